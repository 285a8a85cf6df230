"""State metrics where Spark users look: each batch's statistics committed with its
checkpoint (:class:`RecordingJob`), one structured log line per batch
(:func:`batch_line`), and the statistics beside the streaming query's progress
(:class:`StateMetrics`).

Why not ``DataFrame.observe``: Spark computes a streaming query's ``observedMetrics``
from the ``observe`` nodes of the micro-batch's own plan, the source's rows on their way
to the sink, as they pass. A ``foreachBatch`` function's DataFrames (the runner's tasks,
its output) run as batch queries of their own, whose observed metrics go to their
``Observation`` and never to the query's progress (Spark 4.3, checked by
``tests/spark/test_metrics.py``); and the statistics exist only after the tasks consumed
the batch's rows. So the runner commits them with the checkpoint, and
:class:`StateMetrics` adds them to the progress as ``observedMetrics["objectspace"]``, on
the client, from the catalog: under Spark Connect too, where the runner runs in the
server's Python process.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from objectspace.checkpoint import EMPTY, Instance, Job, Receipt, Storage
from objectspace.engine import BatchStats
from objectspace.errors import CheckpointError
from objectspace.inspection.stats import (
    STATS_OBJECT,
    STATS_OPERATOR_SUFFIX,
    encode_stats,
    read_stats,
    stats_row,
)

if TYPE_CHECKING:
    from objectspace.engine import TaskPlan

__all__ = [
    "OBSERVED_NAME",
    "PROGRESS_FIELDS",
    "RecordingJob",
    "StateMetrics",
    "batch_line",
    "preview_stats",
]

logger = logging.getLogger(__name__)

# The stats record travels in the commit's own transaction when the storage stages writes.
_STAGE_BYTES = 1 << 20

OBSERVED_NAME = "objectspace"
"""The name of the runner's metrics in a progress' ``observedMetrics``."""

PROGRESS_FIELDS = (
    "checkpoint_id",
    "parallelism",
    "instances",
    "keys",
    "rows_in",
    "rows_out",
    "bytes_written",
    "rows_written",
    "timers_fired",
    "entries_expired",
    "rows_late",
    "rows_bad_time",
    "seconds_restore",
    "seconds_process",
    "seconds_save",
    "seconds_tasks",
    "seconds_total",
    "cached_instances",
    "snapshot_instances",
    "helper_instances",
    "bytes_read",
    "objects_loaded",
    "watermark",
)
"""The :class:`~objectspace.engine.BatchStats` fields a progress' metrics show, and a
batch's log line."""


def _text(value: object) -> str:
    """A logfmt value: bare when it is one plain word, else JSON text (quoted, escaped)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else json.dumps(str(value))
    text = str(value)
    if text and all(c.isalnum() or c in "._-:/#" for c in text):
        return text
    return json.dumps(text)


def batch_line(job: str, operator: str, batch: BatchStats) -> str:
    """One batch as one ``key=value`` line (logfmt): the job, operator and checkpoint, then
    the :data:`PROGRESS_FIELDS` and whether it was a replay or committed."""
    fields: dict[str, object] = {
        "job": job,
        "operator": operator,
        "checkpoint": batch.checkpoint_id,
        "replay": batch.replay,
        "committed": batch.committed,
    }
    for name in PROGRESS_FIELDS[1:]:
        fields[name] = getattr(batch, name)
    return "objectspace batch " + " ".join(f"{k}={_text(v)}" for k, v in fields.items())


def preview_stats(
    plan: TaskPlan,
    reports: Iterable[tuple[Receipt | None, Any]],
    seconds_tasks: float,
    started: float,
) -> BatchStats:
    """The statistics of ``plan``'s batch as they stand before its commit: the tasks'
    reports summed, with the batch's time; ``seconds_total`` counted from ``started`` (a
    ``time.perf_counter()``; :class:`RecordingJob` adds the time up to the commit). What
    :meth:`BatchDriver.finish` adds after the commit, its duration, is left out."""
    from objectspace.engine.stats import add_task, sum_tasks

    batch = BatchStats(
        checkpoint_id=plan.checkpoint_id, parallelism=plan.parallelism, replay=plan.replay
    )
    for receipt, stats in reports:
        add_task(batch, [], receipt, stats)
    sum_tasks(batch)
    batch.tasks = []
    batch.seconds_tasks = seconds_tasks
    batch.seconds_total = time.perf_counter() - started
    if plan.time is not None:
        clock = plan.time.clock
        batch.watermark, batch.late_watermark = clock.watermark, clock.late_watermark
        batch.batch_time = clock.batch_time
    return batch


class RecordingJob(Job):
    """A :class:`~objectspace.Job` whose commit of a batch carries the batch's statistics.

    :meth:`record` hands it a batch's :class:`~objectspace.engine.BatchStats` (see
    :func:`preview_stats`); the next :meth:`commit` of that checkpoint saves them into the
    state of operator ``<operator>#stats`` (one key group, one persisted dict: checkpoint
    id -> the fields, the last ``keep`` batches; see :mod:`objectspace.inspection.stats`)
    and commits that save with the batch's receipts, in the same catalog transaction: a
    batch's record exists exactly when its checkpoint does. ``committed`` is true in a
    record, and ``bytes_written``/``rows_written`` count every receipt of the commit.
    """

    def __init__(self, storage: Storage, name: str, keep: int | None = 100) -> None:
        super().__init__(storage, name)
        self.keep = keep
        self._pending: tuple[str, BatchStats, int | None, float] | None = None
        # The stats operator's instance as of the checkpoint it last committed.
        self._kept: Instance | None = None
        self._kept_at: int | None = None

    def record(self, operator: str, batch: BatchStats, base: int | None) -> None:
        """Commit ``batch``'s statistics with the next commit of its checkpoint, made on
        checkpoint ``base``; replaces a record not committed yet."""
        self._pending = (operator, batch, base, time.perf_counter())

    def _stats_instance(self, operator: str, base: int | None) -> Instance:
        if self._kept is not None and self._kept_at == base:
            return self._kept
        name = operator + STATS_OPERATOR_SUFFIX
        exists = self.backend.operator_info(self.name, name) is not None
        op = self.operator(name, 1)
        if base is None or not exists:
            instance = op.instance(0, 1, checkpoint=EMPTY)
            instance.base = base  # receipts of one commit share their base
            return instance
        return op.instance(0, 1, checkpoint=base)

    def _save(self, checkpoint_id: int, receipts: list[Receipt]) -> Instance | None:
        pending, self._pending = self._pending, None
        if pending is None or self.keep == 0:
            return None
        operator, batch, base, recorded_at = pending
        if batch.checkpoint_id != checkpoint_id:
            return None
        batch.seconds_total += time.perf_counter() - recorded_at
        batch.committed = True
        batch.bytes_written = sum(r.bytes_written for r in receipts)
        batch.rows_written = sum(r.rows_written for r in receipts)
        instance = self._stats_instance(operator, base)
        self._kept = self._kept_at = None  # edited now: no longer that checkpoint's state
        space = instance.space(0)
        recorded = (
            space.get_dict(STATS_OBJECT)
            if STATS_OBJECT in space
            else space.create_dict(STATS_OBJECT)
        )
        recorded[checkpoint_id] = encode_stats(batch)
        if self.keep is not None and len(recorded) > self.keep:
            for old in sorted(recorded)[: len(recorded) - self.keep]:
                del recorded[old]
        receipts.append(instance.save(checkpoint_id, stage_bytes=_STAGE_BYTES))
        return instance

    def commit(self, checkpoint_id: int, receipts: Iterable[Receipt]) -> bool:
        """:meth:`Job.commit`, with the statistics :meth:`record` gave for this
        checkpoint saved and committed alongside."""
        receipts = list(receipts)
        instance = self._save(checkpoint_id, receipts)
        committed = super().commit(checkpoint_id, receipts)
        if instance is not None and committed:
            try:
                instance.on_saved()
            except CheckpointError:  # not the save committed after all: restore next time
                logger.debug(
                    "job %r: the stats saved for checkpoint %s are not the committed ones; "
                    "the next batch restores them",
                    self.name,
                    checkpoint_id,
                )
            else:
                self._kept, self._kept_at = instance, checkpoint_id
        return committed


def _plain(progress: Any) -> dict[str, Any]:
    """A progress (PySpark's ``StreamingQueryProgress``, a dict, or its JSON) as a dict."""
    if progress is None:
        return {}
    if isinstance(progress, str):
        return dict(json.loads(progress))
    text = getattr(progress, "json", None)
    if isinstance(text, str):
        return dict(json.loads(text))
    return dict(progress)


class StateMetrics:
    """The runner's batch statistics beside a streaming query's progress, read from the
    checkpoint catalog (so from any process that reaches the storage: the driver, or the
    client of a Spark Connect session).

    ::

        metrics = StateMetrics("sqlite:///state.db", "clicks")
        query = stream.writeStream.foreachBatch(runner.foreach_batch(sink)).start()
        ...
        progress = metrics.last_progress(query)
        progress["observedMetrics"]["objectspace"]["keys"]

    :meth:`last_progress` and :meth:`recent_progress` are ``query.lastProgress`` and
    ``query.recentProgress`` as plain dicts whose ``observedMetrics`` hold, under
    :data:`OBSERVED_NAME`, the :data:`PROGRESS_FIELDS` of the batch the progress reports
    (its ``batchId`` is the checkpoint id; nothing is added for a batch the runner has not
    committed, or whose record is no longer kept). :meth:`listener` is a
    ``StreamingQueryListener`` calling a function with each such progress.
    ``operator`` as in :func:`~objectspace.read_stats`.
    """

    def __init__(self, storage: str | Storage, job: str, *, operator: str | None = None) -> None:
        self.storage = storage
        self.job = job
        self.operator = operator

    def stats(self, last: int | None = None) -> dict[int, BatchStats]:
        """The recorded batches (the last ``last``), by checkpoint id."""
        batches = read_stats(self.storage, self.job, operator=self.operator, last=last)
        return {b.checkpoint_id: b for b in batches}

    @staticmethod
    def metrics(batch: BatchStats) -> dict[str, Any]:
        """The :data:`PROGRESS_FIELDS` of ``batch``."""
        row = stats_row(batch)
        return {name: row[name] for name in PROGRESS_FIELDS}

    def merge(
        self, progress: Any, recorded: Mapping[int, BatchStats] | None = None
    ) -> dict[str, Any]:
        """``progress`` (a progress, dict or JSON) as a dict with the metrics of its batch
        in ``observedMetrics`` (``recorded``: the statistics to use, default read now)."""
        data = _plain(progress)
        batch_id = data.get("batchId")
        if not isinstance(batch_id, int):
            return data
        stats = (self.stats() if recorded is None else recorded).get(batch_id)
        if stats is not None:
            observed = dict(data.get("observedMetrics") or {})
            observed[OBSERVED_NAME] = self.metrics(stats)
            data["observedMetrics"] = observed
        return data

    def last_progress(self, query: Any) -> dict[str, Any] | None:
        """``query.lastProgress`` with the runner's metrics (``None`` before any)."""
        progress = query.lastProgress
        return None if progress is None else self.merge(progress)

    def recent_progress(self, query: Any) -> list[dict[str, Any]]:
        """``query.recentProgress`` with the runner's metrics, oldest first."""
        progresses = list(query.recentProgress)
        if not progresses:
            return []
        recorded = self.stats()
        return [self.merge(p, recorded) for p in progresses]

    def listener(self, on_progress: Callable[[dict[str, Any]], None]) -> Any:
        """A ``StreamingQueryListener`` (register it with ``spark.streams.addListener``)
        that calls ``on_progress`` with each progress of the session's queries, the
        runner's metrics merged in (Spark Connect: on the client). An exception raised
        by ``on_progress`` or while reading the catalog is logged, never raised into
        Spark's listener bus."""
        from pyspark.sql.streaming.listener import StreamingQueryListener

        merge = self.merge

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                try:
                    on_progress(merge(event.progress))
                except Exception:
                    logger.exception("objectspace: the state metrics of a progress failed")

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        return _Listener()
