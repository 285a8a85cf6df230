"""Random workloads with late rows through PySpark's own streaming operators and through
objectspace, batch for batch: Spark's ``session_window``, ``window()`` (tumbling and
sliding) and ``dropDuplicatesWithinWatermark`` against ``ops.session_window``,
``ops.tumbling_window``, ``ops.sliding_window`` and ``ops.dedup``.

Each workload is one JSON file per micro-batch, read by a streaming query with
``maxFilesPerTrigger=1`` and ``trigger(availableNow=True)``: every file is present from the
start, so Spark runs the data batches back to back, with no no-data batch between them.
The objectspace side runs the same batches through ``simulate`` (the engine the runner
runs, so the same code as under Spark) and, for a few workloads, through the runner on
Spark itself. Spark's output of every micro-batch must equal objectspace's for that batch.
"""

# The session fixture `spark` is imported from tests.support.spark and requested by name.
# ruff: noqa: F811

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from typing import Any

import pytest

from objectspace import operators as ops
from objectspace.keyed import to_ms
from objectspace.spark import StatefulRunner
from objectspace.testing import simulate
from tests.support.spark import spark, write_json_files  # noqa: F401

pytestmark = pytest.mark.slow

SEC = 1000
DELAY_S = 5
WORKLOADS = 20
INPUT_DDL = "k STRING, ts LONG, seq LONG, x LONG, v LONG"
Row = dict[str, Any]
Batch = list[tuple[Any, ...]]


def workload(seed: int) -> list[list[Row]]:
    """Six batches around 10 s apart of a few keys: mostly on time, some out of order
    within the delay, some late by more (and some late only against the previous batch's
    watermark), then a far batch that closes what is open."""
    rng = random.Random(seed)
    batches: list[list[Row]] = []
    top, seq = 0, 0
    for b in range(6):
        rows = []
        for _ in range(rng.randint(1, 9)):
            roll = rng.random()
            if roll < 0.25 and top:
                ts = top - DELAY_S * SEC - rng.randint(0, 30) * SEC  # late, or nearly
            elif roll < 0.45 and top:
                ts = top - rng.randint(0, DELAY_S) * SEC
            else:
                ts = (b + 1) * 10 * SEC + rng.randint(0, 12) * SEC
            seq += 1
            k = rng.choice("abc")
            rows.append({"k": k, "ts": max(ts, 1), "seq": seq, "x": rng.randint(0, 2), "v": seq})
        batches.append(rows)
        top = max([top, *(r["ts"] for r in rows)])
    batches.append([{"k": "a", "ts": 10**6 * SEC, "seq": seq + 1, "x": 0, "v": 0}])
    return batches


# -- the two sides ---------------------------------------------------------------------------

OPERATORS: dict[str, tuple[Callable[[Any], Any], Any, Callable[[Row], tuple[Any, ...]]]] = {}


def _window_row(r: Any) -> tuple[Any, ...]:
    return (r["k"], to_ms(r["start"]), to_ms(r["end"]), r["count"], r["sum"])


def _register() -> None:
    from pyspark.sql import functions as F

    def windowed(column: Any) -> Callable[[Any], Any]:
        def plan(df: Any) -> Any:
            return (
                df.groupBy("k", column(F.col("et")).alias("w"))
                .agg(F.count("*").alias("count"), F.sum("v").alias("sum"))
                .selectExpr(
                    "k",
                    "unix_millis(w.start) AS start",
                    "unix_millis(w.end) AS end",
                    "count",
                    "sum",
                )
            )

        return plan

    def native_row(r: Any) -> tuple[Any, ...]:
        return (r["k"], r["start"], r["end"], r["count"], r["sum"])

    OPERATORS["session_window"] = (
        windowed(lambda c: F.session_window(c, "3 seconds")),
        ops.session_window("3 seconds", aggs=("count", "sum")),
        native_row,
    )
    OPERATORS["tumbling_window"] = (
        windowed(lambda c: F.window(c, "10 seconds")),
        ops.tumbling_window("10 seconds", aggs=("count", "sum")),
        native_row,
    )
    OPERATORS["sliding_window"] = (
        windowed(lambda c: F.window(c, "10 seconds", "4 seconds")),
        ops.sliding_window("10 seconds", "4 seconds", aggs=("count", "sum")),
        native_row,
    )
    OPERATORS["dedup"] = (
        lambda df: df.dropDuplicatesWithinWatermark(["k", "x"]).select("k", "seq"),
        ops.dedup(f"{DELAY_S} seconds", by="x"),
        lambda r: (r["k"], r["seq"]),
    )


def native(spark: Any, name: str, folder: str, checkpoint: str) -> tuple[Any, dict[int, Batch]]:
    """Start the native query of ``name`` over ``folder``; its outputs by batch id."""
    from pyspark.sql import functions as F

    plan, _, shape = OPERATORS[name]
    outputs: dict[int, Batch] = {}
    lock = threading.Lock()

    def sink(df: Any, batch_id: int) -> None:
        got = sorted(shape(r) for r in df.collect())
        with lock:
            outputs[int(batch_id)] = got

    stream = (
        spark.readStream.schema(INPUT_DDL)
        .option("maxFilesPerTrigger", 1)
        .json(folder)
        .withColumn("et", F.timestamp_millis("ts"))
        .withWatermark("et", f"{DELAY_S} seconds")
    )
    query = (
        plan(stream)
        .writeStream.outputMode("append")
        .foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    return query, outputs


LATE: dict[str, int] = {}  # rows late by Spark's rule, per operator, over the workloads


def ours(name: str, batches: list[list[Row]]) -> list[Batch]:
    _, op, _ = OPERATORS[name]
    sim = simulate(
        op,
        batches,
        key="k",
        order_by="seq",
        max_key_groups=8,
        parallelism=2,
        time_mode="event",
        event_time="ts",
        watermark_delay=f"{DELAY_S} seconds",
    )
    LATE[name] = LATE.get(name, 0) + sum(st.rows_late for st in sim.stats)
    if name == "dedup":
        return [sorted((r["k"], r["seq"]) for r in out) for out in sim.outputs]
    return [sorted(_window_row(r) for r in out) for out in sim.outputs]


def compare(name: str, batches: list[list[Row]], spark_out: dict[int, Batch]) -> int:
    """Assert Spark's output equals ours batch for batch; the number of rows compared."""
    mine = ours(name, [*batches, []])
    n = len(batches)
    assert sorted(spark_out)[:n] == list(range(n)), (name, sorted(spark_out))
    for b in range(n):
        assert spark_out[b] == mine[b], (name, b, batches)
    if n in spark_out:  # a no-data batch Spark ran after the last file
        assert spark_out[n] == mine[n], (name, n)
    return sum(len(out) for out in spark_out.values())


@pytest.mark.parametrize("name", ["session_window", "tumbling_window", "sliding_window", "dedup"])
def test_random_late_workloads_match_spark_batch_for_batch(
    spark: Any, tmp_path: Any, name: str
) -> None:
    if not OPERATORS:
        _register()
    # The workloads' queries run a few at a time: each waits on Spark's scheduling more
    # than on the two cores.
    pending = list(range(WORKLOADS))
    compared = rows = 0
    while pending:
        running = []
        for seed in pending[:5]:
            batches = workload(seed)
            folder = str(tmp_path / f"{name}-{seed}" / "input")
            write_json_files(folder, batches, first_mtime=1_700_000_000)
            query, out = native(spark, name, folder, str(tmp_path / f"{name}-{seed}" / "ckpt"))
            running.append((query, out, batches))
        for query, out, batches in running:
            query.awaitTermination(timeout=300)
            assert query.exception() is None
            rows += compare(name, batches, out)
            compared += 1
        pending = pending[5:]
    assert compared == WORKLOADS
    assert rows > 5 * WORKLOADS and LATE[name] >= WORKLOADS  # outputs and late rows to compare


def test_the_runner_on_spark_matches_spark_batch_for_batch(spark: Any, tmp_path: Any) -> None:
    """Two workloads per operator through StatefulRunner in a streaming query, beside the
    native query over the same files."""
    if not OPERATORS:
        _register()
    ddl = {
        "dedup": "k string, ts long, seq long, x long, v long",
    }
    window_ddl = "k string, start timestamp, end timestamp, count long, sum long"
    for name in OPERATORS:
        for seed in (101, 102):
            batches = workload(seed)
            base = str(tmp_path / f"runner-{name}-{seed}")
            folder = os.path.join(base, "input")
            write_json_files(folder, batches, first_mtime=1_700_000_000)
            query, spark_out = native(spark, name, folder, os.path.join(base, "native"))
            _, op, _ = OPERATORS[name]
            runner = StatefulRunner(
                op,
                key="k",
                order_by="seq",
                output_schema=ddl.get(name, window_ddl),
                storage=f"sqlite:///{base}/state.db",
                job="parity",
                operator=name,
                max_key_groups=8,
                parallelism=2,
                time_mode="event",
                event_time="ts",
                watermark_delay=f"{DELAY_S} seconds",
            )
            mine: dict[int, Batch] = {}

            def sink(
                df: Any, batch_id: int, mine: dict[int, Batch] = mine, name: str = name
            ) -> None:
                if name == "dedup":
                    mine[batch_id] = sorted((r["k"], r["seq"]) for r in df.collect())
                else:
                    cols = "k", "unix_millis(start)", "unix_millis(end)", "count", "sum"
                    mine[batch_id] = sorted(tuple(r) for r in df.selectExpr(*cols).collect())

            ours_query = (
                spark.readStream.schema(INPUT_DDL)
                .option("maxFilesPerTrigger", 1)
                .json(folder)
                .writeStream.foreachBatch(runner.foreach_batch(sink))
                .option("checkpointLocation", os.path.join(base, "ours"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(timeout=300)
            ours_query.awaitTermination(timeout=300)
            assert query.exception() is None and ours_query.exception() is None
            runner.close()
            for b in range(len(batches)):
                assert mine[b] == spark_out[b], (name, seed, b)
