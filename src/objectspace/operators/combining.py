"""``combine_latest`` and ``zip``: rows of several sources combined per key."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from objectspace.keyed import KeyState
from objectspace.operators._base import (
    KeyedOperator,
    Row,
    _check_column,
    _check_sources,
    _field,
    _Operator,
)

__all__ = ["combine_latest", "zip"]


class _Sourced(_Operator):
    __slots__ = ("source", "sources", "valid", "value")

    def __init__(self, sources: tuple[str, ...], source: str, value: str) -> None:
        self.sources = sources
        self.valid = frozenset(sources)
        self.source = source
        self.value = value

    def _args(self) -> Iterable[str]:
        return (repr(list(self.sources)), f"source={self.source!r}", f"value={self.value!r}")

    def _check_rows(self, rows: list[Row]) -> list[tuple[str, Any]]:
        """Every row's ``(source, value)``, checked before any state changes."""
        valid = self.valid
        pairs = []
        for row in rows:
            src = _field(self, row, self.source)
            if not isinstance(src, str) or src not in valid:
                raise ValueError(
                    f"{self!r}: row source {src!r} is not one of {list(self.sources)!r}: {row!r}"
                )
            pairs.append((src, _field(self, row, self.value)))
        return pairs


class _CombineLatest(_Sourced):
    __slots__ = ()
    name = "combine_latest"

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        pairs = self._check_rows(rows)
        sources = self.sources
        latest = state.dict("latest")
        complete = len(latest) == len(sources)
        out: list[Row] = []
        for src, v in pairs:
            latest[src] = v
            if not complete:
                complete = len(latest) == len(sources)
            if complete:
                out.append({s: latest[s] for s in sources})
        return out


def combine_latest(
    sources: Iterable[str], source: str = "source", value: str = "v"
) -> KeyedOperator:
    """Rx ``CombineLatest`` over rows tagged with their source.

    Each row carries ``row[source]``, one of ``sources`` (another raises ``ValueError``
    naming it, before any state changes), and ``row[value]``. Once every source has had a
    value for the key, emit ``{s: latest value of s for s in sources}`` for every incoming
    row (including the row that completed the set).

    State: dict ``"latest"`` from source to its latest value, one slot per source, so a
    row writes one slot. Cost: O(len(sources)) per emitted row, O(1) otherwise; writes: at
    most one slot per source per batch.
    """
    names = _check_sources("combine_latest", sources)
    return _CombineLatest(
        names,
        _check_column("combine_latest", "source", source),
        _check_column("combine_latest", "value", value),
    )


class _Zip(_Sourced):
    __slots__ = ()
    name = "zip"

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        pairs = self._check_rows(rows)
        sources = self.sources
        space = state.namespace("queues")
        queues = {s: space.queue(s) for s in sources}
        out: list[Row] = []
        for src, v in pairs:
            q = queues[src]
            was_empty = not q
            q.enqueue(v)
            # Before this row some queue was empty (else they would have been zipped), so
            # only a row that fills an empty queue can complete a tuple.
            if was_empty and all(queues.values()):
                out.append({s: queues[s].dequeue() for s in sources})
        return out


def zip(sources: Iterable[str], source: str = "source", value: str = "v") -> KeyedOperator:
    """Rx ``Zip`` over rows tagged with their source: pair the n-th value of every source.

    Each row carries ``row[source]``, one of ``sources`` (another raises ``ValueError``
    naming it, before any state changes), and ``row[value]``, which is appended to its
    source's queue; whenever every queue is non-empty, one value is taken from each and
    ``{s: v_s for s in sources}`` is emitted.

    State: one queue per source, ``"queues/<source>"`` (the namespace ``"queues"``). A
    source that runs ahead of the others grows its queue without bound. Cost: O(1) per row,
    plus O(len(sources)) when a row fills an empty queue; writes: per row one queue item,
    per emitted row one delete per source, plus each touched queue's head/tail per batch.
    """
    names = _check_sources("zip", sources)
    return _Zip(names, _check_column("zip", "source", source), _check_column("zip", "value", value))
