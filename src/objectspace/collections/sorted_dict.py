"""A persisted sorted dict."""

from __future__ import annotations

import functools
from collections.abc import (
    Callable,
    ItemsView,
    KeysView,
    ValuesView,
)
from typing import TYPE_CHECKING, Any

from sortedcontainers import SortedDict

from objectspace.tables import StateReader

if TYPE_CHECKING:
    from objectspace.space import ObjectSpace
from objectspace.collections._dictbase import (
    _ENTRY_PREFIXES,
    _DictBase,
    _SortedItems,
    _SortedKeys,
    _SortedValues,
)
from objectspace.collections._impl import emit_sorted_rows, sorted_insert, sorted_remove
from objectspace.collections.base import UNENCODABLE, Emitter, Page, SortedOrder, pack_entry
from objectspace.tables import DELETED

__all__ = ["PersistedSortedDict"]


class _SortedDict(SortedDict):  # type: ignore[misc]
    """A ``SortedDict`` that inserts a new key in its sorted key list with
    :func:`~objectspace.collections._pycore.sorted_insert` and removes one with
    :func:`~objectspace.collections._pycore.sorted_remove` (the list's own ``add`` and
    ``remove``, their bisections, insertion and deletion in C); pickled and copied as
    itself."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._list_add = functools.partial(sorted_insert, self._list)
        self._list_remove = functools.partial(sorted_remove, self._list)


class PersistedSortedDict(SortedOrder, _DictBase):
    """A dict kept in ascending key order (keys must be mutually comparable).

    Get is O(1); set and delete O(log n); :meth:`peekitem` O(log n); :meth:`irange`
    O(log n + k).
    """

    KIND = "SortedDict"
    TABLES = ("items",)
    __slots__ = ()

    def __init__(self, space: ObjectSpace, object_id: str, data: Any = None):
        super().__init__(space, object_id)
        self._data: SortedDict = _SortedDict() if data is None else _SortedDict(data)

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
        self._track(key)

    def keys(self) -> KeysView[Any]:
        """A read-only view of the keys, in order; indexable (``d.keys()[0]``)."""
        return _SortedKeys(self._data)

    def values(self) -> ValuesView[Any]:
        """A read-only view of the values, in key order; indexable."""
        return _SortedValues(self._data)

    def items(self) -> ItemsView[Any, Any]:
        """A read-only view of the (key, value) pairs, in key order; indexable."""
        return _SortedItems(self._data)

    def _emit_entries(
        self, out: Emitter, rows: dict[bytes, Any], page: Page, plain: frozenset[type]
    ) -> None:
        # The general loop, in one C call: the held key found in the sorted key list, an
        # insertion number of 0 (a sorted dict keeps none).
        emit_sorted_rows(
            rows,
            page.slots,
            self._data,
            self._data._list,
            page.cleared,
            out.dumps,
            out.encode_key,
            _ENTRY_PREFIXES[0],
            pack_entry,
            DELETED,
            UNENCODABLE,
        )

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

    @classmethod
    def _load(
        cls, space: ObjectSpace, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> PersistedSortedDict:
        data, _, old = cls._load_entries(object_id, reader, loads, space.serializer.raw_loads_many)
        obj = cls(space, object_id, data)
        if old:
            obj._rewrite(set(obj._data))
        return obj
