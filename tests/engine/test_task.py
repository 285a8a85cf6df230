"""The per-instance loop's fast paths (``order_rows``, dropping late rows) against the plain
references they replace."""

from __future__ import annotations

import random
from typing import Any

import pytest

from objectspace.engine import TaskStats, TimeOptions, TimePlan, order_rows
from objectspace.engine.task import _drop_late
from objectspace.errors import TimeError
from objectspace.keyed import Clock, to_ms

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
    groups: dict[tuple[int, Any], list[Row]], timing: TimePlan, stats: TaskStats
) -> dict[tuple[int, Any], list[Row]]:
    """``_drop_late`` as it was before its fast path: every group rebuilt."""
    column = timing.options.event_time
    assert column is not None
    watermark = timing.clock.watermark
    keep = timing.options.late_rows == "keep"
    largest = stats.max_event_time
    kept: dict[tuple[int, Any], list[Row]] = {}
    for group_key, rows in groups.items():
        on_time: list[Row] = []
        for row in rows:
            value = row.get(column)
            if value is None:
                raise TimeError(f"a row of key {group_key[1]!r} has no event time")
            ms = value if type(value) is int else to_ms(value)
            largest = max(largest, ms)
            if watermark is not None and ms < watermark and not keep:
                stats.rows_late += 1
            else:
                on_time.append(row)
        if on_time:
            kept[group_key] = on_time
    stats.max_event_time = largest
    stats.rows_in -= stats.rows_late
    stats.keys = len(kept)
    return kept


@pytest.mark.parametrize("seed", range(4))
def test_drop_late_equals_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        watermark = rng.choice((None, 50, 100))
        late_rows = rng.choice(("drop", "keep"))
        timing = TimePlan(
            Clock("event", watermark, 0, "ts"),
            TimeOptions("event", "ts", 0, late_rows),
        )
        groups: dict[tuple[int, Any], list[Row]] = {}
        for key in rng.sample(range(40), rng.randrange(0, 12)):
            late_share = rng.choice((0.0, 0.0, 0.3, 1.0))
            groups[(key % 3, key)] = [
                {
                    "ts": rng.randrange(0, 50)
                    if rng.random() < late_share
                    else rng.randrange(50, 200)
                }
                for _ in range(rng.randrange(0, 4))
            ]
        before = {k: list(v) for k, v in groups.items()}
        n = sum(map(len, groups.values()))
        got_stats, want_stats = TaskStats(rows_in=n), TaskStats(rows_in=n)
        got = _drop_late(groups, timing, got_stats)
        want = reference_drop_late(before, timing, want_stats)
        assert list(got) == list(want)
        assert {k: [id(r) for r in v] for k, v in got.items()} == {
            k: [id(r) for r in v] for k, v in want.items()
        }
        assert got_stats == want_stats


def test_drop_late_refuses_a_row_without_event_time() -> None:
    timing = TimePlan(Clock("event", 10, 0, "ts"), TimeOptions("event", "ts", 0, "drop"))
    with pytest.raises(TimeError, match="has no event time"):
        _drop_late({(0, "k"): [{"ts": 20}, {"x": 1}]}, timing, TaskStats())
