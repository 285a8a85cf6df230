"""How a batch runs, without Spark: the per-instance loop and the driver's per-batch steps.

The Spark runner (:mod:`objectspace.spark`) and :func:`objectspace.testing.simulate` both
run a batch through this module, so a function tested with ``simulate`` sees exactly what it
sees under Spark. Rows are plain dicts; nothing here imports pyspark, pandas or pyarrow.

Executor side: a :class:`TaskPlan` (frozen, pickled to the executors) says what to run;
:func:`group_rows` groups an instance's rows by key, :func:`run_instance` feeds each key its
rows in ``order_by`` order with its :class:`~objectspace.operators.KeyState`, collects the
output rows (key columns filled in) and saves the instance as pending checkpoint N, giving
its receipt and :class:`TaskStats`.

Driver side: :func:`plan_base` picks the checkpoint a batch runs on (and tells a replay),
:func:`add_task` gathers the tasks' receipts and stats into a :class:`BatchStats`,
:func:`sum_tasks` totals them.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from objectspace.checkpoint import (
    EMPTY,
    CompactionPolicy,
    Instance,
    Job,
    Operator,
    Receipt,
    Storage,
)
from objectspace.errors import (
    CheckpointError,
    CorruptStateError,
    ObjectSpaceError,
    ReservedColumnError,
    TimeError,
)
from objectspace.keyed import (
    TIME_MODES,
    Clock,
    KeyState,
    due_timers,
    earliest,
    expire,
    fire_timer,
    parse_duration,
    prefix_of_repr,
    to_ms,
)
from objectspace.storage.contract import OperatorInfo

__all__ = [
    "INSTANCE_COLUMN",
    "KEY_GROUP_COLUMN",
    "RECEIPT_COLUMN",
    "RESERVED_COLUMNS",
    "BatchStats",
    "StatefulFunction",
    "TaskPlan",
    "TaskStats",
    "TimeDriver",
    "TimeOptions",
    "TimePlan",
    "add_task",
    "check_input_columns",
    "check_output_columns",
    "check_parallelism",
    "check_retain",
    "column_names",
    "finish_task",
    "fire_timer",
    "group_rows",
    "order_rows",
    "plan_base",
    "run_instance",
    "sum_tasks",
]

StatefulFunction = Callable[[Any, list[dict[str, Any]], KeyState], Iterable[Mapping[str, Any]]]
"""``fn(key, rows, state)``: a function or an operator of :mod:`objectspace.operators`."""

KEY_GROUP_COLUMN = "__os_kg"
INSTANCE_COLUMN = "__os_instance"
RECEIPT_COLUMN = "__os_receipt"
NO_TIME = -(1 << 63)
"""``TaskStats.max_event_time`` of a task that saw no event time."""
RESERVED_COLUMNS = (KEY_GROUP_COLUMN, INSTANCE_COLUMN, RECEIPT_COLUMN)
"""Column names the runner adds to a batch: an input, an output row or an output_schema
that uses one is refused with :class:`~objectspace.errors.ReservedColumnError`."""

Row = dict[str, Any]
_GROUP_AND_REPR = operator.itemgetter(0, 1)


def column_names(value: str | Sequence[str], what: str) -> tuple[str, ...]:
    """``key``/``order_by`` as a tuple of column names (``what`` names the argument)."""
    cols = (value,) if isinstance(value, str) else tuple(value)
    if not cols or not all(isinstance(c, str) and c for c in cols):
        raise ValueError(
            f"{what} must be a column name or a non-empty list of names, not {value!r}"
        )
    return cols


def check_parallelism(parallelism: object, max_key_groups: int) -> int:
    """``parallelism`` if it is an int in ``1..max_key_groups``, else :class:`ValueError`."""
    if type(parallelism) is not int or not 1 <= parallelism <= max_key_groups:
        raise ValueError(
            f"parallelism must be an int in 1..{max_key_groups} (max_key_groups), "
            f"not {parallelism!r}"
        )
    return parallelism


def check_retain(retain: int | None) -> None:
    """Refuse a ``retain`` that would drop the checkpoint a replay needs."""
    if retain is not None and retain < 2:
        raise ValueError(
            f"retain must keep at least 2 checkpoints (replays need the one "
            f"before the last), not {retain}"
        )


def check_input_columns(
    columns: Sequence[str],
    key_columns: Sequence[str],
    order_columns: Sequence[str],
    operator: str,
) -> None:
    """Refuse an input with a reserved column (:class:`ReservedColumnError`) or without a
    key or order column (:class:`ValueError`), before any state changes."""
    reserved = [c for c in columns if c in RESERVED_COLUMNS]
    if reserved:
        raise ReservedColumnError(
            f"input of operator {operator!r} has the column {reserved[0]!r}, "
            f"which objectspace reserves (reserved: {', '.join(RESERVED_COLUMNS)}): "
            "drop or rename it before the batch"
        )
    missing = [c for c in (*key_columns, *order_columns) if c not in columns]
    if missing:
        raise ValueError(f"input of {operator!r} lacks column(s) {missing}; it has {columns}")


def check_output_columns(columns: Sequence[str], what: str, operator: str) -> None:
    """Refuse output columns (``what``: where they come from) with a reserved name."""
    reserved = [c for c in columns if c in RESERVED_COLUMNS]
    if reserved:
        raise ReservedColumnError(
            f"{what} of operator {operator!r} uses the column "
            f"{reserved[0]!r}, which objectspace reserves (reserved: "
            f"{', '.join(RESERVED_COLUMNS)})"
        )


@dataclass
class TaskStats:
    """What one instance's task did in one batch.

    ``cached``: the instance was not restored from storage but adopted from this worker's
    memory or (``snapshot``) from a snapshot file another worker wrote. ``seconds_restore``
    covers getting the instance (adopting, or restoring its key groups);
    ``seconds_snapshot`` writing its snapshot after the save (``snapshot_bytes``).
    """

    index: int = 0
    keys: int = 0
    rows_in: int = 0
    rows_out: int = 0
    rows_read: int = 0
    cached: bool = False
    snapshot: bool = False
    snapshot_bytes: int = 0
    seconds_restore: float = 0.0
    seconds_process: float = 0.0
    seconds_save: float = 0.0
    seconds_snapshot: float = 0.0
    seconds_total: float = 0.0
    rows_late: int = 0
    timers_fired: int = 0
    entries_expired: int = 0
    max_event_time: int = NO_TIME
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
    cached_instances: int = 0
    snapshot_instances: int = 0
    seconds_total: float = 0.0
    seconds_commit: float = 0.0
    seconds_tasks: float = 0.0
    seconds_restore: float = 0.0
    seconds_process: float = 0.0
    seconds_save: float = 0.0
    seconds_snapshot: float = 0.0
    rows_late: int = 0
    timers_fired: int = 0
    entries_expired: int = 0
    watermark: int | None = None
    """The watermark the batch ran with (epoch ms; ``None``: none)."""
    batch_time: int | None = None
    """The batch's processing time (epoch ms), when the operator keeps time."""
    tasks: list[TaskStats] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TimeOptions:
    """The time options of a runner (or of ``simulate``), checked."""

    mode: str | None = None
    event_time: str | None = None
    watermark_delay: int = 0
    late_rows: str = "drop"
    on_timer: Callable[..., Iterable[Mapping[str, Any]]] | None = None

    @classmethod
    def of(
        cls,
        time_mode: str | None,
        event_time: str | None,
        watermark_delay: Any,
        late_rows: str,
        on_timer: Any,
    ) -> TimeOptions:
        if time_mode not in TIME_MODES:
            raise TimeError(f"time_mode is None, 'event' or 'processing', not {time_mode!r}")
        if time_mode == "event" and not (isinstance(event_time, str) and event_time):
            raise TimeError("time_mode='event' needs event_time, the event-time column's name")
        if event_time is not None and time_mode != "event":
            raise TimeError(f"event_time={event_time!r} is only used with time_mode='event'")
        if late_rows not in ("drop", "keep"):
            raise TimeError(f"late_rows is 'drop' or 'keep', not {late_rows!r}")
        if on_timer is not None and not callable(on_timer):
            raise TypeError(f"on_timer must be callable (key, when, state), not {on_timer!r}")
        delay = parse_duration(
            timedelta(0) if watermark_delay is None else watermark_delay, "watermark_delay"
        )
        return cls(time_mode, event_time, delay, late_rows, on_timer)


@dataclass(frozen=True, slots=True)
class TimePlan:
    """The time part of a batch's plan: its clock, the key groups with something due
    (``due``: key group -> earliest time), and the options."""

    clock: Clock
    options: TimeOptions
    due: frozenset[int] = frozenset()


INLINE_STATE_BYTES = 16 * 1024 * 1024
"""How many bytes of saved state a batch's tasks send with their receipts by default, split
among them (``StatefulRunner(inline_state_bytes=...)``; :func:`objectspace.testing.simulate`
stages the same way)."""


@dataclass(frozen=True, slots=True)
class TaskPlan:
    """Everything the tasks of one batch need, fixed by the driver and pickled to them.

    ``output_columns``: the columns an output row may have (``None``: any). ``use_cache``,
    ``use_snapshots``, ``owner`` and ``snapshot_key`` concern the Spark workers' instance
    cache and snapshot files only (see :mod:`objectspace.spark`); ``snapshot_key`` (at
    least 32 random bytes, the runner's secret) authenticates the snapshots: without one,
    none is written or read. ``stage_bytes``: a save that encodes to at most this many
    bytes sends its blocks with the receipt for the commit to store (see
    :meth:`Instance.save`; 0: every save stores its writes).
    """

    storage: Storage
    info: OperatorInfo
    compaction: CompactionPolicy
    fn: StatefulFunction
    checkpoint_id: int
    base: int | None
    parallelism: int
    replay: bool
    key_columns: tuple[str, ...]
    order_columns: tuple[str, ...]
    output_columns: tuple[str, ...] | None = None
    use_cache: bool = False
    use_snapshots: bool = False
    owner: str = ""
    snapshot_key: bytes = b""
    time: TimePlan | None = None
    stage_bytes: int = 0

    def restore(self, index: int) -> Instance:
        """Instance ``index`` of this batch, restored from storage as of :attr:`base`."""
        return self.operator().instance(
            index, self.parallelism, checkpoint=-1 if self.base is None else self.base
        )

    def operator(self) -> Operator:
        """The operator this plan runs."""
        return Operator(self.storage.job(self.info.job), self.info, self.compaction, None)


def plan_base(job: Job, checkpoint_id: int) -> tuple[int | None, bool]:
    """The checkpoint batch ``checkpoint_id`` of ``job`` runs on top of, and whether it is
    a replay (a checkpoint already committed: it runs on the one it was made on and
    commits nothing)."""
    infos = {c.checkpoint_id: c for c in job.checkpoint_info()}
    last = job.last_checkpoint()
    if last is None or checkpoint_id > last:
        return last, False
    info = infos.get(checkpoint_id)
    if info is None:
        raise CheckpointError(
            f"cannot run checkpoint {checkpoint_id} of job {job.name!r}: checkpoint "
            f"{last} is already committed and {checkpoint_id} is not a retained one"
        )
    if info.base is not None and info.base not in infos:
        raise CheckpointError(
            f"cannot replay checkpoint {checkpoint_id} of job {job.name!r}: it was "
            f"made on top of checkpoint {info.base}, which is no longer retained"
        )
    return info.base, True


def order_rows(rows: list[Row], order_columns: Sequence[str]) -> None:
    """Sort one key's rows by ``order_columns`` in place (``None`` last); ties (rare) by
    the whole row, so every attempt sees one order whatever order the rows came in."""

    def by_order(r: Row) -> tuple[Any, ...]:
        return tuple((r[c] is None, r[c]) for c in order_columns)

    if len(order_columns) == 1:  # the common case: one (None-last) value per row
        (column,) = order_columns
        if len(rows) == 2:
            # A key's two rows (the most common case after one): compare them directly,
            # as the (None-last) sort keys would compare; equal ones take the tie order.
            a, b = rows[0][column], rows[1][column]
            if a is not None and b is not None:
                if a < b:
                    return
                if b < a:
                    rows.reverse()
                    return
        elif len(rows) > 2:
            # Without a None, distinct values sort as their (None-last) keys would.
            values = [r[column] for r in rows]
            if all(v is not None for v in values) and len(set(values)) == len(values):
                order = sorted(range(len(rows)), key=values.__getitem__)
                rows[:] = [rows[i] for i in order]
                return
        keys: list[Any] = [(r[column] is None, r[column]) for r in rows]
    else:
        keys = [by_order(r) for r in rows]
    if len(rows) < 2:
        return
    if len(set(keys)) == len(keys):
        order = sorted(range(len(rows)), key=keys.__getitem__)
        rows[:] = [rows[i] for i in order]
    else:
        rows.sort(key=lambda r: (by_order(r), repr(sorted(r.items()))))


def group_rows(
    rows: Iterable[Row], key_columns: Sequence[str], group_column: str, drop: Sequence[str] = ()
) -> dict[tuple[int, Any], list[Row]]:
    """An instance's rows per (key group, key); each row's key group is taken out of its
    column ``group_column``, and the helper columns ``drop`` are removed from it. (The hot
    loop of a batch's rows: one key column is read without building a tuple.)"""
    single = len(key_columns) == 1
    first = key_columns[0]
    groups: dict[tuple[int, Any], list[Row]] = {}
    for row in rows:
        for column in drop:
            del row[column]
        at = (
            int(row.pop(group_column)),
            row[first] if single else tuple(row[c] for c in key_columns),
        )
        bucket = groups.get(at)
        if bucket is None:
            groups[at] = [row]
        else:
            bucket.append(row)
    return groups


def run_instance(
    plan: TaskPlan,
    instance: Instance,
    groups: dict[tuple[int, Any], list[Row]],
    stats: TaskStats,
    restore: float = 0.0,
) -> tuple[list[Row], Receipt | None]:
    """Run ``instance`` over its rows (grouped by :func:`group_rows`) and save it as
    pending checkpoint ``plan.checkpoint_id`` (not in a replay). Returns the output rows
    and the receipt; fills ``stats`` (``seconds_restore`` adds ``restore``, the seconds
    spent getting the instance).

    Keys run by key group, then by ``repr(key)``; each key gets its rows in ``order_by``
    order, and its output rows follow in the order the function yields them, key columns
    filled in where missing.
    """
    rows_read = instance.rows_read
    stats.rows_in = sum(len(rows) for rows in groups.values())
    stats.keys = len(groups)
    key_columns = plan.key_columns
    single = len(key_columns) == 1
    first = key_columns[0]
    timing = plan.time
    clock = None if timing is None else timing.clock
    touched = {key_group for key_group, _ in groups}
    if timing is not None:
        touched.update(g for g in timing.due if g in instance.key_groups)
        if timing.options.mode == "event":
            groups = _drop_late(groups, timing, stats)
    t0 = time.perf_counter()
    instance.preload(touched)
    restore += time.perf_counter() - t0
    now = None if clock is None else clock.now
    if now is not None:
        for key_group in sorted(touched):
            space = instance.space(key_group)
            first_due = earliest(space)
            if first_due is not None and first_due <= now:
                stats.entries_expired += expire(space, now)
    names = None if plan.output_columns is None else set(plan.output_columns)
    out: list[Row] = []

    def emit(key: Any, produced: Iterable[Mapping[str, Any]]) -> None:
        for one in produced:
            row = dict(one)
            if single:
                row.setdefault(first, key)
            else:
                for column, part in zip(key_columns, key, strict=True):
                    row.setdefault(column, part)
            if RECEIPT_COLUMN in row:
                raise ReservedColumnError(
                    f"operator {plan.info.name!r}: output row of key {key!r} has the "
                    f"column {RECEIPT_COLUMN!r}, which objectspace reserves for its receipts "
                    "(drop it from the rows the function yields)"
                )
            if names is not None and not names.issuperset(row):
                extra = sorted(row.keys() - names)
                declared = [c for c in plan.output_columns or () if c != RECEIPT_COLUMN]
                raise ObjectSpaceError(
                    f"operator {plan.info.name!r}: output row {row!r} of key {key!r} has "
                    f"fields {extra} that output_schema does not declare "
                    f"({', '.join(declared)})"
                )
            out.append(row)

    fn = plan.fn
    order_columns = plan.order_columns
    # Each key's repr once: it orders the keys and names the key's state (key_prefix).
    ordered = sorted(
        [(key_group, repr(key), key, key_rows) for (key_group, key), key_rows in groups.items()],
        key=_GROUP_AND_REPR,
    )
    key_space = None
    space_group = None
    for key_group, text, key, key_rows in ordered:
        if len(key_rows) > 1:
            order_rows(key_rows, order_columns)
        if key_group != space_group:
            t0 = time.perf_counter()
            key_space = instance.space(key_group)
            restore += time.perf_counter() - t0
            space_group = key_group
        assert key_space is not None
        produced = fn(key, key_rows, KeyState(key_space, prefix_of_repr(text), key, (), clock))
        if type(produced) is not list or produced:
            emit(key, produced)
    if timing is not None:
        for key_group in sorted(touched):
            space = instance.space(key_group)
            fired = due_timers(space, now)
            stats.timers_fired += len(fired)
            for when, prefix, key, path in fired:
                # A timer of the key's own state holds the key's prefix: no repr of the key.
                root = (
                    KeyState(space, prefix, key, (), clock)
                    if not path
                    else KeyState.for_key(space, key, clock)
                )
                produced = fire_timer(fn, timing.options.on_timer, key, path, when, root)
                if type(produced) is not list or produced:
                    emit(key, produced)
            due = earliest(space)
            stats.deadlines.append([key_group] if due is None else [key_group, due])
    stats.rows_out = len(out)
    stats.seconds_restore = restore
    stats.rows_read = instance.rows_read - rows_read
    t0 = time.perf_counter()
    receipt: Receipt | None = None
    if not plan.replay:
        receipt = instance.save(plan.checkpoint_id, stage_bytes=plan.stage_bytes)
    stats.seconds_save = time.perf_counter() - t0
    return out, receipt


def _drop_late(
    groups: dict[tuple[int, Any], list[Row]], timing: TimePlan, stats: TaskStats
) -> dict[tuple[int, Any], list[Row]]:
    """Record the rows' largest event time; drop (and count) the late ones unless kept.
    Without a late row dropped, ``groups`` itself (its lists untouched)."""
    column = timing.options.event_time
    assert column is not None
    watermark = timing.clock.watermark
    keep = timing.options.late_rows == "keep"
    # Below ``floor`` a row is dropped: none when late rows are kept or without a watermark.
    floor = None if keep else watermark
    largest = stats.max_event_time
    late: dict[tuple[int, Any], list[Row]] = {}  # the groups with a late row: on-time rows
    what = f"event_time column {column!r}"
    empty = False
    for group_key, rows in groups.items():
        if not rows:
            empty = True
        on_time: list[Row] | None = None
        for i, row in enumerate(rows):
            value = row.get(column)
            if value is None:
                raise TimeError(
                    f"a row of key {group_key[1]!r} has no event time (column {column!r}): {row!r}"
                )
            ms = value if type(value) is int else to_ms(value, what)
            if ms > largest:
                largest = ms
            if floor is not None and ms < floor:
                stats.rows_late += 1
                if on_time is None:
                    on_time = rows[:i]
            elif on_time is not None:
                on_time.append(row)
        if on_time is not None:
            late[group_key] = on_time
    stats.max_event_time = largest
    stats.rows_in -= stats.rows_late
    if late or empty:
        groups = {k: late.get(k, rows) for k, rows in groups.items()}
        groups = {k: rows for k, rows in groups.items() if rows}
    stats.keys = len(groups)
    return groups


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


def commit_batch(
    job: Job, batch: BatchStats, receipts: Sequence[Receipt], retain: int | None
) -> None:
    """Commit the batch's receipts, unless it replays a committed checkpoint, then keep
    ``retain`` checkpoints (``None``: all); the time taken goes to ``batch.seconds_commit``."""
    started = time.perf_counter()
    if not batch.replay:
        batch.committed = job.commit(batch.checkpoint_id, receipts)
        if retain is not None:
            job.retain(retain)
    batch.seconds_commit = time.perf_counter() - started


def sum_tasks(batch: BatchStats) -> None:
    """Total the tasks' stats into ``batch``."""
    batch.instances = len(batch.tasks)
    for stats in batch.tasks:
        batch.keys += stats.keys
        batch.rows_in += stats.rows_in
        batch.rows_out += stats.rows_out
        batch.rows_read += stats.rows_read
        batch.cached_instances += stats.cached
        batch.snapshot_instances += stats.snapshot
        batch.seconds_restore += stats.seconds_restore
        batch.seconds_process += stats.seconds_process
        batch.seconds_save += stats.seconds_save
        batch.seconds_snapshot += stats.seconds_snapshot
        batch.rows_late += stats.rows_late
        batch.timers_fired += stats.timers_fired
        batch.entries_expired += stats.entries_expired


TIME_OPERATOR_SUFFIX = "#time"
"""The driver's time state of operator ``op`` is the one-key-group operator
``op#time`` of the same job, committed with every checkpoint (see :class:`TimeDriver`)."""
_BATCH_TIMES_KEPT = 64
# The job mark (``<operator>#time`` + this) holding "<checkpoint> <epoch ms>": the batch time
# of the last batch started, recorded before it runs.
_BATCH_TIME_MARK = "/batch_time"


class TimeDriver:
    """The driver's side of time: what it keeps between batches, as object-space state.

    The state lives in operator ``<operator>#time`` of the job (one key group), saved and
    committed with each checkpoint, so it is exactly-once like the operator's own state:
    ``max_event`` (the largest event time of the batches committed so far, for the next
    watermark), ``batch_time`` (checkpoint id -> processing time, the last 64, so a
    replay runs with its first attempt's time) and ``deadlines`` (key group -> the
    earliest time anything is due in it, as the tasks reported). The driver runs exactly
    the instances with rows or with a key group whose deadline has come.

    A runner that uses no time (``time_mode=None``) and whose state has no TTL'd entry
    nor timer never creates that operator and reads nothing.
    """

    def __init__(self, job: Job, operator: str, options: TimeOptions) -> None:
        self.job = job
        self.name = operator + TIME_OPERATOR_SUFFIX
        self.options = options
        self._exists = any(o.name == self.name for o in job.operators())
        self._instance: Instance | None = None
        # The instance as of the last checkpoint it committed (``_kept_at``): a batch run
        # on that checkpoint uses it instead of reading it back from storage.
        self._kept: Instance | None = None
        self._kept_at: int | None = None
        self._base: int | None = None
        # Batch times of attempts not committed yet: a retry by this driver keeps its time.
        self._attempted: dict[int, int] = {}

    def _restore(self, checkpoint: int | None) -> Instance | None:
        if not self._exists:
            return None
        if self._kept is not None and checkpoint == self._kept_at:
            return self._kept
        op = self.job.operator(self.name, 1)
        return op.instance(0, 1, checkpoint=EMPTY if checkpoint is None else checkpoint)

    def _marked(self, checkpoint_id: int) -> int | None:
        """The batch time recorded for ``checkpoint_id`` by an attempt of it that did not
        commit (this driver's before a restart, or another's), if any."""
        mark = self.job.read_mark(self.name + _BATCH_TIME_MARK)
        if mark is None:
            return None
        checkpoint, _, when = mark.partition(" ")
        if checkpoint != str(checkpoint_id):
            return None
        try:
            return int(when)
        except ValueError as exc:
            raise CorruptStateError(
                f"job {self.job.name!r}: the batch time mark of {self.name!r} is {mark!r}, "
                "not '<checkpoint> <epoch ms>'"
            ) from exc

    def plan(
        self, checkpoint_id: int, base: int | None, replay: bool, batch_time: int | None
    ) -> TimePlan:
        """The time of batch ``checkpoint_id`` run on ``base``; ``batch_time`` (epoch ms,
        ``None``: now) is used unless the batch was committed before (a replay), which
        runs with its recorded time."""
        options = self.options
        self._base = base
        self._instance = instance = self._restore(base)
        max_event = None
        deadlines: dict[int, int] = {}
        if instance is not None:
            space = instance.space(0)
            if "max_event" in space:
                max_event = space.get_value("max_event").value
            if "deadlines" in space:
                deadlines = dict(space.get_dict("deadlines").items())
        if replay and self._exists:
            done = self._restore(checkpoint_id)
            assert done is not None
            space = done.space(0)
            recorded = (
                space.get_dict("batch_time").get(checkpoint_id) if "batch_time" in space else None
            )
            if recorded is not None:
                batch_time = recorded
        if batch_time is None:
            batch_time = self._attempted.get(checkpoint_id)
        # A runner without time (no time mode, no TTL'd entry nor timer yet) records none.
        uses_time = options.mode is not None or self._exists
        if batch_time is None and not replay and uses_time:
            batch_time = self._marked(checkpoint_id)
        if batch_time is None:
            batch_time = time.time_ns() // 1_000_000
        if not replay and uses_time and checkpoint_id not in self._attempted:
            # Recorded before the batch runs: a driver restarted before the batch commits
            # runs it again with this time (as Spark keeps a batch's timestamp in its
            # offset log), where this driver's retries find it in ``_attempted``.
            self.job.write_mark(self.name + _BATCH_TIME_MARK, f"{checkpoint_id} {batch_time}")
        if not replay:
            self._attempted = {checkpoint_id: batch_time}
        watermark = None
        if options.mode == "event" and max_event is not None:
            watermark = max_event - options.watermark_delay
        clock = Clock(options.mode, watermark, batch_time, options.event_time)
        now = clock.now
        due = frozenset(g for g, d in deadlines.items() if now is not None and d <= now)
        return TimePlan(clock, options, due)

    def save(self, plan: TimePlan, batch: BatchStats) -> Receipt | None:
        """Record what batch ``batch`` (not a replay) leaves for the next ones and save it
        as pending checkpoint ``batch.checkpoint_id``; the receipt to commit with the
        operator's (``None``: nothing to record)."""
        batch.watermark = plan.clock.watermark
        batch.batch_time = plan.clock.batch_time
        if batch.replay:
            return None
        if self._instance is self._kept:
            self._kept = self._kept_at = None  # edited now: no longer that checkpoint's state
        reported = [d for t in batch.tasks for d in t.deadlines]
        largest = max((t.max_event_time for t in batch.tasks), default=NO_TIME)
        if not self._exists:
            if self.options.mode is None and not any(len(d) == 2 for d in reported):
                return None
            op = self.job.operator(self.name, 1)
            self._exists = True
            # A new operator has no state yet: start empty, on the batch's base (receipts
            # of one commit share their base).
            self._instance = op.instance(0, 1, checkpoint=EMPTY)
            self._instance.base = self._base
        instance = self._instance
        assert instance is not None
        space = instance.space(0)
        if largest != NO_TIME:
            old = space.get_value("max_event").value if "max_event" in space else None
            if old is None or largest > old:
                if "max_event" in space:
                    space.get_value("max_event").value = largest
                else:
                    space.create_value("max_event", largest)
        times = (
            space.get_dict("batch_time")
            if "batch_time" in space
            else space.create_dict("batch_time")
        )
        times[batch.checkpoint_id] = plan.clock.batch_time
        for old_id in [c for c in times if c < batch.checkpoint_id - _BATCH_TIMES_KEPT]:
            del times[old_id]
        deadlines = (
            space.get_dict("deadlines") if "deadlines" in space else space.create_dict("deadlines")
        )
        for entry in reported:
            if len(entry) == 2:
                if deadlines.get(entry[0]) != entry[1]:
                    deadlines[entry[0]] = entry[1]
            elif entry[0] in deadlines:
                del deadlines[entry[0]]
        return instance.save(batch.checkpoint_id)

    def acknowledge(self, committed: bool) -> None:
        """After the batch's commit: a committed save is acknowledged and its instance kept
        for the next batch (which reads it from storage otherwise)."""
        instance = self._instance
        if committed and instance is not None and instance.pending_save is not None:
            instance.on_saved()
            self._kept, self._kept_at = instance, instance.base
        self._instance = None
