"""The object space: named persisted objects, saved by what changed.

Checkpointing follows four steps, which :meth:`ObjectSpace.checkpoint` runs in order::

    writer = store.writer(CheckpointKind.DIFFERENTIAL)
    space.save(writer)      # emit the edits; edits made from now on go to a new page
    writer.commit()         # the store applies them atomically
    space.on_saved()        # forget the committed edits

If ``commit`` fails, skip ``on_saved``: the next ``save`` writes every edit still unsaved.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NoReturn, TypeVar

from objectspace.collections import key_encoder
from objectspace.collections.array import PersistedArray
from objectspace.collections.base import Emitter, Page, PersistedObject
from objectspace.collections.dict import PersistedDict
from objectspace.collections.linked_list import PersistedLinkedList
from objectspace.collections.list import PersistedList
from objectspace.collections.queue import PersistedQueue
from objectspace.collections.set import PersistedSet
from objectspace.collections.sorted_dict import PersistedSortedDict
from objectspace.collections.sorted_set import PersistedSortedSet
from objectspace.collections.stack import PersistedStack
from objectspace.collections.value import PersistedValue
from objectspace.collector import gc_paused
from objectspace.errors import (
    ObjectExistsError,
    SerializationError,
    WrongKindError,
)
from objectspace.residents import ABSENT_KEPT, Backing, Residents, decode_object
from objectspace.serialization import MsgpackSerializer, Serializer
from objectspace.tables import (
    DELETED,
    CheckpointKind,
    StateReader,
    StateWriter,
    WriterSource,
    WriteStats,
)

__all__ = ["INDEX_TABLE", "ObjectSpace", "gc_paused"]

INDEX_TABLE = "state/index"

_T = TypeVar("_T", bound=PersistedObject)


def _entries(obj: PersistedObject) -> int:
    """How many entries ``obj`` holds (a value: one)."""
    try:
        return len(obj)  # type: ignore[arg-type]
    except TypeError:
        return 1


def _check_id(object_id: object) -> str:
    if not isinstance(object_id, str):
        raise TypeError(f"object ids are str, not {type(object_id).__name__} ({object_id!r})")
    if not object_id:
        raise ValueError("object ids must not be empty")
    try:
        object_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"object id {object_id!r} is not valid Unicode text: {exc}") from exc
    return object_id


class ObjectSpace:
    """Named persisted objects of ten kinds, checkpointed by the slots their edits touched.

    ``serializer`` encodes values (default :class:`~objectspace.MsgpackSerializer`); the
    space must be loaded with the serializer it was saved with.
    """

    def __init__(
        self, serializer: Serializer | None = None, backing: Backing | None = None
    ) -> None:
        self._serializer = serializer if serializer is not None else MsgpackSerializer()
        # The objects held as Python objects: with a backing, those used since evicted, in
        # about the order they were last loaded or saved (oldest first).
        self._objects: dict[str, PersistedObject] = {}
        self._residents: Residents | None = None
        if backing is not None:
            self._residents = Residents(self, backing)
        # Objects edited in the current page, and objects whose frozen page awaits on_saved.
        self._dirty: dict[str, PersistedObject] = {}
        self._pending: dict[str, PersistedObject] = {}
        # Ids deleted in the current page, and in the frozen page awaiting on_saved, each
        # with the tables its save deletes (its kind's TABLES; the kinds' union when an id
        # was deleted, created as another kind and deleted again).
        self._deleted: dict[str, tuple[str, ...]] = {}
        self._pending_deleted: dict[str, tuple[str, ...]] = {}

    @property
    def serializer(self) -> Serializer:
        return self._serializer

    # -- creating and finding objects ---------------------------------------------------------

    def _add(self, obj: _T) -> _T:
        object_id = obj._id
        residents = self._residents
        if object_id in self._objects or (
            residents is not None and residents.fetch(object_id, creating=True) is not None
        ):
            existing = self._objects[object_id]
            raise ObjectExistsError(
                f"object {object_id!r} already exists in this space (a {existing.KIND})"
            )
        self._objects[object_id] = obj
        obj._mark_new()
        return obj

    def create_value(self, object_id: str, value: Any = None) -> PersistedValue:
        """Create a persisted single value."""
        return self._add(PersistedValue(self, _check_id(object_id), value))

    def create_array(self, object_id: str, length: int, fill: Any = None) -> PersistedArray:
        """Create a fixed-length array with every slot set to ``fill``."""
        if not isinstance(length, int) or isinstance(length, bool) or length < 0:
            raise ValueError(f"array {object_id!r}: length must be an int >= 0, not {length!r}")
        try:
            data = [fill] * length
        except (OverflowError, MemoryError) as exc:
            raise ValueError(
                f"array {object_id!r}: length {length} is too large to hold in memory"
            ) from exc
        return self._add(PersistedArray(self, _check_id(object_id), data))

    def create_list(self, object_id: str) -> PersistedList:
        """Create an empty list."""
        return self._add(PersistedList(self, _check_id(object_id)))

    def create_queue(self, object_id: str) -> PersistedQueue:
        """Create an empty FIFO queue."""
        return self._add(PersistedQueue(self, _check_id(object_id)))

    def create_stack(self, object_id: str) -> PersistedStack:
        """Create an empty LIFO stack."""
        return self._add(PersistedStack(self, _check_id(object_id)))

    def create_linked_list(self, object_id: str) -> PersistedLinkedList:
        """Create an empty doubly linked list."""
        return self._add(PersistedLinkedList(self, _check_id(object_id)))

    def create_set(self, object_id: str) -> PersistedSet:
        """Create an empty set."""
        return self._add(PersistedSet(self, _check_id(object_id)))

    def create_sorted_set(self, object_id: str) -> PersistedSortedSet:
        """Create an empty sorted set."""
        return self._add(PersistedSortedSet(self, _check_id(object_id)))

    def create_dict(self, object_id: str) -> PersistedDict:
        """Create an empty dict."""
        return self._add(PersistedDict(self, _check_id(object_id)))

    def create_sorted_dict(self, object_id: str) -> PersistedSortedDict:
        """Create an empty sorted dict."""
        return self._add(PersistedSortedDict(self, _check_id(object_id)))

    def get(self, object_id: str) -> PersistedObject:
        """The object ``object_id`` of any kind; ``KeyError`` if there is none."""
        obj = self.find(object_id)
        if obj is None:
            raise KeyError(object_id)
        return obj

    def find(self, object_id: str) -> PersistedObject | None:
        """The object ``object_id`` of any kind, or ``None`` if there is none."""
        obj = self._objects.get(object_id)
        if obj is not None or self._residents is None:
            return obj
        return self._residents.fetch(object_id)

    @property
    def residents(self) -> Residents | None:
        """With a backing, the objects held in memory and what else the backing keeps
        (see :class:`~objectspace.residents.Residents`); ``None`` without one."""
        return self._residents

    def get_as(self, object_id: str, cls: type[_T]) -> _T:
        """The object ``object_id``, which must be a ``cls``: :class:`KeyError` if there is
        none, :class:`~objectspace.WrongKindError` if it is of another kind."""
        obj = self.get(object_id)
        if type(obj) is not cls:
            raise WrongKindError(f"object {object_id!r} is a {obj.KIND}, not a {cls.KIND}")
        return obj

    def get_value(self, object_id: str) -> PersistedValue:
        return self.get_as(object_id, PersistedValue)

    def get_array(self, object_id: str) -> PersistedArray:
        return self.get_as(object_id, PersistedArray)

    def get_list(self, object_id: str) -> PersistedList:
        return self.get_as(object_id, PersistedList)

    def get_queue(self, object_id: str) -> PersistedQueue:
        return self.get_as(object_id, PersistedQueue)

    def get_stack(self, object_id: str) -> PersistedStack:
        return self.get_as(object_id, PersistedStack)

    def get_linked_list(self, object_id: str) -> PersistedLinkedList:
        return self.get_as(object_id, PersistedLinkedList)

    def get_set(self, object_id: str) -> PersistedSet:
        return self.get_as(object_id, PersistedSet)

    def get_sorted_set(self, object_id: str) -> PersistedSortedSet:
        return self.get_as(object_id, PersistedSortedSet)

    def get_dict(self, object_id: str) -> PersistedDict:
        return self.get_as(object_id, PersistedDict)

    def get_sorted_dict(self, object_id: str) -> PersistedSortedDict:
        return self.get_as(object_id, PersistedSortedDict)

    def delete(self, object_id: str) -> None:
        """Delete an object; the next checkpoint deletes its tables (a constant cost).

        The deleted object raises :class:`~objectspace.ObjectDeletedError` when edited.
        """
        obj = self.get(object_id)
        del self._objects[object_id]
        self._dirty.pop(object_id, None)
        self._pending.pop(object_id, None)
        obj._detach()
        tables = self._deleted.get(object_id)
        self._deleted[object_id] = obj.TABLES if tables is None else _union(tables, obj.TABLES)

    def __contains__(self, object_id: object) -> bool:
        if object_id in self._objects:
            return True
        residents = self._residents
        return residents is not None and residents.fetch(object_id) is not None  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.ids()))

    def __len__(self) -> int:
        if self._residents is None:
            return len(self._objects)
        return sum(1 for _ in self.ids())

    def ids(self, prefix: str = "") -> Iterator[str]:
        """The ids of the objects whose id starts with ``prefix`` (with a backing, the ones
        it keeps too, without loading them). O(objects) without a backing; with one,
        O(objects in memory + matching ids kept)."""
        if self._residents is not None:
            return iter(self._residents.ids(prefix))
        return (i for i in list(self._objects) if i.startswith(prefix))

    def __repr__(self) -> str:
        return f"<ObjectSpace {len(self._objects)} objects, {len(self._dirty)} dirty>"

    @property
    def is_dirty(self) -> bool:
        """Whether a differential save would write anything."""
        return bool(self._dirty or self._pending or self._deleted or self._pending_deleted)

    # -- checkpointing ------------------------------------------------------------------------

    def change_rows(self) -> int:
        """About how many rows a differential save would write now: per changed object its
        changed slots, metadata and table delete (a new object: all of it), per deleted
        object its table deletes. An estimate from the edit pages, nothing encoded;
        O(objects changed)."""
        rows = sum(len(t) + 1 for t in _deletes(self._pending_deleted, self._deleted).values())
        objects = self._objects
        for object_id in self._dirty.keys() | self._pending.keys():
            obj = objects[object_id]
            if type(obj) is PersistedValue:  # its merged page's count, without the page
                pending = obj._pending
                if obj._new or (pending is not None and pending.new):
                    rows += 3  # its row, its table and its index row
                elif obj._meta or (pending is not None and pending.meta):
                    rows += 1
                continue
            page = obj._merged_page()
            if page.new:
                rows += _entries(obj) + 2
            else:
                rows += len(page.slots) + len(page.links) + page.meta + page.cleared
                if page.from_ < page.length:  # a list's slots from one on (appended, shifted)
                    rows += page.length - page.from_
        return rows

    def whole_rows(self, stop: int) -> int:
        """About how many rows a full save would write (per object its entries, metadata
        and index row), counted until the count exceeds ``stop``: O(min(objects, stop))."""
        rows = 0
        for obj in self._objects.values():
            rows += _entries(obj) + 2
            if rows > stop:
                break
        return rows

    @gc_paused()
    def save(self, writer: StateWriter) -> None:
        """Emit the edits since the last acknowledged save (or, FULL, every object) to ``writer``.

        Every value is encoded before anything reaches the writer: a value the serializer
        cannot encode raises :class:`~objectspace.SerializationError` naming the object,
        and leaves the writer, the store and the space's edit pages as they were.
        """
        full = writer.kind is CheckpointKind.FULL
        codec = self._serializer
        encode_key = codec.raw_encode_key
        code = codec.flat_tuple_code
        if code is not None:  # flat tuple keys (a shared dict's, the due index's) in C
            encode_key = key_encoder(code, encode_key)
        out = Emitter(codec.raw_dumps, encode_key, codec.raw_key_dumps)
        index = out.table(INDEX_TABLE)
        deleted = _deletes(self._pending_deleted, self._deleted)
        if not full:
            for object_id, tables in deleted.items():
                for table in tables:
                    out.truncate(f"state/item/{object_id}/{table}")
                index[object_id.encode("utf-8")] = DELETED
        touched = self._pending | self._dirty
        targets = self._objects if full else touched
        if full and self._residents is not None:
            self._residents.copy_kept(out, index)
        pages = []
        kind_values: dict[str, bytes] = {}
        for object_id, obj in targets.items():
            try:
                page = obj._save(out, full)
            except SerializationError as exc:
                raise SerializationError(f"cannot save {obj.KIND} {object_id!r}: {exc}") from exc
            except Exception as exc:  # the raw encoder's error: explained, or raised as it is
                page = obj._merged_page()
                _explain(self._serializer, obj, page, full or page.new, exc)
            if full or page.new:
                kind = kind_values.get(obj.KIND)
                if kind is None:
                    kind = kind_values[obj.KIND] = self._serializer.dumps({"kind": obj.KIND})
                index[object_id.encode("utf-8")] = kind
            if not full or object_id in touched:  # a differential save's targets are touched
                pages.append((obj, page))
        for obj, page in pages:
            obj._freeze(page)
        self._pending = touched
        self._dirty = {}
        self._pending_deleted = deleted
        self._deleted = {}
        writer.merge(out.changes)

    def on_saved(self) -> None:
        """Forget the edits of the last save, after its commit succeeded (with a backing:
        once the backing holds them)."""
        objects = self._objects
        residents = self._residents
        plain = PersistedObject._acknowledge
        for object_id, obj in self._pending.items():
            if type(obj)._acknowledge is plain:
                obj._pending = None  # what it does, without a call per object
            else:
                obj._acknowledge()
            if residents is not None and object_id in objects:  # the latest saved go last
                del objects[object_id]
                objects[object_id] = obj
        self._pending = {}
        self._pending_deleted = {}
        if residents is not None:
            residents.forget_absent(ABSENT_KEPT)

    def checkpoint(
        self, store: WriterSource, kind: CheckpointKind = CheckpointKind.DIFFERENTIAL
    ) -> WriteStats:
        """Save, commit and acknowledge in one call; returns what the commit wrote.

        If the commit fails, the writer is rolled back, the error propagates, and every
        edit stays dirty for the next checkpoint.
        """
        writer = store.writer(kind)
        try:
            with gc_paused():  # the store encodes and writes the rows at commit
                self.save(writer)
                stats = writer.commit()
        except BaseException:
            writer.rollback()
            raise
        self.on_saved()
        return stats

    @classmethod
    @gc_paused()
    def load(cls, reader: StateReader, serializer: Serializer | None = None) -> ObjectSpace:
        """A space restored from ``reader``, every object clean.

        Raises :class:`~objectspace.CorruptStateError` naming the object whose stored state
        cannot be decoded or is incomplete.
        """
        space = cls(serializer)
        objects = space._objects
        for raw_id, raw_kind in reader.items(INDEX_TABLE):
            object_id = raw_id.decode("utf-8")
            objects[object_id] = decode_object(space, object_id, raw_kind, reader)
        return space


def _union(first: tuple[str, ...], second: tuple[str, ...]) -> tuple[str, ...]:
    """The tables of ``first`` then those of ``second`` not in it."""
    return first + tuple(t for t in second if t not in first)


def _deletes(
    pending: dict[str, tuple[str, ...]], current: dict[str, tuple[str, ...]]
) -> dict[str, tuple[str, ...]]:
    """The deletes of a save: those awaiting their commit (re-emitted, as their save may
    not commit) and the current page's, the tables of an id in both united."""
    if not pending:
        return current
    if not current:
        return pending
    merged = dict(pending)
    for object_id, tables in current.items():
        before = merged.get(object_id)
        merged[object_id] = tables if before is None else _union(before, tables)
    return merged


def _explain(
    serializer: Serializer, obj: PersistedObject, page: Page, whole: bool, exc: Exception
) -> NoReturn:
    """Re-emit ``obj`` with the checking encoder, for the error that names the value."""
    try:
        codec = serializer
        obj._emit(Emitter(codec.dumps, codec.encode_key, codec.raw_key_dumps), page, whole)
    except SerializationError as explained:
        raise SerializationError(f"cannot save {obj.KIND} {obj.id!r}: {explained}") from exc
    except Exception as other:  # e.g. a key whose __hash__ or __eq__ raises while saved
        raise SerializationError(
            f"cannot save {obj.KIND} {obj.id!r}: one of its keys or values raised "
            f"{type(other).__name__} while it was saved"
        ) from other
    raise exc


def discard(space: ObjectSpace) -> None:
    """Forget every object of ``space`` at once, for a space no one uses again (a stale
    instance's). Each object refers to its space: without this, the space and its objects
    are a cycle that only a collection of the whole heap frees."""
    space._objects = {}
    space._dirty = {}
    space._pending = {}
    space._deleted = {}
    space._pending_deleted = {}
    if space._residents is not None:
        space._residents.compact = {}
