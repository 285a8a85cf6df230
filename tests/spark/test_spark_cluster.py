"""A streaming query on a ``local-cluster[2,1,1024]`` master whose executor is killed mid-stream.

``local-cluster`` runs a standalone master, two workers and one executor process per worker,
as on a real cluster. It cannot share a JVM with the suite's local SparkSession, so the
query runs in a subprocess (the script below), with state in ``file://`` segments and a
SQLite catalog that both executors and the driver reach. In the sink of batch 3 the script
SIGKILLs one executor's JVM *before* collecting the batch's output, so the lost cached output
is recomputed elsewhere; the later batches run on what is left. The test compares the
output of every batch and the final state with the failure-free run computed in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from objectspace import operators as ops
from tests.support.spark import (
    RefBuffer,
    RefChain,
    RefSkip,
    dict_rows,
    dump_state,
    keyed_batches,
    reference_run,
    simulate,
    sort_rows,
    write_json_files,
)
from tests.support.storage import segment_url

SCRIPT = r'''
import json, os, signal, sys, time

cfg = json.load(open(sys.argv[1]))

import pyspark

os.environ["SPARK_HOME"] = os.path.dirname(pyspark.__file__)
os.environ["PYSPARK_PYTHON"] = sys.executable

from objectspace import operators as ops
from objectspace.spark import StatefulRunner, local_session

started = time.time()
spark = local_session("local-cluster[2,1,1024]", app_name="objectspace-cluster-test")
sc = spark.sparkContext
jsc = sc._jsc.sc()


def executor_ids():
    return sorted(i for i in jsc.getExecutorIds().mkString(",").split(",") if i)


def wait_for(predicate, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


def executor_pid(executor_id):
    """The pid of this application's executor JVM with that id (from /proc)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" not in args:
            continue
        opts = dict(zip(args, args[1:]))
        if opts.get("--executor-id") == executor_id and opts.get("--app-id") == sc.applicationId:
            return int(pid)
    return None


assert wait_for(lambda: len(executor_ids()) == 2, 120), executor_ids()
report = {"startup_seconds": time.time() - started, "executors_before": executor_ids()}

runner = StatefulRunner(
    ops.chain(ops.skip(1), ops.buffer(4, skip=3, value="v")),
    key="k",
    order_by="ts",
    output_schema="k long, items array<double>",
    storage=cfg["url"],
    job="cluster",
    operator="chain",
    max_key_groups=32,
    parallelism=4,
)
outputs, calls, times = {}, [], []


def sink(df, batch_id):
    calls.append(batch_id)
    times.append(round(time.time() - started, 1))
    if batch_id == cfg["kill_in_batch"] and "killed" not in report:
        victim = executor_ids()[0]
        pid = executor_pid(victim)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            how = "SIGKILL"
        else:
            jsc.killExecutor(victim)
            how = "killExecutor"
        gone = wait_for(lambda: victim not in executor_ids(), 60)
        report["killed"] = {"id": victim, "pid": pid, "how": how, "gone": gone,
                            "left": executor_ids(), "at": round(time.time() - started, 1)}
    # Collected after the kill: the output cached on the dead executor is recomputed.
    outputs[batch_id] = [[r["k"], list(r["items"])] for r in df.collect()]


stream = (
    spark.readStream.schema("k long, ts long, v double, c long, src string")
    .option("maxFilesPerTrigger", 1)
    .json(cfg["input"])
)
query = (
    stream.writeStream.foreachBatch(runner.foreach_batch(sink))
    .option("checkpointLocation", cfg["checkpoint"])
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination(cfg["query_timeout"])
report["active_after_timeout"] = query.isActive
query.stop()
report.update(
    outputs=outputs,
    calls=calls,
    times=times,
    executors_after=executor_ids(),
    history=[[b.checkpoint_id, b.replay, b.committed, b.parallelism] for b in runner.history],
    checkpoints=runner.job.checkpoints(),
    seconds=time.time() - started,
)
with open(cfg["report"], "w") as f:
    json.dump(report, f)
spark.stop()
'''

BATCHES = keyed_batches(31, 16, 8, (0, 8))
OPERATOR = ops.chain(ops.skip(1), ops.buffer(4, skip=3, value="v"))
REFERENCE = RefChain(RefSkip(1), RefBuffer(4, 3, value="v"))


@pytest.mark.slow
def test_executor_killed_mid_stream_on_local_cluster(tmp_path: Any) -> None:
    import pyspark

    write_json_files(tmp_path / "in", BATCHES, first_mtime=time.time() - 3600)
    url = segment_url(f"file://{tmp_path}/segments", f"sqlite:///{tmp_path}/catalog.db")
    config = {
        "url": url,
        "input": str(tmp_path / "in"),
        "checkpoint": str(tmp_path / "chk"),
        "report": str(tmp_path / "report.json"),
        "kill_in_batch": 3,
        "query_timeout": 180,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    script = tmp_path / "cluster_job.py"
    script.write_text(SCRIPT)
    env = dict(
        os.environ,
        SPARK_HOME=os.path.dirname(pyspark.__file__),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    log = tmp_path / "cluster.log"
    with open(log, "w") as out:
        try:
            proc = subprocess.run(
                [sys.executable, str(script), str(tmp_path / "config.json")],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=tmp_path,
                timeout=240,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"the local-cluster job did not finish in 240 s; log: {log}")
    tail = "\n".join(log.read_text().splitlines()[-40:])
    assert proc.returncode == 0, f"the local-cluster job failed:\n{tail}"
    report = json.loads((tmp_path / "report.json").read_text())

    # An executor really died mid-stream, and the query still completed every batch once.
    assert len(report["executors_before"]) == 2
    killed = report["killed"]
    assert killed["gone"], killed
    assert killed["id"] not in report["executors_after"]
    assert not report["active_after_timeout"]
    assert report["calls"] == list(range(len(BATCHES)))
    assert [h[0] for h in report["history"]] == list(range(len(BATCHES)))
    assert all(committed and not replay for _, replay, committed, _ in report["history"])
    assert report["checkpoints"] == [len(BATCHES) - 2, len(BATCHES) - 1]

    # Output and state equal the failure-free run.
    expected, _ = reference_run(REFERENCE, BATCHES)
    assert sum(len(rows) for rows in expected) > 0
    got = {
        int(b): sort_rows((k, tuple(items)) for k, items in rows)
        for b, rows in report["outputs"].items()
    }
    assert got == {n: dict_rows(rows, ("k", "items")) for n, rows in enumerate(expected)}
    _, state = simulate(OPERATOR, BATCHES, max_key_groups=32)
    assert dump_state(url, "cluster", "chain") == state
