"""A persisted sorted set."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sortedcontainers import SortedSet

from objectspace.collections._impl import sorted_insert, sorted_remove
from objectspace.collections._setbase import _SetBase
from objectspace.collections.base import SortedOrder

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
        data = self._data
        members = data._set  # SortedSet's own add and membership, inline (a hot path)
        if value not in members:
            if not self._registered:
                self._touch()
            members.add(value)
            try:
                sorted_insert(data._list, value)
            except BaseException:
                # The sorted list's comparisons raised: out of the hash set again.
                members.discard(value)
                raise
            self._track_edit(value, True)

    def discard(self, value: Any) -> None:
        """Remove ``value`` if present; the checkpoint deletes one row."""
        data = self._data
        members = data._set  # SortedSet's own discard, inline
        if value in members:
            if not self._registered:
                self._touch()
            members.remove(value)
            try:
                sorted_remove(data._list, value)
            except BaseException:
                # The sorted list's comparisons raised: back in the hash set if the list
                # still holds it.
                if len(data._list) != len(members):
                    members.add(value)
                raise
            self._track_edit(value, False)

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
