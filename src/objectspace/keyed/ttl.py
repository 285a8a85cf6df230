"""TTL: entries of a key's collections that expire a fixed time after they were written.

``state.dict(name, ttl="1 hour")`` (and ``set``, ``sorted_dict``, ``sorted_set``,
``value``, ``list``, ``queue``) gives a view that writes through to the persisted
collection and records each entry's deadline: beside the collection, in ``<id>%ttl`` (a dict
encoded key -> deadline, or a queue/list of deadlines parallel to the elements), and in the
key group's due index (:mod:`objectspace.keyed.timers`), so :func:`expire` finds the k
entries due by popping the index's front: O(k), never a scan.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, MutableMapping, MutableSet
from typing import TYPE_CHECKING, Any

from objectspace.collections import (
    PersistedDict,
    PersistedList,
    PersistedQueue,
    PersistedSortedSet,
    PersistedValue,
)
from objectspace.keyed.clock import UNCLOCKED, Clock
from objectspace.keyed.timers import DUE_ID, _due_index
from objectspace.space import ObjectSpace

if TYPE_CHECKING:
    from objectspace.keyed.state import KeyRef

__all__ = [
    "UNORDERED",
    "TtlDict",
    "TtlList",
    "TtlQueue",
    "TtlSet",
    "TtlValue",
    "expire",
]

UNORDERED = "%ttlu"
"""Suffix of the id of the value that marks a TTL'd list whose expiry times are out of
order (see :class:`TtlList`)."""


def expire(space: ObjectSpace, now: int | None) -> int:
    """Delete every TTL'd entry of ``space`` whose time is <= ``now``; the number deleted.
    O(expired entries): pops the front of the due index."""
    if now is None:
        return 0
    if DUE_ID not in space:
        return 0
    index = space.get_sorted_set(DUE_ID)
    taken = [e for e in index.irange(maximum=(now, "\x7f")) if e[1] != "t"]
    expired = 0
    for entry in taken:
        index.discard(entry)
        when, kind, object_id, enc, key = entry
        times_id = object_id + "%ttl"
        if object_id not in space or times_id not in space:
            continue
        if kind == "e":
            times = space.get_dict(times_id)
            if times.get(enc) != when:
                continue  # rewritten since (a later entry is indexed) or deleted
            if when < UNCLOCKED // 2:  # written before there was a time: ttl after now
                times[enc] = when = now + (when - UNCLOCKED)
                index.add((when, kind, object_id, enc, key))
                continue
            del times[enc]
            obj = space.get(object_id)
            if isinstance(obj, PersistedValue):
                space.delete(object_id)
                space.delete(times_id)
            elif isinstance(obj, MutableMapping):
                obj.pop(key, None)
            else:
                obj.discard(key)  # type: ignore[attr-defined]
            expired += 1
        else:
            expired += _expire_sequence(space, index, object_id, times_id, now)
    return expired


def _expire_sequence(
    space: ObjectSpace, index: PersistedSortedSet, object_id: str, times_id: str, now: int
) -> int:
    obj = space.get(object_id)
    times = space.get(times_id)
    expired = 0
    if isinstance(obj, PersistedQueue) and isinstance(times, PersistedQueue):
        if len(times) and times.peek() < UNCLOCKED // 2:
            rebased = [t + now - UNCLOCKED if t < UNCLOCKED // 2 else t for t in times]
            times.clear()
            for t in rebased:
                times.enqueue(t)
        while len(times) and times.peek() <= now:
            times.dequeue()
            obj.dequeue()
            expired += 1
        if len(times):
            index.add((times.peek(), "q", object_id, b"", None))
        return expired
    assert isinstance(obj, PersistedList) and isinstance(times, PersistedList)
    flag_id = object_id + UNORDERED
    if flag_id not in space and len(times) and times[0] >= UNCLOCKED // 2:
        # In order (the common case): the expired elements are a prefix, O(k) to find
        # and, as a list's head moves, O(k) rows to delete.
        k = 0
        n = len(times)
        while k < n and times[k] <= now:
            k += 1
        if k:
            del obj[:k]
            del times[:k]
        if len(times):
            index.add((times[0], "q", object_id, b"", None))
        return k
    # Unordered, or written before there was a time: check every element, O(len).
    before = len(times)
    if any(t < UNCLOCKED // 2 for t in times):
        for i, t in enumerate(list(times)):
            if t < UNCLOCKED // 2:
                times[i] = t + now - UNCLOCKED
    keep = [i for i, t in enumerate(times) if t > now]
    if len(keep) != before:
        if keep == list(range(before - len(keep), before)):
            del obj[: before - len(keep)]
            del times[: before - len(keep)]
        else:
            values = [obj[i] for i in keep]
            new_times = [times[i] for i in keep]
            obj.clear()
            obj.extend(values)
            times.clear()
            times.extend(new_times)
    ordered = all(a <= b for a, b in itertools.pairwise(times))
    if ordered and flag_id in space:
        space.delete(flag_id)
    elif not ordered and flag_id not in space:
        space.create_value(flag_id, True)
    if len(times):
        index.add((min(times), "q", object_id, b"", None))
    return before - len(keep)


def _deadline(clock: Clock | None, ttl: int) -> int:
    now = None if clock is None else clock.ttl_now
    return UNCLOCKED + ttl if now is None else now + ttl


class _Ttl:
    """What the TTL'd views share: the key's space and clock, the collection and its id,
    the ttl (ms)."""

    __slots__ = ("_clock", "_id", "_obj", "_space", "_ttl")

    def __init__(self, ref: KeyRef, obj: Any, ttl: int) -> None:
        self._space = ref.space
        self._clock = ref.clock
        self._obj = obj
        self._id: str = obj.id
        self._ttl = ttl

    @property
    def target(self) -> Any:
        """The persisted collection this view writes through."""
        return self._obj

    def _times_dict(self) -> PersistedDict:
        times_id = self._id + "%ttl"
        space = self._space
        if times_id in space:
            return space.get_dict(times_id)
        return space.create_dict(times_id)

    def _touch(self, key: Any) -> None:
        """The entry ``key`` was written: it expires ``ttl`` from now."""
        enc = self._space.serializer.encode_key(key)[0]
        times = self._times_dict()
        index = _due_index(self._space)
        old = times.get(enc)
        if old is not None:
            index.discard((old, "e", self._id, enc, key))
        when = _deadline(self._clock, self._ttl)
        times[enc] = when
        index.add((when, "e", self._id, enc, key))

    def _forget(self, key: Any) -> None:
        """The entry ``key`` was deleted: drop its expiry."""
        times_id = self._id + "%ttl"
        space = self._space
        if times_id not in space:
            return
        enc = space.serializer.encode_key(key)[0]
        times = space.get_dict(times_id)
        old = times.pop(enc, None)
        if old is not None and DUE_ID in space:
            space.get_sorted_set(DUE_ID).discard((old, "e", self._id, enc, key))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._obj, name)

    def __repr__(self) -> str:
        return f"<ttl {self._ttl} ms: {self._obj!r}>"


class TtlValue(_Ttl):
    """A TTL'd value: ``state.value(name, default, ttl=...)``. Reads give ``default``
    once the value expired (``ttl`` after its last write). ``object_id``: the value's id,
    which exists only while the value is set."""

    __slots__ = ("_default",)

    def __init__(self, ref: KeyRef, object_id: str, default: Any, ttl: int) -> None:
        self._default = default
        self._space = ref.space
        self._clock = ref.clock
        self._id = object_id
        self._ttl = ttl
        self._obj = None

    @property
    def target(self) -> Any:
        return self._space.get(self._id) if self._id in self._space else None

    @property
    def value(self) -> Any:
        if self._id in self._space:
            return self._space.get_value(self._id).value
        return self._default

    @value.setter
    def value(self, value: Any) -> None:
        if self._id in self._space:
            self._space.get_value(self._id).value = value
        else:
            self._space.create_value(self._id, value)
        self._touch(None)

    def clear(self) -> None:
        """Delete the value now (reads give ``default`` again)."""
        if self._id in self._space:
            self._forget(None)
            self._space.delete(self._id)
            times_id = self._id + "%ttl"
            if times_id in self._space:
                self._space.delete(times_id)


class TtlDict(_Ttl, MutableMapping[Any, Any]):
    """A TTL'd dict or sorted dict: each entry expires ``ttl`` after its last write."""

    __slots__ = ()

    def __getitem__(self, key: Any) -> Any:
        return self._obj[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._obj[key] = value
        self._touch(key)

    def __delitem__(self, key: Any) -> None:
        del self._obj[key]
        self._forget(key)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._obj)

    def __len__(self) -> int:
        return len(self._obj)

    def __contains__(self, key: object) -> bool:
        return key in self._obj

    def get(self, key: Any, default: Any = None) -> Any:
        return self._obj.get(key, default)


class TtlSet(_Ttl, MutableSet[Any]):
    """A TTL'd set or sorted set: each element expires ``ttl`` after it was last added."""

    __slots__ = ()

    def add(self, value: Any) -> None:
        self._obj.add(value)
        self._touch(value)

    def discard(self, value: Any) -> None:
        if value in self._obj:
            self._obj.discard(value)
            self._forget(value)

    def update(self, values: Iterable[Any]) -> None:
        for value in values:
            self.add(value)

    def __contains__(self, value: object) -> bool:
        return value in self._obj

    def __iter__(self) -> Iterator[Any]:
        return iter(self._obj)

    def __len__(self) -> int:
        return len(self._obj)

    def __getitem__(self, index: Any) -> Any:
        return self._obj[index]


class _TtlSequence(_Ttl):
    __slots__ = ()

    def _times(self, kind: type[Any]) -> Any:
        times_id = self._id + "%ttl"
        space = self._space
        if times_id in space:
            return space.get(times_id)
        return (
            space.create_queue(times_id) if kind is PersistedQueue else space.create_list(times_id)
        )

    def _index_front(self, when: int) -> None:
        _due_index(self._space).add((when, "q", self._id, b"", None))

    def __len__(self) -> int:
        return len(self._obj)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._obj)

    def __bool__(self) -> bool:
        return len(self._obj) > 0


class TtlQueue(_TtlSequence):
    """A TTL'd queue: each element expires ``ttl`` after it was enqueued, from the front."""

    __slots__ = ()

    def enqueue(self, value: Any) -> None:
        times = self._times(PersistedQueue)
        when = _deadline(self._clock, self._ttl)
        if not len(times):
            self._index_front(when)
        self._obj.enqueue(value)
        times.enqueue(when)

    def dequeue(self) -> Any:
        value = self._obj.dequeue()
        times = self._times(PersistedQueue)
        old = times.dequeue()
        index = _due_index(self._space)
        index.discard((old, "q", self._id, b"", None))
        if len(times):
            self._index_front(times.peek())
        return value

    def peek(self) -> Any:
        return self._obj.peek()

    def clear(self) -> None:
        while len(self._obj):
            self.dequeue()


class TtlList(_TtlSequence):
    """A TTL'd list: each element expires ``ttl`` after it was last written.

    While the elements' expiry times ascend along the list (appends, in-order inserts,
    rewrites of the last element), expiring k elements from the front costs O(k) rows.
    An element rewritten elsewhere expires after those behind it: the list is then marked
    unordered (a value ``<id>%ttlu``) and its next expiry checks every element, O(len),
    and clears the mark if what remains is in order again."""

    __slots__ = ()

    def _unordered(self) -> None:
        flag_id = self._id + UNORDERED
        if flag_id not in self._space:
            self._space.create_value(flag_id, True)

    def _check_order(self, times: PersistedList, i: int, when: int) -> None:
        """Mark the list unordered unless ``when`` at ``i`` fits between its neighbours."""
        if (i > 0 and times[i - 1] > when) or (i + 1 < len(times) and times[i + 1] < when):
            self._unordered()

    def append(self, value: Any) -> None:
        times = self._times(PersistedList)
        when = _deadline(self._clock, self._ttl)
        if not len(times):
            self._index_front(when)
        elif times[-1] > when:
            self._unordered()
        self._obj.append(value)
        times.append(when)

    def extend(self, values: Iterable[Any]) -> None:
        for value in values:
            self.append(value)

    def __getitem__(self, index: Any) -> Any:
        return self._obj[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        times = self._times(PersistedList)
        when = _deadline(self._clock, self._ttl)
        if isinstance(index, slice):
            values = list(value)
            was_empty = not len(times)
            self._obj[index] = values
            times[index] = [when] * len(values)
            if values:
                if was_empty:
                    self._index_front(when)
                self._unordered()
            return
        n = len(times)
        self._obj[index] = value  # raises IndexError as a list does
        i = index + n if index < 0 else index
        times[i] = when
        self._check_order(times, i, when)

    def insert(self, index: int, value: Any) -> None:
        times = self._times(PersistedList)
        when = _deadline(self._clock, self._ttl)
        n = len(times)
        if not n:
            self._index_front(when)
        self._obj.insert(index, value)
        i = max(0, index + n) if index < 0 else min(index, n)
        times.insert(i, when)
        self._check_order(times, i, when)

    def pop(self, index: int = -1) -> Any:
        value = self._obj.pop(index)
        self._times(PersistedList).pop(index)
        return value

    def __delitem__(self, index: Any) -> None:
        del self._obj[index]
        del self._times(PersistedList)[index]

    def clear(self) -> None:
        self._obj.clear()
        self._times(PersistedList).clear()
        flag_id = self._id + UNORDERED
        if flag_id in self._space:
            self._space.delete(flag_id)
