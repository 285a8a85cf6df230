"""StatefulRunner in batch form: every batch is one ``runner.process(df, checkpoint_id)``.

Each test compares the runner's output (sorted row tuples) with a plain Python reference, and
the state the job committed with the failure-free run (:func:`tests.support.spark.simulate`) or the
reference's state, across parallelisms, restarts, replays, task failures and backends.
"""

# The session fixture `spark` is imported from tests.support.spark and requested by name.
# ruff: noqa: F811

from __future__ import annotations

import json
import os
from typing import Any

import pytest

import objectspace as osp
from objectspace import operators as ops
from objectspace.keyed import KeyState
from objectspace.spark import StatefulRunner
from tests.support.spark import (
    BUFFER100_COLUMNS,
    BUFFER100_SCHEMA,
    INPUT_COLUMNS,
    INPUT_DDL,
    SOURCES,
    RefAggregate,
    RefBuffer,
    RefChain,
    RefCombineLatest,
    RefDistinct,
    RefDistinctUntilChanged,
    RefSkip,
    RefTake,
    RefTopK,
    RefWindow,
    RefZip,
    Row,
    buffer100,
    buffer100_state,
    df_rows,
    dict_rows,
    dump_state,
    keyed_batches,
    ref_buffer100,
    reference_run,
    ship,
    simulate,
    spark,  # noqa: F401
    to_df,
)
from tests.support.storage import segment_url

ship(__name__)


def sqlite_url(tmp_path: Any, name: str = "state.db") -> str:
    return f"sqlite:///{tmp_path}/{name}"


# -- the buffer100 example ----------------------------------------------------------

# 50 keys, ~40 rows per key and batch: keys reach 100 values in batch 2 or 3.
BUFFER100_BATCHES = keyed_batches(100, 50, 4, (30, 50))


@pytest.fixture(scope="module")
def buffer100_reference() -> tuple[list[list[Row]], list[dict[Any, dict[str, Any]]]]:
    """Per-batch reference outputs, and the reference state after each batch."""
    outputs, states_after = [], []
    for n in range(1, len(BUFFER100_BATCHES) + 1):
        out, states = reference_run(ref_buffer100, BUFFER100_BATCHES[:n])
        outputs = out
        states_after.append(states)
    return outputs, states_after


def test_buffer100_same_output_at_parallelism_1_3_8(
    spark: Any, tmp_path: Any, buffer100_reference: Any
) -> None:
    expected, states = buffer100_reference
    assert sum(len(o) for o in expected[:3]) > 20  # the data makes buffers fill
    url = sqlite_url(tmp_path)
    results = {}
    for p in (1, 3, 8):
        runner = StatefulRunner(
            buffer100,
            key="k",
            order_by="ts",
            output_schema=BUFFER100_SCHEMA,
            storage=url,
            job=f"buffer100-p{p}",
            operator="buffer100",
            max_key_groups=128,
            parallelism=p,
        )
        got = []
        for n, rows in enumerate(BUFFER100_BATCHES[:3]):
            out = df_rows(runner.process(to_df(spark, rows), checkpoint_id=n))
            assert out == dict_rows(expected[n], BUFFER100_COLUMNS), f"p={p} batch {n}"
            batch = runner.last_batch
            assert batch is not None
            assert batch.committed and not batch.replay and batch.parallelism == p
            assert batch.rows_in == len(rows) and batch.rows_out == len(out)
            assert batch.keys == 50 and 1 <= batch.instances <= p
            got.append(out)
        runner.close()
        assert runner.job.last_checkpoint() == 2
        assert dump_state(url, f"buffer100-p{p}", "buffer100") == buffer100_state(states[2], 128)
        results[p] = got
    assert results[1] == results[3] == results[8]


def test_buffer100_restart_with_changed_parallelism(
    spark: Any, tmp_path: Any, buffer100_reference: Any
) -> None:
    """Batches 0-1 at p=4, then a new runner at p=3 for batch 2, then one at p=8 for 3."""
    expected, states = buffer100_reference
    url = sqlite_url(tmp_path)

    def runner(p: int) -> StatefulRunner:
        return StatefulRunner(
            buffer100,
            key="k",
            order_by="ts",
            output_schema=BUFFER100_SCHEMA,
            storage=url,
            job="restart",
            operator="buffer100",
            max_key_groups=128,
            parallelism=p,
        )

    plan = [4, 4, 3, 8]
    current = None
    for n, p in enumerate(plan):
        if current is None or current.parallelism != p:
            if current is not None:
                current.close()
            current = runner(p)
        out = df_rows(current.process(to_df(spark, BUFFER100_BATCHES[n]), checkpoint_id=n))
        assert out == dict_rows(expected[n], BUFFER100_COLUMNS), f"batch {n} at p={p}"
        # The state after each batch equals the failure-free reference's.
        assert dump_state(url, "restart", "buffer100") == buffer100_state(states[n], 128)
    assert current is not None
    current.close()
    assert current.operator.parallelism == 8
    assert current.job.checkpoints() == [2, 3]  # retain=2


# -- every operator against a plain Python reference ----------------------------------------

ROW_DDL = INPUT_DDL
ITEM_STRUCT = "struct<k:long,ts:long,v:double,c:long,src:string>"

# name -> (operator, plain Python reference, output_schema)
OPERATORS: dict[str, tuple[Any, Any, str]] = {
    "take": (ops.take(5), RefTake(5), ROW_DDL),
    "skip": (ops.skip(7), RefSkip(7), ROW_DDL),
    "scan_sum": (ops.scan("sum"), RefAggregate("sum", running=True), "k long, sum double"),
    "scan_count": (
        ops.scan("count", out="n"),
        RefAggregate("count", out="n", running=True),
        "k long, n long",
    ),
    "scan_min": (ops.scan("min"), RefAggregate("min", running=True), "k long, min double"),
    "aggregate_mean": (ops.aggregate("mean"), RefAggregate("mean"), "k long, mean double"),
    "aggregate_max": (
        ops.aggregate("max", out="hi"),
        RefAggregate("max", out="hi"),
        "k long, hi double",
    ),
    "buffer": (ops.buffer(5, value="v"), RefBuffer(5, value="v"), "k long, items array<double>"),
    "buffer_rows_overlapping": (
        ops.buffer(3, skip=2),
        RefBuffer(3, 2),
        f"k long, items array<{ITEM_STRUCT}>",
    ),
    "buffer_gaps": (
        ops.buffer(2, skip=4, value="v"),
        RefBuffer(2, 4, value="v"),
        "k long, items array<double>",
    ),
    "window": (ops.window(4, skip=2), RefWindow(4, 2), ROW_DDL + ", window long"),
    "window_gaps": (ops.window(2, skip=3), RefWindow(2, 3), ROW_DDL + ", window long"),
    "distinct": (ops.distinct(by="c"), RefDistinct("c"), ROW_DDL),
    "distinct_until_changed": (
        ops.distinct_until_changed(by="c"),
        RefDistinctUntilChanged("c"),
        ROW_DDL,
    ),
    "top_k": (ops.top_k(3, by="v"), RefTopK(3, "v"), ROW_DDL + ", rank long"),
    "combine_latest": (
        ops.combine_latest(SOURCES, source="src", value="v"),
        RefCombineLatest(SOURCES),
        "k long, a double, b double, c double",
    ),
    "zip": (
        ops.zip(SOURCES, source="src", value="v"),
        RefZip(SOURCES),
        "k long, a double, b double, c double",
    ),
    "chain_take_mean": (
        ops.chain(ops.take(5), ops.aggregate("mean")),
        RefChain(RefTake(5), RefAggregate("mean")),
        "k long, mean double",
    ),
    "chain_three": (
        ops.chain(ops.distinct_until_changed(by="c"), ops.skip(1), ops.buffer(2, value="v")),
        RefChain(RefDistinctUntilChanged("c"), RefSkip(1), RefBuffer(2, value="v")),
        "k long, items array<double>",
    ),
}

# 12 keys, 0..8 rows per key and batch (a key may miss a batch).
OPERATOR_BATCHES = keyed_batches(7, 12, 3, (0, 8))
PARALLELISM_PAIRS = [(1, 8), (8, 3), (3, 1)]


# One per operator and output shape for the typed test; the variants (gaps, min/max, a
# longer chain) run in the multiplexed test below at every parallelism.
TYPED = [
    n
    for n in OPERATORS
    if n not in ("scan_min", "aggregate_max", "buffer_gaps", "window_gaps", "chain_three")
]


@pytest.mark.parametrize("name", TYPED)
def test_operator_matches_reference_across_a_rescale(spark: Any, tmp_path: Any, name: str) -> None:
    """Two batches, each by a new runner at another parallelism; output per batch equals
    the reference, and the committed state equals the failure-free run's."""
    op, ref, schema = OPERATORS[name]
    batches = OPERATOR_BATCHES[:2]
    expected, _ = reference_run(ref, batches)
    _, expected_state = simulate(op, batches, max_key_groups=16)
    assert any(expected), "the data must make the operator emit something"
    url = sqlite_url(tmp_path)
    pair = PARALLELISM_PAIRS[TYPED.index(name) % len(PARALLELISM_PAIRS)]
    for n, p in enumerate(pair):
        runner = StatefulRunner(
            op,
            key="k",
            order_by="ts",
            output_schema=schema,
            storage=url,
            job="ops",
            operator=name,
            max_key_groups=16,
            parallelism=p,
        )
        out = runner.process(to_df(spark, batches[n]), checkpoint_id=n)
        assert df_rows(out) == dict_rows(expected[n], out.columns), f"batch {n} at p={p}"
        runner.close()
    assert dump_state(url, "ops", name) == expected_state


class Multiplex:
    """Every operator on the same input, each in its own namespace of the key's state;
    output rows as JSON so that one output_schema fits all."""

    def __init__(self, operators: dict[str, Any]) -> None:
        self.operators = operators

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> Any:
        for name, op in self.operators.items():
            for row in op(key, [dict(r) for r in rows], state.namespace(name)):
                yield {"op": name, "row": json.dumps(row, sort_keys=True)}


def multiplex_reference(batches: list[list[Row]]) -> list[list[tuple[Any, ...]]]:
    """The references of all operators, multiplexed as :class:`Multiplex` does."""

    def ref(key: Any, rows: list[Row], st: dict[str, Any]) -> Any:
        for name, (_, reference, _) in OPERATORS.items():
            for row in reference(key, [dict(r) for r in rows], st.setdefault(name, {})):
                yield {"op": name, "row": json.dumps(row, sort_keys=True)}

    outputs, _ = reference_run(ref, batches)
    return [dict_rows(rows, ("k", "op", "row")) for rows in outputs]


def test_all_operators_identical_at_parallelism_1_3_8(spark: Any, tmp_path: Any) -> None:
    multiplex = Multiplex({name: op for name, (op, _, _) in OPERATORS.items()})
    expected = multiplex_reference(OPERATOR_BATCHES)
    _, expected_state = simulate(multiplex, OPERATOR_BATCHES, max_key_groups=16)
    url = sqlite_url(tmp_path)
    outputs, states = {}, {}
    for p in (1, 3, 8):
        runner = StatefulRunner(
            multiplex,
            key="k",
            order_by="ts",
            output_schema="k long, op string, row string",
            storage=url,
            job=f"all-p{p}",
            operator="all",
            max_key_groups=16,
            parallelism=p,
        )
        got = []
        for n, rows in enumerate(OPERATOR_BATCHES):
            got.append(df_rows(runner.process(to_df(spark, rows), checkpoint_id=n)))
        runner.close()
        outputs[p] = got
        states[p] = dump_state(url, f"all-p{p}", "all")
    for p in (1, 3, 8):
        for n in range(len(OPERATOR_BATCHES)):
            assert outputs[p][n] == expected[n], f"p={p} batch {n}"
        assert states[p] == expected_state, f"p={p}"
    assert {row[1] for n in range(3) for row in expected[n]} == set(OPERATORS)


# -- a replayed batch id --------------------------------------------------------------------


def sum7(key: Any, rows: list[Row], state: KeyState) -> Any:
    """Buffers of 7 values per key, emitted as their sum; the count of emitted buffers."""
    buf = state.list("buf")
    done = state.value("done", 0)
    for r in rows:
        buf.append(r["v"])
        if len(buf) == 7:
            done.value = done.value + 1
            yield {"n": done.value, "s": sum(buf)}
            buf.clear()


def ref_sum7(key: Any, rows: list[Row], st: dict[str, Any]) -> Any:
    buf = st.setdefault("buf", [])
    for r in rows:
        buf.append(r["v"])
        if len(buf) == 7:
            st["done"] = st.get("done", 0) + 1
            yield {"n": st["done"], "s": sum(buf)}
            buf.clear()


SUM7_SCHEMA = "k long, n long, s double"
SUM7_BATCHES = keyed_batches(11, 15, 4, (2, 9))


def sum7_runner(url: str, job: str, p: int, **kwargs: Any) -> StatefulRunner:
    return StatefulRunner(
        kwargs.pop("fn", sum7),
        key="k",
        order_by="ts",
        output_schema=SUM7_SCHEMA,
        storage=url,
        job=job,
        operator="sum7",
        max_key_groups=16,
        parallelism=p,
        **kwargs,
    )


def test_replayed_batch_id_yields_same_output_and_commits_nothing(
    spark: Any, tmp_path: Any
) -> None:
    batches = SUM7_BATCHES[:3]
    expected, _ = reference_run(ref_sum7, batches)
    _, state_after_1 = simulate(sum7, batches[:2])
    _, state_after_2 = simulate(sum7, batches)
    url = sqlite_url(tmp_path)
    runner = sum7_runner(url, "replay", 3)
    cols = ("k", "n", "s")
    assert df_rows(runner.process(to_df(spark, batches[0]), 0)) == dict_rows(expected[0], cols)
    first = df_rows(runner.process(to_df(spark, batches[1]), 1))
    assert first == dict_rows(expected[1], cols)
    info = [(c.checkpoint_id, c.bytes) for c in runner.job.checkpoint_info()]
    assert runner.job.checkpoints() == [0, 1]

    # The same batch id again, on the same runner (its workers cache the instances) ...
    again = df_rows(runner.process(to_df(spark, batches[1]), 1))
    assert again == first
    assert runner.last_batch is not None
    assert runner.last_batch.replay and not runner.last_batch.committed
    assert [(c.checkpoint_id, c.bytes) for c in runner.job.checkpoint_info()] == info
    assert dump_state(url, "replay", "sum7") == state_after_1
    runner.close()

    # ... and on a fresh runner at another parallelism (a restarted query).
    fresh = sum7_runner(url, "replay", 2)
    assert df_rows(fresh.process(to_df(spark, batches[1]), 1)) == first
    assert fresh.last_batch is not None and fresh.last_batch.replay
    assert [(c.checkpoint_id, c.bytes) for c in fresh.job.checkpoint_info()] == info
    assert dump_state(url, "replay", "sum7") == state_after_1

    # The next batch continues from checkpoint 1, as if nothing had been replayed.
    nxt = df_rows(fresh.process(to_df(spark, batches[2]), 2))
    assert nxt == dict_rows(expected[2], cols)
    assert fresh.last_batch is not None and fresh.last_batch.committed
    assert fresh.job.checkpoints() == [1, 2]
    assert dump_state(url, "replay", "sum7") == state_after_2
    fresh.close()


def test_replay_whose_previous_checkpoint_was_dropped_is_refused(spark: Any, tmp_path: Any) -> None:
    """After 0, 1, 2 with retain=2 only 1 and 2 are restorable; replaying 1 needs 0.

    The runner must refuse (CheckpointError) or yield batch 1's original output; restoring
    batch 1 on top of empty state would silently produce other output.
    """
    batches = SUM7_BATCHES[:3]
    url = sqlite_url(tmp_path)
    runner = sum7_runner(url, "dropped", 2)
    original = []
    for n, rows in enumerate(batches):
        original.append(df_rows(runner.process(to_df(spark, rows), n)))
    assert runner.job.checkpoints() == [1, 2]
    try:
        replayed = df_rows(runner.process(to_df(spark, batches[1]), 1))
    except osp.CheckpointError as exc:
        assert "1" in str(exc)
    else:
        assert replayed == original[1]
    finally:
        runner.close()
    assert runner.job.checkpoints() == [1, 2]


def test_output_recomputed_after_its_cache_is_lost_is_identical(spark: Any, tmp_path: Any) -> None:
    """``process`` caches its output; if the cached blocks are lost (an executor died), using
    the output recomputes the batch's tasks: same rows, and nothing is committed again."""
    batches = SUM7_BATCHES[:3]
    expected, _ = reference_run(ref_sum7, batches)
    url = sqlite_url(tmp_path)
    runner = sum7_runner(url, "recompute", 3, inline_output_bytes=0)
    for n, rows in enumerate(batches):
        out = runner.process(to_df(spark, rows), n)
        first = df_rows(out)
        info = [(c.checkpoint_id, c.bytes) for c in runner.job.checkpoint_info()]
        assert runner._persisted is not None
        runner._persisted.unpersist(blocking=True)  # as if the executor holding it died
        assert df_rows(out) == first == dict_rows(expected[n], ("k", "n", "s"))
        assert [(c.checkpoint_id, c.bytes) for c in runner.job.checkpoint_info()] == info
    runner.close()
    assert dump_state(url, "recompute", "sum7") == simulate(sum7, batches)[1]


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def test_small_output_comes_back_with_the_receipts(spark: Any, tmp_path: Any) -> None:
    """By default a small output travels with the receipts and the batch's output is a local
    DataFrame; with ``inline_output_bytes=0`` it stays in the cached result; with a limit
    between the tasks' sizes, some tasks send it and others leave rows (the output is the
    union of both). The rows are the same every way, and so is the state."""
    batches = SUM7_BATCHES[:4]
    expected, _ = reference_run(ref_sum7, batches)
    plans: dict[int, list[str]] = {}
    for limit in (16 << 20, 0, 3 * 600):
        url = sqlite_url(tmp_path, f"inline-{limit}.db")
        runner = sum7_runner(url, "inline", 3, inline_output_bytes=limit)
        plans[limit] = []
        for n, rows in enumerate(batches):
            out = runner.process(to_df(spark, rows), n)
            plans[limit].append(_plan(out))
            assert df_rows(out) == dict_rows(expected[n], ("k", "n", "s")), (limit, n)
            assert (runner._persisted is None) == ("InMemoryTableScan" not in plans[limit][-1])
        runner.close()
        assert dump_state(url, "inline", "sum7") == simulate(sum7, batches)[1]
    assert all("LocalTableScan" in p and "InMemory" not in p for p in plans[16 << 20])
    assert all("LocalTableScan" not in p for p in plans[0])
    assert any("LocalTableScan" in p and "InMemoryTableScan" in p for p in plans[3 * 600])


def test_output_larger_than_expected_after_inline_batches_is_recomputed(
    spark: Any, tmp_path: Any
) -> None:
    """After batches whose output all came back with the receipts, a batch's result is not
    cached; when its tasks' output turns out too large to come back, using the output runs
    the tasks again: the same rows, every time it is used, and nothing committed twice.
    The batch after it is cached again."""
    batches = SUM7_BATCHES[:4]
    expected, _ = reference_run(ref_sum7, batches)
    url = sqlite_url(tmp_path)
    runner = sum7_runner(url, "recompute-inline", 3)
    for n, rows in enumerate(batches):
        if n == 2:
            runner.inline_output_bytes = 3  # no task's output fits now
        out = runner.process(to_df(spark, rows), n)
        info = [(c.checkpoint_id, c.bytes) for c in runner.job.checkpoint_info()]
        want = dict_rows(expected[n], ("k", "n", "s"))
        assert df_rows(out) == want and df_rows(out) == want, n
        assert [(c.checkpoint_id, c.bytes) for c in runner.job.checkpoint_info()] == info
        plan = _plan(out)
        if n == 0:
            assert "LocalTableScan" in plan  # the first batch is cached, then learns
        elif n == 2:
            assert runner._persisted is None and "InMemoryTableScan" not in plan
            assert "LocalTableScan" not in plan  # every row is in the (recomputed) result
        elif n == 3:
            assert runner._persisted is not None and "InMemoryTableScan" in plan
    runner.close()
    assert dump_state(url, "recompute-inline", "sum7") == simulate(sum7, batches)[1]


@pytest.mark.parametrize("option", ["inline_output_bytes", "inline_state_bytes"])
def test_inline_bytes_are_checked(tmp_path: Any, option: str) -> None:
    for bad in (-1, 1 << 40, 1.5, True):
        with pytest.raises(ValueError, match=option):
            sum7_runner(sqlite_url(tmp_path), "bad", 1, **{option: bad})


def test_small_saves_travel_with_the_receipts(spark: Any, tmp_path: Any) -> None:
    # Staged (the default), a batch's state is stored by the driver's commit: one segment
    # file per batch; with inline_state_bytes=0 each task stores its own.
    batches = SUM7_BATCHES[:2]
    files = {}
    for budget in (0, 1 << 20):
        root = tmp_path / f"b{budget}"
        root.mkdir()
        url = f"file://{root}/seg?catalog=sqlite:///{root}/catalog.db"
        runner = sum7_runner(url, "staged", 3, inline_state_bytes=budget, retain=None)
        for n, batch in enumerate(batches):
            runner.process(to_df(spark, batch), n)
        backend: Any = runner.storage.backend
        # The operator's own files (its batch statistics, operator sum7#stats, have theirs).
        files[budget] = len([s for s in backend.segments() if "/staged/sum7/" in s[0]])
        assert dump_state(url, "staged", "sum7") == simulate(sum7, batches)[1]
        runner.close()
    assert files[1 << 20] == len(batches)
    assert files[0] > len(batches)


def test_output_sent_with_a_receipt_is_checked(spark: Any, tmp_path: Any) -> None:
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    runner = sum7_runner(sqlite_url(tmp_path), "checked", 1)
    struct = StructType([StructField("n", LongType()), StructField("r", BinaryType())])
    schema = pa.schema([("n", pa.int64()), ("r", pa.binary())])
    with pytest.raises(osp.CheckpointError, match="not an Arrow stream"):
        runner._local_output(spark, struct, schema, [b"not arrow"])
    other = pa.table({"m": [1]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, other.schema) as writer:
        writer.write_table(other)
    with pytest.raises(osp.CheckpointError, match="schema"):
        runner._local_output(spark, struct, schema, [sink.getvalue().to_pybytes()])
    table = pa.table({"n": [1, 2]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    local = runner._local_output(spark, struct, schema, [sink.getvalue().to_pybytes()])
    assert [r.n for r in local.collect()] == [1, 2] and local.columns == ["n"]
    empty = runner._local_output(spark, struct, schema, [])
    assert empty.collect() == [] and empty.columns == ["n"]
    assert runner._local_output(spark, struct, schema, []) is empty  # built once


def test_empty_batch_commits_and_keeps_the_state(spark: Any, tmp_path: Any) -> None:
    """A micro-batch without rows (Spark hands those to foreachBatch too) is a checkpoint
    of its own that changes nothing; the next batch continues from the state before it."""
    batches = [SUM7_BATCHES[0], [], SUM7_BATCHES[1]]
    expected, _ = reference_run(ref_sum7, batches)
    url = sqlite_url(tmp_path)
    runner = sum7_runner(url, "empty", 3, retain=None)
    for n, rows in enumerate(batches):
        df = to_df(spark, rows) if rows else spark.createDataFrame([], INPUT_DDL)
        assert df_rows(runner.process(df, n)) == dict_rows(expected[n], ("k", "n", "s"))
        assert runner.last_batch is not None and runner.last_batch.committed
    runner.close()
    assert runner.job.checkpoints() == [0, 1, 2]
    assert dump_state(url, "empty", "sum7", checkpoint=1) == simulate(sum7, batches[:1])[1]
    assert dump_state(url, "empty", "sum7") == simulate(sum7, batches)[1]


def test_a_second_operator_in_one_job_is_refused(spark: Any, tmp_path: Any) -> None:
    """A runner commits its job's checkpoints: a second runner of the same job with another
    operator would find each batch id committed and take it for a replay, so it is refused
    at construction, naming both operators; the first runner keeps working."""
    batches = SUM7_BATCHES[:3]
    url = sqlite_url(tmp_path)
    take = StatefulRunner(
        ops.take(5),
        key="k",
        order_by="ts",
        output_schema=INPUT_DDL,
        storage=url,
        job="pipeline",
        operator="take",
        max_key_groups=16,
        parallelism=2,
    )
    with pytest.raises(ValueError, match=r"'sum'.*'pipeline'.*'take'"):
        StatefulRunner(
            ops.aggregate("sum"),
            key="k",
            order_by="ts",
            output_schema="k long, sum double",
            storage=url,
            job="pipeline",
            operator="sum",
            max_key_groups=16,
            parallelism=2,
        )
    expected_take, _ = reference_run(RefTake(5), batches)
    for n, rows in enumerate(batches):
        got = df_rows(take.process(to_df(spark, rows), n))
        assert got == dict_rows(expected_take[n], INPUT_COLUMNS), f"take, batch {n}"
    take.close()
    names = [o.name for o in osp.open_storage(url).job("pipeline").operators()]
    assert names == ["take", "take#stats"]  # the operator and its batch statistics
    assert dump_state(url, "pipeline", "take") == simulate(ops.take(5), batches)[1]


# -- a task that fails on its first attempt -------------------------------------------------


class Flaky:
    """sum7, but the task that processes ``victim`` fails on its first attempt.

    ``mode="raise"``: raises after the state was changed (before the task saves);
    ``mode="bad_row"``: emits a row that does not fit output_schema, so the task fails
    after it wrote its pending checkpoint. Each injected failure leaves a marker file.
    """

    def __init__(self, victim: Any, mode: str | None, markers: str) -> None:
        self.victim, self.mode, self.markers = victim, mode, markers

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> Any:
        from pyspark import TaskContext

        out = list(sum7(key, rows, state))
        ctx = TaskContext.get()
        if self.mode and key == self.victim and ctx is not None and ctx.attemptNumber() == 0:
            path = os.path.join(self.markers, f"{self.mode}-{ctx.stageId()}-{ctx.partitionId()}")
            with open(path, "w") as f:
                f.write(str(ctx.taskAttemptId()))
            if self.mode == "raise":
                raise RuntimeError(f"injected failure for key {key}")
            out.append({"n": "not a number", "s": 0.0})
        return out


@pytest.mark.parametrize("inline_state_bytes", [0, 1 << 20], ids=["tasks-store", "staged"])
def test_task_failing_on_first_attempt_is_retried(
    spark: Any, tmp_path: Any, inline_state_bytes: int
) -> None:
    batches = SUM7_BATCHES[:3]
    expected, _ = reference_run(ref_sum7, batches)
    _, state_after_1 = simulate(sum7, batches[:2])
    _, state_after_2 = simulate(sum7, batches)
    markers = str(tmp_path / "markers")
    os.makedirs(markers)
    victim = batches[0][0]["k"]
    url = sqlite_url(tmp_path)
    runner = sum7_runner(
        url,
        "flaky",
        3,
        fn=Flaky(victim, "raise", markers),
        retain=None,
        inline_state_bytes=inline_state_bytes,
    )
    cols = ("k", "n", "s")
    for n, mode in enumerate(["raise", "bad_row", None]):
        runner.fn = Flaky(victim, mode, markers)
        out = df_rows(runner.process(to_df(spark, batches[n]), n))
        assert out == dict_rows(expected[n], cols), f"batch {n} ({mode})"
        assert runner.last_batch is not None and runner.last_batch.committed
    runner.close()
    fired = sorted(name.split("-")[0] for name in os.listdir(markers))
    assert fired == ["bad_row", "raise"], fired  # each failure was injected exactly once
    assert runner.job.checkpoints() == [0, 1, 2]
    assert dump_state(url, "flaky", "sum7") == state_after_2
    assert dump_state(url, "flaky", "sum7", checkpoint=1) == state_after_1
    # Stored by the tasks, the failed attempt of batch 1 had written pending versions; they
    # were never committed and retention removes them. Staged, it left nothing behind.
    stats = runner.job.retain(2)
    if inline_state_bytes:
        assert stats.pending_removed == 0
    else:
        assert stats.pending_removed >= 1
    assert dump_state(url, "flaky", "sum7") == state_after_2
    assert dump_state(url, "flaky", "sum7", checkpoint=1) == state_after_1


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "order_by", "missing"), [("kk", "ts", "kk"), ("k", "when", "when")]
)
def test_missing_column_is_refused_before_any_state_changes(
    spark: Any, tmp_path: Any, key: str, order_by: str, missing: str
) -> None:
    url = sqlite_url(tmp_path)
    runner = StatefulRunner(
        sum7,
        key=key,
        order_by=order_by,
        output_schema=SUM7_SCHEMA,
        storage=url,
        job="bad",
        operator="sum7",
        max_key_groups=16,
    )
    with pytest.raises(ValueError, match=missing):
        runner.process(to_df(spark, SUM7_BATCHES[0]), 0)
    assert runner.job.last_checkpoint() is None
    assert runner.job.checkpoints() == []


class BadOutput:
    """sum7 on good batches; on a bad one, an output row that does not fit the schema."""

    def __init__(self, bad: dict[str, Any] | None) -> None:
        self.bad = bad

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> Any:
        yield from sum7(key, rows, state)
        if self.bad is not None:
            yield dict(self.bad)


@pytest.mark.parametrize(
    "bad",
    [{"n": "seven", "s": 1.0}, {"n": 1, "s": 1.0, "undeclared": 3}],
    ids=["wrong-type", "undeclared-field"],
)
def test_output_not_fitting_schema_fails_the_batch(
    spark: Any, tmp_path: Any, bad: dict[str, Any]
) -> None:
    url = sqlite_url(tmp_path)
    runner = sum7_runner(url, "badout", 2, fn=BadOutput(None))
    runner.process(to_df(spark, SUM7_BATCHES[0]), 0)
    state = dump_state(url, "badout", "sum7")
    runner.fn = BadOutput(bad)
    with pytest.raises(Exception, match="output_schema") as info:
        runner.process(to_df(spark, SUM7_BATCHES[1]), 1)
    if "undeclared" in bad:
        assert "undeclared" in str(info.value)
    assert runner.job.last_checkpoint() == 0
    assert runner.job.checkpoints() == [0]
    assert dump_state(url, "badout", "sum7") == state
    # The batch runs again with a fixed function, on top of the untouched checkpoint 0.
    runner.fn = BadOutput(None)
    expected, _ = reference_run(ref_sum7, SUM7_BATCHES[:2])
    out = df_rows(runner.process(to_df(spark, SUM7_BATCHES[1]), 1))
    assert out == dict_rows(expected[1], ("k", "n", "s"))
    assert runner.job.checkpoints() == [0, 1]
    assert dump_state(url, "badout", "sum7") == simulate(sum7, SUM7_BATCHES[:2])[1]
    runner.close()


def test_storage_that_cannot_be_opened_is_refused_at_construction() -> None:
    with pytest.raises(osp.StorageError, match="nope"):
        StatefulRunner(
            sum7,
            key="k",
            order_by="ts",
            output_schema=SUM7_SCHEMA,
            storage="nope://x",
            job="j",
            operator="o",
        )


def test_operator_reopened_with_other_max_key_groups_is_refused(tmp_path: Any) -> None:
    url = sqlite_url(tmp_path)
    sum7_runner(url, "mkg", 2)  # creates the operator with 16 key groups
    with pytest.raises(osp.CheckpointError) as info:
        StatefulRunner(
            sum7,
            key="k",
            order_by="ts",
            output_schema=SUM7_SCHEMA,
            storage=url,
            job="mkg",
            operator="sum7",
            max_key_groups=32,
        )
    assert "16" in str(info.value) and "32" in str(info.value)


# -- multi-column and string keys -----------------------------------------------------------


def tagger(key: Any, rows: list[Row], state: KeyState) -> Any:
    """Per key: a count, a running total, the sorted set of tags, the last ts per source."""
    n = state.value("n", 0)
    total = state.value("total", 0.0)
    tags = state.sorted_set("tags")
    last = state.dict("last")
    for r in rows:
        n.value = n.value + 1
        total.value = total.value + r["v"]
        tags.add(r["tag"])
        last[r["src"]] = r["ts"]
    yield {"n": n.value, "total": total.value, "tags": list(tags), "last_a": last.get("a")}


def ref_tagger(key: Any, rows: list[Row], st: dict[str, Any]) -> Any:
    for r in rows:
        st["n"] = st.get("n", 0) + 1
        st["total"] = st.get("total", 0.0) + r["v"]
        st.setdefault("tags", set()).add(r["tag"])
        st.setdefault("last", {})[r["src"]] = r["ts"]
    yield {
        "n": st["n"],
        "total": st["total"],
        "tags": sorted(st["tags"]),
        "last_a": st["last"].get("a"),
    }


def tagged_batches() -> list[list[Row]]:
    import random

    rng = random.Random(5)
    names = ["x", "ключ", "a/b%c", "", "(1, 'a')"]
    numbers = [1, -7, 2**31 - 1]
    batches, ts = [], 0
    for _ in range(3):
        rows = []
        for a in names:
            for b in numbers:
                for _ in range(rng.randint(0, 4)):
                    ts += 1
                    rows.append(
                        {
                            "a": a,
                            "b": b,
                            "ts": ts,
                            "v": round(rng.uniform(0, 10), 2),
                            "tag": rng.choice(["red", "green", "blue"]),
                            "src": rng.choice(SOURCES),
                        }
                    )
        rng.shuffle(rows)
        batches.append(rows)
    return batches


@pytest.mark.parametrize("key", [("a", "b"), "a"], ids=["two-columns", "string"])
def test_multi_column_and_string_keys(spark: Any, tmp_path: Any, key: Any) -> None:
    batches = tagged_batches()
    key_columns = list(key) if isinstance(key, tuple) else [key]
    schema = ", ".join(
        [{"a": "a string", "b": "b int"}[c] for c in key_columns]
        + ["n long", "total double", "tags array<string>", "last_a long"]
    )
    expected, _ = reference_run(ref_tagger, batches, key=key_columns)
    _, expected_state = simulate(tagger, batches, key=key_columns, max_key_groups=16)
    url = sqlite_url(tmp_path)
    ddl = "a string, b int, ts long, v double, tag string, src string"
    columns = ("a", "b", "ts", "v", "tag", "src")
    for n, p in enumerate([3, 3, 2]):
        if n != 1:  # a new runner for batch 2, at another parallelism
            runner = StatefulRunner(
                tagger,
                key=key_columns,
                order_by="ts",
                output_schema=schema,
                storage=url,
                job="tagged",
                operator="tagger",
                max_key_groups=16,
                parallelism=p,
            )
        df = to_df(spark, batches[n], ddl, columns)
        if n != 1:  # one partition: the task computes the key groups, not the JVM
            df = df.coalesce(1)
        out = runner.process(df, checkpoint_id=n)
        assert df_rows(out) == dict_rows(expected[n], out.columns), f"batch {n}"
    runner.close()
    # The state of every key lives in the key group that objectspace.key_group_hash gives
    # it (batch 1's in the JVM, batches 0 and 2's in the task), under the key's own prefix.
    assert dump_state(url, "tagged", "tagger") == expected_state


def test_key_groups_computed_in_the_task_are_the_jvms(spark: Any, tmp_path: Any) -> None:
    """A one-partition batch's task hashes the keys itself: for every key column type it
    does so for, the key group and instance are those of the JVM expression, nulls,
    extremes and multi-column keys included; other types stay in the JVM."""
    import pyarrow as pa
    from pyspark.sql import types as T

    from objectspace.engine import route_rows
    from objectspace.spark.routing import hashes_alike, route_table, with_routing

    ARROW_TYPES = {
        "tinyint": pa.int8(),
        "smallint": pa.int16(),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "string": pa.string(),
        "binary": pa.binary(),
        "boolean": pa.bool_(),
    }

    def routed_in_python(
        rows: list[Row], key_columns: tuple[str, ...], max_kg: int, p: int
    ) -> None:
        by_instance = route_rows(rows, key_columns, osp.KeyGroups(max_kg), p)
        for index, routed in by_instance.items():
            for row in routed:
                row["__os_instance"] = index

    values = {
        "tinyint": [-128, -1, 0, 1, 127, None],
        "smallint": [-32768, -7, 0, 300, 32767, None],
        "int": [-(2**31), -5, 0, 1, 12345, 2**31 - 1, None],
        "bigint": [-(2**63), -99, 0, 7, 2**40 + 3, 2**63 - 1, None],
        "string": ["", "a", "héllo", "日本", "x" * 300, None],
        "binary": [b"", b"\x00", b"abc", bytes(range(40)), None],
        "boolean": [True, False, None],
    }
    for max_kg, p in ((128, 3), (7, 2)):
        for ddl_type, column in values.items():
            df = spark.createDataFrame([(v,) for v in column], f"k {ddl_type}")
            assert hashes_alike(df.schema["k"].dataType)
            jvm = [
                (r["k"], r["__os_kg"], r["__os_instance"])
                for r in with_routing(df, ("k",), max_kg, p).collect()
            ]
            rows = [{"k": v} for v in column]
            routed_in_python(rows, ("k",), max_kg, p)
            assert [(r["k"], r["__os_kg"], r["__os_instance"]) for r in rows] == jvm, ddl_type
            # The same routing on Arrow columns (a one-partition task's), row order kept.
            arrow_type = ARROW_TYPES[ddl_type]
            table = pa.table({"k": pa.array(column, arrow_type), "pos": range(len(column))})
            tables = route_table(table.to_batches(), "k", osp.KeyGroups(max_kg), p, [p - 1])
            on_arrow = sorted(
                (r["pos"], r["k"], r["__os_kg"], index)
                for index, t in tables.items()
                for r in t.to_pylist()
            )
            assert [x[1:] for x in on_arrow] == jvm, ddl_type
            assert all(t.column("pos").to_pylist() == sorted(t.column("pos").to_pylist())
                       for t in tables.values())  # fmt: skip
            assert p - 1 in tables
        pairs = [("a", 1), ("a", None), (None, 1), (None, None), ("日本", -(2**31))]
        df = spark.createDataFrame(pairs, "a string, b int")
        jvm = [
            (r["__os_kg"], r["__os_instance"])
            for r in with_routing(df, ("a", "b"), max_kg, p).collect()
        ]
        rows = [{"a": a, "b": b} for a, b in pairs]
        routed_in_python(rows, ("a", "b"), max_kg, p)
        assert [(r["__os_kg"], r["__os_instance"]) for r in rows] == jvm
    for other in (T.DoubleType(), T.TimestampType(), T.DateType(), T.DecimalType(10, 2)):
        assert not hashes_alike(other)
    assert not hashes_alike(T.StringType("UTF8_LCASE"))


# -- storage backends -----------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "segments", "postgresql"])
def test_buffer100_on_each_storage_backend(
    spark: Any, tmp_path: Any, request: pytest.FixtureRequest, backend: str
) -> None:
    batches = keyed_batches(3, 20, 3, (30, 50))
    expected, states = reference_run(ref_buffer100, batches)
    if backend == "sqlite":
        url = sqlite_url(tmp_path)
    elif backend == "segments":
        url = segment_url(f"file://{tmp_path}/seg", f"sqlite:///{tmp_path}/cat.db")
    else:
        url = request.getfixturevalue("postgres_url")
    runner = StatefulRunner(
        buffer100,
        key="k",
        order_by="ts",
        output_schema=BUFFER100_SCHEMA,
        storage=url,
        job="backend",
        operator="buffer100",
        max_key_groups=32,
        parallelism=3,
    )
    for n, rows in enumerate(batches):
        out = df_rows(runner.process(to_df(spark, rows), checkpoint_id=n))
        assert out == dict_rows(expected[n], BUFFER100_COLUMNS), f"batch {n}"
        assert runner.last_batch is not None and runner.last_batch.bytes_written > 0
    runner.close()
    assert sum(len(o) for o in expected) > 0
    assert runner.job.checkpoints() == [1, 2]
    assert dump_state(url, "backend", "buffer100") == buffer100_state(states, 32)


def test_two_runners_on_one_job_cannot_interleave(spark: Any, tmp_path: Any) -> None:
    """A runner started on a job that another runner drives takes it over (fences it): the
    first one can no longer commit, so the store holds one runner's batches only."""
    batches = SUM7_BATCHES[:3]
    _, state_after_2 = simulate(sum7, batches)
    url = sqlite_url(tmp_path)
    first = sum7_runner(url, "twice", 2)
    first.process(to_df(spark, batches[0]), 0)
    second = sum7_runner(url, "twice", 2)
    with pytest.raises(osp.CheckpointConflictError, match=r"epoch 1.*epoch 2"):
        first.process(to_df(spark, batches[1]), 1)
    assert first.job.checkpoints() == [0]
    second.process(to_df(spark, batches[1]), 1)
    assert second.last_batch is not None and second.last_batch.committed
    with pytest.raises(osp.CheckpointConflictError):
        first.process(to_df(spark, batches[2]), 2)
    second.process(to_df(spark, batches[2]), 2)
    assert dump_state(url, "twice", "sum7") == state_after_2
    first.close()
    second.close()
