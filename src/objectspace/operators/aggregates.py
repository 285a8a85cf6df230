"""``scan`` and ``aggregate``: running and final aggregates per key."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from objectspace.keyed import KeyState
from objectspace.operators._base import (
    KeyedOperator,
    Row,
    _check_agg,
    _check_column,
    _check_optional_column,
    _field,
    _Operator,
)

__all__ = ["aggregate", "scan"]


class _Aggregate(_Operator):
    """Emits the aggregate once per batch; :class:`_Scan` emits it after every row."""

    __slots__ = ("agg", "out", "value")
    name = "aggregate"
    running = False

    def __init__(self, agg: str, value: str, out: str) -> None:
        self.agg = agg
        self.value = value
        self.out = out

    def _args(self) -> Iterable[str]:
        return (repr(self.agg), f"value={self.value!r}", f"out={self.out!r}")

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        agg, column, name, running = self.agg, self.value, self.out, self.running
        results: list[Any] = []
        emit = results.append
        if agg == "count":
            count_v = state.value("count", 0)
            c = count_v.value
            if running:
                for _row in rows:
                    c += 1
                    emit(c)
            else:
                c0 = c
                c += sum(1 for _row in rows)
                if c > c0:
                    emit(c)
            if results:
                count_v.value = c
        elif agg == "sum" or agg == "mean":
            sum_v = state.value("sum", 0)
            s = sum_v.value
            rows_v = state.value("count", 0) if agg == "mean" else None
            c = 0 if rows_v is None else rows_v.value
            mean = agg == "mean"
            seen = 0
            for row in rows:
                s = s + _field(self, row, column)
                c += 1
                seen += 1
                if running:
                    emit(s / c if mean else s)
            if seen:
                if not running:
                    emit(s / c if mean else s)
                sum_v.value = s
                if rows_v is not None:
                    rows_v.value = c
        else:  # min / max
            best_v = state.value(agg, None)
            best = best_v.value
            old = best
            is_min = agg == "min"
            seen = 0
            for row in rows:
                v = _field(self, row, column)
                if v is None:
                    raise ValueError(f"{self!r}: {column} is None (null) in row {row!r}")
                seen += 1
                if best is None or (v < best if is_min else v > best):
                    best = v
                if running:
                    emit(best)
            if seen:
                if not running:
                    emit(best)
                if best is not old:
                    best_v.value = best
        return [{name: r} for r in results]


class _Scan(_Aggregate):
    __slots__ = ()
    name = "scan"
    running = True


def scan(agg: str, value: str = "v", out: str | None = None) -> KeyedOperator:
    """For every input row emit ``{out: running aggregate of row[value]}``.

    ``agg`` is one of ``"sum"``, ``"count"`` (counts rows; ``value`` is not read), ``"mean"``
    (``sum / count`` as a float), ``"min"``, ``"max"`` (the first of equal extremes wins);
    ``out`` defaults to ``agg``. Values are added and compared as they are, so they must be
    numbers (``min``/``max``: any mutually comparable values, not ``None``); a missing
    column raises ``KeyError``.

    State, one value object per piece: ``"sum"`` (sum, mean), ``"count"`` (count, mean),
    ``"min"`` or ``"max"`` (``None`` until the first row). Cost: O(1) per row; writes: at
    most two rows per batch, whatever the number of rows.
    """
    agg = _check_agg("scan", agg)
    column = _check_column("scan", "value", value)
    name = _check_optional_column("scan", "out", out) or agg
    return _Scan(agg, column, name)


def aggregate(agg: str, value: str = "v", out: str | None = None) -> KeyedOperator:
    """Emit ``{out: aggregate of row[value]}`` once per batch, after the batch's rows.

    The aggregate covers every row of the key so far (all batches), as :func:`scan` computes
    it; a key is emitted for a batch only if it had at least one input row. Unknown ``agg``
    raises ``ValueError`` listing the valid ones (see :data:`AGGREGATES`).

    State: as :func:`scan` (values ``"sum"``, ``"count"``, ``"min"``/``"max"``). Cost: O(1)
    per row; writes: at most two rows per batch.
    """
    agg = _check_agg("aggregate", agg)
    column = _check_column("aggregate", "value", value)
    name = _check_optional_column("aggregate", "out", out) or agg
    return _Aggregate(agg, column, name)
