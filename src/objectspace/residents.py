"""The objects a space with a backing holds in memory, and what the backing keeps.

A space with a :class:`Backing` (an instance's local store, see
:mod:`objectspace.checkpoint.local`) holds as Python objects only those used since they
were last evicted; :class:`Residents` loads the others on first use, lists ids without
loading them, copies the kept rows of objects not in memory into a full save, and evicts.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from objectspace.collections import KINDS
from objectspace.collections.base import Emitter, PersistedObject
from objectspace.collections.value import PersistedValue
from objectspace.errors import CorruptStateError, SerializationError
from objectspace.tables import DictReader, StateReader

if TYPE_CHECKING:
    from objectspace.space import ObjectSpace

__all__ = [
    "ABSENT_KEPT",
    "COMPACT_BYTES",
    "ENTRY_BYTES",
    "OBJECT_BYTES",
    "Backing",
    "Residents",
    "decode_object",
    "estimate",
]

OBJECT_BYTES = 240
"""What :meth:`Residents.nbytes` counts per object in memory, and :data:`ENTRY_BYTES` per
entry it holds: an estimate of their RAM (an object, its id, the space's reference; an
entry's key, value and reference), not a measurement."""
ENTRY_BYTES = 96
ABSENT_KEPT = 1024
"""How many ids the backing lacks a space's :class:`Residents` remembers across saves (a
key's id asked for batch after batch, such as an operator's check for state older stores
kept, is then looked up once, not once a batch); past it they are forgotten at the next
save, which bounds their memory."""
COMPACT_BYTES = 140
"""What :meth:`Residents.nbytes` counts per value kept between uses as a plain value (its
id, its value and its entry; measured about 130 bytes for a float)."""
_NONE = object()
# Values a value object may be kept as between uses: immutable, and without references.
_PLAIN_VALUES = frozenset({float, int, str, bytes, bool, type(None)})
# ... of at most this many bytes (``sys.getsizeof``): a float, any int msgpack stores, a str of
# up to 15 ASCII characters, bytes of up to 31; what :data:`COMPACT_BYTES` counts holds for
# them. A larger value is evicted whole (the local store keeps it).
_PLAIN_MAX_BYTES = 64


def _plain(obj: PersistedObject) -> Any:
    """The small plain value ``obj`` holds if it is a value object holding one (kept as
    that value between uses), else :data:`_NONE`."""
    if type(obj) is not PersistedValue:
        return _NONE
    value = obj._value
    if type(value) in _PLAIN_VALUES and sys.getsizeof(value) <= _PLAIN_MAX_BYTES:
        return value
    return _NONE


class Backing(Protocol):
    """Where a space's objects are kept while they are not Python objects: the saved and
    acknowledged state of every object, stored by object."""

    def fetch(self, object_id: str) -> tuple[bytes, dict[str, dict[bytes, bytes]]] | None:
        """Object ``object_id``'s kind row (``state/index``) and its tables, or ``None``."""

    def ids(self, prefix: str = "") -> Iterator[str]:
        """The ids of the objects kept whose id starts with ``prefix``."""

    def rows(self) -> Iterator[tuple[str, str, bytes, bytes]]:
        """Every row kept: ``(object id, table, row key, value)``."""


def estimate(obj: PersistedObject) -> int:
    """The bytes :meth:`Residents.nbytes` counts for ``obj``: :data:`OBJECT_BYTES`, plus a
    value's own size (``sys.getsizeof``, not what it refers to) or :data:`ENTRY_BYTES` per
    entry of a collection."""
    value = getattr(obj, "_value", _NONE)
    if value is not _NONE:
        return OBJECT_BYTES + sys.getsizeof(value)
    try:
        return OBJECT_BYTES + ENTRY_BYTES * len(obj)  # type: ignore[arg-type]
    except TypeError:
        return OBJECT_BYTES


class Residents:
    """The objects of ``space`` held in memory, over ``backing``.

    The space's own dict holds them, in about the order they were last loaded or saved
    (oldest first: :meth:`ObjectSpace.on_saved` moves the saved ones to the end).
    ``loaded`` counts the objects loaded from the backing so far.

    Between uses, a value object holding a small plain value (a float, an int, a short str
    or bytes, a bool, ``None``: at most 64 bytes) leaves memory as that value alone, in
    :attr:`compact` (id -> value, oldest first): about 145 bytes for a float instead of
    the object's 207 too. Its next use
    makes the object again from it, without reading the backing (which holds the same
    value: only objects whose edits are acknowledged leave).
    """

    __slots__ = ("_absent", "backing", "compact", "loaded", "space")

    def __init__(self, space: ObjectSpace, backing: Backing) -> None:
        self.space = space
        self.backing = backing
        self.loaded = 0
        # Ids the backing was asked for and does not hold (see forget_absent).
        self._absent: set[str] = set()
        self.compact: dict[str, Any] = {}

    def fetch(self, object_id: str, creating: bool = False) -> PersistedObject | None:
        """Object ``object_id`` loaded from the backing into the space, or ``None`` if the
        backing holds none or the object was deleted since. ``creating``: the caller
        creates the object when there is none (so it is no longer absent)."""
        space = self.space
        absent = self._absent
        if (
            type(object_id) is not str
            or object_id in absent
            or object_id in space._deleted
            or object_id in space._pending_deleted
        ):
            if creating:
                absent.discard(object_id)
            self.compact.pop(object_id, None)  # (a deleted object's value)
            return None
        compact = self.compact
        if compact:
            value = compact.pop(object_id, _NONE)
            if value is not _NONE:
                made = PersistedValue(space, object_id, value)
                space._objects[object_id] = made
                return made
        found = self.backing.fetch(object_id)
        if found is None:
            if not creating:
                absent.add(object_id)
            return None
        raw_kind, tables = found
        obj = decode_object(space, object_id, raw_kind, DictReader(tables))
        space._objects[object_id] = obj
        self.loaded += 1
        return obj

    def forget_absent(self, beyond: int = 0) -> None:
        """Forget which ids the backing lacked, if more than ``beyond`` (an id it lacks
        becomes present only by being created in the space, which :meth:`fetch` hears of
        with ``creating``; so they stay true across saves, and are forgotten to bound
        their memory)."""
        if len(self._absent) > beyond:
            self._absent.clear()

    def ids(self, prefix: str = "") -> list[str]:
        """Ids starting with ``prefix``: in memory, then kept and not in memory (not
        deleted), without loading any."""
        space = self.space
        objects = space._objects
        found = [i for i in objects if i.startswith(prefix)]
        gone = space._deleted | space._pending_deleted
        found.extend(i for i in self.backing.ids(prefix) if i not in objects and i not in gone)
        return found

    def count(self) -> int:
        """How many objects are in memory."""
        return len(self.space._objects)

    def nbytes(self) -> int:
        """An estimate of the RAM of the objects in memory and of the values kept between
        uses (see :data:`OBJECT_BYTES`, :data:`COMPACT_BYTES`). O(objects in memory)."""
        return sum(map(estimate, self.space._objects.values())) + COMPACT_BYTES * len(self.compact)

    def drop_compact(self, count: int) -> int:
        """Forget up to ``count`` of the values kept between uses, the oldest first (the
        backing holds them); how many were forgotten."""
        compact = self.compact
        gone = list(itertools.islice(compact, max(count, 0)))
        for object_id in gone:
            del compact[object_id]
        return len(gone)

    def compact_values(self) -> int:
        """Keep every value object holding a small plain value whose edits are acknowledged as
        that value alone (see the class docstring), whatever the budget: between batches a
        float key costs its id, its value and an entry (about 145 bytes of RSS) instead of
        its object too (about 207). Returns how many left memory this way. A compacted
        object is detached: keep no reference to one past a batch."""
        space = self.space
        objects = space._objects
        busy = space._dirty.keys() | space._pending.keys()
        plain = _plain
        moved = [
            (object_id, obj, value)
            for object_id, obj in objects.items()
            if object_id not in busy and (value := plain(obj)) is not _NONE
        ]
        compact = self.compact
        for object_id, obj, value in moved:
            del objects[object_id]
            compact[object_id] = value
            obj._space = None
        return len(moved)

    def evict(self, count: int) -> int:
        """Drop up to ``count`` objects without unsaved or unacknowledged edits from memory,
        the least recently loaded or saved first (a value object holding a plain value is
        kept as that value, see the class docstring); the backing keeps them and the next
        use loads them again. Returns how many were dropped. A dropped object is detached:
        keep no reference to one past a batch (``KeyState`` gives a fresh one)."""
        if count <= 0:
            return 0
        space = self.space
        objects = space._objects
        busy = space._dirty.keys() | space._pending.keys()
        dropped: list[tuple[str, PersistedObject]] = []
        for object_id, obj in objects.items():
            if len(dropped) >= count:
                break
            if object_id not in busy:
                dropped.append((object_id, obj))
        compact = self.compact
        plain = _plain
        for object_id, obj in dropped:
            del objects[object_id]
            value = plain(obj)
            if value is not _NONE:
                compact[object_id] = value
            obj._space = None
        return len(dropped)

    def copy_kept(self, out: Emitter, index: dict[bytes, Any]) -> None:
        """Emit the backing's rows of every object neither in memory nor deleted (a full
        save of a backed space: the rows as they are kept, nothing decoded)."""
        space = self.space
        objects = space._objects
        gone = space._deleted | space._pending_deleted
        for object_id, table, key, value in self.backing.rows():
            if object_id in objects or object_id in gone:
                continue
            if table == "state/index":
                index[key] = value
            else:
                out.table(table)[key] = value


def decode_object(
    space: ObjectSpace, object_id: str, raw_kind: bytes, reader: StateReader
) -> PersistedObject:
    """Object ``object_id`` of ``space``, of kind row ``raw_kind``, read from
    ``reader``; :class:`CorruptStateError` naming it if it cannot be."""
    try:
        kind = space._serializer.loads(raw_kind)["kind"]
        obj_cls = KINDS[kind]
    except (KeyError, TypeError, SerializationError) as exc:
        raise CorruptStateError(
            f"object {object_id!r} has an unreadable kind {raw_kind!r}"
        ) from exc
    try:
        return obj_cls._load(space, object_id, reader, space._serializer.raw_loads)
    except (CorruptStateError, MemoryError):
        raise  # (out of memory says nothing of the stored state)
    except Exception as exc:
        raise CorruptStateError(
            f"cannot load {kind} {object_id!r}: its stored state cannot be decoded "
            f"with {type(space._serializer).__name__} ({type(exc).__name__}: {exc})"
        ) from exc
