"""A persisted sorted set."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sortedcontainers import SortedList, SortedSet

from objectspace.collections._impl import sorted_set_add, sorted_set_discard
from objectspace.collections._setbase import _SetBase
from objectspace.collections.base import SortedOrder
from objectspace.serialization import PLAIN_KEY_TYPES

__all__ = ["PersistedSortedSet", "drop_front"]


def drop_front(sorted_list: SortedList, n: int) -> None:
    """``del sorted_list[:n]`` (0 <= n <= its length) without what sortedcontainers does for
    a slice of more than an eighth of the list (copy the rest and add it back, sorting it
    again): its leading sublists go whole, the next loses its front, and, if that leaves
    it at half the load or less, joins its neighbour, as ``SortedList._delete`` keeps the
    sublists (the position index is rebuilt on its next use). O(sublists dropped + the
    length of one sublist)."""
    if n <= 0:
        return
    lists = sorted_list._lists
    maxes = sorted_list._maxes
    sorted_list._len -= n
    del sorted_list._index[:]
    while n:
        first = lists[0]
        if len(first) <= n:
            n -= len(first)
            del lists[0]
            del maxes[0]
            continue
        del first[:n]  # its maximum stays
        n = 0
        if len(lists) > 1 and len(first) <= sorted_list._load >> 1:
            lists[1][:0] = first
            del lists[0]
            del maxes[0]
            sorted_list._expand(0)


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
            drop_front(data._list, n)
            data._set.difference_update(values)
            for value in values:
                self._track_edit(value, False)
        else:
            for value in values:
                self.discard(value)

    def __getitem__(self, index: int) -> Any:
        """The element at position ``index`` in ascending order (negative too)."""
        return self._data[index]
