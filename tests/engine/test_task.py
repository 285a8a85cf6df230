"""The per-instance loop's fast paths (``order_rows``, dropping late rows) against the plain
references they replace."""

from __future__ import annotations

import random
from typing import Any

import pytest

from objectspace.engine import OrderedRows, TaskStats, TimeOptions, TimePlan, order_rows
from objectspace.engine.task import _drop_late
from objectspace.errors import TimeError
from objectspace.keyed import MAX_MS, Clock, from_ms, to_ms

Row = dict[str, Any]


def reference_order(rows: list[Row], order_columns: tuple[str, ...]) -> list[Row]:
    """``order_rows`` as it was before its fast paths: (None-last) keys, ties by the row."""

    def by_order(r: Row) -> tuple[Any, ...]:
        return tuple((r[c] is None, r[c]) for c in order_columns)

    keys = [by_order(r) for r in rows]
    if len(set(keys)) == len(keys):
        return [rows[i] for i in sorted(range(len(rows)), key=keys.__getitem__)]
    return sorted(rows, key=lambda r: (by_order(r), repr(sorted(r.items()))))


@pytest.mark.parametrize("seed", range(6))
def test_order_rows_equals_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    values: list[Any] = [None, 0, 1, 2, 3, 2.5, -1, 1.0, 7]
    for _ in range(3000):
        n = rng.choice((0, 1, 2, 2, 2, 3, 4, 6))
        columns = ("t",) if rng.random() < 0.7 else ("t", "u")
        rows = [
            {"t": rng.choice(values), "u": rng.choice(values), "v": rng.randrange(5)}
            for _ in range(n)
        ]
        expected = reference_order(list(rows), columns)
        got = list(rows)
        order_rows(got, columns)
        assert [id(r) for r in got] == [id(r) for r in expected], (rows, columns)


def reference_drop_late(
    groups: dict[tuple[int, Any], list[Row]],
    timing: TimePlan,
    stats: TaskStats,
    late_time: Any = None,
) -> dict[tuple[int, Any], list[Row]]:
    """``_drop_late`` without its fast path: every group rebuilt. A row is late when
    ``late_time(ts)`` is at or below the late watermark; a row without a usable time is
    dropped and counted."""
    column = timing.options.event_time
    assert column is not None
    floor = timing.clock.late_watermark or 0
    keep = timing.options.late_rows == "keep"
    largest = stats.max_event_time
    kept: dict[tuple[int, Any], list[Row]] = {}
    dropped = 0
    for group_key, rows in groups.items():
        on_time: list[Row] = []
        for row in rows:
            value = row.get(column)
            try:
                ms = value if type(value) is int else to_ms(value)
                from_ms(ms)
            except TimeError:
                stats.rows_bad_time += 1
                dropped += 1
                continue
            largest = max(largest, ms)
            if (ms if late_time is None else late_time(ms)) <= floor:
                stats.rows_late += 1
                if not keep:
                    dropped += 1
                    continue
            on_time.append(row)
        if on_time:
            kept[group_key] = on_time
    stats.max_event_time = largest
    stats.rows_in -= dropped
    stats.keys = len(kept)
    return kept


def _with_time_range(groups: dict[tuple[int, Any], list[Row]]) -> dict[tuple[int, Any], list[Row]]:
    """``groups`` as the task gives rows it read off an integer event-time column without
    nulls: :class:`OrderedRows` carrying their smallest and largest time (left ``None``
    when some row's time is not an int, as the task leaves it)."""
    ordered = OrderedRows()
    ordered.update(groups)
    times = [row.get("ts") for rows in groups.values() for row in rows]
    if times and all(type(t) is int for t in times):
        ordered.time_range = (min(times), max(times))
    return ordered


@pytest.mark.parametrize("ranged", [False, True], ids=["rows", "time-range"])
@pytest.mark.parametrize("seed", range(4))
def test_drop_late_equals_the_reference(seed: int, ranged: bool) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        late = rng.choice((0, 50, 100))
        late_rows = rng.choice(("drop", "keep"))
        late_time = rng.choice((None, lambda t: t + 7, lambda t: t - t % 20 + 20))
        timing = TimePlan(
            Clock("event", late + 10, 0, "ts", late_watermark=late),
            TimeOptions("event", "ts", 0, late_rows),
        )
        groups: dict[tuple[int, Any], list[Row]] = {}
        for key in rng.sample(range(40), rng.randrange(0, 12)):
            late_share = rng.choice((0.0, 0.0, 0.3, 1.0))
            groups[(key % 3, key)] = [
                {
                    "ts": rng.choice((None, "x", 1.5, True, MAX_MS + 1, -(2**62)))
                    if rng.random() < 0.05
                    else rng.randrange(0, 50)
                    if rng.random() < late_share
                    else rng.randrange(50, 200)
                }
                for _ in range(rng.randrange(0, 4))
            ]
        before = {k: list(v) for k, v in groups.items()}
        n = sum(map(len, groups.values()))
        got_stats, want_stats = TaskStats(rows_in=n), TaskStats(rows_in=n)
        if ranged:
            groups = _with_time_range(groups)
        got = _drop_late(groups, timing, got_stats, late_time)
        want = reference_drop_late(before, timing, want_stats, late_time)
        assert list(got) == list(want)
        assert {k: [id(r) for r in v] for k, v in got.items()} == {
            k: [id(r) for r in v] for k, v in want.items()
        }
        assert got_stats == want_stats


def test_a_row_without_a_usable_event_time_is_dropped_and_counted() -> None:
    """Null, not a time, or beyond year 9999: such a row cannot wedge the stream."""
    timing = TimePlan(
        Clock("event", 10, 0, "ts", late_watermark=10), TimeOptions("event", "ts", 0, "drop")
    )
    stats = TaskStats(rows_in=5)
    rows = [{"ts": 20}, {"x": 1}, {"ts": "soon"}, {"ts": MAX_MS + 1}, {"ts": 10}]
    got = _drop_late({(0, "k"): rows}, timing, stats)
    assert got == {(0, "k"): [{"ts": 20}]}
    assert (stats.rows_bad_time, stats.rows_late, stats.rows_in) == (3, 1, 1)


def test_a_time_range_with_every_row_on_time_keeps_the_groups_as_they_are() -> None:
    timing = TimePlan(
        Clock("event", 10, 0, "ts", late_watermark=10), TimeOptions("event", "ts", 0, "drop")
    )
    groups = _with_time_range({(0, "a"): [{"ts": 11}, {"ts": 40}], (1, "b"): [{"ts": 12}]})
    stats = TaskStats(rows_in=3)
    assert _drop_late(groups, timing, stats) is groups
    assert (stats.max_event_time, stats.keys, stats.rows_in, stats.rows_late) == (40, 2, 3, 0)
    groups = _with_time_range({(0, "a"): [{"ts": 10}, {"ts": 40}]})  # one at the watermark
    stats = TaskStats(rows_in=2)
    assert _drop_late(groups, timing, stats) == {(0, "a"): [{"ts": 40}]}
    assert (stats.rows_late, stats.rows_in) == (1, 1)
