"""What a task and a batch did: :class:`TaskStats`, :class:`BatchStats`, and their sums."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from objectspace.checkpoint import Receipt

__all__ = ["NO_TIME", "BatchStats", "TaskStats", "add_task", "finish_task", "sum_tasks"]

NO_TIME = -(1 << 63)
"""``TaskStats.max_event_time`` of a task that saw no event time."""


@dataclass
class TaskStats:
    """What one instance's task did in one batch.

    ``cached``: the instance was not restored from storage but adopted from this worker's
    memory or (``snapshot``) from a snapshot file another worker wrote. ``seconds_restore``
    covers getting the instance (adopting, or restoring its key groups);
    ``seconds_snapshot`` writing its snapshot after the save (``snapshot_bytes``).
    ``helper``: a helper process of the task's worker ran the instance
    (:mod:`objectspace.spark.helpers`).

    With a memory budget (state larger than memory): ``bytes_read``, the bytes of stored
    writes read from storage (key groups the local store did not hold as committed);
    ``objects_loaded``, the objects loaded from the local store into memory;
    ``objects_evicted``, dropped from memory to stay within the budget;
    ``objects_resident`` and ``bytes_resident`` (an estimate), what the instance holds in
    memory once the task is done. An object is one collection of a key's state (a key
    with one ``state.value`` is one object). ``copy_bytes_read``: the bytes of a copy of
    the instance's local store read from storage's file area (a process without the local
    file); ``copy_bytes_written``: of a copy the task put there (see
    :mod:`objectspace.checkpoint.copies`).
    """

    index: int = 0
    keys: int = 0
    rows_in: int = 0
    rows_out: int = 0
    rows_read: int = 0
    cached: bool = False
    snapshot: bool = False
    helper: bool = False
    snapshot_bytes: int = 0
    seconds_restore: float = 0.0
    seconds_process: float = 0.0
    seconds_save: float = 0.0
    seconds_snapshot: float = 0.0
    seconds_total: float = 0.0
    rows_late: int = 0
    rows_bad_time: int = 0
    timers_fired: int = 0
    entries_expired: int = 0
    max_event_time: int = NO_TIME
    bytes_read: int = 0
    objects_loaded: int = 0
    objects_evicted: int = 0
    objects_resident: int = 0
    bytes_resident: int = 0
    copy_bytes_read: int = 0
    copy_bytes_written: int = 0
    deadlines: list[list[int]] = field(default_factory=list)
    """Per key group the task ran: ``[key_group]`` (nothing due any more) or
    ``[key_group, earliest time due]``, for the driver's record."""


@dataclass
class BatchStats:
    """What one batch did, summed over its tasks."""

    checkpoint_id: int
    parallelism: int
    replay: bool = False
    committed: bool = False
    instances: int = 0
    keys: int = 0
    rows_in: int = 0
    rows_out: int = 0
    bytes_written: int = 0
    rows_written: int = 0
    rows_read: int = 0
    bytes_read: int = 0
    objects_loaded: int = 0
    objects_evicted: int = 0
    objects_resident: int = 0
    bytes_resident: int = 0
    """The resident figures summed over the tasks (see :class:`TaskStats`)."""
    copy_bytes_read: int = 0
    copy_bytes_written: int = 0
    """Bytes of local store copies read from and put in storage's file area."""
    cached_instances: int = 0
    snapshot_instances: int = 0
    helper_instances: int = 0
    """Instances a helper process of the task's worker ran (see ``task_processes``)."""
    seconds_total: float = 0.0
    seconds_commit: float = 0.0
    seconds_tasks: float = 0.0
    seconds_restore: float = 0.0
    seconds_process: float = 0.0
    seconds_save: float = 0.0
    seconds_snapshot: float = 0.0
    rows_late: int = 0
    """Rows late by the batch's ``late_watermark`` (dropped, or kept with
    ``late_rows="keep"``)."""
    rows_bad_time: int = 0
    """Rows dropped because their event time is null, not a time, or outside the datetimes
    (years 1 to 9999)."""
    timers_fired: int = 0
    entries_expired: int = 0
    watermark: int | None = None
    """The watermark the batch evicted and fired event-time timers with (epoch ms;
    ``None``: not in event mode)."""
    late_watermark: int | None = None
    """The watermark the batch's late rows were tested against: the previous batch's."""
    batch_time: int | None = None
    """The batch's processing time (epoch ms), when the operator keeps time."""
    tasks: list[TaskStats] = field(default_factory=list)


def finish_task(stats: TaskStats, started: float) -> None:
    """Set the task's total and processing time once everything it does is done."""
    stats.seconds_total = time.perf_counter() - started
    stats.seconds_process = (
        stats.seconds_total - stats.seconds_save - stats.seconds_snapshot - stats.seconds_restore
    )


def add_task(
    batch: BatchStats, receipts: list[Receipt], receipt: Receipt | None, stats: TaskStats
) -> None:
    """Gather one task's receipt (into ``receipts``) and stats (into ``batch``)."""
    if receipt is not None:
        receipts.append(receipt)
        batch.bytes_written += receipt.bytes_written
        batch.rows_written += receipt.rows_written
    batch.tasks.append(stats)


def sum_tasks(batch: BatchStats) -> None:
    """Total the tasks' stats into ``batch``."""
    batch.instances = len(batch.tasks)
    for stats in batch.tasks:
        batch.keys += stats.keys
        batch.rows_in += stats.rows_in
        batch.rows_out += stats.rows_out
        batch.rows_read += stats.rows_read
        batch.bytes_read += stats.bytes_read
        batch.objects_loaded += stats.objects_loaded
        batch.objects_evicted += stats.objects_evicted
        batch.objects_resident += stats.objects_resident
        batch.bytes_resident += stats.bytes_resident
        batch.copy_bytes_read += stats.copy_bytes_read
        batch.copy_bytes_written += stats.copy_bytes_written
        batch.cached_instances += stats.cached
        batch.snapshot_instances += stats.snapshot
        batch.helper_instances += stats.helper
        batch.seconds_restore += stats.seconds_restore
        batch.seconds_process += stats.seconds_process
        batch.seconds_save += stats.seconds_save
        batch.seconds_snapshot += stats.seconds_snapshot
        batch.rows_late += stats.rows_late
        batch.rows_bad_time += stats.rows_bad_time
        batch.timers_fired += stats.timers_fired
        batch.entries_expired += stats.entries_expired
