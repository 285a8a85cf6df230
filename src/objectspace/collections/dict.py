"""A persisted dict."""

from __future__ import annotations

import itertools
from collections.abc import (
    Callable,
    Iterable,
    Iterator,
)
from typing import TYPE_CHECKING, Any

from objectspace.collections.base import (
    _NONE,
    Emitter,
    Page,
)
from objectspace.serialization import PLAIN_KEY_TYPES
from objectspace.tables import StateReader

if TYPE_CHECKING:
    from objectspace.space import ObjectSpace
from objectspace.collections._dictbase import _MISSING, _DictBase

__all__ = ["PersistedDict"]


class PersistedDict(_DictBase):
    """A dict (``collections.abc.MutableMapping``); get, set and delete are O(1).

    Restores in insertion order, like ``dict``: each row holds the key's insertion number
    (updating a key keeps its place; deleting and inserting it again moves it to the end).
    """

    KIND = "Dict"
    TABLES = ("items",)
    __slots__ = ("_next", "_order", "_spell")

    def __init__(self, space: ObjectSpace, object_id: str, data: dict[Any, Any] | None = None):
        super().__init__(space, object_id)
        self._data: dict[Any, Any] = data if data is not None else {}
        # Kept up to date by each save (never by an edit, so edits cost what they did):
        # the insertion number of every live key, numbers increasing in the dict's order,
        # and the live keys whose type is not in PLAIN_KEY_TYPES, each mapped to the key
        # object the dict holds. Both may keep removed keys until the next save.
        self._order: dict[Any, int] = {key: i for i, key in enumerate(self._data)}
        self._next = len(self._order)
        self._spell: dict[Any, Any] = {k: k for k in self._data if type(k) not in PLAIN_KEY_TYPES}

    def _rewrite_all(self) -> None:
        # Every key is rewritten and renumbered in the dict's order; the old numbers may
        # still hold a removed key whose comparisons raise, so they are dropped unread.
        super()._rewrite_all()
        self._order = {}
        self._spell = {k: k for k in self._data if type(k) not in PLAIN_KEY_TYPES}

    def _number(self, keys: Iterable[Any], prev: int) -> None:
        """Give ``keys`` (live, held key objects, in dict order, after a key numbered
        ``prev``) increasing insertion numbers: each keeps its number if that is still
        greater than the one before, else gets a new one; note their spellings. O(len(keys))."""
        order = self._order
        spell = self._spell
        fresh = self._next
        for key in keys:
            if key not in order or order[key] <= prev:
                order[key] = fresh
                fresh += 1
            prev = order[key]
            if type(key) in PLAIN_KEY_TYPES:
                if spell:
                    spell.pop(key, None)
            else:
                spell[key] = key
        self._next = fresh

    def _save(self, out: Emitter, full: bool) -> Page:
        # The common differential save (no earlier save awaiting its commit, not new, not
        # cleared, every key plain) in as few frames as it takes: what _merged_page and
        # _emit do for it.
        if full or self._pending is not None or self._new or self._cleared or self._spell:
            return super()._save(out, full)
        slots = self._dirty if self._dirty is not None else _NONE
        page = Page(False, False, self._meta, slots)
        data = self._data
        order = self._order
        if data:
            last = next(reversed(data))
            if last in slots:  # keys were inserted (or the last one updated): number them
                touched = 0
                prev = -1
                for key in reversed(data):
                    if key not in slots:
                        prev = order[key]
                        break
                    touched += 1
                tail = list(itertools.islice(reversed(data), touched))
                tail.reverse()
                self._number(tail, prev)
        if not data.keys() >= slots:  # some slot was removed (one C-level pass)
            spell = self._spell
            for slot in slots:
                if slot not in data:
                    order.pop(slot, None)
                    spell.pop(slot, None)
        if self._spell or not self._plain_rows(out, slots, PLAIN_KEY_TYPES):
            super()._emit(out, page, False)
        return page

    def _emit(self, out: Emitter, page: Page, whole: bool) -> None:
        data = self._data
        if whole or page.cleared:
            # Every key is written: number them all, and forget removed keys.
            plain = PLAIN_KEY_TYPES
            self._spell = {k: k for k in data if type(k) not in plain}
            first = self._next
            if not self._order:  # a new dict: numbered in its order, in C-level passes
                self._order = dict(zip(data, range(first, first + len(data)), strict=True))
                self._next = first + len(data)
                return super()._emit(out, page, whole)
            numbers: list[Any] = list(map(self._order.get, data))
            if None in numbers or numbers != sorted(numbers):
                self._number(data, -1)
                order = self._order
                self._order = {key: order[key] for key in data}
            else:  # nothing inserted since the last save
                self._order = dict(zip(data, numbers, strict=True))
        else:
            # Keys inserted since the last save sit at the end of the dict, after every key
            # this page did not touch: number that tail (O(keys touched), not O(len)).
            slots = page.slots
            touched = 0
            prev = -1
            for key in reversed(data):
                if key not in slots:
                    prev = self._order[key]
                    break
                touched += 1
            if touched:
                tail = list(itertools.islice(reversed(data), touched))
                tail.reverse()
                self._number(tail, prev)
            if not data.keys() >= slots:  # some slot was removed (one C-level pass)
                for slot in slots:
                    if slot not in data:
                        self._order.pop(slot, None)
                        self._spell.pop(slot, None)
            if not self._spell and self._plain_rows(out, slots, PLAIN_KEY_TYPES):
                return
        super()._emit(out, page, whole)

    def _held(self, slot: Any) -> Any:
        # Every live key was noted by _number (here or at an earlier save) or at load,
        # unless plain: then it is its own canonical form, the one any equal slot encodes to.
        spell = self._spell
        return spell.get(slot, _MISSING) if spell else _MISSING

    def _plain_keys(self) -> bool:
        return not self._spell

    def _numbers(self) -> dict[Any, int]:
        return self._order

    def _numbers_in_order(self) -> Iterable[int]:
        return map(self._order.__getitem__, self._data)

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
        data, numbers, old = cls._load_entries(
            object_id, reader, loads, space.serializer.raw_loads_many
        )
        if old:
            obj = cls(space, object_id, data)
            obj._rewrite(set(data))
            return obj
        obj = cls(space, object_id)
        obj._data = data
        obj._order = numbers
        obj._next = max(numbers.values(), default=-1) + 1
        if not set(map(type, data)) <= PLAIN_KEY_TYPES:  # else none to note (C-level pass)
            obj._spell = {k: k for k in data if type(k) not in PLAIN_KEY_TYPES}
        return obj
