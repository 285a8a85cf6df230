"""The Spark paths through Spark Connect: ``SparkSession.builder.remote("local[2]")``.

PySpark allows no Connect session beside a classic one in a process: ``remote("local")``
starts the Connect server in the calling process, on a SparkContext of its own, refused
while the suite's classic ``spark`` session runs; and from then on the process' builder and
functions speak Connect. So the Connect session lives in a child process (spawned, so it
shares nothing with this one), started once for the module by the ``connect`` fixture;
each test runs a scenario there (a function of this module, which the child imports) and
checks what it returns. ``SPARK_TESTING`` lets the local server take a free port.

Under Connect a ``foreachBatch`` function runs in the server's Python process: the sinks
here write each batch's output to Parquet, and the client reads the batches' statistics
from the checkpoint catalog (``read_stats``, ``StateMetrics``), never from the client's
copy of the runner.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import objectspace as osp
from objectspace.inspection import slices, state_rows
from tests.spark.test_demo import check_time_stage
from tests.support.spark import (
    BUFFER100_COLUMNS,
    BUFFER100_SCHEMA,
    INPUT_DDL,
    buffer100,
    buffer100_state,
    dict_rows,
    dump_state,
    keyed_batches,
    ref_buffer100,
    reference_run,
    ship,
    to_df,
    write_json_files,
)

ship(__name__)

pytestmark = pytest.mark.slow

JOB = "connected"
OPERATOR = "buffer"
_SESSION: Any = None


# -- the child process ------------------------------------------------------------------------


def _start() -> None:
    """The child's initializer: the Connect session every scenario uses."""
    global _SESSION
    os.environ["SPARK_TESTING"] = "1"  # the local Connect server takes a free port
    from objectspace.spark import local_session

    _SESSION = local_session("local[2]", "objectspace-connect-tests", connect=True)


def _call(scenario: Callable[..., Any], *args: Any) -> Any:
    return scenario(_SESSION, *args)


def _server_jobs() -> dict[int, str | None]:
    """Job id -> description of the jobs of the Connect server (in this child process)."""
    from pyspark.sql.session import SparkSession

    classic = SparkSession._instantiatedSession
    assert classic is not None
    out = {}
    it = classic.sparkContext._jsc.sc().statusStore().jobsList(None).iterator()
    while it.hasNext():
        job = it.next()
        description = job.description()
        out[int(job.jobId())] = description.get() if description.isDefined() else None
    return out


def _runner(url: str, **options: Any) -> Any:
    from objectspace.spark import StatefulRunner

    return StatefulRunner(
        buffer100,
        key="k",
        order_by="ts",
        output_schema=BUFFER100_SCHEMA,
        storage=url,
        job=JOB,
        operator=OPERATOR,
        max_key_groups=16,
        **options,
    )


def _process(spark: Any, url: str, batches: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Batches through ``process()`` without a parallelism, on the client."""
    from objectspace.spark.session import is_connect

    known = set(_server_jobs())
    runner = _runner(url)
    outputs = [
        dict_rows(
            [r.asDict() for r in runner.process(to_df(spark, rows), n).collect()], BUFFER100_COLUMNS
        )
        for n, rows in enumerate(batches)
    ]
    runner.close()
    described = sorted({d for j, d in _server_jobs().items() if j not in known and d})
    return {
        "connect": is_connect(spark),
        "outputs": outputs,
        "parallelism": [b.parallelism for b in runner.history],
        "committed": [b.committed for b in runner.history],
        "described": described,
    }


class _ParquetSink:
    """Each batch's output to its own Parquet folder (replaced on a replay)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __call__(self, out: Any, batch_id: int) -> None:
        out.write.mode("overwrite").parquet(os.path.join(self.folder, f"batch={batch_id}"))


def _stream(
    spark: Any, url: str, folder: str, batches: list[list[dict[str, Any]]]
) -> dict[str, Any]:
    """A streaming query over one JSON file per batch, stopped half-way and restarted at
    another parallelism; the state metrics read on the client."""
    from objectspace.inspection.stats import read_stats
    from objectspace.spark.metrics import StateMetrics

    half = len(batches) // 2
    metrics = StateMetrics(url, JOB)
    heard: list[dict[str, Any]] = []
    listener = metrics.listener(heard.append)
    spark.streams.addListener(listener)
    runners, progress = [], []
    for parallelism, upto in ((2, half), (3, len(batches))):
        write_json_files(Path(folder) / "in", batches[:upto], first_mtime=time.time() - 3600)
        runner = _runner(url, parallelism=parallelism)
        query = (
            spark.readStream.schema(INPUT_DDL)
            .option("maxFilesPerTrigger", 1)
            .json(os.path.join(folder, "in"))
            .writeStream.foreachBatch(runner.foreach_batch(_ParquetSink(folder + "/out")))
            .option("checkpointLocation", os.path.join(folder, "chk"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        runners.append(runner)
        progress.append(metrics.recent_progress(query))
    deadline = time.monotonic() + 30
    while len(heard) < len(batches) and time.monotonic() < deadline:
        time.sleep(0.1)
    spark.streams.removeListener(listener)
    out = spark.read.parquet(folder + "/out")
    return {
        "outputs": {
            n: dict_rows(
                [r.asDict() for r in out.where(f"batch = {n}").drop("batch").collect()],
                BUFFER100_COLUMNS,
            )
            for n in range(len(batches))
        },
        "client_history": [list(r.history) for r in runners],
        "stats": read_stats(url, JOB),
        "progress": progress,
        "heard": heard,
    }


def _read_state(spark: Any, url: str) -> list[tuple[Any, ...]]:
    from objectspace.spark import read_state

    return sorted((tuple(r) for r in read_state(spark, url, JOB, OPERATOR).collect()), key=repr)


DEMO_TIME_BATCHES = 3


def _demo(spark: Any) -> tuple[int, str]:
    """The demo, its time stage over a few minutes of event time; what it printed."""
    import contextlib
    import io

    from objectspace.demo.spark import run_spark_demo

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = run_spark_demo(batches=2, spark=spark, time_batches=DEMO_TIME_BATCHES)
    return code, printed.getvalue()


# -- the tests ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def connect() -> Iterator[Callable[..., Any]]:
    """Runs a scenario in the child that holds the Connect session; returns its result."""
    pool = ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("spawn"), initializer=_start
    )
    try:
        yield lambda scenario, *args: pool.submit(_call, scenario, *args).result(timeout=600)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


BATCHES = keyed_batches(27, 10, 3, (15, 45))


def test_process_without_parallelism(connect: Callable[..., Any], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    result = connect(_process, url, BATCHES)
    assert result["connect"]
    expected, states = reference_run(ref_buffer100, BATCHES)
    assert result["outputs"] == [dict_rows(rows, BUFFER100_COLUMNS) for rows in expected]
    # Spark's default parallelism without a SparkContext: local[2]'s two cores
    assert result["parallelism"] == [2] * len(BATCHES)
    assert all(result["committed"])
    assert dump_state(url, JOB, OPERATOR) == buffer100_state(states, 16)
    for n in range(len(BATCHES)):
        assert (
            f"objectspace job={JOB} operator={OPERATOR} checkpoint={n} instances=2"
            in (result["described"])
        )
    # read_state on the same state, through Connect too: the rows objectspace export has
    storage = osp.open_storage(url)
    try:
        op = storage.job(JOB).operator(OPERATOR)
        count = slices(op.max_key_groups)
        exported = list(state_rows(op, storage.job(JOB).last_checkpoint(), range(count), count))
    finally:
        storage.close()
    assert len(exported) > 10
    assert connect(_read_state, url) == sorted(exported, key=repr)


def test_streaming_with_restart_and_state_metrics(
    connect: Callable[..., Any], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    result = connect(_stream, url, str(tmp_path), BATCHES)
    expected, states = reference_run(ref_buffer100, BATCHES)
    assert result["outputs"] == {
        n: dict_rows(rows, BUFFER100_COLUMNS) for n, rows in enumerate(expected)
    }
    assert dump_state(url, JOB, OPERATOR) == buffer100_state(states, 16)
    # the runner ran in the server: the client's copies saw no batch...
    assert result["client_history"] == [[], []]
    # ...and the catalog has every batch's statistics
    stats = result["stats"]
    half = len(BATCHES) // 2
    assert [b.checkpoint_id for b in stats] == list(range(len(BATCHES)))
    assert [b.parallelism for b in stats] == [2] * half + [3] * (len(BATCHES) - half)
    assert all(b.committed and not b.replay for b in stats)
    assert [b.rows_in for b in stats] == [len(rows) for rows in BATCHES]
    assert [b.keys for b in stats] == [len({r["k"] for r in rows}) for rows in BATCHES]
    assert [b.rows_out for b in stats] == [len(rows) for rows in expected]
    # the progress of each run, with the batch's metrics, read on the client
    progress = [p for run in result["progress"] for p in run]
    assert [p["batchId"] for p in progress] == list(range(len(BATCHES)))
    for p in progress:
        shown = p["observedMetrics"]["objectspace"]
        batch = stats[p["batchId"]]
        for name in (
            "keys",
            "rows_in",
            "rows_out",
            "bytes_written",
            "timers_fired",
            "rows_late",
            "cached_instances",
        ):
            assert shown[name] == getattr(batch, name), name
        assert shown["seconds_restore"] == pytest.approx(batch.seconds_restore)
    # a listener registered by the client hears every batch with its metrics
    heard = sorted(result["heard"], key=lambda p: p["batchId"])
    assert [p["batchId"] for p in heard] == list(range(len(BATCHES)))
    assert [p["observedMetrics"]["objectspace"]["rows_in"] for p in heard] == [
        b.rows_in for b in stats
    ]


def test_demo(connect: Callable[..., Any]) -> None:
    code, printed = connect(_demo)
    assert code == 0
    assert "output equals a plain Python run of the same pipeline: yes" in printed
    # the time stage ran through Connect too: its lines from the catalog and the Parquet
    # output the server's sink wrote, checked against simulate
    check_time_stage(printed, DEMO_TIME_BATCHES)
