"""The pure-Python base classes of the persisted types: their fields and hot methods.

``objectspace.collections._core`` (``src/objectspace/collections/_core.c``) implements these six classes in C with
the same fields, methods, exceptions and dirty-tracking effects; this module is used when
the extension was not built, or when ``OBJECTSPACE_PURE_PYTHON`` is set (see
:mod:`objectspace.collections._impl`). Keep the two in step.

:class:`ObjectBase` holds the fields every persisted object shares; each kind's base holds
that kind's fields used by its hot methods. The persisted classes inherit from
``PersistedObject`` (which defines ``_touch`` and the save protocol) and from their kind's
base here; every other method stays on the persisted class.
"""

from __future__ import annotations

import copyreg
import operator
import re
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from datetime import UTC, date, datetime
from itertools import chain, compress, count, repeat
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:
    from objectspace.collections.base import Page
    from objectspace.space import ObjectSpace

# copyreg's reconstructor for protocol-2 style pickles (not in its type stubs).
_NEWOBJ: Any = copyreg.__newobj__  # type: ignore[attr-defined]
_FIRST = operator.itemgetter(0)
_THIRD = operator.itemgetter(2)
_ROWS = operator.attrgetter("rows")
_TRUNCATED = operator.attrgetter("truncated")
_D = TypeVar("_D")  # what utc_from_ms's fallback returns

__all__ = [
    "ArrayBase",
    "ListBase",
    "ObjectBase",
    "QueueBase",
    "StackBase",
    "ValueBase",
    "columns_from_rows",
    "emit_rows",
    "emit_set_rows",
    "emit_sorted_rows",
    "grouped_tables",
    "key_encoder",
    "numbered_folders",
    "row_columns",
    "rows_from_columns",
    "sorted_between",
    "sorted_insert",
    "sorted_remove",
    "sorted_set_add",
    "sorted_set_discard",
    "table_heads",
    "untrack",
    "untracked_set",
    "utc_from_ms",
    "utc_micros",
    "value_setup",
]


class ObjectBase:
    """The fields of every persisted object (set by ``PersistedObject.__init__``)."""

    __slots__ = (
        "_cleared",
        "_dirty",
        "_id",
        "_meta",
        "_new",
        "_pending",
        "_registered",
        "_space",
    )

    _cleared: bool
    _dirty: set[Any] | None  # None until the first edit of a page
    _id: str
    _meta: bool
    _new: bool
    _pending: Page | None
    _registered: bool
    _space: ObjectSpace | None

    def __reduce__(self) -> tuple[Any, ...]:
        """``(copyreg.__newobj__, (type(self),), self.__getstate__())``, for every protocol.

        The format ``_core.ObjectBase`` pickles to: protocols 0 and 1 would otherwise refuse
        a class with ``__slots__``, and pickles load across the two implementations.
        """
        return (_NEWOBJ, (type(self),), self.__getstate__())

    if TYPE_CHECKING:

        def _touch(self) -> None:
            """Defined by ``PersistedObject``: register the object as dirty with its space."""


class ValueBase(ObjectBase):
    """The field and accessor of a persisted value."""

    __slots__ = ("_value",)

    _value: Any

    @property
    def value(self) -> Any:
        """The current value."""
        return self._value

    @value.setter
    def value(self, value: Any) -> None:
        if not self._registered:
            self._touch()
        self._value = value
        self._meta = True


class ArrayBase(ObjectBase):
    """The field and slot access of a persisted array."""

    __slots__ = ("_data",)

    _data: list[Any]

    def __len__(self) -> int:
        return len(self._data)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        """The value at ``index`` (a slice gives a plain list). O(1)."""
        if isinstance(index, slice):
            return self._data[index]
        try:
            return self._data[index]
        except IndexError:
            raise IndexError(
                f"array {self._id!r} index {index} out of range (length {len(self._data)})"
            ) from None

    def __setitem__(self, index: int, value: Any) -> None:
        """Assign one slot. O(1)."""
        if not self._registered:
            self._touch()
        if type(index) is not int:
            if isinstance(index, int):
                index = int(index)
            elif hasattr(type(index), "__index__"):
                index = operator.index(index)  # as a list takes it
            else:
                raise TypeError(f"array {self._id!r} indices are ints, not {type(index).__name__}")
        data = self._data
        try:
            data[index] = value
        except IndexError:
            raise IndexError(
                f"array {self._id!r} index {index} out of range (length {len(data)})"
            ) from None
        dirty = self._dirty
        if dirty is None:
            dirty = self._dirty = set()
        dirty.add(index if index >= 0 else index + len(data))

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)


class ListBase(ObjectBase):
    """The values of a persisted list, with ``append``, ``len`` and indexing."""

    __slots__ = ("_data", "_from")

    _data: list[Any]
    # The first slot of the range the next save writes whole (every slot from it on, and
    # the stored slots past the end as deletes); sys.maxsize when none. An append lowers it
    # to its slot instead of adding the slot to _dirty.
    _from: int

    def __len__(self) -> int:
        return len(self._data)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        """The value at ``index``; a slice gives a plain list. O(1) (O(k) for a slice)."""
        return self._data[index]

    def append(self, value: Any) -> None:
        """Add at the end. O(1); the checkpoint writes one item and the length."""
        if not self._registered:
            self._touch()
        self._meta = True
        data = self._data
        n = len(data)
        if n < self._from:
            self._from = n
        data.append(value)


class QueueBase(ObjectBase):
    """The values and head position of a persisted queue, with its O(1) operations."""

    __slots__ = ("_data", "_head")

    _data: deque[Any]
    _head: int

    def enqueue(self, value: Any) -> None:
        """Add ``value`` at the tail. O(1)."""
        if not self._registered:
            self._touch()
        self._meta = True
        dirty = self._dirty
        if dirty is None:
            dirty = self._dirty = set()
        dirty.add(self._head + len(self._data))
        self._data.append(value)

    def dequeue(self) -> Any:
        """Remove and return the value at the head. O(1). Empty: ``IndexError``."""
        if not self._data:
            raise IndexError(f"dequeue from empty queue {self._id!r}")
        if not self._registered:
            self._touch()
        self._meta = True
        dirty = self._dirty
        if dirty is None:
            dirty = self._dirty = set()
        dirty.add(self._head)
        self._head += 1
        return self._data.popleft()

    def peek(self) -> Any:
        """The value at the head, left in place. O(1). Empty: ``IndexError``."""
        if not self._data:
            raise IndexError(f"peek at empty queue {self._id!r}")
        return self._data[0]

    def __len__(self) -> int:
        return len(self._data)


class StackBase(ObjectBase):
    """The values of a persisted stack (bottom first), with its O(1) operations."""

    __slots__ = ("_data",)

    _data: list[Any]

    def push(self, value: Any) -> None:
        """Put ``value`` on top. O(1)."""
        if not self._registered:
            self._touch()
        self._meta = True
        dirty = self._dirty
        if dirty is None:
            dirty = self._dirty = set()
        dirty.add(len(self._data))
        self._data.append(value)

    def pop(self) -> Any:
        """Remove and return the top value. O(1). Empty: ``IndexError``."""
        if not self._data:
            raise IndexError(f"pop from empty stack {self._id!r}")
        if not self._registered:
            self._touch()
        self._meta = True
        value = self._data.pop()
        dirty = self._dirty
        if dirty is None:
            dirty = self._dirty = set()
        dirty.add(len(self._data))
        return value

    def peek(self) -> Any:
        """The top value, left in place. O(1). Empty: ``IndexError``."""
        if not self._data:
            raise IndexError(f"peek at empty stack {self._id!r}")
        return self._data[-1]

    def __len__(self) -> int:
        return len(self._data)


def emit_rows(
    rows: dict[bytes, Any],
    slots: Iterable[Any],
    data: dict[Any, Any],
    order: dict[Any, int],
    key_dumps: Callable[[Any], bytes],
    dumps: Callable[[Any], bytes],
    pack_uint: Callable[[int], bytes],
    plain: AbstractSet[type],
    prefixes: tuple[bytes, ...],
    entry_mark: bytes,
    deleted: object,
    encode_key: Callable[[Any], tuple[bytes, bool]],
    unencodable: tuple[type[BaseException], ...],
) -> bool:
    """A dict's changed entries (``slots``) as rows: a live key's row is its stored key
    (``key_dumps`` of a key whose type is in ``plain``, else ``encode_key(key)[0]``) to its
    entry mark (``prefixes[n]``, or ``entry_mark + pack_uint(n)`` past them; ``n`` its
    insertion number in ``order``, 0 if none) followed by ``dumps`` of its value; a removed
    key's row is ``deleted``, unless the key cannot be encoded (``unencodable``: it was
    never stored). ``False`` on an ``OverflowError`` (an int beyond 64 bits), with the rows
    so far written: the caller writes them again the general way."""
    known = len(prefixes)
    try:
        for slot in slots:
            if slot in data:
                row = key_dumps(slot) if type(slot) in plain else encode_key(slot)[0]
                n = order.get(slot, 0)
                prefix = prefixes[n] if 0 <= n < known else entry_mark + pack_uint(n)
                rows[row] = prefix + dumps(data[slot])
            else:
                try:
                    row = encode_key(slot)[0]
                except unencodable:
                    continue  # a key that cannot be encoded was never stored
                rows[row] = deleted
    except OverflowError:
        return False
    return True


untracked_set = set
"""A new empty set for an object's dirty slots (the C extension's is not tracked by the
cyclic collector; here an ordinary set)."""


_T = TypeVar("_T")


def untrack(obj: _T) -> _T:
    """``obj`` (the C extension stops the cyclic collector tracking it; here a no-op)."""
    return obj


def key_encoder(
    code: int, fallback: Callable[[Any], tuple[bytes, bool]]
) -> Callable[[Any], tuple[bytes, bool]]:
    """A serializer's ``raw_encode_key`` (``fallback``) with flat tuple keys packed as
    extension type ``code`` in one C pass (the C extension's ``KeyEncoder``; here
    ``fallback`` itself, which stores them alike)."""
    return fallback


def emit_sorted_rows(
    rows: dict[bytes, Any],
    slots: Iterable[Any],
    data: dict[Any, Any],
    sorted_list: Any,
    cleared: bool,
    dumps: Callable[[Any], bytes],
    encode_key: Callable[[Any], tuple[bytes, bool]],
    prefix: bytes,
    pack_entry: Callable[[int, bytes | None, bytes], bytes],
    deleted: object,
    unencodable: tuple[type[BaseException], ...],
) -> None:
    """A sorted dict's changed entries (``slots``) as rows. A live slot's row is keyed by
    ``encode_key`` of the key object the dict holds for it (found in ``sorted_list``, the
    dict's ``SortedList`` of keys: an equal key may be spelled otherwise than the slot):
    ``prefix`` (the entry mark of insertion number 0) and ``dumps`` of its value, or, when
    the stored key does not decode to the held key, ``pack_entry(0, dumps(key), dumps of
    the value)``. A removed slot's row is ``deleted``, unless ``cleared`` (the table is
    deleted whole) or the slot cannot be encoded (``unencodable``: it was never stored)."""
    for slot in slots:
        if slot in data:
            maxes = sorted_list._maxes
            sub = sorted_list._lists[bisect_left(maxes, slot)]
            key = sub[bisect_left(sub, slot)]
            row, exact = encode_key(key)
            spelling = None if exact else dumps(key)
            payload = dumps(data[key])
            rows[row] = prefix + payload if spelling is None else pack_entry(0, spelling, payload)
        elif not cleared:
            try:
                row = encode_key(slot)[0]
            except unencodable:
                continue  # a key that cannot be encoded was never stored
            rows[row] = deleted


def sorted_insert(sorted_list: Any, value: Any) -> None:
    """``sorted_list.add(value)`` (a ``sortedcontainers`` ``SortedList``; the C twin does
    its bisections and insertion itself)."""
    sorted_list.add(value)


def sorted_remove(sorted_list: Any, value: Any) -> None:
    """``sorted_list.remove(value)`` (a ``sortedcontainers`` ``SortedList``; ``ValueError``
    when it does not hold ``value``; the C twin does its bisections and deletion itself)."""
    sorted_list.remove(value)


def _needs_spelling(value: Any, plain: AbstractSet[type]) -> bool:
    """Whether a set keeps ``value``'s spelling beside its row (``_spell``): not for a value
    of a type in ``plain``, nor for a tuple of such values (a flat key, whose stored key
    decodes to it, types and all)."""
    kind = type(value)
    if kind in plain:
        return False
    return kind is not tuple or not set(map(type, value)) <= plain


def _dirty_of(obj: Any) -> set[Any]:
    """``obj``'s set of dirty slots, made (untracked) by its first edit."""
    dirty: set[Any] | None = obj._dirty
    if dirty is None:
        dirty = obj._dirty = untracked_set()
    return dirty


def sorted_set_add(self: Any, value: Any, plain: AbstractSet[type], /) -> None:
    """``PersistedSortedSet.add(value)``: when ``value`` is not a member, touch the set, add
    it to the hash set and the sorted list (``TypeError`` from a comparison takes it out of
    the hash set again and leaves the set as it was), then track it: its slot in the dirty
    set, its spelling in ``_spell`` when :func:`_needs_spelling` (``plain``: the types
    stored as they are). Tracking that raises after the edit tracks the whole set for
    rewriting (``_rewrite_all``) and raises."""
    data = self._data
    members = data._set
    if value in members:
        return
    if not self._registered:
        self._touch()
    members.add(value)
    try:
        sorted_insert(data._list, value)
    except BaseException:
        members.discard(value)
        raise
    try:
        _dirty_of(self).add(value)
        if _needs_spelling(value, plain):
            self._spell[value] = value
    except BaseException:
        self._rewrite_all()
        raise


def sorted_set_discard(self: Any, value: Any, /) -> None:
    """``PersistedSortedSet.discard(value)``: when ``value`` is a member, touch the set,
    remove it from the hash set and the sorted list (a comparison that raises puts it back
    in the hash set when the list still holds it), then track it: its slot in the dirty
    set, its spelling out of ``_spell``. Tracking that raises after the edit tracks the
    whole set for rewriting (``_rewrite_all``) and raises."""
    data = self._data
    members = data._set
    if value not in members:
        return
    if not self._registered:
        self._touch()
    members.remove(value)
    try:
        sorted_remove(data._list, value)
    except BaseException:
        if len(data._list) != len(members):
            members.add(value)
        raise
    try:
        _dirty_of(self).add(value)
        if self._spell:
            self._spell.pop(value, None)
    except BaseException:
        self._rewrite_all()
        raise


def sorted_between(sorted_list: Any, low: Any, high: Any) -> list[Any]:
    """The elements ``x`` of ``sorted_list`` (a ``sortedcontainers`` ``SortedList``) with
    ``low <= x < high``, ascending: ``list(sorted_list.irange(low, high, inclusive=(True,
    False)))`` read off its sublists without an iterator chain. O(log n + k)."""
    maxes = sorted_list._maxes
    lists = sorted_list._lists
    pos = bisect_left(maxes, low)
    if pos == len(maxes):
        return []
    sub = lists[pos]
    i = bisect_left(sub, low)
    found: list[Any] = []
    while True:
        n = len(sub)
        while i < n:
            x = sub[i]
            if not x < high:
                return found
            found.append(x)
            i += 1
        pos += 1
        if pos == len(lists):
            return found
        sub = lists[pos]
        i = 0


def emit_set_rows(
    rows: dict[bytes, Any],
    slots: Iterable[Any],
    members: AbstractSet[Any],
    spell: dict[Any, Any],
    cleared: bool,
    key_dumps: Callable[[Any], bytes],
    encode_key: Callable[[Any], tuple[bytes, bool]],
    plain: AbstractSet[type],
    entry_mark: bytes,
    spelled: bytes,
    dumps: Callable[[Any], bytes],
    deleted: object,
    unencodable: tuple[type[BaseException], ...],
) -> None:
    """A set's changed elements (``slots``) as rows. A live slot's row is keyed by the
    stored key of the element the set holds for it (``spell[slot]``, or, absent there, the
    slot itself: ``key_dumps`` of a type in ``plain``, else ``encode_key``): ``entry_mark``,
    or ``spelled`` and ``dumps`` of the element when the stored key does not decode to it.
    A removed slot's row is ``deleted``, unless ``cleared`` or the slot cannot be encoded
    (``unencodable``: it was never stored)."""
    for slot in slots:
        if slot in members:
            value = spell.get(slot, _ABSENT) if spell else _ABSENT
            if value is _ABSENT:
                row = key_dumps(slot) if type(slot) in plain else encode_key(slot)[0]
                rows[row] = entry_mark
            else:
                row, exact = encode_key(value)
                rows[row] = entry_mark if exact else spelled + dumps(value)
        elif not cleared:
            try:
                row = encode_key(slot)[0]
            except unencodable:
                continue  # an element that cannot be encoded was never stored
            rows[row] = deleted


_ABSENT = object()


# a folder name around its first decimal number (no leading zero, at most 18 digits)
_NUMBERED = re.compile(r"(\D*)(0|[1-9][0-9]{0,17})(\D.*|)\Z", re.DOTALL)
_GROUPS = operator.methodcaller("group", 1, 2, 3)


def numbered_folders(folders: Iterable[str], /) -> list[tuple[str, int] | tuple[()]]:
    """Each of ``folders`` as (template, number), the template being ``prefix NUL suffix``
    around its first decimal number, if that number has no leading zero (so that the
    number between the template's parts is the folder) and the folder has no NUL; else
    ``()``. (Table folders in a block: a key's objects with integer keys,
    ``state/item/17/buf``, share the template ``state/item/\x00/buf``.)"""
    found: list[tuple[str, int] | tuple[()]] = []
    for folder in folders:
        match = None if "\x00" in folder else _NUMBERED.match(folder)
        if match is None:
            found.append(())
        else:
            prefix, digits, suffix = _GROUPS(match)
            found.append((f"{prefix}\x00{suffix}", int(digits)))
    return found


RowColumns = tuple[
    list[int],  # per table: its row count
    list[int],  # per table: how its keys are stored (1: delta-encoded ints, 0: bytes)
    list[int],  # the int keys
    list[int],  # the bytes keys' lengths
    list[bytes],  # the bytes keys
    list[int],  # per table: the width of its values (0: they go by length)
    dict[int, list[bytes]],  # width -> the values of the tables of that width
    list[int],  # the other values' lengths (-1: a delete)
    list[bytes],  # the other values
    int,  # the rows
]


def rows_from_columns(names: tuple[str, ...], columns: list[list[Any]], /) -> list[dict[str, Any]]:
    """A dict per row, ``{names[j]: columns[j][i]}`` (a name twice: its last column), of
    lists of one length, one per name (at least one): what ``pyarrow.Table.to_pylist``
    makes of a table's columns' ``to_pylist()``. Unequal lengths or a column per name
    missing raise ``ValueError``."""
    if not isinstance(names, tuple) or not isinstance(columns, list):
        raise TypeError("rows_from_columns: names must be a tuple, columns a list")
    if len(columns) != len(names) or not names:
        raise ValueError("rows_from_columns: one column per name, and at least one")
    if not all(isinstance(column, list) for column in columns):
        raise TypeError("rows_from_columns: each column must be a list")
    if len({len(column) for column in columns}) > 1:
        raise ValueError("rows_from_columns: columns of unequal lengths")
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def columns_from_rows(rows: list[dict[str, Any]], names: tuple[str, ...], /) -> list[list[Any]]:
    """The values of ``rows`` (dicts) as one list per name, ``None`` where a row lacks the
    name: what ``pyarrow.Table.from_pylist`` takes of each row for a schema of ``names``.
    A row that is not a dict raises ``TypeError``."""
    if not isinstance(rows, list) or not isinstance(names, tuple):
        raise TypeError("columns_from_rows: rows must be a list, names a tuple")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TypeError(f"columns_from_rows: row {i} is not a dict")
    return [[row.get(name) for row in rows] for name in names]


_EPOCH_DAY = date(1970, 1, 1).toordinal()


def utc_micros(values: list[Any], /) -> list[int | None] | None:
    """``values`` (datetimes, naive or in UTC, and ``None``) as microseconds since the
    epoch, a naive datetime taken as UTC (as Arrow stores either in a UTC timestamp
    column), ``None`` kept; ``None`` when a value is anything else (another time zone, a
    subclass, not a datetime), which Arrow then converts itself."""
    if not isinstance(values, list):
        raise TypeError("utc_micros takes a list")
    out: list[int | None] = []
    for value in values:
        if value is None:
            out.append(None)
            continue
        tz = value.tzinfo if type(value) is datetime else ()
        if tz is not None and tz is not UTC:
            return None
        seconds = (value.toordinal() - _EPOCH_DAY) * 86400
        seconds += value.hour * 3600 + value.minute * 60 + value.second
        out.append(seconds * 1_000_000 + value.microsecond)
    return out


def table_heads(names: list[str], /) -> tuple[list[str], list[int], list[str]]:
    """Each table name's folder and last component (``str.rpartition("/")``): the folders
    each once, in first-seen order, each table's index into them, and each table's last
    component (equal ones as one object). (The first step of a block's table order, see
    :func:`objectspace.storage.blocks.encode._ordered_tables`.) In C-level passes."""
    if not isinstance(names, list):
        raise TypeError("table_heads: names must be a list")
    for kind in set(map(type, names)):
        if not issubclass(kind, str):
            raise TypeError(f"table_heads: a table name must be a str, not {kind.__name__}")
    parts = list(map(str.rpartition, names, repeat("/")))
    folders = list(map(_FIRST, parts))
    heads = list(dict.fromkeys(folders))
    if len(heads) == len(folders):  # a folder per table
        table_head = list(range(len(heads)))
    else:
        table_head = list(map({head: i for i, head in enumerate(heads)}.__getitem__, folders))
    tails: dict[str, str] = {}
    last = list(map(_THIRD, parts))
    return heads, table_head, list(map(tails.setdefault, last, last))


def grouped_tables(
    edits: list[Any],
    table_head: list[int],
    table_tail: list[str],
    order: list[int] | None,
    full: bool,
    /,
) -> tuple[list[int], dict[str, int], list[int], list[int], list[dict[bytes, Any]]]:
    """The tables (``edits``: each a ``TableChanges``, ``table_head`` and ``table_tail``
    from :func:`table_heads`) grouped by folder, the folders in ``order`` (indices into
    the folders, each once; ``None``: first-seen), each folder's tables as they came: per
    folder its number of tables, the last components by first use (name -> id), each
    table's component id, the indices of the truncated tables (none when ``full``) and
    each table's rows."""
    if not isinstance(edits, list) or not isinstance(table_head, list):
        raise TypeError("grouped_tables: edits and table_head must be lists")
    if not isinstance(table_tail, list) or (order is not None and not isinstance(order, list)):
        raise TypeError("grouped_tables: table_tail and order must be lists")
    if len(edits) != len(table_head) or len(edits) != len(table_tail):
        raise ValueError("grouped_tables: edits, table_head and table_tail differ in length")
    if set(map(type, table_head)) - {int} or (table_head and min(table_head) < 0):
        bad = next(h for h in table_head if type(h) is not int or h < 0)
        raise ValueError(f"grouped_tables: folder index {bad!r} out of range")
    top = max(table_head, default=-1)
    heads = top + 1 if order is None else len(order)
    if top >= heads:
        raise ValueError(f"grouped_tables: folder index {top!r} out of range")
    if order is not None and (set(map(type, order)) - {int} or sorted(order) != list(range(heads))):
        raise ValueError("grouped_tables: order must hold each folder's index once")
    if table_head == list(range(heads)):  # a folder per table: the tables in its order
        placed = list(range(heads)) if order is None else list(order)
        head_tables = [1] * heads
    else:
        members: list[list[int]] = [[] for _ in range(heads)]
        for i, h in enumerate(table_head):
            members[h].append(i)
        ranked = members if order is None else list(map(members.__getitem__, order))
        head_tables = list(map(len, ranked))
        placed = list(chain.from_iterable(ranked))
    ordered = list(map(edits.__getitem__, placed))
    last = list(map(table_tail.__getitem__, placed))
    tails = {tail: i for i, tail in enumerate(dict.fromkeys(last))}  # ids by first use
    table_tails = list(map(tails.__getitem__, last))
    truncated = [] if full else list(compress(count(), map(_TRUNCATED, ordered)))
    return head_tables, tails, table_tails, truncated, list(map(_ROWS, ordered))


def value_setup(pages: tuple[tuple[Any, ...], ...], table_changes: type, /) -> None:
    """The C extension's ``ValueBase._save_value`` and ``_freeze_value`` take their shared
    pages and ``TableChanges`` from here; this ``ValueBase`` has neither: ``PersistedValue``'s
    own ``_save`` and ``_freeze`` are their definition, and run."""


def row_columns(table_rows: list[dict[bytes, Any]], full: bool, deleted: Any, /) -> RowColumns:
    """The rows of a block's tables (each a dict of key -> value bytes or ``deleted``, in
    order) as the block's columns: per table its row count, how its keys are stored (1:
    as integers, delta-encoded within the table, when each is the canonical decimal form
    of an int of at most 18 digits) and the width of its values (when they all have one
    width of 1 to 64 bytes and none is a delete; else 0); the int keys, the other keys'
    lengths and bytes, the values by width, the other values' lengths (-1: a delete) and
    bytes; and the number of rows. ``full``: deletes are left out (a full block starts
    from nothing). (The columns of :mod:`objectspace.storage.blocks.encode`.)"""
    counts: list[int] = []
    key_modes: list[int] = []
    int_keys: list[int] = []
    key_lens: list[int] = []
    keys: list[bytes] = []
    widths: list[int] = []
    fixed: dict[int, list[bytes]] = {}
    value_lens: list[int] = []
    values: list[bytes] = []
    # Bound once: the loop below runs once per table (most hold one row).
    add_count = counts.append
    add_mode = key_modes.append
    add_int_key = int_keys.append
    add_key_len = key_lens.append
    add_key = keys.append
    add_width = widths.append
    add_value_len = value_lens.append
    add_value = values.append
    get_fixed = fixed.get
    rows_total = 0
    flat_keys = list(chain.from_iterable(table_rows))
    flat_values = list(chain.from_iterable(map(dict.values, table_rows)))
    lens = list(map(len, flat_values)) if deleted not in flat_values else []
    width = lens[0] if lens else 0
    if (
        0 < width <= 64
        and lens.count(width) == len(lens)
        and not any(map(bytes.isdigit, flat_keys))
    ):
        # Every key stored as bytes and every value a put of one width (a float dict's
        # entries): the columns the loop below would build, in C-level passes.
        counts = list(map(len, table_rows))
        widths = [width if n else 0 for n in counts]
        return (
            counts,
            [0] * len(counts),
            [],
            list(map(len, flat_keys)),
            flat_keys,
            widths,
            {width: flat_values},
            [],
            [],
            len(flat_keys),
        )
    for rows in table_rows:
        if len(rows) == 1:  # the common case (one entry of an object changed), inline
            ((key, value),) = rows.items()
            if value is deleted and full:
                add_count(0)
                add_mode(0)
                add_width(0)
                continue
            add_count(1)
            rows_total += 1
            if len(key) <= 18 and key.isdigit() and b"%d" % int(key) == key:
                add_mode(1)
                add_int_key(int(key))
            else:
                add_mode(0)
                add_key_len(len(key))
                add_key(key)
            if value is deleted:
                add_width(0)
                add_value_len(-1)
                continue
            width = len(value)
            if 0 < width <= 64:
                add_width(width)
                same = get_fixed(width)
                if same is None:
                    fixed[width] = [value]
                else:
                    same.append(value)
            else:
                add_width(0)
                add_value_len(width)
                add_value(value)
            continue
        table_keys = list(rows)
        table_values = list(rows.values())
        if full and table_values.count(deleted):
            table_keys = [k for k, v in rows.items() if v is not deleted]
            table_values = [v for v in table_values if v is not deleted]
        add_count(len(table_keys))
        rows_total += len(table_keys)
        as_ints = _canonical_deltas(table_keys)
        if as_ints is None:
            add_mode(0)
            key_lens.extend(map(len, table_keys))
            keys.extend(table_keys)
        else:
            add_mode(1)
            int_keys.extend(as_ints)
        if table_values and not table_values.count(deleted):
            lens = list(map(len, table_values))
            width = lens[0]
            if lens.count(width) == len(lens) and 0 < width <= 64:
                add_width(width)
                fixed.setdefault(width, []).extend(table_values)
                continue
        add_width(0)
        for value in table_values:
            if value is deleted:
                add_value_len(-1)
            else:
                add_value_len(len(value))
                add_value(value)
    return (
        counts,
        key_modes,
        int_keys,
        key_lens,
        keys,
        widths,
        fixed,
        value_lens,
        values,
        rows_total,
    )


def _canonical_deltas(keys: list[bytes]) -> list[int] | None:
    """A table's keys as delta-encoded ints (each less the one before, the first less 0)
    when each is the canonical decimal form of an int of at most 18 digits (list
    indices), else ``None``."""
    if not keys:
        return None
    if len(keys) <= 4:  # a few slots of one list (appends between two saves): per key
        ints = []
        prev = 0
        for key in keys:
            if not (len(key) <= 18 and key.isdigit() and b"%d" % int(key) == key):
                return None
            i = int(key)
            ints.append(i - prev)
            prev = i
        return ints
    joined = b"".join(keys)
    if not joined.isdigit() or max(map(len, keys)) > 18:  # deltas must fit 64 bits
        return None
    try:
        numbers = list(map(int, keys))
    except ValueError:  # an empty key
        return None
    if b"".join([b"%d" % i for i in numbers]) != joined:  # a leading zero
        return None
    return [b - a for a, b in zip([0, *numbers], numbers, strict=False)]


def utc_from_ms(fallback: Callable[[int], _D], /) -> Callable[[int], _D]:
    """Epoch milliseconds to an aware UTC datetime: ``fallback`` itself here. The C
    extension's is its ``datetime_from_ms`` bound to ``fallback``: the datetime built in C
    for an int within datetime's range, ``fallback`` called for anything else."""
    return fallback
