"""The shared base of the persisted set and sorted set."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, MutableSet
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, Self

from objectspace.collections._impl import emit_set_rows, untracked_set
from objectspace.collections.base import ENTRY_MARK, UNENCODABLE, Emitter, KeyedObject, Page
from objectspace.serialization import PLAIN_KEY_TYPES
from objectspace.tables import DELETED, StateReader

if TYPE_CHECKING:
    from objectspace.space import ObjectSpace

_SPELLED = ENTRY_MARK + ENTRY_MARK
_MISSING: Any = object()


class _SetBase(KeyedObject, MutableSet[Any]):
    """Shared by both sets: ``items: <canonical element> = <mark>``, a row per changed element.

    Python-equal elements (``1``, ``1.0``, ``True``) share one row, keyed by the canonical
    encoding (:meth:`~objectspace.Serializer.encode_key`); its value is
    :data:`~objectspace.collections.base.ENTRY_MARK`, followed by the element's own encoding
    when the row key does not decode to the element the set holds.
    """

    __slots__ = ("_data", "_spell")
    _data: Any
    # The live elements whose type is not in PLAIN_KEY_TYPES, each mapped to the object the
    # set holds, so a save stores that spelling whatever spelling the edit used.
    _spell: dict[Any, Any]

    def __init__(self, space: ObjectSpace, object_id: str, data: Iterable[Any] = ()) -> None:
        super().__init__(space, object_id)
        self._data = self._new_data(data)
        self._spell = {v: v for v in self._data if type(v) not in PLAIN_KEY_TYPES}

    @staticmethod
    def _new_data(data: Iterable[Any]) -> Any:
        """The container that holds the elements: a ``set`` or a ``SortedSet``."""
        raise NotImplementedError

    def add(self, value: Any) -> None:
        """Add ``value``; the checkpoint writes one row if it was absent."""
        if value not in self._data:
            if not self._registered:
                self._touch()
            self._data.add(value)
            try:  # inline, not self._track_edit(value, True): the hottest path of a set
                dirty = self._dirty
                if dirty is None:
                    dirty = self._dirty = untracked_set()
                dirty.add(value)
                if type(value) not in PLAIN_KEY_TYPES:
                    self._spell[value] = value
            except BaseException:
                self._rewrite_all()
                raise

    def discard(self, value: Any) -> None:
        """Remove ``value`` if present; the checkpoint deletes one row."""
        if value in self._data:
            if not self._registered:
                self._touch()
            self._data.discard(value)
            self._track_edit(value, False)

    def _track_edit(self, value: Any, added: bool) -> None:
        """Track ``value``, just added or removed: its row, and its spelling (kept for an
        added value of a type not in ``PLAIN_KEY_TYPES``). When tracking raises after the
        edit was made, the whole set is tracked for rewriting and the error raised."""
        try:
            self._dirty_set().add(value)
            if added:
                if type(value) not in PLAIN_KEY_TYPES:
                    self._spell[value] = value
            elif self._spell:
                self._spell.pop(value, None)
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
        self._spell = {v: v for v in self._data if type(v) not in PLAIN_KEY_TYPES}

    def clear(self) -> None:
        """Remove every element. O(1) writes: one table delete."""
        if not self._registered:
            self._touch()
        self._data.clear()
        self._cleared = True
        self._dirty = None
        self._spell = {}

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

    def _hash_set(self) -> AbstractSet[Any]:
        """The elements as a hash set (membership in one C call)."""
        return self._data  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._id!r}: {set(self._data)!r}>"

    def _emit_rows(self, out: Emitter, page: Page, whole: bool, plain: frozenset[type]) -> None:
        """Write the rows; keys of a type in ``plain`` are encoded by ``out.key_dumps`` (the
        bytes of ``encode_key``, one C call), the others by ``out.encode_key``."""
        dumps = out.dumps
        key_dumps = out.key_dumps
        encode_key = out.encode_key
        if whole:
            rows = out.table(self._t_items)
            if set(map(type, self._data)) <= plain:  # every element plain: C-level passes
                rows.update(dict.fromkeys(map(key_dumps, self._data), ENTRY_MARK))
                return
            for value in self._data:
                if type(value) in plain:
                    rows[key_dumps(value)] = ENTRY_MARK
                else:
                    row, exact = encode_key(value)
                    rows[row] = ENTRY_MARK if exact else _SPELLED + dumps(value)
            return
        if page.cleared:
            out.truncate(self._t_items)
        # Each slot is the element as the edit spelled it; the row keeps the set's (its
        # _spell entry; not there: the set holds a plain element, which is its own
        # canonical form, the one any equal slot encodes to). One C call.
        emit_set_rows(
            out.table(self._t_items),
            page.slots,
            self._hash_set(),
            self._spell,
            page.cleared,
            key_dumps,
            encode_key,
            plain,
            ENTRY_MARK,
            _SPELLED,
            dumps,
            DELETED,
            UNENCODABLE,
        )

    @classmethod
    def _load_elements(
        cls, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> tuple[list[Any], bool]:
        """The elements, and whether a row of the layout before canonical keys was read."""
        rows = reader.table(f"state/item/{object_id}/items")
        marks = list(rows.values())
        if marks.count(ENTRY_MARK) == len(marks):  # no spelled element: C-level passes
            return list(map(loads, rows.keys())), False
        elements = []
        old = False
        for row, raw in rows.items():
            if raw == ENTRY_MARK:
                elements.append(loads(row))
            elif raw[:2] == _SPELLED:
                elements.append(loads(raw[2:]))
            elif not raw:
                old = True
                elements.append(loads(row))
            else:
                raise ValueError(f"a row holds {len(raw)} bytes that are not an element mark")
        return elements, old

    @classmethod
    def _load(
        cls, space: ObjectSpace, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> Self:
        elements, old = cls._load_elements(object_id, reader, loads)
        obj = cls(space, object_id, elements)
        if old:
            obj._rewrite(set(obj._data))
        return obj
