"""A persisted sorted set."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from sortedcontainers import SortedSet

from objectspace.serialization import PLAIN_KEY_TYPES

if TYPE_CHECKING:
    pass
from objectspace.collections._setbase import _SetBase

__all__ = ["PersistedSortedSet"]


class PersistedSortedSet(_SetBase):
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
            try:
                self._dirty.add(value)
                if type(value) not in PLAIN_KEY_TYPES:
                    self._spell[value] = value
            except BaseException:
                self._rewrite_all()
                raise

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
            try:
                self._dirty.add(value)
                if self._spell:
                    self._spell.pop(value, None)
            except BaseException:
                self._rewrite_all()
                raise

    def __getitem__(self, index: int) -> Any:
        """The element at position ``index`` in ascending order (negative too)."""
        return self._data[index]

    def __reversed__(self) -> Iterator[Any]:
        backwards: Iterator[Any] = reversed(self._data)
        return backwards

    def irange(
        self,
        minimum: Any = None,
        maximum: Any = None,
        inclusive: tuple[bool, bool] = (True, True),
        reverse: bool = False,
    ) -> Iterator[Any]:
        """Elements between ``minimum`` and ``maximum`` (``None``: unbounded), ascending."""
        return iter(self._data.irange(minimum, maximum, inclusive, reverse))

    def index(self, value: Any) -> int:
        """The position of ``value``; ``ValueError`` if absent. O(log n)."""
        return int(self._data.index(value))
