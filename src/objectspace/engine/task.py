"""The per-instance loop a batch's task runs, under Spark and in :func:`~objectspace.engine.simulate`:
:func:`group_rows` groups an instance's rows by key (:func:`group_columns` groups them as
column lists, for an operator that takes columns), :func:`run_instance` feeds each key its
rows in ``order_by`` order with its :class:`~objectspace.keyed.KeyState`, fires the due
timers, expires TTL'd entries, collects the output rows (key columns filled in) and saves
the instance as pending checkpoint N, giving its receipt and :class:`TaskStats`.
Rows are plain dicts; nothing here imports pyspark, pandas or pyarrow.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import accumulate, compress, groupby, pairwise
from typing import Any

from objectspace.checkpoint import Instance, Receipt
from objectspace.collections import untrack
from objectspace.collector import fewer_collections
from objectspace.engine.columns import RECEIPT_COLUMN
from objectspace.engine.plan import TaskPlan
from objectspace.engine.stats import TaskStats
from objectspace.engine.time_driver import TimePlan
from objectspace.errors import ObjectSpaceError, ReservedColumnError
from objectspace.keyed import (
    MAX_MS,
    MIN_MS,
    KeyState,
    earliest,
    expire,
    expired_timers,
    prefix_of_repr,
    timer_handler,
    to_ms,
)

__all__ = [
    "KeyColumns",
    "OrderedRows",
    "Row",
    "group_columns",
    "group_rows",
    "order_rows",
    "run_instance",
    "takes_columns",
]

Row = dict[str, Any]
_GROUP_AND_REPR = operator.itemgetter(0, 1)
_GROUP = operator.itemgetter(0)


def order_rows(rows: list[Row], order_columns: Sequence[str]) -> None:
    """Sort one key's rows by ``order_columns`` in place (``None`` last); ties (rare) by
    the whole row, so every attempt sees one order whatever order the rows came in. Naive
    datetimes mean UTC: they order among aware ones as the instants they are."""
    try:
        _order_rows(rows, order_columns)
    except TypeError:
        if not any(isinstance(r[c], datetime) for r in rows for c in order_columns):
            raise
        keys = [tuple(_instant(r[c]) for c in order_columns) for r in rows]
        if len(set(keys)) == len(keys):
            order = sorted(range(len(rows)), key=keys.__getitem__)
        else:
            ties = [repr(sorted(r.items())) for r in rows]
            order = sorted(range(len(rows)), key=lambda i: (keys[i], ties[i]))
        rows[:] = [rows[i] for i in order]


def _instant(value: Any) -> tuple[bool, Any]:
    """The sort key of one order value (``None`` last), a naive datetime taken as UTC."""
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value is None, value)


def _order_rows(rows: list[Row], order_columns: Sequence[str]) -> None:

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


class OrderedRows(dict[tuple[int, Any], list[Row]]):
    """An instance's rows per (key group, key) as :func:`group_rows` gives them, each key's
    rows already in the order :func:`order_rows` gives them (the task sorted them as
    columns): :func:`run_instance` does not sort them again. :attr:`time_range`, when not
    ``None``, is the smallest and largest event time of the rows, every row's being an int
    (the task read them off an integer column without nulls): what the late-row check needs
    when no row is late, without a pass over the rows."""

    __slots__ = ("time_range",)

    def __init__(self) -> None:
        super().__init__()
        self.time_range: tuple[int, int] | None = None


@dataclass(slots=True)
class KeyColumns:
    """An instance's rows for an operator that takes columns (see :func:`group_columns`):
    per (key group, key), the values of the operator's ``input_columns`` as one list per
    column, in ``order_by`` order, the late rows and those without a usable event time
    dropped; ``touched``, the key group of every row, dropped ones too (their timers fire)."""

    groups: dict[tuple[int, Any], tuple[list[Any], ...]]
    touched: set[int]


def takes_columns(plan: TaskPlan) -> tuple[str, ...] | None:
    """The columns ``plan``'s function takes per key (:func:`group_columns`), or ``None``
    when it takes rows: a function with ``run_columns`` and ``input_columns`` (as
    ``session_window``), in event time, one key column, ordered by a column, with no
    ``on_timer`` of the runner's own."""
    timing = plan.time
    fn: Any = plan.fn
    if (
        timing is None
        or timing.options.mode != "event"
        or timing.options.on_timer is not None
        or len(plan.key_columns) != 1
        or not plan.order_columns
        or getattr(fn, "run_columns", None) is None
    ):
        return None
    needs: tuple[str, ...] | None = fn.input_columns(timing.options.event_time)
    return needs


def group_columns(
    plan: TaskPlan,
    columns: Mapping[str, list[Any]],
    needs: Sequence[str],
    stats: TaskStats,
    runs: tuple[Sequence[int], AbstractSet[int]],
    rows_at: Callable[[list[int]], list[Row]],
    group_column: str,
) -> KeyColumns:
    """An instance's rows as :class:`KeyColumns`, from its columns: what :func:`group_rows`,
    the late-row drop and :func:`order_rows` give, without a dict per row.

    ``columns`` holds, by name, the values of the group column (each row's key group), the
    key column, the event time column and ``needs``, the rows sorted so that each (key
    group, key) is one run of rows, in ``order_by`` order: ``runs`` is the row number where
    each run starts, and the runs (by number) whose ``order_by`` values do not rise
    strictly (ties, nulls: their order is not the sort's alone). Such a run's rows come
    as dicts from ``rows_at(row numbers)`` (every column but the group column) and are
    ordered by :func:`order_rows`, so every key sees its rows in the order the rows path
    gives. Fills the stats :func:`run_instance` fills from rows (rows in, keys, late and
    bad-time rows, the largest event time)."""
    timing = plan.time
    assert timing is not None and timing.options.event_time is not None
    starts, unordered = runs
    groups_of = columns[group_column]
    keys_of = columns[plan.key_columns[0]]
    touched = set(groups_of)
    n = len(groups_of)
    wanted = [columns[c] for c in needs]
    late_time = getattr(plan.fn, "late_time", None)
    keep = _on_time(columns[timing.options.event_time], timing, stats, late_time)
    positions: Sequence[int] = range(n)
    bounds = [*starts, n]
    if keep is not None:
        # Without the dropped rows: each run's bounds counted in the rows kept.
        kept_before = [0, *accumulate(keep)]
        bounds = [kept_before[b] for b in bounds]
        positions = list(compress(positions, keep))
        groups_of = list(compress(groups_of, keep))
        keys_of = list(compress(keys_of, keep))
        wanted = [list(compress(c, keep)) for c in wanted]
    stats.rows_in = len(positions)
    groups: dict[tuple[int, Any], tuple[list[Any], ...]] = {}
    as_dicts: dict[int, list[Row]] = {}
    if unordered:
        # The rows of every run in question as dicts, at once (each from its first row).
        spans = [(bounds[run], bounds[run + 1]) for run in sorted(unordered)]
        spans = [(start, stop) for start, stop in spans if start < stop]  # not all dropped
        fetched = rows_at([positions[i] for start, stop in spans for i in range(start, stop)])
        done = 0
        for start, stop in spans:
            as_dicts[start] = fetched[done : done + stop - start]
            done += stop - start
    first = wanted[0]
    second = wanted[1] if len(wanted) == 2 else None
    # A key's columns are lists of the rows' values that run_columns reads and never
    # changes: they can be in no cycle, so the cyclic collector is told to leave them
    # alone (a batch's columns then neither slow its young collections nor, promoted,
    # bring the next full collection of the whole state closer).
    for start, stop in pairwise(bounds):
        if start == stop:
            continue
        at = (groups_of[start], keys_of[start])
        if as_dicts and start in as_dicts:
            rows = as_dicts[start]
            order_rows(rows, plan.order_columns)
            groups[at] = tuple([row[c] for row in rows] for c in needs)
        elif second is not None:  # the common case (time and value), without a generator
            groups[at] = (untrack(first[start:stop]), untrack(second[start:stop]))
        elif len(wanted) == 1:
            groups[at] = (untrack(first[start:stop]),)
        else:
            groups[at] = tuple(untrack(c[start:stop]) for c in wanted)
    stats.keys = len(groups)
    return KeyColumns(groups, touched)


def _all_on_time(
    lo: int,
    hi: int,
    timing: TimePlan,
    stats: TaskStats,
    late_time: Callable[[int], int] | None,
) -> bool:
    """Whether rows whose event times (ints) span ``lo``..``hi`` are all on time and within
    the datetimes; if so, the largest event time is recorded in ``stats``."""
    floor = timing.clock.late_watermark
    if floor is None:
        floor = 0
    if lo >= MIN_MS and hi <= MAX_MS and (lo if late_time is None else late_time(lo)) > floor:
        if hi > stats.max_event_time:
            stats.max_event_time = hi
        return True
    return False


def _on_time(
    times: Sequence[Any],
    timing: TimePlan,
    stats: TaskStats,
    late_time: Callable[[int], int] | None,
) -> list[bool] | None:
    """Which of the rows with event times ``times`` stay (``None``: all): a row is late
    when ``late_time(event time)`` (non-decreasing in it; the event time itself when
    ``None``) is at or below the batch's late watermark, and dropped unless late rows are
    kept; a row whose time is null, not a time or outside the datetimes is dropped. Counts
    them (``rows_late``, ``rows_bad_time``) and the largest event time in ``stats``."""
    if (
        times
        and set(map(type, times)) == {int}
        and _all_on_time(min(times), max(times), timing, stats, late_time)
    ):
        return None  # every row on time (the common case), without a pass per row
    floor = timing.clock.late_watermark
    if floor is None:
        floor = 0
    keep_late = timing.options.late_rows == "keep"
    largest = stats.max_event_time
    keep = []
    dropped = 0
    for value in times:
        ms = value if type(value) is int and MIN_MS <= value <= MAX_MS else _event_ms(value)
        if ms is None:
            stats.rows_bad_time += 1
            drop = True
        else:
            if ms > largest:
                largest = ms
            drop = (ms if late_time is None else late_time(ms)) <= floor
            if drop:
                stats.rows_late += 1
                drop = not keep_late
        dropped += drop
        keep.append(not drop)
    stats.max_event_time = largest
    return keep if dropped else None


def run_instance(
    plan: TaskPlan,
    instance: Instance,
    groups: dict[tuple[int, Any], list[Row]] | KeyColumns,
    stats: TaskStats,
    restore: float = 0.0,
) -> tuple[list[Row], Receipt | None]:
    """Run ``instance`` over its rows (grouped by :func:`group_rows`; :class:`OrderedRows`
    when each key's rows are in ``order_by`` order already) and save it as
    pending checkpoint ``plan.checkpoint_id`` (not in a replay). Returns the output rows
    and the receipt; fills ``stats`` (``seconds_restore`` adds ``restore``, the seconds
    spent getting the instance).

    Keys run by key group, then by ``repr(key)``; each key gets its rows in ``order_by``
    order, and its output rows follow in the order the function yields them, key columns
    filled in where missing.

    A function with ``run_group(space, keys, clock)`` (``keys``: the key group's ``(key
    state prefix, key, rows)`` in that order; returns ``(key, output rows)`` pairs) gets a
    key group's keys in one call, and with ``fire_group(space, now, clock)`` (returns the
    timers fired and ``(key, output rows)`` pairs) fires the key group's due timers
    itself, unless the runner has its own ``on_timer``. Both must do exactly what calling
    the function key by key and firing its timers one by one would (``session_window``
    does so, without an object per key).

    ``groups`` may instead be :class:`KeyColumns` (from :func:`group_columns`, for a
    function :func:`takes_columns` accepts): each key group's keys then go to
    ``run_columns(space, keys, clock)``, ``keys`` being ``(key state prefix, key,
    columns)`` with ``columns`` the lists of ``input_columns(event_time)``, which must do
    what ``run_group`` does with the rows those columns came from.
    """
    # The state that exists before the batch stays out of its collections, unless a memory
    # budget applies: objects it evicts must go at once, cycles too.
    with fewer_collections(freeze=plan.memory_budget is None):
        return _run_instance(plan, instance, groups, stats, restore)


def _run_instance(
    plan: TaskPlan,
    instance: Instance,
    groups: dict[tuple[int, Any], list[Row]] | KeyColumns,
    stats: TaskStats,
    restore: float,
) -> tuple[list[Row], Receipt | None]:
    rows_read = instance.rows_read
    bytes_read = instance.bytes_read
    loaded = instance.objects_loaded()
    key_columns = plan.key_columns
    single = len(key_columns) == 1
    first = key_columns[0]
    timing = plan.time
    clock = None if timing is None else timing.clock
    by_columns = None
    if isinstance(groups, KeyColumns):
        # Grouped, ordered and the late rows dropped already (group_columns).
        fn_any: Any = plan.fn
        by_columns = fn_any.run_columns
        touched = set(groups.touched)
        by_key: dict[tuple[int, Any], Any] = groups.groups
    else:
        stats.rows_in = sum(len(rows) for rows in groups.values())
        stats.keys = len(groups)
        touched = {key_group for key_group, _ in groups}
        by_key = groups
    ordered_already = type(groups) is OrderedRows
    if timing is not None:
        touched.update(g for g in timing.due if g in instance.key_groups)
        if timing.options.mode == "event" and by_columns is None:
            by_key = _drop_late(by_key, timing, stats, getattr(plan.fn, "late_time", None))
    t0 = time.perf_counter()
    instance.preload(touched)
    restore += time.perf_counter() - t0
    now = None if clock is None else clock.now
    ttl_now = None if clock is None else clock.ttl_now
    if ttl_now is not None:
        for key_group in sorted(touched):
            space = instance.space(key_group)
            first_due = earliest(space)
            if first_due is not None and first_due <= ttl_now:
                stats.entries_expired += expire(space, ttl_now)
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
        [(key_group, repr(key), key, key_rows) for (key_group, key), key_rows in by_key.items()],
        key=_GROUP_AND_REPR,
    )
    # A function that runs a key group's keys at once (``run_group``, ``fire_group``: see
    # run_instance) gets them so, unless the runner's own on_timer takes its timers.
    by_group = None
    fire_group = None
    if timing is None or timing.options.on_timer is None:
        by_group = getattr(fn, "run_group", None)
        fire_group = getattr(fn, "fire_group", None)
    for key_group, members in groupby(ordered, key=_GROUP):
        t0 = time.perf_counter()
        key_space = instance.space(key_group)
        restore += time.perf_counter() - t0
        if by_columns is not None:
            keyed = [(prefix_of_repr(text), key, cols) for _, text, key, cols in members]
            for key, produced in by_columns(key_space, keyed, clock):
                emit(key, produced)
            continue
        keys = []
        for _, text, key, key_rows in members:
            if len(key_rows) > 1 and not ordered_already:
                order_rows(key_rows, order_columns)
            keys.append((prefix_of_repr(text), key, key_rows))
        if by_group is not None:
            for key, produced in by_group(key_space, keys, clock):
                emit(key, produced)
            continue
        for prefix, key, key_rows in keys:
            produced = fn(key, key_rows, KeyState(key_space, prefix, key, (), clock))
            if type(produced) is not list or produced:
                emit(key, produced)
    if timing is not None:
        handle = None  # the timer handler, looked up when a key group fires its first
        for key_group in sorted(touched):
            space = instance.space(key_group)
            if fire_group is not None:
                fired, outputs = fire_group(space, now, clock)
                stats.timers_fired += fired
                for key, produced in outputs:
                    emit(key, produced)
            else:
                if handle is None:
                    handle = timer_handler(fn, timing.options.on_timer)
                for when, prefix, key, path in expired_timers(space, now):
                    stats.timers_fired += 1
                    # A timer of the key's own state holds the key's prefix: no key repr.
                    root = (
                        KeyState(space, prefix, key, (), clock)
                        if not path
                        else KeyState.for_key(space, key, clock)
                    )
                    produced = handle(key, path, when, root)
                    if type(produced) is not list or produced:
                        emit(key, produced)
            due = earliest(space)
            stats.deadlines.append([key_group] if due is None else [key_group, due])
    stats.rows_out = len(out)
    stats.seconds_restore = restore
    stats.rows_read = instance.rows_read - rows_read
    stats.bytes_read = instance.bytes_read - bytes_read
    stats.objects_loaded = instance.objects_loaded() - loaded
    t0 = time.perf_counter()
    receipt: Receipt | None = None
    if not plan.replay:
        receipt = instance.save(plan.checkpoint_id, stage_bytes=plan.stage_bytes)
    stats.seconds_save = time.perf_counter() - t0
    return out, receipt


def _drop_late(
    groups: dict[tuple[int, Any], list[Row]],
    timing: TimePlan,
    stats: TaskStats,
    late_time: Callable[[int], int] | None = None,
) -> dict[tuple[int, Any], list[Row]]:
    """Record the rows' largest event time; drop (and count) the late ones unless kept, and
    the rows without a usable event time.

    A row is late when ``late_time(event time)`` (the end of what it would join, as the
    operator states it; the event time itself for a plain function) is at or below the
    batch's late watermark, the previous batch's (Spark's rule). A row whose event time is
    null, not a time, or outside the datetimes cannot be placed in time: it is dropped and
    counted in ``rows_bad_time``, never failing the batch. Without a row dropped,
    ``groups`` itself (its lists untouched)."""
    column = timing.options.event_time
    assert column is not None
    span = groups.time_range if type(groups) is OrderedRows else None
    if span is not None and all(groups.values()) and _all_on_time(*span, timing, stats, late_time):
        stats.keys = len(groups)
        return groups  # every row on time, known without a pass over the rows
    times = [row.get(column) for rows in groups.values() for row in rows]
    keep = _on_time(times, timing, stats, late_time)
    empty = not all(groups.values())
    if keep is not None or empty:
        kept: dict[tuple[int, Any], list[Row]] = {}
        at = 0
        for group_key, rows in groups.items():
            flags = keep[at : at + len(rows)] if keep is not None else None
            at += len(rows)
            if flags is not None and not all(flags):
                rows = list(compress(rows, flags))
            if rows:
                kept[group_key] = rows
        stats.rows_in -= len(times) - sum(len(rows) for rows in kept.values())
        groups = kept
    stats.keys = len(groups)
    return groups


def _event_ms(value: object) -> int | None:
    """An event time in epoch ms, ``None`` when it cannot be one (null, not a time, outside
    the datetimes)."""
    if type(value) is int:
        return value if MIN_MS <= value <= MAX_MS else None
    if isinstance(value, datetime):
        return to_ms(value)
    return None
