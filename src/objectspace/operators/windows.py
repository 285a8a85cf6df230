"""``buffer`` and ``window``: counted buffers and sliding windows per key."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from objectspace.keyed import KeyState
from objectspace.operators._base import (
    KeyedOperator,
    Row,
    _check_int,
    _check_optional_column,
    _field,
    _Operator,
)

__all__ = ["buffer", "window"]


class _Buffer(_Operator):
    __slots__ = ("count", "skip", "value")
    name = "buffer"

    def __init__(self, count: int, skip: int, value: str | None) -> None:
        self.count = count
        self.skip = skip
        self.value = value

    def _args(self) -> Iterable[str]:
        return (repr(self.count), f"skip={self.skip!r}", f"value={self.value!r}")

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        count, step, column = self.count, self.skip, self.value
        items = state.queue("items")
        n_v = state.value("n", 0)
        n = n_v.value
        out: list[Row] = []
        for row in rows:
            items.enqueue(dict(row) if column is None else _field(self, row, column))
            if len(items) > count:
                items.dequeue()
            n += 1
            first = n - count  # index of the first item of the buffer ending here
            if first >= 0 and first % step == 0:
                if column is None:
                    out.append({"items": [dict(item) for item in items]})
                else:
                    out.append({"items": list(items)})
        if n != n_v.value:
            n_v.value = n
        return out


def buffer(count: int, skip: int | None = None, value: str | None = None) -> KeyedOperator:
    """Rx ``Buffer(count, skip)``: emit ``{"items": [...]}`` whenever a buffer is full.

    Buffers start at the key's items 0, ``skip``, 2·``skip``, … (``skip`` defaults to
    ``count``: back-to-back buffers; ``skip < count`` overlaps them, ``skip > count`` leaves
    gaps) and each holds ``count`` consecutive items, so the buffer starting at item
    ``s·skip`` is emitted with the row of item ``s·skip + count - 1``. An item is
    ``row[value]``, or (``value=None``) a copy of the whole row. A partly filled buffer is
    never emitted (the stream does not end).

    State: queue ``"items"`` holding the last ``count`` items (each row enqueues its item
    and, once the queue is longer than ``count``, dequeues the oldest) and value ``"n"``
    (items seen). Cost: O(1) per row plus O(count) per emitted buffer; writes: per row one
    queue item and one delete, plus per batch the queue's head/tail and ``"n"`` — never
    the whole buffer. ``count >= 1`` and ``skip >= 1``, else ``ValueError``.
    """
    count = _check_int("buffer", "count", count, 1)
    step = count if skip is None else _check_int("buffer", "skip", skip, 1)
    return _Buffer(count, step, _check_optional_column("buffer", "value", value))


class _Window(_Operator):
    __slots__ = ("count", "skip")
    name = "window"

    def __init__(self, count: int, skip: int) -> None:
        self.count = count
        self.skip = skip

    def _args(self) -> Iterable[str]:
        return (repr(self.count), f"skip={self.skip!r}")

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        count, step = self.count, self.skip
        n_v = state.value("n", 0)
        n = n_v.value
        out: list[Row] = []
        for row in rows:
            # Window w covers items w*step .. w*step + count - 1.
            lowest = max(0, -((count - 1 - n) // step))  # ceil((n - count + 1) / step)
            for w in range(lowest, n // step + 1):
                out.append({**row, "window": w})
            n += 1
        if n != n_v.value:
            n_v.value = n
        return out


def window(count: int, skip: int | None = None) -> KeyedOperator:
    """Count-based windows: emit each row once per window that contains it.

    Windows start at the key's items 0, ``skip``, 2·``skip``, … (``skip`` defaults to
    ``count``) and each covers ``count`` consecutive items. Item ``j`` is emitted as
    ``{**row, "window": w}`` for every ``w`` with ``w·skip <= j < w·skip + count``, in
    increasing ``w`` (none if it falls in a gap, ``skip > count``); a ``"window"`` column of
    the input is replaced.

    State: value ``"n"`` (items seen). Cost: O(1) plus O(ceil(count / skip)) output rows per
    row; writes: one row per batch.
    """
    count = _check_int("window", "count", count, 1)
    step = count if skip is None else _check_int("window", "skip", skip, 1)
    return _Window(count, step)
