"""The batch loop's time rules beyond Spark's cases: the first watermark, rows that cannot be
placed in time, mixed naive and aware datetimes, absurd delays, timers deleted while a batch
fires them, and ``late_rows="keep"``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from objectspace.errors import TimeError
from objectspace.keyed import MAX_MS, KeyState, to_ms
from objectspace.testing import simulate

Row = dict[str, Any]
EVENT = {"time_mode": "event", "event_time": "ts", "watermark_delay": "1 second"}


def echo(key: Any, rows: list[Row], state: KeyState) -> Iterator[Row]:
    for r in rows:
        yield {"k": key, "seq": r["seq"]}


def test_the_first_watermark_is_zero_and_rows_at_or_before_1970_are_late() -> None:
    seen: list[datetime | None] = []

    def watch(key: Any, rows: list[Row], state: KeyState) -> Iterator[Row]:
        seen.append(state.watermark)
        yield from echo(key, rows, state)

    batches = [
        [{"k": 1, "ts": -5000, "seq": 0}, {"k": 1, "ts": 0, "seq": 1}, {"k": 1, "ts": 3, "seq": 2}],
        [{"k": 1, "ts": 2, "seq": 3}],
    ]
    sim = simulate(watch, batches, key="k", order_by="seq", **EVENT)
    assert [[r["seq"] for r in out] for out in sim.outputs] == [[2], [3]]
    assert seen[0] == datetime(1970, 1, 1, tzinfo=UTC)
    assert [s.rows_late for s in sim.stats] == [2, 0]
    # max event 3 ms - 1 s is negative: the watermark stays 0, never below
    assert [s.watermark for s in sim.stats] == [0, 0]


@pytest.mark.parametrize("bad", [None, "yesterday", 1.5, True, MAX_MS + 1])
def test_a_row_whose_event_time_cannot_be_placed_is_dropped_and_counted(bad: Any) -> None:
    batches = [
        [{"k": 1, "ts": 10_000, "seq": 0}, {"k": 2, "ts": bad, "seq": 1}],
        [{"k": 2, "ts": 20_000, "seq": 2}],
    ]
    sim = simulate(echo, batches, key="k", order_by="seq", **EVENT)
    assert [[r["seq"] for r in out] for out in sim.outputs] == [[0], [2]]
    assert [s.rows_bad_time for s in sim.stats] == [1, 0]


def test_naive_and_aware_datetimes_of_one_key_mix_as_utc() -> None:
    naive = datetime(2026, 1, 1, 12, 0, 5)
    aware = datetime(2026, 1, 1, 12, 0, 1, tzinfo=UTC)
    batches = [[{"k": 1, "ts": naive, "seq": 0}, {"k": 1, "ts": aware, "seq": 1}]]
    sim = simulate(echo, batches, key="k", order_by="ts", **EVENT)
    assert [r["seq"] for r in sim.outputs[0]] == [1, 0]  # 12:00:01 UTC before 12:00:05 UTC
    assert sim.stats[0].rows_bad_time == 0


def test_an_absurd_watermark_delay_is_refused_before_anything_runs() -> None:
    with pytest.raises(TimeError, match="longer than the span of datetimes"):
        simulate(
            echo,
            [[{"k": 1, "ts": 0, "seq": 0}]],
            key="k",
            order_by="seq",
            time_mode="event",
            event_time="ts",
            watermark_delay="999999999999999999999 seconds",
        )


def test_a_timer_deleted_by_an_earlier_timer_of_the_same_batch_does_not_fire() -> None:
    fired: list[int] = []

    class TwoTimers:
        def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
            if rows[0]["seq"] == 0:
                state.timers.register(1_000)
                state.timers.register(2_000)
            return []

        def on_timer(self, key: Any, when: datetime, state: KeyState) -> list[Row]:
            fired.append(to_ms(when))
            state.timers.delete(2_000)  # the other one is due too, and is not fired
            return []

    batches = [[{"k": 1, "ts": 500, "seq": 0}], [{"k": 1, "ts": 10_000, "seq": 1}], []]
    sim = simulate(TwoTimers(), batches, key="k", order_by="seq", **EVENT)
    assert fired == [1_000]
    assert sim.state(1).timers.list() == []
    assert sum(s.timers_fired for s in sim.stats) == 1


def test_kept_late_rows_are_counted() -> None:
    batches = [[{"k": 1, "ts": 10_000, "seq": 0}], [], [{"k": 1, "ts": 5_000, "seq": 1}]]
    for late_rows, expected in (("drop", [[0], [], []]), ("keep", [[0], [], [1]])):
        sim = simulate(echo, batches, key="k", order_by="seq", late_rows=late_rows, **EVENT)
        assert [[r["seq"] for r in out] for out in sim.outputs] == expected
        assert [s.rows_late for s in sim.stats] == [0, 0, 1]


def test_a_timer_beyond_the_datetimes_is_refused_when_registered() -> None:
    def far(key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        state.timers.register(MAX_MS + 1)
        return []

    with pytest.raises(TimeError, match="outside the datetimes"):
        simulate(far, [[{"k": 1, "ts": 1000, "seq": 0}]], key="k", order_by="seq", **EVENT)


def test_processing_time_timer_at_the_batch_time_fires_in_the_same_batch() -> None:
    """Spark fires a processing-time timer when ``timer <= batch time``, after the rows."""

    class AtBatchTime:
        def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
            assert state.batch_time is not None
            state.timers.register(state.batch_time)
            return []

        def on_timer(self, key: Any, when: datetime, state: KeyState) -> list[Row]:
            return [{"k": key, "when": to_ms(when)}]

    start = datetime(2026, 1, 1, tzinfo=UTC)
    sim = simulate(
        AtBatchTime(),
        [[{"k": 1, "seq": 0}]],
        key="k",
        order_by="seq",
        time_mode="processing",
        batch_times=[start + timedelta(seconds=1)],
    )
    assert sim.outputs == [[{"k": 1, "when": to_ms(start) + 1000}]]
