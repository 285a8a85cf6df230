"""A persisted sorted set."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sortedcontainers import SortedSet

from objectspace.collections._setbase import _SetBase
from objectspace.collections.base import SortedOrder

__all__ = ["PersistedSortedSet"]


class PersistedSortedSet(SortedOrder, _SetBase):
    """A set kept in ascending order (elements must be mutually comparable).

    Add, discard and membership cost O(log n); indexing by position O(log n);
    :meth:`irange` O(log n + k).
    """

    KIND = "SortedSet"
    __slots__ = ()

    @staticmethod
    def _new_data(data: Iterable[Any]) -> SortedSet:
        return SortedSet(data)

    def add(self, value: Any) -> None:
        """Add ``value``; the checkpoint writes one row if it was absent.

        ``TypeError`` (the set unchanged) when ``value`` cannot be ordered against the
        elements.
        """
        data = self._data
        if value not in data:
            if not self._registered:
                self._touch()
            try:
                data.add(value)
            except BaseException:
                # SortedSet.add puts the value in its hash set before its sorted list, whose
                # comparisons may raise: take it out again.
                data._set.discard(value)
                raise
            self._track_edit(value, True)

    def discard(self, value: Any) -> None:
        """Remove ``value`` if present; the checkpoint deletes one row."""
        data = self._data
        if value in data:
            if not self._registered:
                self._touch()
            try:
                data.discard(value)
            except BaseException:
                # SortedSet.discard takes the value out of its hash set before its sorted
                # list, whose comparisons may raise: put it back if the list still holds it.
                if len(data._list) != len(data._set):
                    data._set.add(value)
                raise
            self._track_edit(value, False)

    def _discard_sorted(self, values: list[Any]) -> None:
        """Remove ``values``: distinct elements of the set, ascending. When they are its
        first ``len(values)`` elements (a due prefix taken from the front) one slice
        deletion removes them, else one :meth:`discard` each. Each removal is tracked as
        :meth:`discard` tracks it."""
        data = self._data
        n = len(values)
        if not n:
            return
        if not self._registered:
            self._touch()
        if len(data) >= n and data[n - 1] == values[-1]:
            # n distinct members, all <= values[-1], the n-th smallest: the first n.
            del data._list[:n]
            data._set.difference_update(values)
            for value in values:
                self._track_edit(value, False)
        else:
            for value in values:
                self.discard(value)

    def __getitem__(self, index: int) -> Any:
        """The element at position ``index`` in ascending order (negative too)."""
        return self._data[index]
