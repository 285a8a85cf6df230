"""Time for keyed state: the clock of a batch, timers, and TTL'd collections.

Everything here is ordinary object-space state in the key group's space, written through
the space's own checkpoint: a key group keeps one persisted sorted set, the *due index*
(id :data:`DUE_ID`), holding ``(time_ms, kind, ...)`` entries ordered by time:

* ``(when, "t", prefix, key, names)``: a timer of the key state ``prefix`` (key ``key``,
  namespace path ``names``; ``(when, "t", prefix, key)`` in the root namespace). A timer is this one row: the timers of a key (for
  :meth:`Timers.list`, ``delete`` and clearing a key's state) are found through an
  in-memory index of the space's timers by ``(prefix, when)``, derived from the due index
  the first time a space's timers are used (O(timers) once per space loaded) and kept up
  to date by every timer operation, never persisted. (Stores written before kept that
  index as a sorted set, id :data:`TIMERS_ID`; it is folded in and deleted on first use.)
* ``(when, "e", object_id, encoded_key, key)``: an entry of a TTL'd dict, set, sorted
  dict, sorted set or value expiring at ``when``; the collection keeps each entry's expiry
  in a dict ``<object_id>%ttl`` (encoded key -> time), which again is the truth.
* ``(when, "q", object_id, b"", None)``: the front element of a TTL'd queue or list
  expires at ``when``; the elements' expiry times are a parallel queue/list
  ``<object_id>%ttl``.

Registering a timer or writing a TTL'd entry therefore writes O(1) rows; finding what is
due pops the front of the index, so expiring k entries costs O(k), never a scan. The
earliest time of a key group (:func:`earliest`) is what the driver records per key group,
so it runs exactly the instances with rows or due work.

Below Spark, a :class:`Clock` is explicit: ``KeyState(space, prefix, clock=Clock(...))``
(or ``KeyState.for_key(space, key, clock)``) gives timers and TTL on any
:class:`~objectspace.ObjectSpace`, and :func:`expire` / :func:`due_timers` do, for one
space, what the runner does for each key group it runs.
"""

from __future__ import annotations

import itertools
import re
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, MutableSet
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from sortedcontainers import SortedDict

from objectspace.collections import (
    PersistedDict,
    PersistedList,
    PersistedQueue,
    PersistedSortedSet,
    PersistedValue,
)
from objectspace.errors import ObjectSpaceError, TimeError
from objectspace.space import ObjectSpace

if TYPE_CHECKING:
    from objectspace.keyed.state import KeyState

__all__ = [
    "DUE_ID",
    "TIMERS_ID",
    "TIME_MODES",
    "UNCLOCKED",
    "Clock",
    "Timers",
    "drop_timers",
    "due_timers",
    "earliest",
    "expire",
    "fire_timer",
    "from_ms",
    "parse_duration",
    "to_ms",
]

DUE_ID = "#time/due"
"""Id of a key group's due index (``#`` never starts a key's id prefix)."""
TIMERS_ID = "#time/timers"
"""Id of the sorted set of ``(key state prefix, when_ms)`` that stores written by earlier
versions kept beside the due index (the timers that had not been deleted); read once, then
deleted (see :func:`_timer_index`)."""
UNCLOCKED = -(1 << 62)
"""Deadlines below ``UNCLOCKED / 2`` belong to TTL'd entries written before the operator
had a time (event mode, before the first watermark): ``UNCLOCKED + ttl``. They are due as
soon as there is a time, which re-bases them to ``ttl`` after it."""
UNORDERED = "%ttlu"
"""Suffix of the id of the value that marks a TTL'd list whose expiry times are out of
order (see :class:`TtlList`)."""
TIME_MODES = (None, "event", "processing")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_UNITS = {
    "ms": 1,
    "millisecond": 1,
    "milliseconds": 1,
    "s": 1000,
    "sec": 1000,
    "secs": 1000,
    "second": 1000,
    "seconds": 1000,
    "m": 60_000,
    "min": 60_000,
    "mins": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
    "days": 86_400_000,
    "week": 604_800_000,
    "weeks": 604_800_000,
}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*")


def parse_duration(value: object, what: str = "duration") -> int:
    """``value`` (a :class:`~datetime.timedelta`, or a string like ``"10 seconds"``,
    ``"1 hour"``, ``"2 minutes 30 seconds"``) in whole milliseconds, >= 0."""
    if isinstance(value, timedelta):
        ms = value // timedelta(milliseconds=1)
    elif isinstance(value, str):
        pos = 0
        total = 0.0
        text = value.strip()
        if not text:
            raise TimeError(f"{what} {value!r} is empty; write e.g. '10 seconds' or '1 hour'")
        while pos < len(value):
            match = _DURATION.match(value, pos)
            unit = match and _UNITS.get(match.group(2).lower())
            if not match or unit is None:
                raise TimeError(
                    f"{what} {value!r} is not a duration: write a number and a unit "
                    f"({', '.join(sorted({'ms', 'seconds', 'minutes', 'hours', 'days'}))}), "
                    "e.g. '10 seconds', '1 hour', or a timedelta"
                )
            total += float(match.group(1)) * unit
            pos = match.end()
        ms = round(total)
    else:
        raise TimeError(f"{what} is a timedelta or a str like '10 seconds', not {value!r}")
    if ms < 0:
        raise TimeError(f"{what} {value!r} is negative")
    return int(ms)


def to_ms(when: object, what: str = "a time") -> int:
    """``when`` (a :class:`~datetime.datetime`, naive meaning UTC, or an int of epoch
    milliseconds) as epoch milliseconds."""
    if type(when) is int:
        return when
    if isinstance(when, datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return (when - _EPOCH) // timedelta(milliseconds=1)
    raise TimeError(
        f"{what} is a datetime (naive meaning UTC) or an int of epoch milliseconds, not {when!r}"
    )


def from_ms(ms: int) -> datetime:
    """Epoch milliseconds as an aware UTC datetime."""
    return _EPOCH + timedelta(milliseconds=ms)


@dataclass(frozen=True, slots=True)
class Clock:
    """The time one batch runs with, fixed for the whole batch.

    ``mode``: ``None``, ``"event"`` or ``"processing"``; ``watermark``: epoch ms or
    ``None`` (no event time seen yet); ``batch_time``: epoch ms of the batch's processing
    time; ``event_time``: the name of the event-time column in event mode (the runner's
    ``event_time``), which the time operators read unless given their own ``time=``.
    :attr:`now` is the operator's time, used by timers and TTL: the watermark in event
    mode, the batch time otherwise.
    """

    mode: str | None = None
    watermark: int | None = None
    batch_time: int | None = None
    event_time: str | None = None

    @property
    def now(self) -> int | None:
        return self.watermark if self.mode == "event" else self.batch_time


def _due_index(space: ObjectSpace) -> PersistedSortedSet:
    if DUE_ID in space:
        return space.get_sorted_set(DUE_ID)
    return space.create_sorted_set(DUE_ID)


def earliest(space: ObjectSpace) -> int | None:
    """The earliest time anything (a timer, a TTL'd entry) is due in ``space``; ``None``:
    nothing (below ``UNCLOCKED / 2`` while entries wait for the operator's first time)."""
    if DUE_ID not in space:
        return None
    index = space.get_sorted_set(DUE_ID)
    return index[0][0] if len(index) else None


# -- timers ------------------------------------------------------------------------------------


class Timers:
    """The timers of one key (state namespace): ``state.timers``.

    A timer fires once the operator's time (the watermark in event mode, the batch time in
    processing mode) reaches it, after the batch's keys with rows were called; its handler
    is ``on_timer(key, when, state)``. A timer is one element of the key group's due
    index: registering writes one row, firing or deleting one, and no object is created
    per key.
    """

    __slots__ = ("_state",)

    def __init__(self, state: KeyState) -> None:
        self._state = state

    def register(self, when: datetime | int) -> None:
        """Register a timer at ``when`` (a datetime, naive meaning UTC, or int epoch ms);
        registering one that exists changes nothing. Writes one row."""
        ms = when if type(when) is int else to_ms(when, "a timer's time")
        state = self._state
        clock = state._clock
        if clock is not None and clock.mode is None:
            raise TimeError(
                f"{state!r}: timers need time_mode='event' or 'processing' "
                "(this operator runs with time_mode=None)"
            )
        timers = _timer_index(state._space, True)
        assert timers is not None
        prefix = state._prefix
        at = (prefix, ms)
        by_key = timers.by_key
        if at in by_key:
            return
        names = state._names
        entry = (ms, "t", prefix, state._key, names) if names else (ms, "t", prefix, state._key)
        timers.due.add(entry)
        by_key[at] = entry

    def delete(self, when: datetime | int) -> None:
        """Delete the timer at ``when``; deleting one that does not exist is a no-op."""
        ms = to_ms(when, "a timer's time")
        state = self._state
        timers = _timer_index(state._space, False)
        if timers is None:
            return
        entry = timers.by_key.pop((state._prefix, ms), None)
        if entry is not None:
            timers.due.discard(entry)

    def _times(self) -> list[int]:
        timers = _timer_index(self._state._space, False)
        if timers is None:
            return []
        prefix = self._state._prefix
        return [
            ms
            for _, ms in timers.by_key.irange(
                (prefix,), (prefix + "\x00",), inclusive=(True, False)
            )
        ]

    def list(self) -> list[datetime]:
        """This key's timers, ascending, as aware UTC datetimes."""
        return [from_ms(ms) for ms in self._times()]

    def __len__(self) -> int:
        return len(self._times())

    def __repr__(self) -> str:
        return f"<Timers of {self._state!r}: {self.list()}>"


class _TimerIndex:
    """The timers of one space by ``(prefix, when)`` -> their element of the due index
    ``due`` (the very element stored there, so it is discarded by equality)."""

    __slots__ = ("by_key", "due")

    def __init__(self, due: PersistedSortedSet) -> None:
        self.due = due
        self.by_key: SortedDict[tuple[str, int], tuple[Any, ...]] = SortedDict()


# Per space (weakly held: it goes with its space), the timer index derived from its due
# index; rebuilt when the space's due index is another object (deleted and re-created).
_TIMER_INDEXES: WeakKeyDictionary[ObjectSpace, _TimerIndex] = WeakKeyDictionary()
# The last space asked for and its index (weakly held too): the common repeat, found
# without the weak dict's lookup.
_LAST_INDEX: tuple[weakref.ref[ObjectSpace], _TimerIndex] | None = None


def _timer_index(space: ObjectSpace, create: bool) -> _TimerIndex | None:
    """The timer index of ``space`` (``None``: no due index and not ``create``).

    Built from the due index on first use: O(entries) once per space (a restored or
    adopted space is a new object). A store written by an earlier version also has the
    sorted set :data:`TIMERS_ID`, which then said which index entries were live timers:
    entries missing from it (deleted timers, cleared keys) are dropped from the due index
    now, and the set is deleted (both written with the next checkpoint)."""
    global _LAST_INDEX
    due = space.find(DUE_ID)
    if due is None:
        if not create:
            return None
        due = space.create_sorted_set(DUE_ID)
    last = _LAST_INDEX
    if last is not None and last[0]() is space and last[1].due is due:
        return last[1]  # the space of the previous call (a batch runs space by space)
    if type(due) is not PersistedSortedSet:
        due = space.get_sorted_set(DUE_ID)  # raises WrongKindError
    found = _TIMER_INDEXES.get(space)
    if found is not None and found.due is due:
        _LAST_INDEX = (weakref.ref(space), found)
        return found
    index = _TimerIndex(due)
    legacy = space.get_sorted_set(TIMERS_ID) if TIMERS_ID in space else None
    stale = []
    for entry in due:
        if entry[1] != "t":
            continue
        at = (entry[2], entry[0])
        if legacy is not None and at not in legacy:
            stale.append(entry)
        else:
            index.by_key[at] = entry
    for entry in stale:
        due.discard(entry)
    if legacy is not None:
        space.delete(TIMERS_ID)
    _TIMER_INDEXES[space] = index
    _LAST_INDEX = (weakref.ref(space), index)
    return index


def drop_timers(space: ObjectSpace, prefix: str) -> None:
    """Delete the timers of every key state whose prefix starts with ``prefix`` (a key's
    state cleared, nested namespaces too). O(log n + timers dropped)."""
    timers = _timer_index(space, False)
    if timers is None:
        return
    by_key = timers.by_key
    for at in list(by_key.irange((prefix,), (prefix + "\U0010ffff",))):
        timers.due.discard(by_key.pop(at))


def due_timers(space: ObjectSpace, now: int | None) -> list[tuple[int, str, Any, tuple[str, ...]]]:
    """Pop the timers of ``space`` due at ``now`` (time <= now), in time order (then by
    key): ``(when_ms, prefix, key, names)`` each, removed from the index. Timers
    registered afterwards fire in a later call. O(due timers)."""
    if now is None:
        return []
    timers = _timer_index(space, False)
    if timers is None:
        return []
    index = timers.due
    taken = [e for e in index.irange(maximum=(now, "t\x7f")) if e[1] == "t"]
    due: list[tuple[int, str, Any, tuple[str, ...]]] = []
    by_key = timers.by_key
    for entry in taken:
        when, _, prefix, key = entry[:4]
        names = entry[4] if len(entry) > 4 else ()
        index.discard(entry)
        by_key.pop((prefix, when), None)
        due.append((when, prefix, key, tuple(names)))
    return due


def fire_timer(
    fn: Any,
    on_timer: Callable[..., Iterable[Mapping[str, Any]]] | None,
    key: Any,
    names: tuple[str, ...],
    when: int,
    root: KeyState,
) -> Iterable[Mapping[str, Any]]:
    """The output of the timer at ``when`` (epoch ms) registered by ``key`` in namespace
    ``names``: ``on_timer`` when given, else the operator's own (an operator with
    ``fire_timer``, as ``chain``, routes it; one with an ``on_timer`` attribute gets it;
    an operator of this package may instead have ``_on_timer_ms``, its ``on_timer`` taking
    the time in epoch ms)."""
    if on_timer is not None:
        return on_timer(key, from_ms(when), root.path(names))
    router = getattr(fn, "fire_timer", None)
    if router is not None:
        return router(key, names, when, root)  # type: ignore[no-any-return]
    in_ms = getattr(fn, "_on_timer_ms", None)
    if in_ms is not None:
        return in_ms(key, when, root.path(names) if names else root)  # type: ignore[no-any-return]
    handler = getattr(fn, "on_timer", None)
    if handler is None:
        raise ObjectSpaceError(
            f"a timer of key {key!r} (namespace {'/'.join(names) or '(root)'}) fired at "
            f"{from_ms(when).isoformat()}, but the function has no on_timer handler: pass "
            "on_timer= or give the operator an on_timer attribute"
        )
    return handler(key, from_ms(when), root.path(names))  # type: ignore[no-any-return]


# -- TTL ---------------------------------------------------------------------------------------


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
    now = None if clock is None else clock.now
    return UNCLOCKED + ttl if now is None else now + ttl


class _Ttl:
    """What the TTL'd views share: the key state, the collection's id, the ttl (ms)."""

    __slots__ = ("_clock", "_id", "_obj", "_space", "_ttl")

    def __init__(self, state: KeyState, obj: Any, ttl: int) -> None:
        self._space = state.space
        self._clock = state.clock
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
    once the value expired (``ttl`` after its last write)."""

    __slots__ = ("_default", "_state", "_state_name")

    def __init__(self, state: KeyState, name: str, default: Any, ttl: int) -> None:
        self._state = state
        self._state_name = name
        self._default = default
        self._space = state.space
        self._clock = state.clock
        self._id = state._raw_id(_escape_name(name))
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


def _escape_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a state name is a non-empty str, not {name!r}")
    return name.replace("%", "%25").replace("/", "%2F")


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
