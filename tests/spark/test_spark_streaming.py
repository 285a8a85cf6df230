"""StatefulRunner under Structured Streaming: ``foreachBatch(runner.foreach_batch(sink))``.

The input is one JSON file per micro-batch (``maxFilesPerTrigger=1``, increasing mtimes);
the sink runs on the driver and keeps each batch's output rows by batch id, so a replayed
batch id overwrites its entry, as an idempotent sink does. Every test compares the union
of the sink's batches with the plain Python reference run over the files in order, and the
job's committed state with the failure-free run.
"""

# The session fixture `spark` is imported from tests.support.spark and requested by name.
# ruff: noqa: F811

from __future__ import annotations

import time
from typing import Any

import pytest

from objectspace import operators as ops
from objectspace.spark import StatefulRunner
from tests.support.spark import (
    BUFFER100_COLUMNS,
    BUFFER100_SCHEMA,
    INPUT_DDL,
    RefBuffer,
    RefChain,
    RefDistinctUntilChanged,
    RefSkip,
    Row,
    buffer100,
    df_rows,
    dict_rows,
    dump_state,
    keyed_batches,
    ref_buffer100,
    reference_run,
    ship,
    simulate,
    spark,  # noqa: F401
    write_json_files,
)

ship(__name__)


class Sink:
    """Keeps each batch's output rows by batch id; optionally fails once on one batch id
    (after looking at its output), which makes the query fail."""

    def __init__(self, fail_once_on: int | None = None) -> None:
        self.outputs: dict[int, list[tuple[Any, ...]]] = {}
        self.calls: list[int] = []
        self.failed: dict[int, list[tuple[Any, ...]]] = {}
        self.fail_once_on = fail_once_on

    def __call__(self, df: Any, batch_id: int) -> None:
        self.calls.append(batch_id)
        rows = df_rows(df)
        if batch_id == self.fail_once_on:
            self.fail_once_on = None
            self.failed[batch_id] = rows
            raise RuntimeError(f"sink failed on batch {batch_id}")
        self.outputs[batch_id] = rows


def run_query(spark: Any, source: Any, checkpoint: Any, runner: StatefulRunner, sink: Sink) -> None:
    """Process every file available now, one per micro-batch, and wait for the end."""
    stream = spark.readStream.schema(INPUT_DDL).option("maxFilesPerTrigger", 1).json(str(source))
    query = (
        stream.writeStream.foreachBatch(runner.foreach_batch(sink))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(timeout=180)
        assert not query.isActive, "the query did not finish in time"
    finally:
        query.stop()


BUFFER100_STREAM = keyed_batches(21, 20, 5, (30, 50))
CHAIN_STREAM = keyed_batches(22, 12, 5, (0, 8))
CHAIN_OP = ops.chain(
    ops.distinct_until_changed(by="c"), ops.skip(2), ops.buffer(3, skip=2, value="v")
)
CHAIN_REF = RefChain(RefDistinctUntilChanged("c"), RefSkip(2), RefBuffer(3, 2, value="v"))

# name -> (function, plain reference, output_schema, output columns, batches)
PIPELINES: dict[str, tuple[Any, Any, str, tuple[str, ...], list[list[Row]]]] = {
    "buffer100": (buffer100, ref_buffer100, BUFFER100_SCHEMA, BUFFER100_COLUMNS, BUFFER100_STREAM),
    "chain": (CHAIN_OP, CHAIN_REF, "k long, items array<double>", ("k", "items"), CHAIN_STREAM),
}


def make_runner(url: str, name: str, p: int) -> StatefulRunner:
    fn, _, schema, _, _ = PIPELINES[name]
    return StatefulRunner(
        fn,
        key="k",
        order_by="ts",
        output_schema=schema,
        storage=url,
        job="stream",
        operator=name,
        max_key_groups=32,
        parallelism=p,
    )


def expected_outputs(name: str) -> tuple[dict[int, list[tuple[Any, ...]]], Any]:
    fn, ref, _, columns, batches = PIPELINES[name]
    outputs, _ = reference_run(ref, batches)
    _, state = simulate(fn, batches, max_key_groups=32)
    return {n: dict_rows(rows, columns) for n, rows in enumerate(outputs)}, state


@pytest.mark.parametrize("name", list(PIPELINES))
def test_stream_equals_batch_reference(spark: Any, tmp_path: Any, name: str) -> None:
    batches = PIPELINES[name][4]
    write_json_files(tmp_path / "in", batches, first_mtime=time.time() - 3600)
    url = f"sqlite:///{tmp_path}/state.db"
    runner = make_runner(url, name, 3)
    sink = Sink()
    run_query(spark, tmp_path / "in", tmp_path / "chk", runner, sink)
    runner.close()
    expected, state = expected_outputs(name)
    assert sum(len(rows) for rows in expected.values()) > 0
    assert sink.calls == list(range(len(batches)))
    assert sink.outputs == expected
    assert all(b.committed and not b.replay for b in runner.history)
    assert runner.job.checkpoints() == [len(batches) - 2, len(batches) - 1]
    assert dump_state(url, "stream", name) == state


def test_query_stopped_and_restarted_mid_stream(spark: Any, tmp_path: Any) -> None:
    """Half of the files, availableNow; then the rest, the same checkpointLocation and a
    new runner at another parallelism: nothing duplicated or lost."""
    name = "buffer100"
    batches = PIPELINES[name][4]
    first_mtime = time.time() - 3600
    half = len(batches) // 2
    write_json_files(tmp_path / "in", batches[:half], first_mtime=first_mtime)
    url = f"sqlite:///{tmp_path}/state.db"
    sink = Sink()
    first = make_runner(url, name, 2)
    run_query(spark, tmp_path / "in", tmp_path / "chk", first, sink)
    first.close()
    assert sink.calls == list(range(half))
    assert first.job.last_checkpoint() == half - 1

    write_json_files(tmp_path / "in", batches[half:], first_mtime=first_mtime, start=half)
    second = make_runner(url, name, 5)
    run_query(spark, tmp_path / "in", tmp_path / "chk", second, sink)
    second.close()

    expected, state = expected_outputs(name)
    assert sink.calls == list(range(len(batches)))  # each batch exactly once
    assert sink.outputs == expected
    assert [b.checkpoint_id for b in second.history] == list(range(half, len(batches)))
    assert all(b.committed and not b.replay and b.parallelism == 5 for b in second.history)
    assert dump_state(url, "stream", name) == state


def test_replayed_batch_after_a_failed_sink(spark: Any, tmp_path: Any) -> None:
    """The sink fails on batch 2 after the runner committed checkpoint 2; the restarted
    query replays batch 2: same output, nothing committed twice, same final state."""
    name = "chain"
    batches = PIPELINES[name][4]
    write_json_files(tmp_path / "in", batches, first_mtime=time.time() - 3600)
    url = f"sqlite:///{tmp_path}/state.db"
    sink = Sink(fail_once_on=2)
    first = make_runner(url, name, 3)
    from pyspark.errors import StreamingQueryException

    with pytest.raises(StreamingQueryException, match="sink failed on batch 2"):
        run_query(spark, tmp_path / "in", tmp_path / "chk", first, sink)
    first.close()
    assert sink.calls == [0, 1, 2]
    assert first.job.last_checkpoint() == 2  # the runner had committed before the sink ran

    second = make_runner(url, name, 3)
    run_query(spark, tmp_path / "in", tmp_path / "chk", second, sink)
    second.close()

    expected, state = expected_outputs(name)
    assert sink.calls == [0, 1, 2, 2, 3, 4]
    assert sink.failed[2] == sink.outputs[2]  # the replay yields the same output
    assert sink.outputs == expected
    replayed = second.history[0]
    assert replayed.checkpoint_id == 2 and replayed.replay and not replayed.committed
    assert [b.checkpoint_id for b in second.history] == [2, 3, 4]
    ids = [c.checkpoint_id for c in second.job.checkpoint_info()]
    assert ids == sorted(set(ids)) == [3, 4]
    assert dump_state(url, "stream", name) == state
