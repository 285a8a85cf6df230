"""The per-instance loop a batch's task runs, under Spark and in :func:`~objectspace.engine.simulate`:
:func:`group_rows` groups an instance's rows by key, :func:`run_instance` feeds each key its
rows in ``order_by`` order with its :class:`~objectspace.keyed.KeyState`, fires the due
timers, expires TTL'd entries, collects the output rows (key columns filled in) and saves
the instance as pending checkpoint N, giving its receipt and :class:`TaskStats`.
Rows are plain dicts; nothing here imports pyspark, pandas or pyarrow.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from objectspace.checkpoint import Instance, Receipt
from objectspace.engine.columns import RECEIPT_COLUMN
from objectspace.engine.plan import TaskPlan
from objectspace.engine.stats import TaskStats
from objectspace.engine.time_driver import TimePlan
from objectspace.errors import ObjectSpaceError, ReservedColumnError, TimeError
from objectspace.keyed import (
    KeyState,
    due_timers,
    earliest,
    expire,
    fire_timer,
    prefix_of_repr,
    to_ms,
)

__all__ = ["Row", "group_rows", "order_rows", "run_instance"]

Row = dict[str, Any]
_GROUP_AND_REPR = operator.itemgetter(0, 1)


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
