"""``top_k``: the k largest rows per key."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from objectspace.keyed import KeyState
from objectspace.operators._base import (
    KeyedOperator,
    Row,
    _check_column,
    _check_int,
    _field,
    _Operator,
)

__all__ = ["top_k"]


class _TopK(_Operator):
    __slots__ = ("by", "k")
    name = "top_k"

    def __init__(self, k: int, by: str) -> None:
        self.k = k
        self.by = by

    def _args(self) -> Iterable[str]:
        return (repr(self.k), repr(self.by))

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        k, by = self.k, self.by
        order = state.sorted_set("order")
        kept = state.dict("rows")
        seq_v = state.value("seq", 0)
        seq = seq_v.value
        start = seq
        changed = False
        for row in rows:
            score = _field(self, row, by)
            if score is None or (isinstance(score, float) and math.isnan(score)):
                raise ValueError(f"{self!r}: cannot rank {by}={score!r}: {row!r}")
            seq += 1
            entry = (score, -seq)
            if len(order) >= k:
                lowest = order[0]
                if entry < lowest:
                    continue
                order.discard(lowest)
                del kept[-lowest[1]]
            order.add(entry)
            kept[seq] = dict(row)
            changed = True
        if seq != start:
            seq_v.value = seq
        if not changed:
            return []
        return [{**kept[-entry[1]], "rank": r} for r, entry in enumerate(reversed(order))]


def top_k(k: int, by: str) -> KeyedOperator:
    """Keep the ``k`` rows of the key with the largest ``row[by]``; emit them when they change.

    Ties rank the earlier row higher. After a batch that changed the key's top ``k`` (a row
    entered it), emit the whole current top ``k`` (fewer while the key has fewer rows) as
    ``{**row, "rank": r}``, ``r = 0 .. k-1`` by descending value. Values must be mutually
    comparable; ``None`` and NaN raise ``ValueError``.

    State: sorted set ``"order"`` of ``(value, -seq)`` pairs (the smallest is the first to
    go), dict ``"rows"`` from ``seq`` to a copy of the row, and value ``"seq"`` (rows seen).
    Cost: O(log k) per row, plus O(k) per batch that changed the top ``k``; writes: per row
    that enters the top ``k`` one set element and one dict slot (and the deletes of the
    row it pushes out), plus ``"seq"`` once per batch. Rows that do not enter cost no
    state writes beyond ``"seq"``.
    """
    return _TopK(_check_int("top_k", "k", k, 1), _check_column("top_k", "by", by))
