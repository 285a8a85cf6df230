"""A persisted list: a full ``MutableSequence`` stored slot by slot."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, MutableSequence
from typing import TYPE_CHECKING, Any

from objectspace.collections._impl import ListBase, untrack
from objectspace.collections.base import (
    _NONE,
    INF,
    Emitter,
    Page,
    PersistedObject,
    indexed_values,
)
from objectspace.errors import CorruptStateError
from objectspace.tables import DELETED, StateReader

if TYPE_CHECKING:
    from objectspace.space import ObjectSpace

__all__ = ["PersistedList"]


def _as_index(index: Any) -> int:
    """``index`` as an int (through ``__index__``), or the ``TypeError`` a list raises."""
    try:
        return operator.index(index)
    except TypeError as exc:
        raise TypeError(
            f"list indices must be integers or slices, not {type(index).__name__}"
        ) from exc


class PersistedList(PersistedObject, ListBase, MutableSequence[Any]):
    """A list of values, stored as ``items: position = value`` for the positions ``head <=
    position < head + length``, one row per value, and ``metadata: head`` when ``head`` is
    not 0 (values were removed from the front). The length is the number of ``items`` rows.
    (A list stored with ``metadata: length``, the layout before, is read up to that length
    and keeps writing it.)

    Costs in memory are those of a Python ``list``. A checkpoint writes one row per
    ``append``, assignment or ``pop()`` from the end; one row per value removed from the
    front and the head (``pop(0)``, ``del l[:k]``: the head moves, nothing shifts); every
    slot from the first shifted one for ``insert``/``del``/``pop(i)`` elsewhere (O(n - i));
    one table delete for ``clear()``.

    ``append``, ``len`` and indexing are implemented by :class:`ListBase` (in C when built),
    which holds ``_data``.
    """

    KIND = "List"
    TABLES = ("metadata", "items")
    __slots__ = ("_head", "_length_row", "_stored_head", "_stored_len")

    def __init__(
        self, space: ObjectSpace, object_id: str, data: list[Any] | None = None, head: int = 0
    ) -> None:
        super().__init__(space, object_id)
        self._data: list[Any] = data if data is not None else []
        # Slots from _from on were shifted (insert/delete in the middle) or appended; INF when
        # none. Slots (in _dirty and _from) are indexes into _data; value i is stored at
        # _head + i.
        self._from = INF
        self._head = head
        # The head and length in the store as of the last acknowledged save: the stored
        # positions outside [_head, _head + len) are deleted by the next save.
        self._stored_head = head
        self._stored_len = len(self._data)
        # Whether the store holds the list's length (``metadata: length``), as lists stored
        # before their length was their number of slots do: such a list is read up to its
        # length and keeps writing it.
        self._length_row = False

    def _trim_front(self, k: int) -> None:
        """The first ``k`` values were removed: move the head instead of shifting every slot.
        Only without a save awaiting its commit (whose slots are relative to the old head);
        then the slots shift as for a removal in the middle."""
        if self._pending is not None:
            self._from = 0
            return
        self._head += k
        dirty = self._dirty
        if dirty:
            self._dirty = {i - k for i in dirty if i >= k}
        if self._from != INF:
            self._from = max(0, self._from - k)

    def _edit(self) -> None:
        if not self._registered:
            self._touch()
        self._meta = True

    def __setitem__(self, index: int | slice, value: Any) -> None:
        """Assign a slot, O(1); or a slice, O(n - start) when its length changes."""
        if type(index) is not int:
            if isinstance(index, slice):
                self._set_slice(index, value)
                return
            index = _as_index(index)
        if not self._registered:
            self._touch()
        n = len(self._data)
        self._data[index] = value
        self._dirty_set().add(index + n if index < 0 else index)

    def _set_slice(self, index: slice, value: Any) -> None:
        # list materialises ``value`` before it changes anything: an iterable that raises
        # leaves the list as it was.
        old_len = len(self._data)
        self._edit()
        self._data[index] = value
        self._edit()  # again: consuming ``value`` may have checkpointed the space
        if len(self._data) == old_len:
            self._dirty_set().update(range(*index.indices(old_len)))
        else:  # only a step-1 slice can change the length: later slots shift
            self._from = min(self._from, index.indices(old_len)[0])

    def __delitem__(self, index: int | slice) -> None:
        """Delete a slot or slice. O(n - i): the slots after it shift."""
        if type(index) is not int and not isinstance(index, slice):
            index = _as_index(index)
        old_len = len(self._data)
        self._edit()
        del self._data[index]
        if isinstance(index, slice):
            affected = range(*index.indices(old_len))
            if not affected:
                return
            start = min(affected)
            if start == 0 and max(affected) == len(affected) - 1:  # a prefix: the head moves
                self._trim_front(len(affected))
                return
        else:
            start = index + old_len if index < 0 else index
            if start == 0:
                self._trim_front(1)
                return
        self._from = min(self._from, start)

    def insert(self, index: int, value: Any) -> None:
        """Insert before ``index`` (clamped like ``list.insert``). O(n - index)."""
        if type(index) is not int:
            index = _as_index(index)
        n = len(self._data)
        self._edit()
        self._data.insert(index, value)
        if index < 0:
            index = max(0, index + n)
        if index >= n:
            self._dirty_set().add(n)
        else:
            self._from = min(self._from, index)

    def extend(self, values: Iterable[Any]) -> None:
        """Append every value. O(k).

        Like ``list.extend``, the values an iterable yielded before it raised stay appended;
        they are tracked like any other appended value.
        """
        data = self._data
        if values is self:
            values = list(data)  # extending with itself: iterate over a copy, like list
        if not self._registered:
            self._touch()
        start = len(data)
        # Made now, so that a clear or checkpoint while ``values`` is consumed replaces it.
        dirty = self._dirty_set()
        try:
            data.extend(values)
        finally:
            if self._dirty is not dirty:
                # The iterable cleared or checkpointed this list while it was consumed: the
                # slots below ``start`` may hold new values too.
                if not self._registered:
                    self._touch()
                self._meta = True
                self._from = 0
            elif len(data) != start:
                self._meta = True
                dirty.update(range(start, len(data)))

    def pop(self, index: int = -1) -> Any:
        """Remove and return the value at ``index`` (the last by default). O(1) at the end."""
        if type(index) is not int:
            index = _as_index(index)
        data = self._data
        n = len(data)
        if not self._registered:
            self._touch()
        value = data.pop(index)
        self._meta = True
        i = index + n if index < 0 else index
        if i == n - 1:
            if i < self._from:  # else the save's range from _from covers it (if stored)
                self._dirty_set().add(i)
        elif i == 0:
            self._trim_front(1)
        else:
            self._from = min(self._from, i)
        return value

    def clear(self) -> None:
        """Remove every value. O(1) writes: one table delete and the length."""
        if not self._registered:
            self._touch()
        self._data.clear()
        self._cleared = True
        self._meta = True
        self._dirty = None
        self._from = INF
        if self._pending is None:  # else the head of the save awaiting its commit stays
            self._head = 0

    def sort(self, *, key: Callable[[Any], Any] | None = None, reverse: bool = False) -> None:
        """Sort in place, like ``list.sort``. O(n log n); rewrites every slot.

        A key or comparison that raises leaves the values partly reordered, as ``list.sort``
        does; every slot is marked for rewriting before the sort starts.
        """
        self._edit()
        self._from = 0
        try:
            self._data.sort(key=key, reverse=reverse)
        finally:
            if self._from != 0 or not self._registered:
                # The key or a comparison cleared or checkpointed this list during the sort.
                self._edit()
                self._from = 0

    def reverse(self) -> None:
        """Reverse in place. O(n); rewrites every slot."""
        self._edit()
        self._from = 0
        self._data.reverse()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __reversed__(self) -> Iterator[Any]:
        backwards: Iterator[Any] = reversed(self._data)
        return backwards

    def __contains__(self, value: object) -> bool:
        return value in self._data

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        return self._data.index(value, start, len(self._data) if stop is None else stop)

    def count(self, value: Any) -> int:
        return self._data.count(value)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PersistedList):
            return self._data == other._data
        if isinstance(other, list):
            return self._data == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<PersistedList {self._id!r}: {self._data!r}>"

    # -- persistence -------------------------------------------------------------------------

    def _length(self) -> int:
        return len(self._data)

    def _current_page(self) -> Page:
        return untrack(  # see PersistedObject._current_page
            Page(
                self._new,
                self._cleared,
                self._meta,
                self._dirty,
                _NONE,
                self._from,
                len(self._data),
            )
        )

    def _reset_extra(self) -> None:
        self._from = INF

    def _acknowledge(self) -> None:
        if self._pending is not None:
            self._stored_len = self._pending.length
            # The head moves only while no save awaits its commit: the saved head is _head.
            self._stored_head = self._head
        super()._acknowledge()

    def _emit(self, out: Emitter, page: Page, whole: bool) -> None:
        dumps = out.dumps
        data = self._data
        n = len(data)
        head = self._head
        if whole:
            rows = out.table(self._t_items)
            for i, value in enumerate(data, head):
                rows[b"%d" % i] = dumps(value)
            if head or self._length_row:
                meta = out.table(self._t_meta)
                if self._length_row:
                    meta[b"length"] = dumps(n)
                if head:
                    meta[b"head"] = dumps(head)
            return
        cleared = page.cleared
        if cleared:
            out.truncate(self._t_items)
        rows = out.table(self._t_items)
        stored_head = self._stored_head
        stored_end = stored_head + self._stored_len
        if head > stored_head and not cleared:
            for position in range(stored_head, min(head, stored_end)):
                rows[b"%d" % position] = DELETED  # removed from the front
        for i in page.slots:
            if i < n:
                rows[b"%d" % (head + i)] = dumps(data[i])
            elif not cleared:
                rows[b"%d" % (head + i)] = DELETED
        start = page.from_
        if start < n:  # every slot from start on: appended or shifted
            for i in range(start, n):
                rows[b"%d" % (head + i)] = dumps(data[i])
        if start != INF and not cleared and stored_end - head > n:  # and the stored ones after
            for position in range(head + max(start, n), stored_end):
                rows[b"%d" % position] = DELETED
        length = self._length_row and page.meta
        if head != stored_head or length:  # the head moved (written until that is committed)
            meta = out.table(self._t_meta)
            if head != stored_head:
                meta[b"head"] = dumps(head) if head else DELETED
            if length:
                meta[b"length"] = dumps(n)

    @classmethod
    def _load(
        cls, space: ObjectSpace, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> PersistedList:
        meta = f"state/item/{object_id}/metadata"
        raw = reader.get(meta, b"head")
        head = 0 if raw is None else loads(raw)
        if type(head) is not int or head < 0:
            raise CorruptStateError(f"list {object_id!r} has an invalid stored head {head!r}")
        raw = reader.get(meta, b"length")  # stored with its length: read up to it
        rows = reader.table(f"state/item/{object_id}/items")
        n = None if raw is None else loads(raw)
        lst = cls(space, object_id, indexed_values("list", object_id, rows, loads, head, n), head)
        lst._length_row = raw is not None
        return lst
