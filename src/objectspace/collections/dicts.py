"""A persisted dict and a persisted sorted dict."""

from __future__ import annotations

from collections.abc import (
    Callable,
    ItemsView,
    Iterator,
    KeysView,
    MutableMapping,
    ValuesView,
)
from typing import TYPE_CHECKING, Any

from sortedcontainers import SortedDict
from sortedcontainers.sorteddict import SortedItemsView, SortedKeysView, SortedValuesView

from objectspace.collections.base import Emitter, Page, PersistedObject
from objectspace.storage.base import StateReader

if TYPE_CHECKING:
    from objectspace.space import ObjectSpace

__all__ = ["PersistedDict", "PersistedSortedDict"]

_MISSING: Any = object()


def _no_deletion(view: object, index: object) -> None:
    raise TypeError("a sorted dict's views are read-only: delete from the dict itself")


# SortedDict's views are sequences that also delete by position (``del d.keys()[0]``),
# behind the persisted dict's back: ours are the same views without that.
class _SortedKeys(SortedKeysView):  # type: ignore[misc]
    """A read-only, indexable view of a sorted dict's keys."""

    __slots__ = ()
    __delitem__ = _no_deletion


class _SortedValues(SortedValuesView):  # type: ignore[misc]
    """A read-only, indexable view of a sorted dict's values."""

    __slots__ = ()
    __delitem__ = _no_deletion


class _SortedItems(SortedItemsView):  # type: ignore[misc]
    """A read-only, indexable view of a sorted dict's (key, value) pairs."""

    __slots__ = ()
    __delitem__ = _no_deletion


class _DictBase(PersistedObject, MutableMapping[Any, Any]):
    """Shared by both dicts: ``items: <encoded key> = <encoded value>``, a row per changed key."""

    __slots__ = ("_data",)
    _data: Any

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        """Set ``key``; the checkpoint writes one row."""
        if not self._registered:
            self._touch()
        self._data[key] = value
        try:
            self._dirty.add(key)
        except BaseException:
            self._rewrite_all()
            raise

    def __delitem__(self, key: Any) -> None:
        """Delete ``key`` (``KeyError`` if absent); the checkpoint deletes one row."""
        if not self._registered:
            self._touch()
        del self._data[key]
        try:
            self._dirty.add(key)
        except BaseException:
            self._rewrite_all()
            raise

    def _rewrite_all(self) -> None:
        """Track the whole dict for rewriting: one table delete, then every key. O(n).

        Only for an edit that changed the dict but could not be tracked by its key (its
        ``__eq__`` raised against a key deleted earlier that is still tracked).
        """
        self._cleared = True
        self._dirty = set(self._data)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        """Remove ``key`` and return its value, or ``default`` (``KeyError`` without one).

        Like ``dict.pop``, an empty dict does not look at ``key`` (not even hash it).
        """
        if self._data and key in self._data:
            value = self._data[key]
            del self[key]
            return value
        if default is _MISSING:
            raise KeyError(key)
        return default

    def clear(self) -> None:
        """Remove every key. O(1) writes: one table delete."""
        if not self._registered:
            self._touch()
        self._data.clear()
        self._cleared = True
        self._dirty = set()

    def get(self, key: Any, default: Any = None) -> Any:
        return self._data.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def keys(self) -> KeysView[Any]:
        """A read-only view of the keys."""
        return self._data.keys()  # type: ignore[no-any-return]

    def values(self) -> ValuesView[Any]:
        """A read-only view of the values."""
        return self._data.values()  # type: ignore[no-any-return]

    def items(self) -> ItemsView[Any, Any]:
        """A read-only view of the (key, value) pairs."""
        return self._data.items()  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._id!r}: {dict(self._data)!r}>"

    def _emit(self, out: Emitter, page: Page, whole: bool) -> None:
        dumps = out.dumps
        data = self._data
        if whole:
            rows = out.table(self._t_items)
            for key, value in data.items():
                rows[dumps(key)] = dumps(value)
        else:
            self._emit_slots(out, self._t_items, page, data.__contains__, data.__getitem__, dumps)

    @classmethod
    def _load_items(
        cls, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> Iterator[tuple[Any, Any]]:
        rows = reader.table(f"state/item/{object_id}/items")
        return zip(map(loads, rows.keys()), map(loads, rows.values()), strict=True)


class PersistedDict(_DictBase):
    """A dict (``collections.abc.MutableMapping``); get, set and delete are O(1)."""

    KIND = "Dict"
    __slots__ = ()

    def __init__(self, space: ObjectSpace, object_id: str, data: dict[Any, Any] | None = None):
        super().__init__(space, object_id)
        self._data: dict[Any, Any] = data if data is not None else {}

    def __reversed__(self) -> Iterator[Any]:
        """The keys, the last inserted first (``Mapping`` itself is not reversible)."""
        backwards: Iterator[Any] = reversed(self._data)
        return backwards

    def popitem(self) -> tuple[Any, Any]:
        """Remove and return the pair inserted last, like ``dict.popitem``. O(1).

        ``KeyError`` when empty.
        """
        data = self._data
        if not data:
            raise KeyError(f"popitem(): dict {self._id!r} is empty")
        key = next(reversed(data))
        return key, self.pop(key)

    @classmethod
    def _load(
        cls, space: ObjectSpace, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> PersistedDict:
        return cls(space, object_id, dict(cls._load_items(object_id, reader, loads)))


class PersistedSortedDict(_DictBase):
    """A dict kept in ascending key order (keys must be mutually comparable).

    Get is O(1); set and delete O(log n); :meth:`peekitem` O(log n); :meth:`irange`
    O(log n + k).
    """

    KIND = "SortedDict"
    __slots__ = ()

    def __init__(self, space: ObjectSpace, object_id: str, data: Any = None):
        super().__init__(space, object_id)
        self._data: SortedDict = SortedDict() if data is None else SortedDict(data)

    def __delitem__(self, key: Any) -> None:
        """Delete ``key`` (``KeyError`` if absent); the checkpoint deletes one row. O(log n)."""
        data = self._data
        value = data[key]
        if not self._registered:
            self._touch()
        try:
            del data[key]
        except BaseException:
            # SortedDict deletes from its dict before its sorted key list, whose comparisons
            # may raise: put the key back.
            if not dict.__contains__(data, key):
                dict.__setitem__(data, key, value)
            raise
        try:
            self._dirty.add(key)
        except BaseException:
            self._rewrite_all()
            raise

    def keys(self) -> KeysView[Any]:
        """A read-only view of the keys, in order; indexable (``d.keys()[0]``)."""
        return _SortedKeys(self._data)

    def values(self) -> ValuesView[Any]:
        """A read-only view of the values, in key order; indexable."""
        return _SortedValues(self._data)

    def items(self) -> ItemsView[Any, Any]:
        """A read-only view of the (key, value) pairs, in key order; indexable."""
        return _SortedItems(self._data)

    def irange(
        self,
        minimum: Any = None,
        maximum: Any = None,
        inclusive: tuple[bool, bool] = (True, True),
        reverse: bool = False,
    ) -> Iterator[Any]:
        """Keys between ``minimum`` and ``maximum`` (``None``: unbounded), ascending."""
        return iter(self._data.irange(minimum, maximum, inclusive, reverse))

    def peekitem(self, index: int = -1) -> tuple[Any, Any]:
        """The (key, value) pair at position ``index`` in key order (the last by default)."""
        return tuple(self._data.peekitem(index))

    def popitem(self) -> tuple[Any, Any]:
        """Remove and return the pair with the greatest key. ``KeyError`` when empty."""
        if not self._data:
            raise KeyError(f"popitem(): sorted dict {self._id!r} is empty")
        key, value = self._data.peekitem(-1)
        del self[key]
        return key, value

    def index(self, key: Any) -> int:
        """The position of ``key`` in key order; ``ValueError`` if absent. O(log n)."""
        return int(self._data.index(key))

    def __reversed__(self) -> Iterator[Any]:
        backwards: Iterator[Any] = reversed(self._data)
        return backwards

    @classmethod
    def _load(
        cls, space: ObjectSpace, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> PersistedSortedDict:
        return cls(space, object_id, cls._load_items(object_id, reader, loads))
