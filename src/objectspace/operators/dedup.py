"""``distinct`` and ``distinct_until_changed`` per key."""

from __future__ import annotations

from typing import Any

from objectspace.operators._base import (
    KeyedOperator,
    Row,
    _ByOperator,
    _check_optional_column,
    _field,
    _hashable,
)
from objectspace.operators.state import KeyState

__all__ = ["distinct", "distinct_until_changed"]


class _Distinct(_ByOperator):
    __slots__ = ()
    name = "distinct"

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        by = self.by
        seen = state.set("seen")
        out: list[Row] = []
        for row in rows:
            if by is None:
                if not isinstance(row, dict):
                    raise TypeError(f"{self!r}: input rows are dicts, got {type(row).__name__}")
                v = tuple(sorted((k, _hashable(x)) for k, x in row.items()))
            else:
                v = _hashable(_field(self, row, by))
            if v not in seen:
                seen.add(v)
                out.append(row)
        return out


def distinct(by: str | None = None) -> KeyedOperator:
    """Emit a row if its value was never seen before for this key.

    The value is ``row[by]``, or (``by=None``) the whole row as
    ``tuple(sorted(row.items()))``; nested lists and tuples become tuples, nested dicts
    sorted tuples of pairs, sets frozensets, so equal values (``==``) count as the same.

    State: set ``"seen"`` of every distinct value. Cost: O(1) per row (O(row size) to make
    the value hashable); writes: one set element per new value. The set grows with the
    number of distinct values and is never pruned.
    """
    return _Distinct(_check_optional_column("distinct", "by", by))


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
