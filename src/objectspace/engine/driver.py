"""The driver's protocol of a batch, once for the Spark runner and for
:func:`~objectspace.engine.simulate`: :class:`BatchDriver`.

``begin`` picks the checkpoint the batch runs on (a replay runs on the one it was made on and
commits nothing), the batch's time (watermark, batch time, the key groups with something
due) and fixes the :class:`~objectspace.engine.plan.TaskPlan`; the caller runs the plan's
instances wherever it runs tasks and hands their receipts and stats to ``finish``, which
records the batch's time, commits the checkpoint in one catalog transaction, applies
retention and totals the :class:`~objectspace.engine.stats.BatchStats`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from objectspace.checkpoint import CompactionPolicy, Operator, Receipt
from objectspace.engine.columns import check_copy_every, check_parallelism, check_retain
from objectspace.engine.plan import StatefulFunction, TaskPlan, plan_base
from objectspace.engine.stats import BatchStats, TaskStats, add_task, sum_tasks
from objectspace.engine.time_driver import TimeDriver, TimeOptions

__all__ = ["BatchDriver"]


class BatchDriver:
    """Runs the driver's side of an operator's batches: :meth:`begin` → (tasks) →
    :meth:`finish`.

    ``operator`` is the job's operator the batches run (its job is fenced by the caller);
    ``fn``, ``key_columns``, ``order_columns``, ``output_columns`` and ``compaction`` go
    to every :class:`~objectspace.engine.plan.TaskPlan`; ``retain`` checkpoints are kept
    after each commit (``None``: all); ``time`` are the runner's time options;
    ``memory_budget``, ``local_dir`` and ``copy_every`` go to every plan (see
    :class:`TaskPlan`).
    """

    def __init__(
        self,
        operator: Operator,
        fn: StatefulFunction,
        *,
        key_columns: tuple[str, ...],
        order_columns: tuple[str, ...],
        output_columns: tuple[str, ...] | None = None,
        compaction: CompactionPolicy | None = None,
        retain: int | None = 2,
        time: TimeOptions | None = None,
        memory_budget: int | None = None,
        local_dir: str | None = None,
        copy_every: int | None = None,
    ) -> None:
        check_retain(retain)
        check_copy_every(copy_every)
        self.memory_budget = memory_budget
        self.local_dir = local_dir
        self.copy_every = copy_every
        self.operator = operator
        self.job = operator.job
        self.fn = fn
        self.key_columns = key_columns
        self.order_columns = order_columns
        self.output_columns = output_columns
        self.compaction = compaction or CompactionPolicy()
        self.retain = retain
        self.time = TimeDriver(self.job, operator.name, time or TimeOptions())
        self._started: dict[int, float] = {}

    def begin(
        self,
        checkpoint_id: int,
        parallelism: int,
        *,
        batch_time: int | None = None,
        stage_bytes: int = 0,
        output_columns: Sequence[str] | None = None,
        use_cache: bool = False,
        use_snapshots: bool = False,
        owner: str = "",
        snapshot_key: bytes = b"",
    ) -> TaskPlan:
        """The plan of batch ``checkpoint_id`` at ``parallelism``: on which checkpoint it
        runs, whether it replays a committed one, and its time (``batch_time``, epoch ms:
        the processing time of a first attempt, default now; a replay keeps its recorded
        one). ``stage_bytes`` and the cache options go to the plan as they are;
        ``output_columns`` overrides the driver's for this batch."""
        check_parallelism(parallelism, self.operator.max_key_groups)
        # One batch at a time: an attempt that failed before finish() is forgotten here.
        self._started = {checkpoint_id: time.perf_counter()}
        base, replay = plan_base(self.job, checkpoint_id)
        timing = self.time.plan(checkpoint_id, base, replay, batch_time)
        columns = self.output_columns if output_columns is None else tuple(output_columns)
        return TaskPlan(
            storage=self.job.storage,
            info=self.operator.info,
            compaction=self.compaction,
            fn=self.fn,
            checkpoint_id=checkpoint_id,
            base=base,
            parallelism=parallelism,
            replay=replay,
            key_columns=self.key_columns,
            order_columns=self.order_columns,
            output_columns=columns,
            use_cache=use_cache,
            use_snapshots=use_snapshots,
            owner=owner,
            snapshot_key=snapshot_key,
            time=timing,
            stage_bytes=stage_bytes,
            memory_budget=self.memory_budget,
            local_dir=self.local_dir,
            copy_every=self.copy_every,
        )

    def finish(
        self,
        plan: TaskPlan,
        tasks: Iterable[tuple[Receipt | None, TaskStats]],
        *,
        commit: bool = True,
        seconds_tasks: float = 0.0,
    ) -> BatchStats:
        """Gather the tasks' receipts and stats of ``plan``'s batch and, when ``commit``
        (and the batch is no replay), record its time and commit it with them; then keep
        ``retain`` checkpoints. ``commit=False`` plays a failed attempt: nothing is
        committed, and a later attempt of the batch keeps its time. The batch's stats,
        ``seconds_total`` counted from :meth:`begin`."""
        batch = BatchStats(
            checkpoint_id=plan.checkpoint_id, parallelism=plan.parallelism, replay=plan.replay
        )
        receipts: list[Receipt] = []
        for receipt, stats in tasks:
            add_task(batch, receipts, receipt, stats)
        batch.seconds_tasks = seconds_tasks
        timing = plan.time
        if commit:
            if timing is not None:
                time_receipt = self.time.save(timing, batch)
                if time_receipt is not None:
                    receipts.append(time_receipt)
            started = time.perf_counter()
            if not batch.replay:
                batch.committed = self.job.commit(batch.checkpoint_id, receipts)
                if self.retain is not None:
                    self.job.retain(self.retain)
            batch.seconds_commit = time.perf_counter() - started
            self.time.acknowledge(batch.committed)
        elif timing is not None:
            clock = timing.clock
            batch.watermark, batch.late_watermark = clock.watermark, clock.late_watermark
            batch.batch_time = clock.batch_time
        sum_tasks(batch)
        started_at = self._started.pop(plan.checkpoint_id, None)
        if started_at is not None:
            batch.seconds_total = time.perf_counter() - started_at
        return batch
