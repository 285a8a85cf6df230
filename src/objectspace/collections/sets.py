"""A persisted set and a persisted sorted set."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, MutableSet
from typing import TYPE_CHECKING, Any

from sortedcontainers import SortedSet

from objectspace.collections.base import Emitter, Page, PersistedObject
from objectspace.storage.base import DELETED, StateReader

if TYPE_CHECKING:
    from objectspace.space import ObjectSpace

__all__ = ["PersistedSet", "PersistedSortedSet"]


class _SetBase(PersistedObject, MutableSet[Any]):
    """Shared by both sets: ``items: <encoded element> = b""``, one row per changed element."""

    __slots__ = ("_data",)
    _data: Any

    def add(self, value: Any) -> None:
        """Add ``value``; the checkpoint writes one row if it was absent."""
        if value not in self._data:
            if not self._registered:
                self._touch()
            self._data.add(value)
            try:
                self._dirty.add(value)
            except BaseException:
                self._rewrite_all()
                raise

    def discard(self, value: Any) -> None:
        """Remove ``value`` if present; the checkpoint deletes one row."""
        if value in self._data:
            if not self._registered:
                self._touch()
            self._data.discard(value)
            try:
                self._dirty.add(value)
            except BaseException:
                self._rewrite_all()
                raise

    def _rewrite_all(self) -> None:
        """Track the whole set for rewriting: one table delete, then every element. O(n).

        Only for an edit that changed the set but could not be tracked by its element (its
        ``__eq__`` raised against an element deleted earlier that is still tracked).
        """
        self._cleared = True
        self._dirty = set(self._data)

    def clear(self) -> None:
        """Remove every element. O(1) writes: one table delete."""
        if not self._registered:
            self._touch()
        self._data.clear()
        self._cleared = True
        self._dirty = set()

    @classmethod
    def _from_iterable(cls, values: Iterable[Any]) -> set[Any]:
        # The results of &, |, - and ^ are plain sets, not new persisted objects.
        return set(values)

    def update(self, values: Iterable[Any]) -> None:
        """Add every value."""
        for value in values:
            self.add(value)

    def __contains__(self, value: object) -> bool:
        return value in self._data

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._id!r}: {set(self._data)!r}>"

    def _emit(self, out: Emitter, page: Page, whole: bool) -> None:
        dumps = out.dumps
        if whole:
            rows = out.table(self._t_items)
            for value in self._data:
                rows[dumps(value)] = b""
        else:
            if page.cleared:
                out.truncate(self._t_items)
            rows = out.table(self._t_items)
            data = self._data
            for value in page.slots:
                if value in data:
                    rows[dumps(value)] = b""
                elif not page.cleared:
                    rows[dumps(value)] = DELETED

    @classmethod
    def _load_elements(
        cls, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> list[Any]:
        return list(map(loads, reader.keys(f"state/item/{object_id}/items")))


class PersistedSet(_SetBase):
    """A set (``collections.abc.MutableSet``); add, discard and membership are O(1)."""

    KIND = "Set"
    __slots__ = ()

    def __init__(self, space: ObjectSpace, object_id: str, data: Iterable[Any] = ()) -> None:
        super().__init__(space, object_id)
        self._data: set[Any] = set(data)

    @classmethod
    def _load(
        cls, space: ObjectSpace, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> PersistedSet:
        return cls(space, object_id, cls._load_elements(object_id, reader, loads))


class PersistedSortedSet(_SetBase):
    """A set kept in ascending order (elements must be mutually comparable).

    Add, discard and membership cost O(log n); indexing by position O(log n);
    :meth:`irange` O(log n + k).
    """

    KIND = "SortedSet"
    __slots__ = ()

    def __init__(self, space: ObjectSpace, object_id: str, data: Iterable[Any] = ()) -> None:
        super().__init__(space, object_id)
        self._data: SortedSet = SortedSet(data)

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

    @classmethod
    def _load(
        cls, space: ObjectSpace, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> PersistedSortedSet:
        return cls(space, object_id, cls._load_elements(object_id, reader, loads))
