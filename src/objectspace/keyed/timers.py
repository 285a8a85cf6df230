"""Timers of keyed state, and the due index they share with TTL.

A key group keeps one persisted sorted set, the *due index* (id :data:`DUE_ID`), holding
``(time_ms, kind, ...)`` entries ordered by time, in the key group's space and written with
its checkpoint:

* ``(when, "t", prefix, key, names)``: a timer of the key state ``prefix`` (key ``key``,
  namespace path ``names``; ``(when, "t", prefix, key)`` in the root namespace). A timer
  is this one row. The timers of a key (for :meth:`Timers.list`, ``delete`` and clearing a
  key's state) are found through an in-memory index of the space's timers by ``(prefix,
  when)``, derived from the due index the first time a space's timers are used
  (O(timers) once per space loaded) and kept up to date by every timer operation, never
  persisted. A space that still holds the sorted set :data:`TIMERS_ID` (the live timers by
  ``(prefix, when)``, as older stores kept them beside the due index) has it folded in
  and deleted on first use.
* ``(when, "e", object_id, encoded_key, key)`` and ``(when, "q", object_id, b"", None)``:
  TTL'd entries and the front of TTL'd queues and lists (:mod:`objectspace.keyed.ttl`).

Registering a timer writes one row; finding what is due pops the front of the index, so
firing k timers costs O(k), never a scan. The earliest time of a key group
(:func:`earliest`) is what the driver records per key group, so it runs exactly the
instances with rows or due work.

**The timer contract.** A timer fires once the operator's time (the watermark in event
mode, the batch time in processing mode) reaches it, after the batch's keys with rows were
called, and :func:`fire_timer` hands it to one handler:

1. the ``on_timer=`` function given to the runner or ``simulate``, if any:
   ``on_timer(key, when: datetime, state)`` with ``state`` the namespace that registered
   the timer;
2. else the function's :class:`TimerHandler` method ``handle_timer(key, names, when_ms,
   state)``, which every operator of :mod:`objectspace.operators` that registers timers
   implements: ``state`` is the key's root state and ``names`` the path of the namespace
   that registered the timer, which the handler routes itself (``chain`` to the operator
   that registered it);
3. else the function's own ``on_timer(key, when: datetime, state)`` method: the users'
   form, for a callable object written by hand (``state`` as in 1).

Below Spark, ``KeyState(space, prefix, clock=Clock(...))`` (or ``KeyState.for_key(space,
key, clock)``) gives timers on any :class:`~objectspace.ObjectSpace`, and
:func:`due_timers` and :func:`fire_timer` do, for one space, what the runner does for
each key group it runs.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol
from weakref import WeakKeyDictionary

from objectspace.collections import PersistedSortedSet, untrack
from objectspace.errors import ObjectSpaceError, TimeError
from objectspace.keyed.clock import MAX_MS, MIN_MS, from_ms, to_ms
from objectspace.space import ObjectSpace

if TYPE_CHECKING:
    from objectspace.keyed.state import KeyRef, KeyState

__all__ = [
    "DUE_ID",
    "TIMERS_ID",
    "TimerHandler",
    "Timers",
    "drop_timers",
    "due_timers",
    "earliest",
    "expired_timers",
    "fire_timer",
    "timer_handler",
    "timer_registrar",
]

DUE_ID = "#time/due"
"""Id of a key group's due index (``#`` never starts a key's id prefix)."""
TIMERS_ID = "#time/timers"
"""Id of the sorted set of ``(key state prefix, when_ms)`` that older stores kept beside
the due index (the timers that had not been deleted); read once, then deleted (see
:func:`_timer_index`)."""


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


class Timers:
    """The timers of one key (state namespace) ``ref``: ``state.timers``.

    A timer fires once the operator's time (the watermark in event mode, the batch time in
    processing mode) reaches it, after the batch's keys with rows were called, and goes to
    the handler the module's timer contract names. A timer is one element of the key
    group's due index: registering writes one row, firing or deleting one, and no object
    is created per key.
    """

    __slots__ = ("_ref",)

    def __init__(self, ref: KeyRef) -> None:
        self._ref = ref

    def register(self, when: datetime | int) -> None:
        """Register a timer at ``when`` (a datetime, naive meaning UTC, or int epoch ms);
        registering one that exists changes nothing; a time outside the datetimes (years 1
        to 9999) is refused with :class:`TimeError`. Writes one row."""
        ms = when if type(when) is int else to_ms(when, "a timer's time")
        ref = self._ref
        if not MIN_MS <= ms <= MAX_MS:
            raise _out_of_range(repr(ref), ms)
        clock = ref.clock
        if clock is not None and clock.mode is None:
            raise TimeError(
                f"{ref!r}: timers need time_mode='event' or 'processing' "
                "(this operator runs with time_mode=None)"
            )
        timers = _timer_index(ref.space, True)
        assert timers is not None
        timers.register(ref.prefix, ref.key, ms, ref.names)

    def delete(self, when: datetime | int) -> None:
        """Delete the timer at ``when``; deleting one that does not exist is a no-op."""
        ms = when if type(when) is int else to_ms(when, "a timer's time")
        ref = self._ref
        timers = _timer_index(ref.space, False)
        if timers is None:
            return
        entry = timers.pop(ref.prefix, ms)
        if entry is not None:
            timers.due.discard(entry)

    def _times(self) -> list[int]:
        timers = _timer_index(self._ref.space, False)
        if timers is None:
            return []
        whens = timers.by_prefix.get(self._ref.prefix)
        return sorted(whens) if whens else []

    def list(self) -> list[datetime]:
        """This key's timers, ascending, as aware UTC datetimes."""
        return [from_ms(ms) for ms in self._times()]

    def __len__(self) -> int:
        return len(self._times())

    def __repr__(self) -> str:
        return f"<Timers of {self._ref!r}: {self.list()}>"


class _TimerIndex:
    """The timers of one space: ``by_prefix``, a key state prefix -> when -> its element of
    the due index ``due`` (the very element stored there, so it is discarded by equality);
    ``nested``, a key's root prefix -> the prefixes of its nested namespaces that have had
    timers (what :func:`drop_timers` looks through besides the prefix itself). Plain
    dicts: registering, firing and deleting a timer touch no sorted structure but the due
    index."""

    __slots__ = ("by_prefix", "due", "nested")

    def __init__(self, due: PersistedSortedSet) -> None:
        self.due = due
        self.by_prefix: dict[str, dict[int, tuple[Any, ...]]] = {}
        self.nested: dict[str, set[str]] = {}

    def add(self, entry: tuple[Any, ...]) -> None:
        """Index the due index's ``entry`` (a timer). The entry (its time, tag, prefix,
        key and names, all made before it) can be in no cycle: untracked by the cyclic
        collector, it leaves its key's dict of timers untracked too."""
        prefix = entry[2]
        whens = self.by_prefix.get(prefix)
        if whens is None:
            whens = self.by_prefix[prefix] = {}
        whens[entry[0]] = untrack(entry)
        if len(entry) > 4 and entry[4]:  # a nested namespace's: note it under its key's root
            root = prefix[: prefix.find("/") + 1]
            if root != prefix:
                self.nested.setdefault(root, set()).add(prefix)

    def register(self, prefix: str, key: Any, when: int, names: tuple[str, ...] = ()) -> None:
        """Register the timer at ``when`` (epoch ms, in range) of key state ``prefix`` (key
        ``key``, namespace path ``names``), unless it exists: one row of the due index."""
        by_prefix = self.by_prefix
        whens = by_prefix.get(prefix)
        if whens is None:
            whens = by_prefix[prefix] = {}
        elif when in whens:
            return
        entry = (when, "t", prefix, key, names) if names else (when, "t", prefix, key)
        try:
            self.due.add(entry)
        except BaseException:
            if not whens:
                del by_prefix[prefix]
            raise
        if names:
            self.add(entry)  # (notes the nested namespace)
        else:
            whens[when] = untrack(entry)  # what add does for a root namespace's timer

    def get(self, prefix: str, when: int) -> tuple[Any, ...] | None:
        whens = self.by_prefix.get(prefix)
        return None if whens is None else whens.get(when)

    def pop(self, prefix: str, when: int) -> tuple[Any, ...] | None:
        """Remove and return the timer at ``when`` of ``prefix`` (``None``: none)."""
        whens = self.by_prefix.get(prefix)
        if whens is None:
            return None
        entry = whens.pop(when, None)
        if not whens:
            del self.by_prefix[prefix]
        return entry


# Per space (weakly held: it goes with its space), the timer index derived from its due
# index; rebuilt when the space's due index is another object (deleted and re-created).
_TIMER_INDEXES: WeakKeyDictionary[ObjectSpace, _TimerIndex] = WeakKeyDictionary()
# The last space asked for and its index (weakly held too): the common repeat, found
# without the weak dict's lookup.
_LAST_INDEX: tuple[weakref.ref[ObjectSpace], _TimerIndex] | None = None


def _timer_index(space: ObjectSpace, create: bool) -> _TimerIndex | None:
    """The timer index of ``space`` (``None``: no due index and not ``create``).

    Built from the due index on first use: O(entries) once per space (a restored or
    adopted space is a new object). A space that holds the sorted set :data:`TIMERS_ID`
    (which says which index entries are live timers) has the entries missing from it
    (deleted timers, cleared keys) dropped from the due index now, and the set deleted
    (both written with the next checkpoint)."""
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
        if legacy is not None and (entry[2], entry[0]) not in legacy:
            stale.append(entry)
        else:
            index.add(entry)
    for entry in stale:
        due.discard(entry)
    if legacy is not None:
        space.delete(TIMERS_ID)
    _TIMER_INDEXES[space] = index
    _LAST_INDEX = (weakref.ref(space), index)
    return index


def timer_registrar(space: ObjectSpace) -> Callable[[str, Any, int], None]:
    """``register(prefix, key, when_ms)``: what ``Timers(KeyRef(space, prefix, key,
    clock=c)).register(when_ms)`` does for a clocked operator's key (its root namespace),
    without a :class:`Timers` per call, for an operator that registers many timers of one
    space in a row. Valid while the space's due index is the same object (nothing between
    two calls deletes it)."""
    timers = _timer_index(space, True)
    assert timers is not None
    add = timers.register

    def register(prefix: str, key: Any, when: int) -> None:
        if not MIN_MS <= when <= MAX_MS:
            raise _out_of_range(f"<KeyRef {prefix!r}>", when)
        add(prefix, key, when)

    return register


def _out_of_range(who: str, ms: int) -> TimeError:
    return TimeError(f"{who}: a timer at {ms} epoch ms is outside the datetimes (years 1 to 9999)")


def drop_timers(space: ObjectSpace, prefix: str) -> None:
    """Delete the timers of every key state whose prefix starts with ``prefix`` (a key's
    state cleared, nested namespaces too). O(log n + timers dropped)."""
    timers = _timer_index(space, False)
    if timers is None:
        return
    by_prefix = timers.by_prefix
    prefixes = [prefix]
    root = prefix[: prefix.find("/") + 1]
    nested = timers.nested.get(root)
    if nested:
        inner = [p for p in nested if p.startswith(prefix)]
        nested.difference_update(inner)
        prefixes.extend(p for p in inner if p != prefix)
        if not nested:
            del timers.nested[root]
    for one in prefixes:
        whens = by_prefix.pop(one, None)
        if whens:
            for entry in whens.values():
                timers.due.discard(entry)


def due_timers(space: ObjectSpace, now: int | None) -> list[tuple[int, str, Any, tuple[str, ...]]]:
    """Pop the timers of ``space`` due at ``now`` (time <= now), in time order (then by
    key): ``(when_ms, prefix, key, names)`` each, removed from the index. Timers
    registered afterwards fire in a later call. O(due timers)."""
    return list(expired_timers(space, now))


def expired_timers(
    space: ObjectSpace, now: int | None
) -> Iterator[tuple[int, str, Any, tuple[str, ...]]]:
    """The timers of ``space`` due at ``now`` (time <= now), one by one, in time order (then
    by key), as a batch fires them: ``(when_ms, prefix, key, names)`` each. A timer stays
    registered while the consumer handles it (its key's :meth:`Timers.list` shows it, as
    Spark's ``listTimers`` does in ``handleExpiredTimer``) and is removed when the consumer
    asks for the next one; a due timer deleted meanwhile (by the handler of an earlier one)
    does not fire, and timers registered meanwhile fire in a later call. O(due timers)."""
    if now is None:
        return
    timers = _timer_index(space, False)
    if timers is None:
        return
    index = timers.due
    by_prefix = timers.by_prefix
    taken: list[tuple[Any, ...]] = [e for e in index.irange(maximum=(now, "t\x7f")) if e[1] == "t"]
    fired: list[tuple[Any, ...]] = []
    timers_of = by_prefix.get
    try:
        for entry in taken:
            when = entry[0]
            prefix = entry[2]
            whens = timers_of(prefix)
            if whens is None or whens.get(when) is not entry:
                continue  # deleted by an earlier handler
            yield when, prefix, entry[3], tuple(entry[4]) if len(entry) > 4 else ()
            whens = timers_of(prefix)
            if whens is not None and whens.get(when) is entry:
                del whens[when]
                if not whens:
                    del by_prefix[prefix]
                fired.append(entry)
    finally:
        # The fired timers leave the due index at once (most often its first elements:
        # one slice), but for one registered again meanwhile: its equal element stays in
        # the index, and is the one its key's entry names.
        gone = []
        for entry in fired:
            whens = by_prefix.get(entry[2])
            if whens is not None and entry[0] in whens:
                whens[entry[0]] = entry
            else:
                gone.append(entry)
        index._discard_sorted(gone)


class TimerHandler(Protocol):
    """What an operator implements to handle the timers it registers: one method, as
    Spark's ``StatefulProcessor.handleExpiredTimer``.

    ``handle_timer(key, names, when_ms, state)`` gets the key, the path ``names`` of the
    namespace (relative to ``state``) whose ``state.timers`` registered the timer, its time
    in epoch ms, and ``state``, the key's root state as the operator was called with it
    (a ``chain`` hands each operator its namespace, and the rest of the path). It returns
    the output rows, as a call with rows does. A leaf operator handles ``names == ()``,
    its own timers, in ``state``; an operator that runs others in namespaces (``chain``,
    ``expire_after``) routes by ``names[0]`` and passes ``names[1:]`` on, through
    :func:`fire_timer`. ``state.path(names)`` is the namespace that registered it.
    """

    def handle_timer(
        self, key: Any, names: tuple[str, ...], when_ms: int, state: KeyState
    ) -> Iterable[Mapping[str, Any]]: ...


def fire_timer(
    fn: Any,
    on_timer: Callable[[Any, datetime, KeyState], Iterable[Mapping[str, Any]]] | None,
    key: Any,
    names: tuple[str, ...],
    when: int,
    root: KeyState,
) -> Iterable[Mapping[str, Any]]:
    """The output of the timer at ``when`` (epoch ms) that ``key``'s namespace ``names``
    registered, ``root`` being the key's root state: ``on_timer(key, when, state)`` when
    given, else ``fn``'s :class:`TimerHandler` method, else ``fn``'s own ``on_timer(key,
    when, state)`` (see the module's timer contract); :class:`ObjectSpaceError` if ``fn``
    has neither."""
    return timer_handler(fn, on_timer)(key, names, when, root)


def timer_handler(
    fn: Any,
    on_timer: Callable[[Any, datetime, KeyState], Iterable[Mapping[str, Any]]] | None,
) -> Callable[[Any, tuple[str, ...], int, KeyState], Iterable[Mapping[str, Any]]]:
    """``handle(key, names, when, root)``: what :func:`fire_timer` does with ``fn`` and
    ``on_timer``, the handler looked up once (for a batch that fires many timers). Calling
    it raises :class:`ObjectSpaceError` if ``fn`` has no handler."""
    handler: Any = on_timer
    if handler is None:
        handle = getattr(fn, "handle_timer", None)
        if handle is not None:
            return handle  # type: ignore[no-any-return]
        handler = getattr(fn, "on_timer", None)
    if handler is None:

        def refuse(
            key: Any, names: tuple[str, ...], when: int, root: KeyState
        ) -> Iterable[Mapping[str, Any]]:
            raise ObjectSpaceError(
                f"a timer of key {key!r} (namespace {'/'.join(names) or '(root)'}) fired at "
                f"{from_ms(when).isoformat()}, but the function has no timer handler: pass "
                "on_timer= (key, when, state), or give the function an on_timer method"
            )

        return refuse

    def call(
        key: Any, names: tuple[str, ...], when: int, root: KeyState
    ) -> Iterable[Mapping[str, Any]]:
        # on_timer= or the function's own on_timer: a datetime and the registering namespace
        return handler(key, from_ms(when), root.path(names) if names else root)  # type: ignore[no-any-return]

    return call
