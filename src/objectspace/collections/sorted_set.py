"""A persisted sorted set."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sortedcontainers import SortedSet

from objectspace.collections._impl import sorted_set_add, sorted_set_discard
from objectspace.collections._setbase import _SetBase
from objectspace.collections.base import SortedOrder
from objectspace.serialization import PLAIN_KEY_TYPES

__all__ = ["PersistedSortedSet"]


class PersistedSortedSet(SortedOrder, _SetBase):
    """A set kept in ascending order (elements must be mutually comparable).

    Add, discard and membership cost O(log n); indexing by position O(log n);
    :meth:`irange` O(log n + k).
    """

    KIND = "SortedSet"
    TABLES = ("items",)
    __slots__ = ()

    @staticmethod
    def _new_data(data: Iterable[Any]) -> SortedSet:
        return SortedSet(data)

    def add(self, value: Any) -> None:
        """Add ``value``; the checkpoint writes one row if it was absent.

        ``TypeError`` (the set unchanged) when ``value`` cannot be ordered against the
        elements.
        """
        sorted_set_add(self, value, PLAIN_KEY_TYPES)  # one C call with the extension

    def discard(self, value: Any) -> None:
        """Remove ``value`` if present; the checkpoint deletes one row."""
        sorted_set_discard(self, value)

    def _hash_set(self) -> set[Any]:
        members: set[Any] = self._data._set  # not SortedSet.__contains__, a Python call
        return members

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
