"""``expire_after``: an operator whose whole per-key state is deleted after a quiet period."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from objectspace.operators._base import (
    KeyedOperator,
    Row,
    _check_duration,
    _format_duration,
    _now_millis,
    _Operator,
    _row_millis,
    _to_millis,
)
from objectspace.operators.state import KeyState

__all__ = ["expire_after"]


class _ExpireAfter(_Operator):
    __slots__ = ("op", "ttl")
    name = "expire_after"

    def __init__(self, ttl: int, op: KeyedOperator) -> None:
        self.ttl = ttl
        self.op = op

    def _args(self) -> Iterable[str]:
        return (_format_duration(self.ttl), repr(self.op))

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        expires = state.value("expires", None)
        old = expires.value
        if old is not None:
            now = _now_millis(state)
            if now is not None and old <= now:
                # Expired, but its timer fires only after the keys with rows: expire first.
                self._expire(state)
                expires = state.value("expires", None)
                old = None
        out = list(self.op(key, rows, state.namespace("op")))
        if not rows:
            return out
        at = max(_row_millis(self, state, row) for row in rows) + self.ttl
        if old is None or at > old:
            if old is not None:
                state.timers.delete(old)
            state.timers.register(at)
            expires.value = at
        return out

    def on_timer(self, key: Any, when: datetime, state: KeyState) -> list[Row]:
        """Delete the key's state if ``when`` is its expiry, else pass the timer on."""
        if "expires" in state and state.value("expires").value == _to_millis(when):
            self._expire(state)
            return []
        handler = getattr(self.op, "on_timer", None)
        if handler is None:
            return []
        return list(handler(key, when, state.namespace("op")))

    @staticmethod
    def _expire(state: KeyState) -> None:
        inner = state.namespace("op")
        for at in inner.timers.list():
            inner.timers.delete(at)
        inner.clear()
        state.delete("expires")


def expire_after(ttl: Any, op: KeyedOperator) -> KeyedOperator:
    """``op``, with the key's whole state (and timers) deleted ``ttl`` after its last row.

    The time of a row is its event time in event mode, the batch time otherwise; the key's
    state expires when the watermark (or batch time) reaches ``ttl`` after the latest of
    them, and a key that comes back later starts afresh. ``ttl`` is a ``timedelta`` or a
    string like ``"30 days"``. ``op``'s own timers still reach its ``on_timer``. Example::

        expire_after("1 hour", ops.chain(ops.take(10), ops.aggregate("sum")))

    State: ``op``'s, in namespace ``"op"``, and value ``"expires"`` (epoch ms) with one
    timer there. Cost: ``op``'s, plus O(rows) per batch; writes: one value and one timer
    move per batch with rows; the expiry deletes every object of the key's namespace (it
    lists the ids of the key group's space: O(objects of the key group)).
    """
    ttl_ms = _check_duration("expire_after", "ttl", ttl)
    if not callable(op):
        raise ValueError(f"expire_after: op must be an operator (callable), got {op!r}")
    return _ExpireAfter(ttl_ms, op)
