"""Time under Spark (issue 12): StatefulRunner's event-time timers and TTL give what
``objectspace.testing.simulate`` gives, in batch form (``process``, a timestamp event-time
column, an empty batch firing timers of instances with no rows) and in a streaming query
(``foreachBatch``, a long event-time column, TTL)."""

# The session fixture `spark` is imported from tests.support.spark and requested by name.
# ruff: noqa: F811

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from objectspace.keyed import KeyState
from objectspace.spark import StatefulRunner
from objectspace.testing import simulate
from tests.support.spark import INPUT_DDL, ship, spark, write_json_files  # noqa: F401

ship(__name__)

T0 = datetime(2024, 1, 1, tzinfo=UTC)
T0_MS = (T0 - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def sessions(key: Any, rows: list[dict[str, Any]], state: KeyState) -> list[dict[str, Any]]:
    last = state.value("last")
    count = state.value("n", 0)
    for row in rows:
        ts = row["ts"]
        if last.value is not None:
            state.timers.delete(last.value + 60_000)
        count.value += 1
        last.value = ts if isinstance(ts, int) else round(ts.replace(tzinfo=UTC).timestamp() * 1000)
        state.timers.register(last.value + 60_000)
    return []


def on_timer(key: Any, when: datetime, state: KeyState) -> list[dict[str, Any]]:
    n = state.value("n", 0).value
    state.delete("n")
    state.delete("last")
    return [
        {
            "k": key,
            "end": (when - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1),
            "n": n,
        }
    ]


def sessions_runner(tmp_path: Any) -> StatefulRunner:
    """The runner of :func:`sessions` the tests share: event time on ``ts``, no delay."""
    return StatefulRunner(
        sessions,
        on_timer=on_timer,
        key="k",
        order_by="ts",
        output_schema="k long, end long, n long",
        storage=f"sqlite:///{tmp_path}/state.db",
        job="j",
        operator="sessions",
        max_key_groups=16,
        parallelism=4,
        time_mode="event",
        event_time="ts",
        watermark_delay="0 seconds",
    )


def test_batch_event_time_timers_equal_simulate(spark: Any, tmp_path: Any) -> None:
    from pyspark.sql import types as T

    schema = T.StructType(
        [T.StructField("k", T.LongType()), T.StructField("ts", T.TimestampType())]
    )
    batches = [
        [(k, T0 + timedelta(seconds=s)) for k, s in [(1, 0), (2, 10), (3, 20), (1, 30), (4, 5)]],
        # 5 is not late: batch 1 tests late rows against batch 0's watermark, 0 (Spark's rule)
        [(2, T0 + timedelta(seconds=100)), (5, T0 + timedelta(seconds=1))],
        [],  # no rows: every due timer fires, in instances that have no rows
    ]
    runner = sessions_runner(tmp_path)
    outputs = []
    for i, rows in enumerate(batches):
        out = runner.process(spark.createDataFrame(rows, schema), i)
        outputs.append(Counter(tuple(r) for r in out.collect()))
    runner.close()
    dict_batches = [[{"k": k, "ts": ts.replace(tzinfo=None)} for k, ts in rows] for rows in batches]
    sim = simulate(
        sessions,
        dict_batches,
        key="k",
        order_by="ts",
        parallelism=4,
        time_mode="event",
        event_time="ts",
        on_timer=on_timer,
        max_key_groups=16,
    )
    expected = [Counter((r["k"], r["end"], r["n"]) for r in out) for out in sim.outputs]
    assert outputs == expected
    assert sum(sum(c.values()) for c in expected) == 4  # key 2 (last at 100 s) stays open
    assert [b.rows_late for b in runner.history] == [0, 0, 0]
    assert [b.late_watermark for b in runner.history] == [0, 0, 30_000 + T0_MS]
    assert runner.history[2].timers_fired == 4 and runner.history[2].rows_in == 0


def ttl_count(key: Any, rows: list[dict[str, Any]], state: KeyState) -> list[dict[str, Any]]:
    seen = state.dict("seen", ttl="10 seconds")
    out = [{"k": key, "ts": rows[-1]["ts"], "before": len(seen)}]
    for row in rows:
        seen[row["v"]] = row["ts"]
    return out


def test_streaming_ttl_and_timers_equal_simulate(spark: Any, tmp_path: Any) -> None:
    batches = [
        [{"k": k, "ts": 1000 * (5 * b + k), "v": float(b), "c": 0, "src": "a"} for k in range(6)]
        for b in range(6)
    ]
    write_json_files(tmp_path / "in", batches, first_mtime=time.time() - 3600)
    runner = StatefulRunner(
        ttl_count,
        key="k",
        order_by="ts",
        output_schema="k long, ts long, before long",
        storage=f"sqlite:///{tmp_path}/state.db",
        job="j",
        operator="ttl",
        max_key_groups=8,
        parallelism=3,
        time_mode="event",
        event_time="ts",
        watermark_delay="2 seconds",
    )
    got: dict[int, Counter[Any]] = {}

    def sink(df: Any, batch_id: int) -> None:
        got[batch_id] = Counter(tuple(r) for r in df.collect())

    stream = (
        spark.readStream.schema(INPUT_DDL)
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "in"))
    )
    query = (
        stream.writeStream.foreachBatch(runner.foreach_batch(sink))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(timeout=180)
    finally:
        query.stop()
    runner.close()
    sim = simulate(
        ttl_count,
        batches,
        key="k",
        order_by="ts",
        parallelism=3,
        max_key_groups=8,
        time_mode="event",
        event_time="ts",
        watermark_delay="2 seconds",
    )
    expected = {
        i: Counter((r["k"], r["ts"], r["before"]) for r in out) for i, out in enumerate(sim.outputs)
    }
    assert got == expected
    assert (
        sum(b.entries_expired for b in runner.history)
        == sum(s.entries_expired for s in sim.stats)
        > 0
    )


def test_timestamp_output_columns(spark: Any, tmp_path: Any) -> None:
    """``output_schema`` may hold timestamps: session_window's aware UTC start/end leave the
    runner as timestamp columns, equal to simulate's."""
    from pyspark.sql import types as T

    from objectspace import operators as ops

    schema = T.StructType(
        [
            T.StructField("k", T.LongType()),
            T.StructField("ts", T.TimestampType()),
            T.StructField("v", T.DoubleType()),
        ]
    )
    batches = [
        [(k, T0 + timedelta(seconds=s), 1.0) for k, s in [(1, 0), (2, 10), (1, 30), (3, 200)]],
        [(4, T0 + timedelta(days=1), 1.0)],  # far future: every session closes after it
        [],
    ]
    op = ops.session_window("1 minute", value="v", aggs=("count",), time="ts")
    runner = StatefulRunner(
        op,
        key="k",
        order_by="ts",
        output_schema="k long, start timestamp, end timestamp, count long",
        storage=f"sqlite:///{tmp_path}/state.db",
        job="j",
        operator="sessions",
        max_key_groups=8,
        parallelism=2,
        time_mode="event",
        event_time="ts",
    )
    got = []
    for i, rows in enumerate(batches):
        out = runner.process(spark.createDataFrame(rows, schema), i)
        got.append(
            Counter(
                tuple(r)
                for r in out.selectExpr(
                    "k", "unix_millis(start)", "unix_millis(end)", "count"
                ).collect()
            )
        )
    runner.close()
    sim = simulate(
        ops.session_window("1 minute", value="v", aggs=("count",), time="ts"),
        [[{"k": k, "ts": ts, "v": v} for k, ts, v in rows] for rows in batches],
        key="k",
        order_by="ts",
        parallelism=2,
        max_key_groups=8,
        time_mode="event",
        event_time="ts",
    )
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    expected = [
        Counter(
            (
                r["k"],
                (r["start"] - epoch) // timedelta(milliseconds=1),
                (r["end"] - epoch) // timedelta(milliseconds=1),
                r["count"],
            )
            for r in out
        )
        for out in sim.outputs
    ]
    assert got == expected
    assert sum(sum(c.values()) for c in expected) == 3


def test_a_one_partition_batch_with_due_timers_runs_without_a_shuffle(
    spark: Any, tmp_path: Any
) -> None:
    """A micro-batch in one partition runs every instance in that one task also when
    timers are due (the task runs the due instances itself: no shuffle, no marker rows
    joined), with the output simulate gives."""
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("k", T.LongType()), T.StructField("ts", T.LongType())])
    batches = [
        [(k, 1_000 * k) for k in range(1, 9)],
        [(2, 100_000)],  # watermark 8 s: no timer (61..68 s) due yet
        [(3, 200_000)],  # watermark 100 s: keys 1 and 4..8 fire, most without rows
    ]
    runner = sessions_runner(tmp_path)
    outputs, plans = [], []
    for i, rows in enumerate(batches):
        out = runner.process(spark.createDataFrame(rows, schema).coalesce(1), i)
        plans.append(out._jdf.queryExecution().executedPlan().toString())
        outputs.append(Counter(tuple(r) for r in out.collect()))
    runner.close()
    sim = simulate(
        sessions,
        [[{"k": k, "ts": ts} for k, ts in rows] for rows in batches],
        key="k",
        order_by="ts",
        parallelism=4,
        time_mode="event",
        event_time="ts",
        on_timer=on_timer,
        max_key_groups=16,
    )
    assert outputs == [Counter((r["k"], r["end"], r["n"]) for r in out) for out in sim.outputs]
    assert runner.history[2].timers_fired == 6
    assert "Exchange" not in plans[2], plans[2]
    assert "Union" not in plans[2], plans[2]


def test_a_quiet_stream_fires_its_timers_with_ticks(spark: Any, tmp_path: Any) -> None:
    """Spark plans no batch for a quiet stream behind foreachBatch; with_ticks makes it run
    one, which fires what the last data's watermark made due (Spark's no-data batch)."""
    from objectspace.spark import with_ticks

    start = T0_MS
    batches = [
        [{"k": 1, "ts": start, "v": 1.0, "c": 0, "src": "a"}],
        [{"k": 2, "ts": start + 10_000, "v": 1.0, "c": 0, "src": "a"}],
        [{"k": 3, "ts": start + 200_000, "v": 1.0, "c": 0, "src": "a"}],
    ]
    write_json_files(tmp_path / "in", batches, first_mtime=time.time() - 3600)
    runner = sessions_runner(tmp_path)
    got: list[tuple[Any, ...]] = []

    def sink(df: Any, batch_id: int) -> None:
        got.extend(tuple(r) for r in df.collect())

    stream = spark.readStream.schema(INPUT_DDL).option("maxFilesPerTrigger", 1)
    query = (
        with_ticks(stream.json(str(tmp_path / "in")))
        .writeStream.foreachBatch(runner.foreach_batch(sink))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while len(got) < 2 and time.monotonic() < deadline and query.exception() is None:
            time.sleep(0.5)
    finally:
        query.stop()
    runner.close()
    # keys 1 and 2 (timers at 60 s and 70 s) fire once the last file's watermark (200 s) is
    # the batch's; no file follows it, so only a tick batch can fire them
    assert sorted(got) == [(1, start + 60_000, 1), (2, start + 70_000, 1)]
    assert all(b.rows_in <= 1 for b in runner.history)  # the ticks are never rows
    with pytest.raises(ValueError, match="rows_per_second"):
        with_ticks(stream.json(str(tmp_path / "in")), rows_per_second=0)
