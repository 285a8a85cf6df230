"""Spark's own streaming test cases, replayed through ``simulate``: each test names the Spark
test it reproduces and gives its micro-batches, one ``simulate`` batch per Spark batch (a
no-data batch Spark runs by itself is an empty batch here).

The rules they pin down (Spark 4.3): batch N evicts and fires event-time timers with the
watermark ``max(0, largest event time before N - delay)``, which never decreases; it drops
the rows late by the previous batch's watermark (0 for the first), ``<=``; a window or
session row is late by its window's end, a plain row by its own time; processing-time
timers fire when ``timer <= batch time``, after the batch's rows.

Sources: ``StreamingDeduplicationWithinWatermarkSuite``, ``StreamingSessionWindowSuite``,
``EventTimeWatermarkSuite``, ``MultiStatefulOperatorsSuite``, ``DataFrameTimeWindowingSuite``
(``sql/core/src/test/scala/org/apache/spark/sql/...``) and PySpark's
``test_pandas_transform_with_state.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from objectspace import operators as ops
from objectspace.keyed import KeyState, to_ms
from objectspace.testing import Simulation, simulate

SEC = 1000
Row = dict[str, Any]


def at(seconds: float) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)


def event(delay_s: float) -> dict[str, Any]:
    return {
        "time_mode": "event",
        "event_time": "ts",
        "watermark_delay": timedelta(seconds=delay_s),
    }


def rows(*pairs: tuple[Any, float]) -> list[Row]:
    """``(key, event second)`` pairs as rows, ``seq`` their arrival order."""
    return [{"k": k, "ts": int(s * SEC), "seq": i, "v": 1} for i, (k, s) in enumerate(pairs)]


def keyed_seconds(sim: Simulation) -> list[list[tuple[Any, int]]]:
    return [sorted((r["k"], r["ts"] // SEC) for r in out) for out in sim.outputs]


def windows(sim: Simulation) -> list[list[tuple[Any, ...]]]:
    return [
        sorted((r["k"], to_ms(r["start"]) // SEC, to_ms(r["end"]) // SEC, r["count"]) for r in out)
        for out in sim.outputs
    ]


# -- dropDuplicatesWithinWatermark ----------------------------------------------------------


def test_dedup_all_columns_with_event_time() -> None:
    """StreamingDeduplicationWithinWatermarkSuite: "deduplicate with all columns with event
    time column in DataFrame" (delay 10 s; the key is every column)."""
    batches = [
        [{"k": v, "ts": v * SEC} for v in range(10, 16) for _ in range(5)],
        [],
        [{"k": v, "ts": v * SEC} for v in (13, 14, 15, 16, 17)],
        [],
        [{"k": 5, "ts": 5 * SEC}],
        [{"k": 35, "ts": 35 * SEC}],
        [],
        [{"k": 55, "ts": 55 * SEC}],
        [],
    ]
    sim = simulate(ops.dedup("10 seconds"), batches, key="k", order_by="ts", **event(10))
    assert keyed_seconds(sim) == [
        [(v, v) for v in range(10, 16)],
        [],
        [(16, 16), (17, 17)],
        [],
        [],
        [(35, 35)],
        [],
        [(55, 55)],
        [],
    ]
    assert [s.rows_late for s in sim.stats] == [0, 0, 0, 0, 1, 0, 0, 0, 0]
    assert [s.late_watermark for s in sim.stats[:7]] == [0, 0, 5000, 5000, 7000, 7000, 7000]
    assert [s.watermark for s in sim.stats[:7]] == [0, 5000, 5000, 7000, 7000, 7000, 25000]


def test_dedup_subset_of_columns_without_event_time() -> None:
    """StreamingDeduplicationWithinWatermarkSuite: "deduplicate with subset of columns which
    event time column is not in subset" (delay 2 s, dedup on the key): a duplicate is
    dropped while the first row's entry lives, whatever its own time."""
    batches = [
        rows(("a", 17)),
        [],
        rows(("a", 16)),
        rows(("a", 13)),
        rows(("b", 22), ("c", 21)),
        [],
        rows(("a", 21)),
        rows(("d", 25)),
        [],
    ]
    sim = simulate(ops.dedup("2 seconds", by="k"), batches, key="k", order_by="seq", **event(2))
    assert keyed_seconds(sim) == [
        [("a", 17)],
        [],
        [],
        [],
        [("b", 22), ("c", 21)],
        [],
        [("a", 21)],
        [("d", 25)],
        [],
    ]
    assert sim.stats[3].rows_late == 1


@pytest.mark.parametrize(
    ("no_data_batches", "expected"),
    [
        (False, [[17], [], [], [27]]),
        (True, [[17], [], [], [], [26], [], []]),
    ],
    ids=["back-to-back", "with-no-data-batches"],
)
def test_dedup_one_row_per_batch(no_data_batches: bool, expected: list[list[int]]) -> None:
    """Issue 25's case (delay 2 s): a@17, a@25, a@26, a@27 one per batch. Back to back (a
    file source with every file present) Spark emits [17] [] [] [27]; with a no-data batch
    after each (``testStream``) [17] [] [] [] [26] [] []."""
    data = [rows(("a", t)) for t in (17, 25, 26, 27)]
    batches = [data[0], [], data[1], [], data[2], [], data[3]] if no_data_batches else data
    sim = simulate(ops.dedup("2 seconds", by="k"), batches, key="k", order_by="seq", **event(2))
    assert [[s for _, s in out] for out in keyed_seconds(sim)] == expected


def test_late_rows_use_the_previous_batch_watermark() -> None:
    """Issue 25's case (delay 10 s): [k@20], [y@30], [z@15, w@10, u@11]; batch 2 tests late
    rows against batch 1's watermark (10 s): w (10 <= 10) is late, z and u are not."""
    batches = [rows(("k", 20)), rows(("y", 30)), rows(("z", 15), ("w", 10), ("u", 11))]
    sim = simulate(ops.dedup("10 seconds", by="k"), batches, key="k", order_by="seq", **event(10))
    assert keyed_seconds(sim) == [[("k", 20)], [("y", 30)], [("u", 11), ("z", 15)]]
    assert (sim.stats[2].late_watermark, sim.stats[2].watermark) == (10 * SEC, 20 * SEC)
    assert sim.stats[2].rows_late == 1


# -- session_window -------------------------------------------------------------------------


def _words(line: str, second: float) -> list[tuple[str, float]]:
    return [(w, second) for w in line.split()]


def test_session_window_append_mode() -> None:
    """StreamingSessionWindowSuite: "append mode - session window" (gap 10 s, delay 30 s):
    sessions merge at exactly ``last + gap``, a row whose own session ends at or below the
    late watermark is dropped, and the watermark emits sessions by their end."""
    batches = [
        rows(
            *_words("hello world spark streaming", 40),
            *_words("world hello structured streaming", 41),
        ),
        [],
        rows(*_words("spark streaming", 25)),
        rows(*_words("spark streaming", 0)),
        rows(*_words("spark streaming", 30)),
        rows(*_words("hello apache spark", 60)),
        [],
        rows(*_words("structured streaming", 90)),
        [],
    ]
    sim = simulate(
        ops.session_window("10 seconds", aggs=("count",)),
        batches,
        key="k",
        order_by="seq",
        **event(30),
    )
    assert windows(sim) == [[]] * 8 + [
        [
            ("hello", 40, 51, 2),
            ("spark", 25, 50, 3),
            ("streaming", 25, 51, 4),
            ("structured", 41, 51, 1),
            ("world", 40, 51, 2),
        ]
    ]
    assert sim.stats[3].rows_late == 2


def test_session_window_is_late_by_its_end() -> None:
    """Issue 25's case (gap 5 s, delay 10 s): [k@20], [y@30], [z@15, w@10, u@11]: each late
    row's own session ends after the late watermark (10 s), so all three count, and the
    eviction watermark (20 s) emits them in the same batch."""
    batches = [rows(("k", 20)), rows(("y", 30)), rows(("z", 15), ("w", 10), ("u", 11))]
    sim = simulate(
        ops.session_window("5 seconds", aggs=("count",)),
        batches,
        key="k",
        order_by="seq",
        **event(10),
    )
    assert windows(sim) == [[], [], [("u", 11, 16, 1), ("w", 10, 15, 1), ("z", 15, 20, 1)]]
    assert sim.stats[2].rows_late == 0


# -- window() -------------------------------------------------------------------------------


def test_tumbling_window_append_mode() -> None:
    """EventTimeWatermarkSuite: "append mode" (window 5 s, delay 10 s): a window is emitted
    when the watermark reaches its end; a row of a window already ended by the late
    watermark is dropped."""
    one = [("all", s) for s in range(10, 16)]
    batches = [rows(*one), [], rows(("all", 25)), [], rows(("all", 10))]
    sim = simulate(
        ops.tumbling_window("5 seconds", aggs=("count",)),
        batches,
        key="k",
        order_by="seq",
        **event(10),
    )
    assert windows(sim) == [[], [], [], [("all", 10, 15, 5)], []]
    assert sim.stats[4].rows_late == 1


def test_tumbling_window_rows_still_count_while_their_window_is_open() -> None:
    """MultiStatefulOperatorsSuite: "agg -> agg -> agg, append mode", its first operator
    (window 5 s, delay 0): in batch 2 rows 30-34 are late ([30, 35) ended at or below 37)
    while 35, 36 and 37, at or below the watermark themselves, still count in [35, 40)."""
    batches = [
        rows(*[("all", s) for s in range(0, 38)]),
        [],
        rows(*[("all", s) for s in range(30, 61)]),
        [],
    ]
    sim = simulate(
        ops.tumbling_window("5 seconds", aggs=("count",)),
        batches,
        key="k",
        order_by="seq",
        **event(0),
    )
    assert windows(sim) == [
        [],
        [("all", s, s + 5, 5) for s in range(0, 35, 5)],
        [],
        [("all", 35, 40, 8), *[("all", s, s + 5, 5) for s in range(40, 60, 5)]],
    ]
    assert sim.stats[2].rows_late == 5


def test_sliding_window_lateness_is_per_window() -> None:
    """Spark drops a late row from each of its windows that ended at or below the late
    watermark, and keeps it in the others (window 10 s sliding 5 s, delay 5 s)."""
    batches = [rows(("all", 20)), [], rows(("all", 12)), rows(("all", 40)), []]
    sim = simulate(
        ops.sliding_window("10 seconds", "5 seconds", aggs=("count",)),
        batches,
        key="k",
        order_by="seq",
        **event(5),
    )
    assert windows(sim) == [
        [],
        [],
        [],
        [],
        [("all", 10, 20, 1), ("all", 15, 25, 1), ("all", 20, 30, 1)],
    ]
    assert sim.stats[2].rows_late == 0


@pytest.mark.parametrize(
    ("size", "slide", "times", "expected"),
    [
        # DataFrameTimeWindowingSuite: "simple tumbling window with record at window start"
        ("10 seconds", "10 seconds", ["19:39:30"], [("19:39:30", "19:39:40", 1)]),
        # "tumbling window with multi-column projection"
        (
            "10 seconds",
            "10 seconds",
            ["19:39:34", "19:39:56", "19:39:27"],
            [
                ("19:39:20", "19:39:30", 1),
                ("19:39:30", "19:39:40", 1),
                ("19:39:50", "19:40:00", 1),
            ],
        ),
        # "sliding window grouping"
        (
            "10 seconds",
            "3 seconds",
            ["19:39:34", "19:39:56", "19:39:27"],
            [
                ("19:39:18", "19:39:28", 1),
                ("19:39:21", "19:39:31", 1),
                ("19:39:24", "19:39:34", 1),
                ("19:39:27", "19:39:37", 2),
                ("19:39:30", "19:39:40", 1),
                ("19:39:33", "19:39:43", 1),
                ("19:39:48", "19:39:58", 1),
                ("19:39:51", "19:40:01", 1),
                ("19:39:54", "19:40:04", 1),
            ],
        ),
        # "millisecond precision sliding windows"
        (
            "200 ms",
            "40 ms",
            ["09:00:00.410", "09:00:00.620", "09:00:00.715"],
            [
                ("09:00:00.240", "09:00:00.440", 1),
                ("09:00:00.280", "09:00:00.480", 1),
                ("09:00:00.320", "09:00:00.520", 1),
                ("09:00:00.360", "09:00:00.560", 1),
                ("09:00:00.400", "09:00:00.600", 1),
                ("09:00:00.440", "09:00:00.640", 1),
                ("09:00:00.480", "09:00:00.680", 1),
                ("09:00:00.520", "09:00:00.720", 2),
                ("09:00:00.560", "09:00:00.760", 2),
                ("09:00:00.600", "09:00:00.800", 2),
                ("09:00:00.640", "09:00:00.840", 1),
                ("09:00:00.680", "09:00:00.880", 1),
            ],
        ),
    ],
    ids=["record-at-window-start", "tumbling", "sliding", "milliseconds"],
)
def test_window_assignment_like_spark_batch_windows(
    size: str, slide: str, times: list[str], expected: list[tuple[str, str, int]]
) -> None:
    """DataFrameTimeWindowingSuite's batch cases: which windows a row falls in (start
    inclusive, end exclusive, aligned to the epoch), in one batch closed by a far one."""
    day = "2016-03-27"

    def when(clock: str) -> datetime:
        return datetime.fromisoformat(f"{day}T{clock}+00:00")

    batch = [{"k": "all", "ts": when(t), "seq": i, "v": 1} for i, t in enumerate(times)]
    far = [{"k": "other", "ts": when("23:00:00"), "seq": 99, "v": 1}]
    op = (
        ops.tumbling_window(size, aggs=("count",))
        if size == slide
        else ops.sliding_window(size, slide, aggs=("count",))
    )
    sim = simulate(op, [batch, far, []], key="k", order_by="seq", **event(0))
    got = sorted(
        (r["start"], r["end"], r["count"]) for out in sim.outputs for r in out if r["k"] == "all"
    )
    assert got == [(when(a), when(b), n) for a, b, n in expected]


# -- timers ---------------------------------------------------------------------------------


class MaxEventTime:
    """PySpark's ``EventTimeStatefulProcessor`` (test_transform_with_state_in_pandas_event_time):
    keep the largest event second, register a timer at the watermark; the timer clears it."""

    def __call__(self, key: Any, batch: list[Row], state: KeyState) -> Iterator[Row]:
        box = state.value("max")
        top = max([box.value or 0, *(r["ts"] // SEC for r in batch)])
        box.value = top
        assert state.watermark is not None
        state.timers.register(state.watermark)
        yield {"k": key, "out": str(top)}

    def on_timer(self, key: Any, when: datetime, state: KeyState) -> Iterator[Row]:
        state.delete("max")
        yield {"k": f"{key}-expired", "out": str(to_ms(when))}


def test_event_time_timers_and_late_rows_of_transform_with_state() -> None:
    """PySpark test_transform_with_state_in_pandas_event_time (delay 10 s; no no-data
    batches): a timer at the watermark fires in the same batch; batch 1 tests late rows
    against batch 0's watermark (0) and fires with its own (10 s); a@2 is late in batch 2."""
    batches = [rows(("a", 20)), rows(("a", 4)), rows(("a", 2), ("a", 11), ("a", 13), ("a", 15))]
    sim = simulate(MaxEventTime(), batches, key="k", order_by="seq", **event(10))
    got = [sorted((r["k"], r["out"]) for r in out) for out in sim.outputs]
    assert got == [
        [("a", "20"), ("a-expired", "0")],
        [("a", "4"), ("a-expired", "10000")],
        [("a", "15"), ("a-expired", "10000")],
    ]
    assert [s.rows_late for s in sim.stats] == [0, 0, 1]


class ProcessingCount:
    """PySpark's ``ProcTimeStatefulProcessor`` (test_transform_with_state_in_pandas_proc_timer):
    count the key's rows; key "0" registers a timer one ms after the batch time; the timer
    sees itself still listed, clears the count and emits -1."""

    def __call__(self, key: Any, batch: list[Row], state: KeyState) -> Iterator[Row]:
        box = state.value("count")
        box.value = (box.value or 0) + len(batch)
        assert state.batch_time is not None
        if key == "0":
            state.timers.register(state.batch_time + timedelta(milliseconds=1))
        yield {"k": key, "count": str(box.value), "time": to_ms(state.batch_time)}

    def on_timer(self, key: Any, when: datetime, state: KeyState) -> Iterator[Row]:
        assert len(state.timers.list()) == 2  # the one firing is listed until it is done
        state.delete("count")
        state.timers.delete(when)
        yield {"k": key, "count": "-1", "time": to_ms(when)}


def test_processing_time_timer_of_transform_with_state() -> None:
    """PySpark test_transform_with_state_in_pandas_proc_timer: a timer at batch time + 1 ms
    fires in the next batch, after that batch's rows."""
    batches = [
        [{"k": "0", "v": 123}, {"k": "1", "v": 6}],
        [{"k": "0", "v": 123}, {"k": "0", "v": 46}, {"k": "1", "v": 146}, {"k": "1", "v": 346}],
        [
            {"k": "0", "v": 123},
            {"k": "0", "v": 223},
            {"k": "0", "v": 323},
            {"k": "1", "v": 246},
            {"k": "1", "v": 6},
        ],
    ]
    times = [1_000, 2_000, 3_000]
    sim = simulate(
        ProcessingCount(),
        batches,
        key="k",
        order_by="v",
        time_mode="processing",
        batch_times=times,
    )
    got = [sorted((r["k"], r["count"], r["time"]) for r in out) for out in sim.outputs]
    assert got == [
        [("0", "1", 1000), ("1", "1", 1000)],
        [("0", "-1", 1001), ("0", "3", 2000), ("1", "3", 2000)],
        [("0", "-1", 2001), ("0", "3", 3000), ("1", "5", 3000)],
    ]
