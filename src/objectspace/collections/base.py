"""What every persisted object shares: identity, edit pages, and the save protocol.

Every mutation records the *slots* it touched in the object's current edit page. When the
space saves, the current page is merged into the page frozen by an earlier save that was not
acknowledged yet (its commit failed, or ``on_saved`` did not run), and the merged page is
frozen in turn: the save writes exactly the slots it names. ``on_saved`` forgets the frozen
page; edits made between ``save`` and ``on_saved`` went into a new current page and stay
dirty. So a failed commit never loses an edit, and a checkpoint writes what changed.

A page also records whether the object is new (write it whole), whether it was cleared (one
table delete instead of a delete per element), and whether its metadata changed.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, ClassVar

import msgpack

from objectspace.collections._impl import ObjectBase, sorted_between, untrack, untracked_set
from objectspace.errors import CorruptStateError, ObjectDeletedError, SerializationError
from objectspace.serialization import PLAIN_KEY_TYPES, encode_key_with
from objectspace.tables import DELETED, StateReader, TableChanges

if TYPE_CHECKING:
    from objectspace.space import ObjectSpace

__all__ = [
    "ENTRY_MARK",
    "INF",
    "MARK_BYTE",
    "UINT_SIZES",
    "UNENCODABLE",
    "Emitter",
    "KeyedObject",
    "Page",
    "PersistedObject",
    "indexed_values",
    "int_key",
    "load_indexed",
    "pack_entry",
    "unpack_entry",
]

INF = sys.maxsize

# The slots of a page that names none (pages only ever read their sets).
_NONE: frozenset[Any] = frozenset()


def int_key(index: int) -> bytes:
    """The stored key of an integer slot: its decimal digits (``3`` → ``b"3"``)."""
    return b"%d" % index


def load_indexed(
    kind: str, object_id: str, reader: StateReader, loads: Callable[[bytes], Any], head: int = 0
) -> list[Any]:
    """The values of an array: ``metadata: length`` and ``items: <position> = <value>`` for
    every position from ``head`` on, ``length`` of them (:class:`CorruptStateError` if one
    is missing)."""
    raw = reader.get(f"state/item/{object_id}/metadata", b"length")
    if raw is None:
        raise CorruptStateError(f"{kind} {object_id!r} has no stored length")
    rows = reader.table(f"state/item/{object_id}/items")
    return indexed_values(kind, object_id, rows, loads, head, loads(raw))


def indexed_values(
    kind: str,
    object_id: str,
    rows: Mapping[bytes, bytes],
    loads: Callable[[bytes], Any],
    head: int,
    n: int | None,
) -> list[Any]:
    """The values of ``rows`` (an object's ``items``) at the positions ``head`` to ``head +
    n - 1``; ``n`` ``None``: as many as there are rows (a list's length is its number of
    rows). :class:`CorruptStateError` if a position is missing."""
    counted = n is None
    if n is None:
        n = len(rows)
    try:
        return [loads(rows[b"%d" % i]) for i in range(head, head + n)]
    except KeyError as exc:
        detail = f": its {n} stored slots are not the positions {head} to {head + n - 1}"
        raise CorruptStateError(
            f"{kind} {object_id!r} misses slot {exc} of {n}{detail if counted else ''}"
        ) from None


# -- the row layout of dict entries and set elements ------------------------------------------
#
# A dict or set row is keyed by the canonical encoding of the key (Serializer.encode_key), so
# Python-equal keys share one row. Its value starts with ENTRY_MARK, a byte that msgpack never
# uses and that starts neither JSON text nor a pickle: that is how a row written before this
# layout (a dict row holding just the encoded value, a set row holding b"") is told apart.
#
#   dict row:  MARK [MARK <uint len> <key's own encoding>] <uint insertion seq> <value>
#   set row:   MARK [MARK <key's own encoding>]
#
# The bracketed part is there only when decoding the row key would not give back the key
# Python holds (True for 1, 1.0, a frozenset, an aware datetime not in UTC); uints are
# msgpack unsigned ints. Sorted dicts write seq 0.

ENTRY_MARK = b"\xc1"
MARK_BYTE = 0xC1
UINT_SIZES = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
"""Payload bytes of a msgpack unsigned int by its first byte (beyond the one-byte ints)."""

UNENCODABLE = (SerializationError, TypeError, ValueError, OverflowError, RecursionError)
"""What encoding a key may raise: such a key was never stored, so its delete is skipped."""


def _uint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    for code, size in UINT_SIZES.items():
        if n < 1 << (8 * size):
            return bytes((code,)) + n.to_bytes(size, "big")
    raise OverflowError(f"{n} does not fit in 64 bits")


def _read_uint(raw: bytes, at: int) -> tuple[int, int]:
    first = raw[at]
    if first < 0x80:
        return first, at + 1
    size = UINT_SIZES[first]
    return int.from_bytes(raw[at + 1 : at + 1 + size], "big"), at + 1 + size


def pack_entry(seq: int, spelling: bytes | None, value: bytes) -> bytes:
    """A dict row's value: insertion number ``seq``, the key's own encoding when the row key
    does not decode to it (``spelling``), and the encoded ``value``."""
    if spelling is None:
        return ENTRY_MARK + _uint(seq) + value
    return b"\xc1\xc1" + _uint(len(spelling)) + spelling + _uint(seq) + value


def unpack_entry(raw: bytes) -> tuple[int, bytes | None, bytes] | None:
    """``(seq, spelling or None, value)`` of a dict row, or ``None`` for a row of the layout
    before insertion order (its value is just the encoded value). Raises ``KeyError`` or
    ``IndexError`` for a damaged row."""
    if not raw or raw[0] != MARK_BYTE:
        return None
    spelling = None
    at = 1
    if raw[1] == MARK_BYTE:
        length, at = _read_uint(raw, 2)
        spelling = raw[at : at + length]
        if len(spelling) != length:
            raise IndexError(f"the key's encoding is cut short ({len(spelling)} of {length})")
        at += length
    seq, at = _read_uint(raw, at)
    return seq, spelling, raw[at:]


def _default_encode_key(dumps: Callable[[Any], bytes]) -> Callable[[Any], tuple[bytes, bool]]:
    return functools.partial(encode_key_with, dumps=dumps)


class Page:
    """The edits of one checkpoint interval (or several merged ones) of one object."""

    __slots__ = ("cleared", "from_", "length", "links", "meta", "new", "slots")

    def __init__(
        self,
        new: bool = False,
        cleared: bool = False,
        meta: bool = False,
        slots: AbstractSet[Any] | None = None,
        links: AbstractSet[Any] | None = None,
        from_: int = INF,
        length: int = 0,
    ) -> None:
        self.new = new
        self.cleared = cleared
        self.meta = meta
        self.slots: AbstractSet[Any] = slots if slots is not None else _NONE
        self.links: AbstractSet[Any] = links if links is not None else _NONE
        self.from_ = from_
        self.length = length

    def then(self, later: Page) -> Page:
        """This page followed by ``later``: what a save must write to cover both."""
        if later.cleared:
            # A clear supersedes every slot edit before it; only newness survives.
            return Page(
                new=self.new or later.new,
                cleared=True,
                meta=True,
                slots=later.slots,
                links=later.links,
                from_=later.from_,
                length=later.length,
            )
        return Page(
            new=self.new or later.new,
            cleared=self.cleared,
            meta=self.meta or later.meta,
            slots=self.slots | later.slots,
            links=self.links | later.links,
            from_=min(self.from_, later.from_),
            length=later.length,
        )


class Emitter:
    """Collects one save's edits as normalised :class:`TableChanges`, before any reach a writer."""

    __slots__ = ("changes", "dumps", "encode_key", "key_dumps", "pack_uint")

    def __init__(
        self,
        dumps: Callable[[Any], bytes],
        encode_key: Callable[[Any], tuple[bytes, bool]] | None = None,
        key_dumps: Callable[[Any], bytes] | None = None,
    ) -> None:
        self.dumps = dumps
        # (canonical key bytes, exact) of a dict key or set element: see Serializer.encode_key.
        self.encode_key = encode_key if encode_key is not None else _default_encode_key(dumps)
        # The stored key of a key whose type is in PLAIN_KEY_TYPES: Serializer.raw_key_dumps.
        self.key_dumps = key_dumps if key_dumps is not None else dumps
        # A msgpack unsigned int (a dict entry's insertion number), one C call; a packer of
        # this save's own, as packers are not thread-safe.
        self.pack_uint: Callable[[int], bytes] = msgpack.Packer(autoreset=True).pack
        self.changes: dict[str, TableChanges] = {}

    def table(self, name: str) -> dict[bytes, Any]:
        """The row edits of table ``name`` (key → bytes or DELETED), created on first use."""
        changes = self.changes.get(name)
        if changes is None:
            # Untracked: it holds a bool and a dict of bytes, so it can be in no cycle, and
            # the collector need not walk it (a save makes one per table it writes).
            changes = self.changes[name] = untrack(TableChanges())
        return changes.rows

    def truncate(self, name: str) -> None:
        """Delete the whole table ``name`` before the rows emitted after this call."""
        changes = self.changes.get(name)
        if changes is None:
            changes = self.changes[name] = untrack(TableChanges())
        changes.truncated = True
        changes.rows.clear()


class PersistedObject(ObjectBase):
    """Base of the ten persisted types. Not instantiated directly: use ``space.create_*``.

    Subclasses set :attr:`KIND` (the name stored in ``state/index``) and :attr:`TABLES`,
    implement :meth:`_emit` (write a page, or the whole object) and :meth:`_load`.

    The fields (``_id``, ``_dirty``, ``_meta`` ...) are slots of :class:`ObjectBase`, from
    the C extension when it was built (see :mod:`objectspace.collections._impl`). Table
    names are not fields: ``_t_meta``, ``_t_items`` and ``_t_data`` build them on use.
    """

    KIND: ClassVar[str] = ""
    # The tables a kind writes, as the last component of ``state/item/<id>/<table>``: what
    # a checkpoint deletes when the object is deleted (each kind has always written the
    # same ones, so no other table of a deleted object's id can hold rows).
    TABLES: ClassVar[tuple[str, ...]] = ("metadata", "items", "data")
    __slots__ = ()

    def __init__(self, space: ObjectSpace, object_id: str) -> None:
        self._id = object_id
        self._space: ObjectSpace | None = space
        self._registered = False
        # The slots edited in the current page: None until the first edit (most resident
        # objects are clean, and an empty set would cost 216 bytes each).
        self._dirty: set[Any] | None = None
        self._meta = False
        self._cleared = False
        self._new = False
        self._pending: Page | None = None

    @property
    def id(self) -> str:
        """The object's id in its space."""
        return self._id

    @property
    def space(self) -> ObjectSpace | None:
        """The space holding the object (``None`` once it was deleted from it)."""
        return self._space

    @property
    def kind(self) -> str:
        """The stored kind name, e.g. ``"Array"``."""
        return self.KIND

    # The object's tables, named when a save or load needs them (not kept per object).

    @property
    def _t_meta(self) -> str:
        return f"state/item/{self._id}/metadata"

    @property
    def _t_items(self) -> str:
        return f"state/item/{self._id}/items"

    @property
    def _t_data(self) -> str:
        return f"state/item/{self._id}/data"

    def _dirty_set(self) -> set[Any]:
        """The current page's set of edited slots, created by the first edit."""
        dirty = self._dirty
        if dirty is None:
            dirty = self._dirty = untracked_set()
        return dirty

    def _touch(self) -> None:
        """Register the object as dirty with its space; called by the first edit of a page."""
        space = self._space
        if space is None:
            raise ObjectDeletedError(f"object {self._id!r} was deleted from its space")
        self._registered = True
        space._dirty[self._id] = self

    def _mark_new(self) -> None:
        self._new = True
        self._touch()

    # -- the page protocol, driven by ObjectSpace.save / on_saved ---------------------------

    def _current_page(self) -> Page:
        # Positional: this runs once per dirty object per save. The page lives until the
        # save is acknowledged (into the next batch, in a Spark worker) and can be in no
        # cycle: untracked, the collections meanwhile neither walk nor promote it.
        return untrack(
            Page(
                self._new,
                self._cleared,
                self._meta,
                self._dirty,
                self._dirty_links(),
                INF,
                self._length(),
            )
        )

    def _dirty_links(self) -> AbstractSet[Any]:
        return _NONE

    def _length(self) -> int:
        return 0

    def _save(self, out: Emitter, full: bool) -> Page:
        """Emit the edits since the last acknowledged save (everything when ``full`` or
        new) to ``out``; the page that :meth:`_freeze` keeps until acknowledged."""
        page = self._merged_page()
        self._emit(out, page, full or page.new)
        return page

    def _merged_page(self) -> Page:
        current = self._current_page()
        return current if self._pending is None else self._pending.then(current)

    def _freeze(self, page: Page) -> None:
        """Keep ``page`` until acknowledged and start an empty current page."""
        self._pending = page
        self._registered = False
        self._dirty = None
        self._meta = False
        self._cleared = False
        self._new = False
        self._reset_extra()

    def _rewrite(self, slots: set[Any]) -> None:
        """Replace the object's rows with ``slots`` at the next save (a table delete, then a
        row per slot): for a table read in the layout before canonical keys, whose rows are
        keyed by each key's own encoding, so later edits would not find them."""
        self._touch()
        self._cleared = True
        self._dirty = slots

    def _reset_extra(self) -> None:
        """Reset kind-specific parts of the current page."""

    def _acknowledge(self) -> None:
        """The frozen page is committed: forget it."""
        self._pending = None

    def _detach(self) -> None:
        """Called when the object is deleted from its space: later edits raise."""
        self._space = None
        self._registered = False
        self._pending = None

    def _emit(self, out: Emitter, page: Page, whole: bool) -> None:
        """Write ``page`` (or, when ``whole``, every slot and the metadata) into ``out``."""
        raise NotImplementedError

    @classmethod
    def _load(
        cls, space: ObjectSpace, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> PersistedObject:
        raise NotImplementedError

    def _emit_slots(
        self,
        out: Emitter,
        table: str,
        page: Page,
        live: Callable[[Any], bool],
        value_of: Callable[[Any], Any],
        key_of: Callable[[Any], bytes],
    ) -> None:
        """Write each dirty slot: its value if live, else a delete (none after a clear)."""
        dumps = out.dumps
        if page.cleared:
            out.truncate(table)
        rows = out.table(table)
        for slot in page.slots:
            if live(slot):
                rows[key_of(slot)] = dumps(value_of(slot))
            elif not page.cleared:
                rows[key_of(slot)] = DELETED

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._id!r}>"


class KeyedObject(PersistedObject):
    """Base of the dicts and sets: a row per key (or element), keyed by its canonical encoding.

    Subclasses implement :meth:`_emit_rows`.
    """

    __slots__ = ()

    def _emit(self, out: Emitter, page: Page, whole: bool) -> None:
        try:
            self._emit_rows(out, page, whole, PLAIN_KEY_TYPES)
        except OverflowError:
            # A plain int key beyond 64 bits, which msgpack stores only through encode_key:
            # again, with every key through encode_key (rows written already are rewritten).
            self._emit_rows(out, page, whole, frozenset())

    def _emit_rows(self, out: Emitter, page: Page, whole: bool, plain: frozenset[type]) -> None:
        """Write the rows; keys of a type in ``plain`` are encoded by ``out.key_dumps`` (the
        bytes of ``encode_key``, one C call), the others by ``out.encode_key``."""
        raise NotImplementedError

    def _track(self, key: Any) -> None:
        """Track ``key``, just set or removed, for the next save. When tracking raises (its
        ``__eq__`` raised against a removed key that is still tracked) after the edit was
        made, the whole object is tracked for rewriting instead, and the error raised."""
        try:
            self._dirty_set().add(key)
        except BaseException:
            self._rewrite_all()
            raise

    def _rewrite_all(self) -> None:
        """Track the whole object for rewriting: one table delete, then every key. O(n)."""
        raise NotImplementedError


class SortedOrder:
    """Position and range access shared by the sorted set and the sorted dict (whose
    ``_data`` is a ``sortedcontainers`` ``SortedSet``/``SortedDict``)."""

    __slots__ = ()
    _data: Any

    def irange(
        self,
        minimum: Any = None,
        maximum: Any = None,
        inclusive: tuple[bool, bool] = (True, True),
        reverse: bool = False,
    ) -> Iterator[Any]:
        """Elements (keys of a dict) between ``minimum`` and ``maximum`` (``None``:
        unbounded), ascending unless ``reverse``. O(log n + k)."""
        return iter(self._data.irange(minimum, maximum, inclusive, reverse))

    def _between(self, low: Any, high: Any) -> list[Any]:
        """``list(self.irange(low, high, inclusive=(True, False)))``: the elements (keys of
        a dict) ``low <= x < high``, ascending (a hot path: a key's entries in a dict keys
        share; :func:`~objectspace.collections._pycore.sorted_between`). O(log n + k)."""
        return sorted_between(self._data._list, low, high)

    def index(self, value: Any) -> int:
        """The position of ``value`` (a key of a dict) in ascending order; ``ValueError``
        if absent. O(log n)."""
        return int(self._data.index(value))

    def __reversed__(self) -> Iterator[Any]:
        backwards: Iterator[Any] = reversed(self._data)
        return backwards
