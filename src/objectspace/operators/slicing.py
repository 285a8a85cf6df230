"""``take`` and ``skip``: the first rows of each key, or all but them."""

from __future__ import annotations

import itertools
from typing import Any

from objectspace.keyed import KeyState
from objectspace.operators._base import KeyedOperator, Row, _check_int, _CountOperator

__all__ = ["skip", "take"]


class _Take(_CountOperator):
    __slots__ = ()
    name = "take"

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        n = self.n
        if n == 0:
            return []
        seen = state.value("seen", 0)
        had = seen.value
        if had >= n:
            return []
        out = list(itertools.islice(rows, n - had))
        if out:
            seen.value = had + len(out)
        return out


def take(n: int) -> KeyedOperator:
    """Emit the first ``n`` rows ever seen for the key (across batches), then nothing.

    State: value ``"seen"`` (rows emitted so far, at most ``n``). Cost: O(1) per emitted row,
    O(1) per batch once ``n`` rows were emitted (the rest of the batch is not looked at);
    writes: one row per batch that emitted something. ``take(0)`` emits nothing and keeps
    no state.
    """
    return _Take(_check_int("take", "n", n, 0))


class _Skip(_CountOperator):
    __slots__ = ()
    name = "skip"

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        n = self.n
        if n == 0:
            return list(rows)
        seen = state.value("seen", 0)
        had = seen.value
        if had >= n:
            return list(rows)
        out = list(rows)
        dropped = min(n - had, len(out))
        if dropped:
            seen.value = had + dropped
        return out[dropped:]


def skip(n: int) -> KeyedOperator:
    """Drop the first ``n`` rows of the key (across batches) and emit every later row.

    State: value ``"seen"`` (rows dropped so far, at most ``n``). Cost: O(1) per row;
    writes: one row per batch that dropped something, none once ``n`` rows were dropped.
    """
    return _Skip(_check_int("skip", "n", n, 0))
