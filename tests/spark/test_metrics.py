"""State metrics where Spark users look: each batch's statistics committed with its
checkpoint (``read_stats``), the description of the Spark jobs a batch starts, one log line
per batch, and the statistics beside a streaming query's progress (``StateMetrics``)."""

# The session fixture `spark` is imported from tests.support.spark and requested by name.
# ruff: noqa: F811

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

import objectspace as osp
from objectspace.engine import BatchStats
from objectspace.inspection.stats import read_stats
from objectspace.spark import StatefulRunner
from objectspace.spark.metrics import OBSERVED_NAME, PROGRESS_FIELDS, StateMetrics, batch_line
from tests.support.spark import (
    BUFFER100_SCHEMA,
    buffer100,
    keyed_batches,
    ship,
    spark,  # noqa: F401
    to_df,
    write_json_files,
)

ship(__name__)

JOB = "metrics"
OPERATOR = "buffer"
# Fields a record holds as the runner's own BatchStats has them (the commit's duration
# and the per-task stats are not in the record).
SAME = [f for f in PROGRESS_FIELDS if f not in ("seconds_total",)] + [
    "replay",
    "committed",
    "late_watermark",
    "batch_time",
    "rows_read",
]


def _runner(url: str, **options: Any) -> StatefulRunner:
    return StatefulRunner(
        buffer100,
        key="k",
        order_by="ts",
        output_schema=BUFFER100_SCHEMA,
        storage=url,
        job=JOB,
        operator=OPERATOR,
        max_key_groups=16,
        parallelism=2,
        **options,
    )


def _same(recorded: BatchStats, ran: BatchStats) -> None:
    for name in SAME:
        assert getattr(recorded, name) == getattr(ran, name), name
    assert recorded.tasks == [] and recorded.seconds_commit == 0


def _jobs(spark: Any) -> list[tuple[int, str | None]]:
    """(job id, description) of every Spark job of the session's application."""
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    out = []
    it = jobs.iterator()
    while it.hasNext():
        job = it.next()
        description = job.description()
        out.append((int(job.jobId()), description.get() if description.isDefined() else None))
    return out


def test_batches_are_recorded_with_their_checkpoints(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    batches = keyed_batches(5, 12, 4, (20, 60))
    runner = _runner(url, history=3)
    known = {job for job, _ in _jobs(spark)}
    with caplog.at_level(logging.INFO, logger="objectspace"):
        for n, rows in enumerate(batches):
            runner.process(to_df(spark, rows), n).collect()
    # one structured line per batch, through the objectspace logger
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("objectspace ")]
    assert len(lines) == 4
    assert lines[1:] == [batch_line(JOB, OPERATOR, b) for b in runner.history]
    assert lines[2].startswith(f"objectspace batch job={JOB} operator={OPERATOR} checkpoint=2 ")
    for field in ("keys", "rows_in", "rows_out", "bytes_written", "timers_fired", "rows_late"):
        assert f" {field}={getattr(runner.history[1], field)}" in lines[2]
    assert " cached_instances=" in lines[2] and " seconds_restore=" in lines[2]

    # the records of the last `history` batches, as the runner saw them
    recorded = read_stats(url, JOB)
    assert [b.checkpoint_id for b in recorded] == [1, 2, 3]
    for record, ran in zip(recorded, list(runner.history), strict=True):
        _same(record, ran)
        assert record.keys == 12 and record.rows_in > 0 and record.bytes_written > 0
        assert record.seconds_total >= record.seconds_tasks > 0
    assert [b.checkpoint_id for b in read_stats(url, JOB, operator=OPERATOR, last=2)] == [2, 3]
    assert read_stats(url, JOB, last=0) == []
    assert [b.checkpoint_id for b in runner.read_stats(last=10)] == [1, 2, 3]

    # every Spark job of a batch is described: job, operator, checkpoint, instances
    described = [d for job, d in _jobs(spark) if job not in known and d is not None]
    for n in range(4):
        assert f"objectspace job={JOB} operator={OPERATOR} checkpoint={n} instances=2" in described
    assert spark.sparkContext.getLocalProperty("spark.job.description") is None  # restored

    # a replayed batch records nothing; a new runner continues the record
    again = _runner(url, history=3)
    again.process(to_df(spark, batches[3]), 3).collect()
    assert again.history[0].replay
    assert [b.checkpoint_id for b in read_stats(url, JOB)] == [1, 2, 3]
    _same(read_stats(url, JOB)[-1], runner.history[-1])
    again.process(to_df(spark, batches[0]), 4).collect()
    recorded = read_stats(url, JOB)
    assert [b.checkpoint_id for b in recorded] == [2, 3, 4]
    _same(recorded[-1], again.history[-1])
    runner.close()
    again.close()


def test_no_record_with_history_zero_and_read_stats_errors(spark: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    runner = _runner(url, history=0)
    runner.process(to_df(spark, keyed_batches(1, 3, 1, (1, 2))[0]), 0).collect()
    assert runner.job.checkpoints() == [0]
    assert read_stats(url, JOB) == []
    assert [o.name for o in runner.job.operators()] == [OPERATOR]
    with pytest.raises(osp.CheckpointError, match="no job 'nope'"):
        read_stats(url, "nope")
    with pytest.raises(osp.CheckpointError, match="has no operator 'other'"):
        read_stats(url, JOB, operator="other")
    with pytest.raises(osp.StorageError, match="does not exist"):
        read_stats(f"sqlite:///{tmp_path}/missing.db", JOB)
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(ValueError, match="last is a number"):
        read_stats(url, JOB, last=-1)
    runner.close()


def test_streaming_progress_shows_the_state_metrics(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    url = f"sqlite:///{tmp_path}/state.db"
    batches = keyed_batches(9, 8, 3, (30, 80))
    write_json_files(tmp_path / "in", batches, first_mtime=time.time() - 3600)
    runner = _runner(url)
    metrics = StateMetrics(url, JOB)
    seen: list[dict[str, Any]] = []
    listener = metrics.listener(seen.append)
    spark.streams.addListener(listener)
    known = {job for job, _ in _jobs(spark)}

    def sink(out: Any, batch_id: int) -> None:
        # what Spark offers a foreachBatch function: observe its own DataFrame...
        observed = out.observe("sink", F.count(F.lit(1)).alias("rows"))
        observed.collect()

    try:
        query = (
            spark.readStream.schema("k long, ts long, v double, c long, src string")
            .option("maxFilesPerTrigger", 1)
            .json(str(tmp_path / "in"))
            .writeStream.foreachBatch(runner.foreach_batch(sink))
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        deadline = time.monotonic() + 30
        while len(seen) < len(batches) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        spark.streams.removeListener(listener)
    # ...whose observed metrics never reach the query's progress
    assert all(
        "sink" not in (p.get("observedMetrics") or {}) for p in map(dict, query.recentProgress)
    )
    assert all(OBSERVED_NAME not in (p.get("observedMetrics") or {}) for p in query.recentProgress)

    last = metrics.last_progress(query)
    assert last is not None and last["batchId"] == len(batches) - 1
    shown = last["observedMetrics"][OBSERVED_NAME]
    ran = runner.history[-1]
    assert set(shown) == set(PROGRESS_FIELDS)
    for name in ("checkpoint_id", "keys", "rows_in", "rows_out", "bytes_written"):
        assert shown[name] == getattr(ran, name)
    assert shown["cached_instances"] == ran.cached_instances
    assert shown["seconds_restore"] == pytest.approx(ran.seconds_restore)
    recent = metrics.recent_progress(query)
    assert [p["batchId"] for p in recent] == list(range(len(batches)))
    assert [p["observedMetrics"][OBSERVED_NAME]["keys"] for p in recent] == [
        b.keys for b in runner.history
    ]
    # the jobs a foreachBatch function starts are described too
    described = {d for job, d in _jobs(spark) if job not in known and d is not None}
    for n in range(len(batches)):
        assert f"objectspace job={JOB} operator={OPERATOR} checkpoint={n} instances=2" in described
    # the listener got every progress with the metrics of its batch
    assert sorted(p["batchId"] for p in seen) == list(range(len(batches)))
    assert all(
        p["observedMetrics"][OBSERVED_NAME]["rows_in"] == runner.history[p["batchId"]].rows_in
        for p in seen
    )
    runner.close()
