"""Helper processes (``task_processes``): a one-partition batch's instances run in the
worker and in helper processes it keeps, each instance always in the same process.

The unit tests drive the task Spark runs (``_InstanceTask.run_partition``) directly, batch
by batch, as ``StatefulRunner.process`` does for an input in one partition; the last test
runs a stream through Spark.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from objectspace.keyed import KeyState
from objectspace.spark import StatefulRunner, TaskStats
from objectspace.spark import cache as spark_cache
from objectspace.spark.helpers import HELPERS, HelperError
from objectspace.spark.task import _InstanceTask
from tests.support.spark import (
    Row,
    buffer5,
    df_rows,
    dict_rows,
    dump_state,
    keyed_batches,
    ref_buffer5,
    reference_run,
    ship,
    simulate,
    spark,  # noqa: F401
    task_result,
    write_json_files,
)

ship(__name__)

MAX_KG = 16
P = 4
COLUMNS = ("k", "n", "s")
SCHEMA = "k long, n long, s double"
ARROW_SCHEMA = pa.schema(
    [("k", pa.int64()), ("n", pa.int64()), ("s", pa.float64()), ("__os_receipt", pa.binary())]
)
INPUT_SCHEMA = pa.schema(
    [("k", pa.int64()), ("ts", pa.int64()), ("v", pa.float64()), ("c", pa.int64()),
     ("src", pa.string())]
)  # fmt: skip
BATCHES = keyed_batches(47, 40, 7, (0, 4))


class Failing:
    """buffer5, but a row with ``ts == at`` raises (``how="raise"``) or ends its process
    (``how="exit"``), as a bug or a crash would."""

    def __init__(self, at: int, how: str) -> None:
        self.at, self.how = at, how

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> Any:
        if any(r["ts"] == self.at for r in rows):
            if self.how == "exit":
                os._exit(3)
            raise ValueError(f"boom at ts {self.at}")
        return list(buffer5(key, rows, state))


@pytest.fixture(autouse=True)
def own_worker(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A worker cache (and snapshot folder) of this test's own; its helpers stopped after."""
    root = str(tmp_path / "spark-files")
    os.makedirs(root)
    monkeypatch.setattr(spark_cache, "WORKER", spark_cache.InstanceCache(snapshot_root=root))
    HELPERS.stop_all()
    yield
    HELPERS.stop_all()


def make_runner(url: str, fn: Any = buffer5) -> StatefulRunner:
    return StatefulRunner(
        fn,
        key="k",
        order_by="ts",
        output_schema=SCHEMA,
        storage=url,
        job="helpers",
        operator="buffer5",
        max_key_groups=MAX_KG,
        parallelism=P,
    )


def run_batch(
    runner: StatefulRunner, rows: list[Row], checkpoint_id: int, processes: int
) -> tuple[list[tuple[Any, ...]], list[TaskStats]]:
    """One batch as ``StatefulRunner.process`` runs an input in one partition: the sorted
    output rows and the stats of each instance (by index); committed."""
    plan = runner._driver.begin(
        checkpoint_id,
        P,
        output_columns=ARROW_SCHEMA.names,
        use_cache=True,
        use_snapshots=True,
        owner=f"test-app/{runner._token}",
        snapshot_key=runner._snapshot_key,
    )
    task = _InstanceTask(
        plan, ARROW_SCHEMA, plan.due_instances(), 1 << 20, hash_keys=True, processes=processes
    )
    batch = pa.RecordBatch.from_pylist(rows, schema=INPUT_SCHEMA)
    table = pa.Table.from_batches(list(task.run_partition(iter([batch]))), ARROW_SCHEMA)
    out, reports = task_result(table.to_pylist())
    runner._driver.finish(plan, reports)
    return dict_rows(out, COLUMNS), sorted((s for _, s in reports), key=lambda s: s.index)


def expected() -> tuple[list[list[tuple[Any, ...]]], Any]:
    outputs, _ = reference_run(ref_buffer5, BATCHES)
    _, state = simulate(buffer5, BATCHES, max_key_groups=MAX_KG)
    return [dict_rows(rows, COLUMNS) for rows in outputs], state


def test_instances_run_in_their_process_and_stay_there(tmp_path: Any) -> None:
    """Two processes: instances 1 and 3 run in the helper, 0 and 2 in the worker, every
    batch; each process keeps its instances in memory from batch to batch, and the outputs
    and the committed state are those of the reference."""
    outputs, state = expected()
    url = f"sqlite:///{tmp_path}/two.db"
    runner = make_runner(url)
    for n, rows in enumerate(BATCHES):
        got, stats = run_batch(runner, rows, n, processes=2)
        assert got == outputs[n], n
        assert [s.helper for s in stats] == [i % 2 == 1 for i in range(P)]
        if n:
            assert all(s.cached and not s.snapshot for s in stats), (n, stats)
    assert len(HELPERS.pids()) == 1
    assert dump_state(url, "helpers", "buffer5") == state


def test_three_processes_and_one_give_the_same_state(tmp_path: Any) -> None:
    outputs, state = expected()
    for processes in (3, 1):
        url = f"sqlite:///{tmp_path}/p{processes}.db"
        runner = make_runner(url)
        for n, rows in enumerate(BATCHES):
            got, stats = run_batch(runner, rows, n, processes)
            assert got == outputs[n]
            assert [s.helper for s in stats] == [
                processes > 1 and i % processes > 0 for i in range(P)
            ]
        assert dump_state(url, "helpers", "buffer5") == state
    assert len(HELPERS.pids()) == 2


def test_a_helper_killed_between_batches_is_started_again(tmp_path: Any) -> None:
    outputs, state = expected()
    url = f"sqlite:///{tmp_path}/state.db"
    runner = make_runner(url)
    for n, rows in enumerate(BATCHES):
        if n == 3:
            (pid,) = HELPERS.pids()
            os.kill(pid, signal.SIGKILL)  # found dead, or dying while sent the batch
        got, stats = run_batch(runner, rows, n, processes=2)
        assert got == outputs[n]
        if n == 3:
            # the new helper's instances are not from its memory: snapshots or storage
            assert not any(s.cached and not s.snapshot for s in stats[1::2])
            assert HELPERS.pids() != [pid]
    assert dump_state(url, "helpers", "buffer5") == state


@pytest.mark.parametrize("how", ["raise", "exit"])
def test_a_helper_that_fails_fails_the_batch_and_a_retry_succeeds(tmp_path: Any, how: str) -> None:
    """A row of an instance the helper runs raises (or ends the helper's process, in the
    new helper too) in batch 3: the batch fails with the helper's error, nothing of it is
    committed; run again with a fixed function, the batch and those after give the
    reference's output and state."""
    outputs, state = expected()
    url = f"sqlite:///{tmp_path}/state.db"
    runner = make_runner(url)
    # a row of batch 3 whose key an instance of the helper runs
    from objectspace.keygroups import KeyGroups

    groups = KeyGroups(MAX_KG)
    bad = next(
        r["ts"] for r in BATCHES[3] if groups.instance_of(groups.key_group(r["k"]), P) % 2 == 1
    )
    for n, rows in enumerate(BATCHES):
        if n == 3:
            runner.fn = Failing(bad, how)
            expected_text = "died" if how == "exit" else f"ValueError: boom at ts {bad}"
            with pytest.raises(HelperError, match=expected_text):
                run_batch(runner, rows, n, processes=2)
            assert runner.job.last_checkpoint() == 2
            runner.fn = buffer5
        got, _ = run_batch(runner, rows, n, processes=2)
        assert got == outputs[n]
    assert dump_state(url, "helpers", "buffer5") == state


def test_a_helper_sees_the_task_context(tmp_path: Any) -> None:
    """A function that reads ``TaskContext.get()`` (say, to log the partition) sees the
    worker's task in a helper too."""
    from pyspark import TaskContext
    from pyspark.taskcontext import TaskContext as Ctx

    ctx = object.__new__(Ctx)
    ctx._stageId, ctx._partitionId, ctx._attemptNumber, ctx._taskAttemptId = 7, 0, 1, 42
    TaskContext._setTaskContext(ctx)
    try:
        runner = make_runner(f"sqlite:///{tmp_path}/state.db", fn=context_rows)
        got, stats = run_batch(runner, BATCHES[0], 0, processes=2)
    finally:
        TaskContext._setTaskContext(None)
    assert any(s.helper for s in stats)
    assert {row[1:] for row in got} == {(7, 42.0)}


def context_rows(key: Any, rows: list[Row], state: KeyState) -> list[Row]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    assert ctx is not None, "no TaskContext"
    return [{"k": key, "n": ctx.stageId(), "s": float(ctx.taskAttemptId())}]


def test_stream_on_spark_uses_a_helper(spark: Any, tmp_path: Any) -> None:  # noqa: F811
    """Under ``local[2]`` a stream of one-file micro-batches runs its instances in two
    processes by default; the outputs and the state are the reference's, and each batch
    after the first runs every instance from its process' memory."""
    outputs, state = expected()
    write_json_files(tmp_path / "in", BATCHES, first_mtime=time.time() - 3600)
    url = f"sqlite:///{tmp_path}/state.db"
    runner = make_runner(url)
    results: dict[int, list[tuple[Any, ...]]] = {}

    def sink(df: Any, batch_id: int) -> None:
        results[batch_id] = df_rows(df)

    query = (
        spark.readStream.schema("k long, ts long, v double, c long, src string")
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "in"))
        .writeStream.foreachBatch(runner.foreach_batch(sink))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(timeout=180)
        assert not query.isActive
    finally:
        query.stop()
    runner.close()
    assert results == dict(enumerate(outputs))
    assert dump_state(url, "helpers", "buffer5") == state
    history = list(runner.history)
    assert [b.helper_instances for b in history] == [P // 2] * len(BATCHES)
    # One Python worker ran the batches, or (Spark's choice) another one sometimes:
    # most batches ran every instance from memory.
    assert sum(b.cached_instances == P for b in history[1:]) >= len(history) // 2


def test_a_busy_helper_ends_with_its_worker(tmp_path: Any) -> None:
    """A helper stuck in a function (an endless loop never reads the socket) still ends
    when its worker is gone."""
    import subprocess
    import sys

    child = (
        "import os, sys; from objectspace.spark.helpers import _exit_with_parent; "
        "_exit_with_parent(os.getppid()); print(os.getpid(), flush=True)\n"
        "while True: pass"
    )
    parent = (
        "import subprocess, sys; "
        f"c = subprocess.Popen([sys.executable, '-c', {child!r}], stdout=subprocess.PIPE); "
        "print(c.stdout.readline().decode().strip(), flush=True)"
    )
    out = subprocess.run(
        [sys.executable, "-c", parent], capture_output=True, text=True, timeout=60, check=True
    )
    pid = int(out.stdout.strip())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"helper {pid} outlived its worker")
