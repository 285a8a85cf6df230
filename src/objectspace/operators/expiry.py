"""``expire_after``: an operator whose whole per-key state is deleted after a quiet period."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from objectspace.keyed import KeyState, fire_timer
from objectspace.operators._base import (
    KeyedOperator,
    Row,
    _check_duration,
    _check_optional_column,
    _format_duration,
    _now_millis,
    _Operator,
    _row_times,
)

__all__ = ["expire_after"]


class _ExpireAfter(_Operator):
    __slots__ = ("op", "time", "ttl")
    name = "expire_after"

    def __init__(self, ttl: int, op: KeyedOperator, time: str | None) -> None:
        self.ttl = ttl
        self.op = op
        self.time = time

    def _args(self) -> Iterable[str]:
        yield _format_duration(self.ttl)
        yield repr(self.op)
        if self.time is not None:
            yield f"time={self.time!r}"

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        expires = state.value("expires", None)
        old = expires.value
        if old is not None:
            now = _now_millis(state)
            if now is not None and old <= now:
                # Expired, but its timer fires only after the keys with rows: expire first.
                self._expire(state, old)
                expires = state.value("expires", None)
                old = None
        out = list(self.op(key, rows, state.namespace("op")))
        if not rows:
            return out
        at = max(_row_times(self, state, rows)) + self.ttl
        if old is None or at > old:
            if old is not None:
                state.timers.delete(old)
            state.timers.register(at)
            expires.value = at
        return out

    def handle_timer(
        self, key: Any, names: tuple[str, ...], when: int, state: KeyState
    ) -> Iterable[Mapping[str, Any]]:
        """Route a timer: this operator's own (namespace ``()``) expires the key; one of
        ``op`` (namespace ``("op", ...)``) goes to ``op``."""
        if not names:
            if "expires" in state and state.value("expires").value == when:
                self._expire(state, None)
            return []
        if names[0] != "op":
            raise ValueError(f"{self!r}: a timer of key {key!r} names no operator: {names!r}")
        return fire_timer(self.op, None, key, names[1:], when, state.namespace("op"))

    def _expire(self, state: KeyState, timer: int | None) -> None:
        """Delete the key's state: ``op``'s namespace (its timers and TTL'd entries with
        it) and the expiry (and its timer, when it has not fired)."""
        if timer is not None:
            state.timers.delete(timer)
        state.namespace("op").clear()
        state.delete("expires")


def expire_after(ttl: Any, op: KeyedOperator, *, time: str | None = None) -> KeyedOperator:
    """``op``, with the key's whole state (and timers) deleted ``ttl`` after its last row.

    The time of a row is its event time in event mode (the runner's ``event_time``
    column, or column ``time``), the batch time otherwise; the key's
    state expires when the watermark (or batch time) reaches ``ttl`` after the latest of
    them, and a key that comes back later starts afresh. ``ttl`` is a ``timedelta`` or a
    string like ``"30 days"``. ``op``'s own timers still reach ``op``. Example::

        expire_after("1 hour", ops.chain(ops.take(10), ops.aggregate("sum")))

    State: ``op``'s, in namespace ``"op"``, and value ``"expires"`` (epoch ms) with one
    timer there. Cost: ``op``'s, plus O(rows) per batch; writes: one value and one timer
    move per batch with rows; the expiry deletes every object of the key's namespace (it
    lists the ids of the key group's space: O(objects of the key group)).
    """
    ttl_ms = _check_duration("expire_after", "ttl", ttl)
    if not callable(op):
        raise ValueError(f"expire_after: op must be an operator (callable), got {op!r}")
    return _ExpireAfter(ttl_ms, op, _check_optional_column("expire_after", "time", time))
