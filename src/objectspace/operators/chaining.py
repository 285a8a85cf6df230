"""``chain``: operators run one after the other, each on the output of the previous one."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from objectspace.keyed import KeyState, fire_timer
from objectspace.operators._base import KeyedOperator, Row, _Operator

__all__ = ["chain"]


class _Chain(_Operator):
    __slots__ = ("ops",)
    name = "chain"

    def __init__(self, ops: tuple[KeyedOperator, ...]) -> None:
        self.ops = ops

    def _args(self) -> Iterable[str]:
        return (repr(op) for op in self.ops)

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        current = rows if isinstance(rows, list) else list(rows)
        for i, op in enumerate(self.ops):
            if not current:
                return []
            current = list(op(key, current, state.namespace(str(i))))
        return current

    def handle_timer(
        self, key: Any, names: tuple[str, ...], when: int, state: KeyState
    ) -> list[Row]:
        """A timer that operator ``names[0]`` registered fired: that operator handles it
        (by the timer contract, :func:`~objectspace.keyed.fire_timer`), and its output
        rows run through the operators after it, as rows do."""
        if not names or not names[0].isdigit() or int(names[0]) >= len(self.ops):
            raise ValueError(f"{self!r}: a timer of key {key!r} names no operator: {names!r}")
        i = int(names[0])
        current = [
            dict(r)
            for r in fire_timer(self.ops[i], None, key, names[1:], when, state.namespace(names[0]))
        ]
        for j in range(i + 1, len(self.ops)):
            if not current:
                return []
            current = list(self.ops[j](key, current, state.namespace(str(j))))
        return current


def chain(*ops: KeyedOperator) -> KeyedOperator:
    """Feed each operator's output rows into the next; emit the last one's output.

    Operator ``i`` keeps its state in ``state.namespace(str(i))`` (ids
    ``<key>/<i>/<name>``), so two operators of one kind never share state. As with the
    runner, an operator is called only with rows: once one emits nothing for a batch, the
    operators after it are not called. ``chain(take(5), aggregate("mean"))`` is the mean
    of the key's first five values, emitted per batch while they arrive.

    State: that of the operators, each in its namespace. Cost: the sum of the operators'
    costs, plus one list per stage per batch.
    """
    if not ops:
        raise ValueError("chain: needs at least one operator")
    for i, op in enumerate(ops):
        if not callable(op):
            raise ValueError(f"chain: operator {i} is not callable: {op!r}")
    return _Chain(tuple(ops))
