"""The shared base of the persisted dict and sorted dict."""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import (
    Callable,
    ItemsView,
    Iterable,
    Iterator,
    KeysView,
    MutableMapping,
    ValuesView,
)
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any

import msgpack
from sortedcontainers.sorteddict import SortedItemsView, SortedKeysView, SortedValuesView

from objectspace.collections._impl import emit_rows, untracked_set
from objectspace.collections.base import (
    ENTRY_MARK,
    MARK_BYTE,
    UINT_SIZES,
    UNENCODABLE,
    Emitter,
    KeyedObject,
    Page,
    pack_entry,
    unpack_entry,
)
from objectspace.tables import DELETED, StateReader


def _map_list(loads: Callable[[bytes], Any], datas: list[bytes]) -> list[Any]:
    return list(map(loads, datas))


_FIRST = operator.itemgetter(slice(0, 1))
_SECOND = operator.itemgetter(1)
_AFTER_SECOND = operator.itemgetter(slice(2, None))
_NO_END = 0xFF
# By a dict row's second byte: where its insertion number ends (0xFF: a spelling, or no
# number), and the number when it is that byte itself (0 when it is the code of a larger).
_NUMBER_END = bytes(
    2 if b < 0x80 else 2 + UINT_SIZES[b] if b in UINT_SIZES else _NO_END for b in range(256)
)
_SMALL_NUMBER = bytes(b if b < 0x80 else 0 for b in range(256))
_ENDLESS = itertools.repeat(None)

if TYPE_CHECKING:
    pass

_MISSING: Any = object()
_NO_NUMBERS: dict[Any, int] = {}
# A row's start for the first insertion numbers: the mark and the number (msgpack uint).
_ENTRY_PREFIXES = tuple(ENTRY_MARK + msgpack.packb(n) for n in range(1024))


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


class _DictBase(KeyedObject, MutableMapping[Any, Any]):
    """Shared by both dicts: ``items: <canonical key> = <entry>``, a row per changed key.

    Python-equal keys (``1``, ``1.0``, ``True``) share one row, keyed by the canonical
    encoding (:meth:`~objectspace.Serializer.encode_key`); the entry (see
    :func:`~objectspace.collections.base.pack_entry`) holds the insertion number, the key
    Python holds when the row key does not decode to it, and the value.
    """

    __slots__ = ("_data",)
    _data: Any

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        """Set ``key``; the checkpoint writes one row."""
        if not self._registered:
            self._touch()
        self._data[key] = value
        try:  # inline, not self._track(key): the hottest path of a dict
            dirty = self._dirty
            if dirty is None:
                dirty = self._dirty = untracked_set()
            dirty.add(key)
        except BaseException:
            self._rewrite_all()
            raise

    def __delitem__(self, key: Any) -> None:
        """Delete ``key`` (``KeyError`` if absent); the checkpoint deletes one row."""
        if not self._registered:
            self._touch()
        del self._data[key]
        self._track(key)

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
        self._dirty = None

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

    def _held(self, slot: Any) -> Any:
        """The key object the dict holds for the live key ``slot`` (an equal key, perhaps
        spelled otherwise), or ``_MISSING`` when that is plain (its own canonical form)."""
        raise NotImplementedError

    def _plain_keys(self) -> bool:
        """Whether :meth:`_held` is ``_MISSING`` for every live key (no key is held under
        a spelling of its own), so a save encodes each slot as it is."""
        return False

    def _numbers(self) -> dict[Any, int]:
        """Insertion number by key (empty where order is not kept: every number is 0)."""
        return _NO_NUMBERS

    def _numbers_in_order(self) -> Iterable[int]:
        """The insertion numbers of the keys, in the dict's order."""
        return itertools.repeat(0, len(self._data))

    def _plain_rows(self, out: Emitter, slots: AbstractSet[Any], plain: frozenset[type]) -> bool:
        """The rows of ``slots`` when no live key is held under another spelling (each slot
        is its key), in one C call (``emit_rows``). ``False`` when a key or value needs the
        general way after all (an int beyond 64 bits): the caller writes the rows again."""
        return emit_rows(
            out.table(self._t_items),
            slots,
            self._data,
            self._numbers(),
            out.key_dumps,
            out.dumps,
            out.pack_uint,
            plain,
            _ENTRY_PREFIXES,
            ENTRY_MARK,
            DELETED,
            out.encode_key,
            UNENCODABLE,
        )

    def _emit_rows(self, out: Emitter, page: Page, whole: bool, plain: frozenset[type]) -> None:
        """Write the rows; keys of a type in ``plain`` are encoded by ``out.key_dumps`` (the
        bytes of ``encode_key``, one C call), the others by ``out.encode_key``."""
        dumps = out.dumps
        key_dumps = out.key_dumps
        encode_key = out.encode_key
        pack_uint = out.pack_uint
        number = self._numbers().get
        data = self._data
        if whole:
            rows = out.table(self._t_items)
            if set(map(type, data)) <= plain:  # every key plain: C-level passes
                numbers = map(pack_uint, self._numbers_in_order())
                entries = map(
                    b"".join,
                    zip(itertools.repeat(ENTRY_MARK), numbers, map(dumps, data.values())),
                )
                rows.update(zip(map(key_dumps, data), entries, strict=True))
                return
            for key, value in data.items():
                if type(key) in plain:
                    rows[key_dumps(key)] = ENTRY_MARK + pack_uint(number(key, 0)) + dumps(value)
                else:
                    row, exact = encode_key(key)
                    spelling = None if exact else dumps(key)
                    rows[row] = pack_entry(number(key, 0), spelling, dumps(value))
            return
        if page.cleared:
            out.truncate(self._t_items)
        rows = out.table(self._t_items)
        if not page.cleared and self._plain_keys() and self._plain_rows(out, page.slots, plain):
            return  # no key held under another spelling (the common case)
        self._emit_entries(out, rows, page, plain)

    def _emit_entries(
        self, out: Emitter, rows: dict[bytes, Any], page: Page, plain: frozenset[type]
    ) -> None:
        """The rows of ``page``'s slots, each keyed by the key the dict holds for it."""
        dumps = out.dumps
        key_dumps = out.key_dumps
        encode_key = out.encode_key
        pack_uint = out.pack_uint
        number = self._numbers().get
        data = self._data
        held = self._held
        for slot in page.slots:
            if slot in data:
                # The slot is the key as the edit spelled it; the row keeps the dict's.
                key = held(slot)
                if key is _MISSING:
                    row = key_dumps(slot) if type(slot) in plain else encode_key(slot)[0]
                    rows[row] = ENTRY_MARK + pack_uint(number(slot, 0)) + dumps(data[slot])
                else:
                    row, exact = encode_key(key)
                    spelling = None if exact else dumps(key)
                    rows[row] = pack_entry(number(key, 0), spelling, dumps(data[key]))
            elif not page.cleared:
                try:
                    row = encode_key(slot)[0]
                except UNENCODABLE:
                    continue  # a key that cannot be encoded was never stored
                rows[row] = DELETED

    @classmethod
    def _load_entries(
        cls,
        object_id: str,
        reader: StateReader,
        loads: Callable[[bytes], Any],
        loads_many: Callable[[list[bytes]], list[Any]] | None = None,
    ) -> tuple[dict[Any, Any], dict[Any, int], bool]:
        """The dict in insertion order, the insertion number by key, and whether a row of
        the layout before insertion order was read (the caller rewrites those).
        ``loads_many``: ``loads`` of a list, in bulk (the serializer's ``raw_loads_many``)."""
        if loads_many is None:
            loads_many = functools.partial(_map_list, loads)
        stored = reader.table(f"state/item/{object_id}/items")
        keys: list[bytes] = list(stored)
        raws: list[bytes] = list(stored.values())
        mark = MARK_BYTE
        uint_sizes = UINT_SIZES
        if raws and b"".join(map(_FIRST, raws)).count(mark) == len(raws):
            # Every row marked: when none has a spelling, C-level passes over the column of
            # second bytes (a number below 128, or the code of a larger one) do the loop's work.
            seconds = bytes(map(_SECOND, raws))
            ends = seconds.translate(_NUMBER_END)  # where each row's number ends
            if _NO_END not in ends:
                if max(seconds) < 0x80:  # every insertion number below 128
                    numbers: list[int] = list(seconds)
                    values: list[bytes] = list(map(_AFTER_SECOND, raws))
                else:
                    larger = map(
                        int.from_bytes,  # type: ignore[arg-type]
                        map(operator.getitem, raws, map(slice, itertools.repeat(2), ends)),
                        itertools.repeat("big"),
                    )
                    numbers = list(map(operator.add, seconds.translate(_SMALL_NUMBER), larger))
                    values = list(map(operator.getitem, raws, map(slice, ends, _ENDLESS)))  # type: ignore[arg-type]
                return cls._entries(keys, values, numbers, loads_many, False)
        keys = []
        values = []
        numbers = []
        old = False
        for row, raw in stored.items():
            if not raw or raw[0] != mark:
                old = True
                keys.append(row)
                values.append(raw)
                numbers.append(len(numbers))
                continue
            second = raw[1]
            if second < 0x80:  # no spelling, a number below 128
                keys.append(row)
                numbers.append(second)
                values.append(raw[2:])
                continue
            size = uint_sizes.get(second)
            if size is not None:  # no spelling, a larger number
                keys.append(row)
                numbers.append(int.from_bytes(raw[2 : 2 + size], "big"))
                values.append(raw[2 + size :])
                continue
            entry = unpack_entry(raw)
            assert entry is not None
            seq, spelling, value = entry
            keys.append(row if spelling is None else spelling)
            numbers.append(seq)
            values.append(value)
        return cls._entries(keys, values, numbers, loads_many, old)

    @staticmethod
    def _entries(
        keys: list[bytes],
        values: list[bytes],
        numbers: list[int],
        loads_many: Callable[[list[bytes]], list[Any]],
        old: bool,
    ) -> tuple[dict[Any, Any], dict[Any, int], bool]:
        """The dict of decoded ``keys`` and ``values`` in the order of their ``numbers``."""
        decoded = loads_many(keys)
        loaded = loads_many(values)
        if numbers != sorted(numbers):
            by_number = sorted(range(len(numbers)), key=numbers.__getitem__)
            decoded = [decoded[i] for i in by_number]
            loaded = [loaded[i] for i in by_number]
            numbers = [numbers[i] for i in by_number]
        return (
            dict(zip(decoded, loaded, strict=True)),
            dict(zip(decoded, numbers, strict=True)),
            old,
        )
