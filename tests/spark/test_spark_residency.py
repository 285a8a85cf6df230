"""State larger than memory on Spark: ``StatefulRunner(memory_budget=...)``.

Workers are played as in ``test_spark_snapshots``: each is its own ``InstanceCache``
swapped in for the process's ``cache.WORKER``, so two of them contend for the local
stores exactly as two Python worker processes do (the locks are per open file). The last
test runs a stream whose state is larger than the Python workers' memory limit on a
SparkSession of its own.
"""

# The session fixture `spark` is imported from tests.support.spark and requested by name.

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from objectspace.spark import StatefulRunner
from objectspace.spark import cache as spark_cache
from objectspace.spark.runner import default_budget
from tests.spark.test_spark_snapshots import (
    BATCHES,
    expected,
    run_batch,
)
from tests.spark.test_spark_snapshots import make_runner as snapshot_runner
from tests.support.spark import dump_state, ship

ship(__name__)


def make_runner(url: str, local_dir: str, budget: Any = 1) -> StatefulRunner:
    return snapshot_runner(url, "resident", memory_budget=budget, local_dir=local_dir)


@pytest.mark.parametrize("budget", [1, "64 MiB"])
def test_workers_take_turns_over_the_local_stores(tmp_path: Any, budget: Any) -> None:
    outputs, state = expected()
    runner = make_runner(f"sqlite:///{tmp_path}/state.db", str(tmp_path / "local"), budget)
    workers = [spark_cache.InstanceCache(), spark_cache.InstanceCache()]
    try:
        got = []
        for i, rows in enumerate(BATCHES):
            if i == 3:  # an attempt that is never committed, on the other worker
                run_batch(runner, rows, i, workers[(i + 1) % 2], snapshots=False, commit=False)
            out, stats = run_batch(runner, rows, i, workers[i % 2], snapshots=False)
            got.append(out)
            if i >= 2:
                # the other worker left the local stores at the committed state
                assert sum(s.bytes_read for s in stats) == 0, (i, stats)
        assert got == outputs
        assert dump_state(runner.storage, "resident", "buffer5") == state
    finally:
        for worker in workers:
            worker.clear()


def test_a_cached_instance_of_a_lost_attempt_is_not_adopted(tmp_path: Any) -> None:
    outputs, state = expected()
    runner = make_runner(f"sqlite:///{tmp_path}/state.db", str(tmp_path / "local"))
    first, second = spark_cache.InstanceCache(), spark_cache.InstanceCache()
    try:
        got = []
        for i, rows in enumerate(BATCHES):
            if i == 2:
                # the first worker's attempt loses; the second worker's is committed
                run_batch(runner, rows, i, first, snapshots=False, commit=False)
                out, _ = run_batch(runner, rows, i, second, snapshots=False)
            else:
                out, _ = run_batch(runner, rows, i, first, snapshots=False)
            got.append(out)
        assert got == outputs
        assert dump_state(runner.storage, "resident", "buffer5") == state
    finally:
        first.clear()
        second.clear()


def test_default_budget_is_a_quarter_of_the_python_worker_memory() -> None:
    class Conf:
        def __init__(self, value: Any) -> None:
            self.value = value

        def get(self, name: str, default: Any = None) -> Any:
            assert name == "spark.executor.pyspark.memory"
            return self.value

    class Session:
        def __init__(self, value: Any) -> None:
            self.conf = Conf(value)

    assert default_budget(Session("1g")) == 256 << 20
    assert default_budget(Session("2048")) == 512 << 20  # MiB, as Spark reads it
    assert default_budget(Session(None)) is None
    assert default_budget(Session("lots")) is None


_STREAM = """
import os, sys
from pyspark.sql import SparkSession
from objectspace.spark import StatefulRunner

root, limit, keys, batches, size = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.executor.pyspark.memory", limit)
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)

def keep(key, rows, state):
    blob = state.value("blob")
    for row in rows:
        blob.value = bytes([row["n"] % 251]) * row["size"]
    yield {"k": key, "n": len(blob.value) + blob.value[0]}

runner = StatefulRunner(
    keep, key="k", order_by="n", output_schema="k long, n long",
    storage=f"sqlite:///{root}/state.db", job="big", operator="keep",
    max_key_groups=16, parallelism=2, local_dir=f"{root}/local",
)
total = 0
for b in range(batches):
    rows = [(b * keys + i, b, size) for i in range(keys)]
    df = spark.createDataFrame(rows, "k long, n long, size long")
    out = runner.process(df, b).collect()
    assert sorted(r["n"] for r in out) == [size + b % 251] * keys, out[:3]
    stats = runner.last_batch
    total += keys * size
    print("batch", b, "state", total >> 20, "MiB", "resident", stats.bytes_resident >> 20,
          "MiB", "evicted", stats.objects_evicted, flush=True)
# every key comes back, from the local store
df = spark.createDataFrame([(0, 999, 8)], "k long, n long, size long")
assert runner.process(df, batches).collect()[0]["n"] == 8 + 999 % 251
print("budget", runner.memory_budget, "loaded", runner.last_batch.objects_loaded, flush=True)
"""


@pytest.mark.slow
def test_a_stream_whose_state_exceeds_the_python_workers_memory(tmp_path: Any) -> None:
    """1,120 MiB of state through Python workers limited to 1 GiB of address space each
    (which map about 360 MiB before their first row, 500 MiB once Arrow ran): each keeps
    at most its budget, the local stores the rest; every key is there at the end."""
    script = tmp_path / "stream.py"
    script.write_text(textwrap.dedent(_STREAM))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": os.getcwd()}
    run = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "1g", "448", "40", str(64 << 10)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line for line in run.stdout.splitlines() if line.startswith(("batch", "budget"))]
    assert len(lines) == 41, run.stdout
    assert "state 1120 MiB" in lines[39]
    assert lines[40].split()[-1] == "1"  # key 0, written in batch 0, from the local store


def test_a_worker_without_the_local_stores_starts_from_their_copies(tmp_path: Any) -> None:
    outputs, state = expected()
    url = f"sqlite:///{tmp_path}/state.db"
    runner = make_runner(url, str(tmp_path / "a"), "64 MiB")
    worker = spark_cache.InstanceCache()
    got = []
    try:
        for i, rows in enumerate(BATCHES):
            if i == len(BATCHES) - 1:  # a new executor elsewhere: no local store
                worker.clear()
                worker = spark_cache.InstanceCache()
                runner = make_runner(url, str(tmp_path / "b"), "64 MiB")
            out, stats = run_batch(runner, rows, i, worker, snapshots=False)
            got.append(out)
        assert got == outputs
        assert dump_state(runner.storage, "resident", "buffer5") == state
        assert sum(s.copy_bytes_read for s in stats) > 0  # the copies of checkpoint 0
        assert os.listdir(tmp_path / "state.db.files")
    finally:
        worker.clear()
