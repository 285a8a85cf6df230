"""``tumbling_window`` and ``sliding_window``: event-time windows of fixed size per key, and
what they share with ``session_window`` (:mod:`objectspace.operators.sessions`).

Each window (a session, or a window of fixed size aligned to the epoch) keeps its running
aggregates in one entry of a dict: a fixed window in a dict of the key's state, a session
in a sorted dict the key group's keys share. A fixed window has one event-time timer at
its end. When the watermark reaches a window's end its timer has fired and the window is
emitted once, as ``{"start", "end", <aggs>}`` with aware UTC datetimes, and its entry is
deleted. So a batch writes one dict entry per window it touched, and a window costs about
one timer registration.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from objectspace.keyed import (
    KeyState,
    from_ms,
)
from objectspace.operators._base import (
    KeyedOperator,
    Row,
    _check_agg,
    _check_column,
    _check_duration,
    _check_optional_column,
    _format_duration,
    _row_times,
    _TimedOperator,
)

__all__ = ["sliding_window", "tumbling_window"]

# An accumulator is a list [count, sum, min, max]; ``start``/``end`` sit in front of it.
_COUNT, _SUM, _MIN, _MAX = range(4)


def _check_aggs(op: str, aggs: object) -> tuple[str, ...]:
    if isinstance(aggs, str) or not isinstance(aggs, Iterable):
        raise ValueError(f"{op}: aggs must be a list of aggregate names, got {aggs!r}")
    names = tuple(_check_agg(op, a) for a in aggs)
    if len(set(names)) != len(names):
        raise ValueError(f"{op}: aggs must be distinct, got {list(names)!r}")
    return names


class _TimeWindowed(_TimedOperator):
    """What the three window operators share: the aggregates and the emitted row."""

    __slots__ = ("aggs", "needs", "time", "value")

    def __init__(self, value: str, aggs: tuple[str, ...], time: str | None) -> None:
        self.value = value
        self.aggs = aggs
        self.time = time
        # (needs a value, needs the sum, needs min, needs max)
        self.needs = (
            any(a != "count" for a in aggs),
            "sum" in aggs or "mean" in aggs,
            "min" in aggs,
            "max" in aggs,
        )

    def _agg_args(self) -> Iterable[str]:
        yield f"value={self.value!r}"
        yield f"aggs={self.aggs!r}"
        if self.time is not None:
            yield f"time={self.time!r}"

    def _add(self, entry: list[Any], offset: int, row: Row) -> None:
        """Add ``row`` to the accumulator that starts at ``entry[offset]``, in place."""
        if not self.needs[0]:
            entry[offset + _COUNT] += 1
            return
        try:
            v = row[self.value]
        except KeyError:
            raise KeyError(f"{self!r}: input row has no column {self.value!r}: {row!r}") from None
        if v is None and (self.needs[2] or self.needs[3]):
            raise ValueError(f"{self!r}: {self.value} is None (null) in row {row!r}")
        self._add_value(entry, offset, v)

    def _values(self, rows: Sequence[Row]) -> list[Any] | None:
        """The values ``rows`` add (``None`` when the aggregates take none: a count), each
        checked as :meth:`_add` checks it."""
        if not self.needs[0]:
            return None
        column = self.value
        try:
            values = [row[column] for row in rows]
        except KeyError:
            row = next(r for r in rows if column not in r)
            raise KeyError(f"{self!r}: input row has no column {column!r}: {row!r}") from None
        if (self.needs[2] or self.needs[3]) and None in values:
            row = rows[values.index(None)]
            raise ValueError(f"{self!r}: {column} is None (null) in row {row!r}")
        return values

    def _add_value(self, entry: list[Any], offset: int, v: Any) -> None:
        """Add value ``v`` (checked: see :meth:`_values`) to the accumulator that starts at
        ``entry[offset]``, in place."""
        entry[offset + _COUNT] += 1
        _, use_sum, use_min, use_max = self.needs
        if use_sum:
            entry[offset + _SUM] += v
        if use_min and (entry[offset + _MIN] is None or v < entry[offset + _MIN]):
            entry[offset + _MIN] = v
        if use_max and (entry[offset + _MAX] is None or v > entry[offset + _MAX]):
            entry[offset + _MAX] = v

    def _add_all(self, entry: list[Any], offset: int, values: list[Any] | None, n: int) -> None:
        """Add ``n`` rows of ``values`` (from :meth:`_values`) in order, in place."""
        if values is None:
            entry[offset + _COUNT] += n
            return
        if not (self.needs[2] or self.needs[3]):
            # count and sum: the sum added value by value, as row by row (the same float)
            entry[offset + _COUNT] += n
            if self.needs[1]:
                total = entry[offset + _SUM]
                for v in values:
                    total += v
                entry[offset + _SUM] = total
            return
        add = self._add_value
        for v in values:
            add(entry, offset, v)

    @staticmethod
    def _merge(into: list[Any], offset: int, other: list[Any]) -> None:
        into[offset + _COUNT] += other[offset + _COUNT]
        into[offset + _SUM] += other[offset + _SUM]
        for i, better in ((_MIN, min), (_MAX, max)):
            a, b = into[offset + i], other[offset + i]
            into[offset + i] = b if a is None else a if b is None else better(a, b)

    def _row(self, start: int, end: int, entry: list[Any], offset: int) -> Row:
        out: Row = {"start": from_ms(start), "end": from_ms(end)}
        count = entry[offset + _COUNT]
        for agg in self.aggs:
            if agg == "count":
                out[agg] = count
            elif agg == "sum":
                out[agg] = entry[offset + _SUM]
            elif agg == "mean":
                out[agg] = entry[offset + _SUM] / count
            else:
                out[agg] = entry[offset + (_MIN if agg == "min" else _MAX)]
        return out


class _FixedWindow(_TimeWindowed):
    """Windows ``[start, start + size)`` with starts at multiples of ``slide``."""

    __slots__ = ("size", "slide")
    name = "sliding_window"

    def __init__(
        self, size: int, slide: int, value: str, aggs: tuple[str, ...], time: str | None
    ) -> None:
        super().__init__(value, aggs, time)
        self.size = size
        self.slide = slide

    def _args(self) -> Iterable[str]:
        return (_format_duration(self.size), _format_duration(self.slide), *self._agg_args())

    def late_time(self, event_ms: int) -> int:
        """A row is late when the last of its windows ends at or below the late watermark
        (Spark's rule, window by window: its earlier windows may be late while it still
        counts in this one)."""
        return event_ms - event_ms % self.slide + self.size

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        size, slide = self.size, self.slide
        windows = state.dict("windows")
        timers = state.timers
        clock = state.clock
        # A window ending at or below the late watermark takes no more rows (Spark drops
        # the row from that window only).
        late = None if clock is None or clock.mode != "event" else clock.late_watermark
        floor = -(1 << 63) if late is None else late - size
        touched: dict[int, list[Any]] = {}
        for row, t in zip(rows, _row_times(self, state, rows), strict=True):
            # The windows holding t: starts s = k * slide with s <= t < s + size, and
            # (s + size > late) not late.
            s = t - t % slide
            while s > t - size and s > floor:
                entry = touched.get(s)
                if entry is None:
                    old = windows.get(s)
                    if old is None:
                        entry = [0, 0, None, None]
                        timers.register(s + size)
                    else:
                        entry = list(old)
                    touched[s] = entry
                self._add(entry, 0, row)
                s -= slide
        for s, entry in touched.items():
            windows[s] = entry
        return []

    def _on_timer_ms(self, key: Any, when: int, state: KeyState) -> list[Row]:
        """Emit (and forget) the key's windows whose end is at or before ``when``."""
        if "windows" not in state:
            return []
        now, size = when, self.size
        windows = state.dict("windows")
        out = []
        for start in sorted(s for s in windows if s + size <= now):
            out.append(self._row(start, start + size, windows.pop(start), 0))
        if not windows:
            state.delete("windows")
        return out


class _TumblingWindow(_FixedWindow):
    __slots__ = ()
    name = "tumbling_window"

    def _args(self) -> Iterable[str]:
        return (_format_duration(self.size), *self._agg_args())


def tumbling_window(
    size: Any, value: str = "v", aggs: Sequence[str] = ("count", "sum"), *, time: str | None = None
) -> KeyedOperator:
    """Event-time tumbling windows, as Spark's ``window(event_time, size)``.

    Windows ``[start, start + size)`` with ``start`` a multiple of ``size`` since the epoch
    (1970-01-01 UTC), as Spark aligns them. Each non-empty window is emitted once, when the
    watermark reaches its end, as ``{"start", "end", <agg>: ...}`` (aware UTC datetimes; one
    field per name of ``aggs`` over ``row[value]``). Needs ``time_mode="event"``. Example::

        tumbling_window("1 minute", value="bytes", aggs=("count", "max"))

    State: dict ``"windows"`` from a window's start (epoch ms) to ``[count, sum, min,
    max]``, deleted when no window is open, and one event-time timer per open window.
    Cost: O(1) per row; writes: one entry per window a batch touched, one timer per window.
    """
    size_ms = _check_duration("tumbling_window", "size", size)
    return _TumblingWindow(
        size_ms,
        size_ms,
        _check_column("tumbling_window", "value", value),
        _check_aggs("tumbling_window", aggs),
        _check_optional_column("tumbling_window", "time", time),
    )


def sliding_window(
    size: Any,
    slide: Any,
    value: str = "v",
    aggs: Sequence[str] = ("count", "sum"),
    *,
    time: str | None = None,
) -> KeyedOperator:
    """Event-time sliding windows, as Spark's ``window(event_time, size, slide)``.

    Windows ``[start, start + size)`` with ``start`` a multiple of ``slide`` since the
    epoch, so an event falls in ``ceil(size / slide)`` windows (fewer, or none, when
    ``slide > size`` leaves gaps). Each non-empty window is emitted once, when the
    watermark reaches its end, as ``{"start", "end", <agg>: ...}``. Needs
    ``time_mode="event"``. Example::

        sliding_window("10 minutes", "5 minutes", value="v", aggs=("mean",))

    State: as :func:`tumbling_window`. Cost: O(size / slide) per row; writes: one entry
    per window a batch touched, one timer per window.
    """
    return _FixedWindow(
        _check_duration("sliding_window", "size", size),
        _check_duration("sliding_window", "slide", slide),
        _check_column("sliding_window", "value", value),
        _check_aggs("sliding_window", aggs),
        _check_optional_column("sliding_window", "time", time),
    )
