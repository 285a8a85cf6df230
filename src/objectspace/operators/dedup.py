"""``distinct``, ``distinct_until_changed`` and ``dedup`` per key."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from objectspace.keyed import KeyState
from objectspace.operators._base import (
    KeyedOperator,
    Row,
    _ByOperator,
    _check_duration,
    _check_optional_column,
    _field,
    _format_duration,
    _hashable,
    _row_times,
    _TimedOperator,
)

__all__ = ["dedup", "distinct", "distinct_until_changed"]


def _value_of(op: _ByOperator, row: Row) -> Any:
    """The hashable value ``op`` compares: ``row[op.by]``, or the whole row."""
    if op.by is None:
        if not isinstance(row, dict):
            raise TypeError(f"{op!r}: input rows are dicts, got {type(row).__name__}")
        return tuple(sorted((k, _hashable(x)) for k, x in row.items()))
    return _hashable(_field(op, row, op.by))


class _Distinct(_ByOperator):
    __slots__ = ("ttl",)
    name = "distinct"

    def __init__(self, by: str | None, ttl: int | None) -> None:
        super().__init__(by)
        self.ttl = ttl

    def _args(self) -> Iterable[str]:
        yield from super()._args()
        if self.ttl is not None:
            yield f"ttl={_format_duration(self.ttl)}"

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        ttl = self.ttl
        seen = (
            state.set("seen") if ttl is None else state.set("seen", ttl=timedelta(milliseconds=ttl))
        )
        out: list[Row] = []
        for row in rows:
            v = _value_of(self, row)
            if v not in seen:
                seen.add(v)
                out.append(row)
        return out


def distinct(by: str | None = None, ttl: Any = None) -> KeyedOperator:
    """Emit a row if its value was never seen before for this key (within ``ttl``).

    The value is ``row[by]``, or (``by=None``) the whole row as
    ``tuple(sorted(row.items()))``; nested lists and tuples become tuples, nested dicts
    sorted tuples of pairs, sets frozensets, so equal values (``==``) count as the same.

    With ``ttl`` (a ``timedelta`` or a string like ``"1 day"``) a value is forgotten
    ``ttl`` after it was emitted, in the operator's time (the watermark in event mode, the
    batch time otherwise: the TTL of :class:`~objectspace.keyed.KeyState`), and is
    emitted again when it comes back after that; a duplicate does not extend the period.
    Example: ``distinct(by="url", ttl="1 hour")``.

    State: set ``"seen"`` of every distinct value (with ``ttl``: a TTL'd set, whose expired
    elements are deleted at O(1) each). Cost: O(1) per row (O(row size) to make the value
    hashable); writes: one set element per new value. Without ``ttl`` the set grows with
    the number of distinct values and is never pruned.
    """
    column = _check_optional_column("distinct", "by", by)
    return _Distinct(column, None if ttl is None else _check_duration("distinct", "ttl", ttl))


class _DistinctUntilChanged(_ByOperator):
    __slots__ = ()
    name = "distinct_until_changed"

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        by = self.by
        last = state.value("last", None)
        box = last.value
        has = box is not None
        previous: Any = box[0] if has else None
        out: list[Row] = []
        for row in rows:
            v = row if by is None else _field(self, row, by)
            if not has or v != previous:
                out.append(row)
                previous = v
                has = True
        if out:
            last.value = [dict(previous) if by is None else previous]
        return out


def distinct_until_changed(by: str | None = None) -> KeyedOperator:
    """Emit a row if its value differs (``!=``) from the value of the key's previous row.

    The value is ``row[by]``, or (``by=None``) the whole row. The key's first row is always
    emitted.

    State: value ``"last"``: ``None`` before the first row, then ``[v]``, a one-element list
    around the last value, so that a value ``None`` survives serialization. Cost: O(1) per
    row (O(row size) for whole rows); writes: one row per batch that emitted something.
    """
    return _DistinctUntilChanged(_check_optional_column("distinct_until_changed", "by", by))


class _Dedup(_ByOperator, _TimedOperator):
    __slots__ = ("time", "ttl")
    name = "dedup"

    def __init__(self, ttl: int, by: str | None, time: str | None) -> None:
        super().__init__(by)
        self.ttl = ttl
        self.time = time

    def _args(self) -> Iterable[str]:
        yield _format_duration(self.ttl)
        yield from super()._args()
        if self.time is not None:
            yield f"time={self.time!r}"

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        ttl = self.ttl
        seen = state.dict("seen")
        expiry = state.dict("expiry")
        timers = state.timers
        clock = state.clock
        # Event time: a duplicate is dropped while the first row's entry lives, whatever its
        # own time (the entry goes after the batch whose watermark reaches its end). Batch
        # time: while the batch time is within ttl of the first row's.
        periods = clock is None or clock.mode != "event"
        out: list[Row] = []
        for row, t in zip(rows, _row_times(self, state, rows), strict=True):
            v = _value_of(self, row)
            emitted = seen.get(v)
            if emitted is not None:
                if not periods or t < emitted + ttl:
                    continue
                _forget(expiry, emitted + ttl, v)
            seen[v] = t
            at = t + ttl
            values = expiry.get(at)
            if values is None:
                expiry[at] = [v]
                timers.register(at)
            else:
                expiry[at] = [*values, v]
            out.append(row)
        return out

    def _on_timer_ms(self, key: Any, when: int, state: KeyState) -> list[Row]:
        """Forget the values whose period ended at or before ``when``."""
        if "expiry" not in state:
            return []
        now = when
        seen = state.dict("seen")
        expiry = state.dict("expiry")
        for at in [at for at in expiry if at <= now]:
            for v in expiry.pop(at):
                if seen.get(v) == at - self.ttl:
                    del seen[v]
        if not expiry:
            state.delete("expiry")
            state.delete("seen")
        return []


def _forget(expiry: Any, at: int, value: Any) -> None:
    values = [v for v in expiry.get(at, ()) if v != value]
    if values:
        expiry[at] = values
    elif at in expiry:
        del expiry[at]


def dedup(ttl: Any, by: str | None = None, *, time: str | None = None) -> KeyedOperator:
    """Drop a row while a row with the same value was emitted and its entry lives, as
    Spark's ``dropDuplicatesWithinWatermark`` (with the watermark delay ``ttl``).

    The value is ``row[by]``, or (``by=None``) the whole row, compared as :func:`distinct`
    compares them. The first row of a value is emitted and keeps an entry until the
    operator's time reaches its time plus ``ttl``. In event mode (``time_mode="event"``;
    the runner's ``event_time`` column, or column ``time``) that is the row's event time
    and the watermark: every row of that value meanwhile is dropped, whatever its own
    event time, and does not extend the entry, which is forgotten after the batch whose
    watermark reaches its end, so the first row after that is emitted again. Otherwise it
    is the batch time: a row of a batch at least ``ttl`` after the emitted row's is
    emitted again (Spark has no processing-time form). Within a batch the first row in ``order_by`` order is the one kept
    (Spark keeps the first in arrival order, which the runner makes deterministic with
    ``order_by``). In event mode rows late by the previous batch's watermark are dropped
    before, as for every operator. Example::

        StatefulRunner(dedup("10 minutes", by="event_id"), key="user", order_by="ts",
                       time_mode="event", event_time="ts", watermark_delay="1 minute", ...)

    State: dict ``"seen"`` from value to the time of its emitted row (epoch ms), dict
    ``"expiry"`` from an entry's end to the values whose entry ends then, and one timer per
    distinct end, which forgets them. Cost: O(1) per row (O(row size) to make the value
    hashable); writes: two entries per emitted row, nothing per dropped row.
    """
    return _Dedup(
        _check_duration("dedup", "ttl", ttl),
        _check_optional_column("dedup", "by", by),
        _check_optional_column("dedup", "time", time),
    )
