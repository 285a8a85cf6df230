"""The recipe of docs/deploy.md, end to end, on a standalone cluster of separate processes.

The test runs the document's own blocks: ``pack`` (a venv with the ``manylinux`` wheel and
its runtime dependencies, packed with venv-pack; cached between runs by a digest of the
sources, see :func:`tests.support.deploy.packed_env`), ``job.py``, and
``submit-standalone`` (``spark-submit`` with ``--archives env.tar.gz#environment`` and
``spark.pyspark.python=./environment/bin/python``), against a standalone master and two
workers (1 core, 1 GB each) started from pyspark's ``bin/spark-class``, with the state in
segment files on the S3 test server and the catalog in PostgreSQL. Nothing of the test's
venv is on the driver's or the executors' path: they run the packed environment's Python.

Once the sink has written batch 1, the test SIGKILLs one executor JVM; the master starts
another, and the query completes. The output of every batch must equal a plain Python
reference exactly, and the state committed must equal the reference's.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from objectspace.keyed import key_prefix
from objectspace.keygroups import KeyGroups
from tests.support.deploy import doc_blocks, packed_env, spark_env, standalone_cluster
from tests.support.servers import S3Server
from tests.support.spark import dump_state, write_json_files
from tests.support.storage import segment_url

BATCHES = 6
USERS = 40
KILL_AFTER_BATCH = 1
# The submitted job must be done within this (the test's budget is 3 minutes).
JOB_TIMEOUT = 150


def _batches(seed: int = 27) -> list[list[dict[str, Any]]]:
    """Rows ``{user, ts, amount}``: per batch 1 to 6 rows per user, ``ts`` unique and
    increasing across batches, each batch shuffled."""
    rng = random.Random(seed)
    users = rng.sample(range(1, 10**9), USERS)
    ts = 0
    batches = []
    for _ in range(BATCHES):
        rows = []
        for user in users:
            for _ in range(rng.randint(1, 6)):
                ts += 1
                rows.append({"user": user, "ts": ts, "amount": round(rng.uniform(-50, 150), 2)})
        rng.shuffle(rows)
        batches.append(rows)
    return batches


def _reference(
    batches: list[list[dict[str, Any]]],
) -> tuple[list[list[tuple[int, float]]], dict[int, float]]:
    """The running totals per user, batch by batch, summed in ``ts`` order as the operator
    does (so the floats are the same bit for bit), and the final total per user."""
    totals: dict[int, float] = {}
    outputs = []
    for rows in batches:
        out = []
        for row in sorted(rows, key=lambda r: r["ts"]):
            total = totals.get(row["user"], 0) + row["amount"]
            totals[row["user"]] = total
            out.append((row["user"], total))
        outputs.append(sorted(out))
    return outputs, totals


def _read_output(folder: Path) -> list[tuple[int, float]]:
    rows = []
    for part in sorted(folder.glob("part-*")):
        for line in part.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                rows.append((row["user"], row["total"]))
    return sorted(rows)


@pytest.mark.slow
def test_documented_standalone_recipe(
    tmp_path: Path, postgres_url: str, s3_server: S3Server, s3_bucket: str
) -> None:
    started = time.monotonic()
    blocks = doc_blocks()
    archive = packed_env()
    seconds_pack = time.monotonic() - started

    submit = tmp_path / "submit"
    submit.mkdir()
    os.symlink(archive, submit / "env.tar.gz")
    (submit / "job.py").write_text(blocks["job.py"])
    batches = _batches()
    write_json_files(tmp_path / "in", batches, first_mtime=time.time() - 3600)
    storage = segment_url(
        f"s3://{s3_bucket}/state",
        postgres_url,
        endpoint_url=s3_server.endpoint,
        key="testing",
        secret="testing",
    )
    output = tmp_path / "out"

    with standalone_cluster(tmp_path / "cluster", workers=2, cores=1, memory="1g") as cluster:
        env = spark_env(tmp_path / "cluster" / "conf")
        env.update(
            MASTER=cluster.master_url,
            INPUT=str(tmp_path / "in"),
            OUTPUT=str(output),
            CHECKPOINTS=str(tmp_path / "chk"),
            STORAGE=storage,
        )
        log_path = tmp_path / "driver.log"
        with open(log_path, "wb") as log:
            driver = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", blocks["submit-standalone"]],
                cwd=submit,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            killed = None
            executors_seen: set[tuple[str, str]] = set()
            deadline = time.monotonic() + JOB_TIMEOUT
            while driver.poll() is None and time.monotonic() < deadline:
                running = cluster.executors()
                executors_seen.update((e.app_id, e.executor_id) for e in running)
                done = (output / f"batch={KILL_AFTER_BATCH}" / "_SUCCESS").exists()
                if killed is None and done and running:
                    victim = running[0]
                    os.kill(victim.pid, signal.SIGKILL)
                    finished = sum(1 for p in output.glob("batch=*/_SUCCESS"))
                    killed = (victim, finished)
                time.sleep(0.2)
            if driver.poll() is None:
                pytest.fail(f"the job did not finish in {JOB_TIMEOUT} s; log: {log_path}")
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait(10)
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
        assert driver.returncode == 0, f"spark-submit failed:\n{tail}"
        # The executors ran the packed environment, unpacked in their working folders (the
        # first two did; the one started last may not have fetched it before the job ended).
        executor_dirs = sorted((tmp_path / "cluster").glob("worker-*/app-*/*"))
        unpacked = [
            folder
            for folder in executor_dirs
            if list(
                (folder / "environment" / "lib").glob(
                    "python3*/site-packages/objectspace/collections/_core*.so"
                )
            )
        ]
        assert {f.name for f in unpacked} >= {"0", "1"}, executor_dirs
    seconds = time.monotonic() - started

    # One executor JVM was killed mid-stream, and the master started another.
    assert killed is not None, "the sink never wrote batch 1 while the job ran"
    victim, finished_at_kill = killed
    assert finished_at_kill < BATCHES, "the stream was over before the kill"
    assert len(executor_dirs) >= 3, executor_dirs
    assert len(executors_seen) >= 3, executors_seen

    # Every batch's output equals the reference's, exactly, and so does the state.
    expected, totals = _reference(batches)
    got = [_read_output(output / f"batch={n}") for n in range(BATCHES)]
    assert sorted(p.name for p in output.iterdir() if p.is_dir()) == sorted(
        f"batch={n}" for n in range(BATCHES)
    )
    for n in range(BATCHES):
        assert got[n] == expected[n], f"batch {n}"
    groups = KeyGroups(128)
    assert dump_state(storage, "running-totals", "totals") == {
        key_prefix(user) + "sum": (groups.key_group(user), "PersistedValue", total)
        for user, total in totals.items()
    }
    print(
        f"\ndeploy recipe: {seconds:.1f} s in all (packed environment {seconds_pack:.1f} s), "
        f"executor {victim.executor_id} killed after {finished_at_kill} of {BATCHES} batches"
    )
