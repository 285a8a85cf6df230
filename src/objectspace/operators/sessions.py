"""``session_window``: sessions of events per key, closed by a gap of event time.

A session keeps its running aggregates in one entry of a sorted dict the key group's keys
share (keys rarely hold more than one session, so an object per key would be created and
deleted with nearly every session). A key's sessions share one event-time timer, at or
before the earliest session end (a growing session keeps it, an early firing arms the
next). When the watermark reaches a session's end its timer has fired and the session is
emitted once, as ``{"start", "end", <aggs>}`` with aware UTC datetimes, and its entry is
deleted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Any

from objectspace.collections import PersistedSortedDict, untrack
from objectspace.keyed import (
    Clock,
    KeyRef,
    KeyState,
    Timers,
    expired_timers,
    shared_dict,
    timer_registrar,
)
from objectspace.operators._base import (
    KeyedOperator,
    Row,
    _check_column,
    _check_duration,
    _check_optional_column,
    _format_duration,
    _row_times,
)
from objectspace.operators.timewindows import _check_aggs, _TimeWindowed
from objectspace.space import ObjectSpace

__all__ = ["session_window"]


class _SessionWindow(_TimeWindowed):
    __slots__ = ("gap",)
    name = "session_window"

    def __init__(self, gap: int, value: str, aggs: tuple[str, ...], time: str | None) -> None:
        super().__init__(value, aggs, time)
        self.gap = gap

    def _args(self) -> Iterable[str]:
        return (_format_duration(self.gap), *self._agg_args())

    def late_time(self, event_ms: int) -> int:
        """A row is late by its own session's end, ``t + gap`` (Spark's rule: late when
        that end is at or below the late watermark, before any merging)."""
        return event_ms + self.gap

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        sessions, prefix = shared_dict(state, _SESSIONS)
        found = _session_keys(state, sessions, prefix)
        before = _expand(sessions._data, found) if found else {}
        times = _row_times(self, state, rows)
        self._update(sessions, prefix, before, self._values(rows), times, state)
        return []

    def input_columns(self, event_time: str | None) -> tuple[str, ...] | None:
        """The columns :meth:`run_columns` takes per key: the event time, and the value
        when an aggregate needs it (``None``: without an event time column, rows)."""
        column = self.time or event_time
        if column is None:
            return None
        return (column, self.value) if self.needs[0] else (column,)

    def run_columns(
        self,
        space: ObjectSpace,
        keys: list[tuple[str, Any, tuple[list[Any], ...]]],
        clock: Clock | None,
    ) -> list[tuple[Any, list[Row]]]:
        """:meth:`run_group` on columns: every key of one key group, ``(prefix, key,
        columns)`` with ``columns`` the lists of :meth:`input_columns` in the rows' order,
        without a dict per row. A key the fast path cannot take (times that are not ints
        of epoch ms, state of older stores) gets its rows as dicts of those columns."""
        if clock is None or clock.mode != "event":
            raise ValueError(f"{self!r}: run_columns needs an event-time clock")
        names = self.input_columns(clock.event_time)
        assert names is not None
        sessions = shared_dict(KeyRef(space, ""), _SESSIONS)[0]
        data = sessions._data
        between = sessions._between
        update = self._update
        check = self.needs[2] or self.needs[3]
        register = None
        # Every key's times ints (the common case) in one pass, not a generator per key.
        ints = all(type(t) is int for _, _, cols in keys for t in cols[0])
        for prefix, key, cols in keys:
            times = cols[0]
            values = cols[1] if len(cols) > 1 else None
            if (
                not (ints or all(type(t) is int for t in times))
                or prefix + _LEGACY in space
                or (check and values is not None and None in values)
            ):
                rows = [dict(zip(names, one, strict=True)) for one in zip(*cols, strict=True)]
                self(key, rows, KeyState(space, prefix, key, (), clock))
                register = None  # (the key's own path may have replaced the due index)
                continue
            found = between((prefix,), (prefix + "\x00",))
            if not found:
                if _ascending(times):  # no open session, rows in time order: _update's
                    if register is None:  # common case, without a KeyRef and Timers
                        register = timer_registrar(space)
                    register(prefix, key, self._open(sessions, prefix, values, times))
                    continue
                before = {}
            elif len(found) == 1 and self._extend(sessions, found[0], values, times):
                continue
            else:
                before = _expand(data, found)
            update(sessions, prefix, before, values, times, KeyRef(space, prefix, key, (), clock))
        return []

    def run_group(
        self, space: ObjectSpace, keys: list[tuple[str, Any, list[Row]]], clock: Clock | None
    ) -> list[tuple[Any, list[Row]]]:
        """Every key of one key group with rows, ``(prefix, key, rows)`` in the order the
        runner calls them: what calling the operator key by key does (the same state, the
        same timers, no output), without a key state object, a shared-dict lookup or a
        time conversion per key. A key the fast path cannot take (state of older stores, a
        time that is not an int of epoch ms) goes through :meth:`__call__`."""
        column = None if clock is None or clock.mode != "event" else self.time or clock.event_time
        if column is None:
            for prefix, key, rows in keys:
                self(key, rows, KeyState(space, prefix, key, (), clock))
            return []
        sessions = shared_dict(KeyRef(space, ""), _SESSIONS)[0]
        data = sessions._data
        between = sessions._between
        update = self._update
        for prefix, key, rows in keys:
            times: list[Any] = [row.get(column) for row in rows]
            if not all(type(t) is int for t in times) or prefix + _LEGACY in space:
                self(key, rows, KeyState(space, prefix, key, (), clock))
                continue
            values = self._values(rows)
            found = between((prefix,), (prefix + "\x00",))
            if len(found) == 1 and self._extend(sessions, found[0], values, times):
                continue
            before = _expand(data, found) if found else {}
            update(sessions, prefix, before, values, times, KeyRef(space, prefix, key, (), clock))
        return []

    def _extend(
        self,
        sessions: PersistedSortedDict,
        at: tuple[str, int],
        values: list[Any] | None,
        times: list[int],
    ) -> bool:
        """The common case of a key with one open session ``at`` whose rows (in time order)
        all fall within it as it grows: the session's entry updated, its timer kept (its
        end only grows), as :meth:`_update` would; ``False``, changing nothing, otherwise."""
        start = at[1]
        stored = sessions._data[at]
        end = start + stored[0]
        gap = self.gap
        for t in times:
            if t < start or t > end:
                return False
            if t + gap > end:
                end = t + gap
        entry = _expand_one(start, stored)
        entry[0] = end
        self._add_all(entry, 1, values, len(times))
        sessions[at] = _stored(entry, start, not (self.needs[2] or self.needs[3]))
        return True

    def _update(
        self,
        sessions: PersistedSortedDict,
        prefix: str,
        before: dict[int, list[Any]],
        values: list[Any] | None,
        times: list[int],
        ref: KeyRef,
    ) -> None:
        """Add the rows of ``values`` (from :meth:`_values`) at ``times`` to the key's open
        sessions ``before`` (start -> [end, count, sum, min, max]), write back what changed
        and keep the key's timer."""
        if not before and _ascending(times):
            # No open session and the rows in time order (the common case).
            Timers(ref).register(self._open(sessions, prefix, values, times))
            return
        gap = self.gap
        add = self._add_value
        short = not (self.needs[2] or self.needs[3])  # no min/max: [length, count, sum]
        vs = values if values is not None else [None] * len(times)
        # A local copy of the open sessions, start -> [end, count, sum, min, max], written
        # back where a session changed: an untouched session writes nothing.
        open_ = {s: e.copy() for s, e in before.items()} if before else {}
        for v, t in zip(vs, times, strict=True):
            reach = t + gap
            # The sessions the event's own [t, t + gap] touches: start <= t + gap, end >= t.
            hits = [s for s, e in open_.items() if s <= reach and e[0] >= t] if open_ else ()
            if not hits:
                entry = open_[t] = [reach, 0, 0, None, None]
            elif len(hits) == 1:
                (s,) = hits
                entry = open_[s]
                if entry[0] < reach:
                    entry[0] = reach
                if t < s:
                    del open_[s]
                    open_[t] = entry
            else:
                hits.sort()
                entry = open_.pop(hits[0])
                for s in hits[1:]:
                    other = open_.pop(s)
                    entry[0] = max(entry[0], other[0])
                    self._merge(entry, 1, other)
                entry[0] = max(entry[0], reach)
                open_[min(hits[0], t)] = entry
            add(entry, 1, v)
        if before:
            for s in before.keys() - open_.keys():
                del sessions[(prefix, s)]
        for s, entry in open_.items():
            if before.get(s) != entry:
                sessions[(prefix, s)] = _stored(entry, s, short)
        if open_:
            first = _earliest_end(open_)
            if not before:
                # No open session before: no timer is armed (the last one fired, or none).
                Timers(ref).register(first)
            elif first < _earliest_end(before):
                # An earlier session than the armed timer (at or before the old earliest
                # end) may cover: re-arm. Otherwise the armed timer still comes first.
                self._arm(Timers(ref), first)

    def _open(
        self,
        sessions: PersistedSortedDict,
        prefix: str,
        values: list[Any] | None,
        times: list[int],
    ) -> int:
        """The rows of ``values`` at ``times`` (ascending) of a key with no open session:
        each row joins the last session or opens the next, as :meth:`_update`'s general
        merge would; the sessions written, and the earliest end returned (the time of the
        key's timer, which the caller registers)."""
        gap = self.gap
        add = self._add_value
        short = not (self.needs[2] or self.needs[3])  # no min/max: [length, count, sum]
        vs = values if values is not None else [None] * len(times)
        entry: list[Any] = []
        start = 0
        first = None
        for v, t in zip(vs, times, strict=True):
            if not entry or t > entry[0]:
                if entry:
                    sessions[(prefix, start)] = _stored(entry, start, short)
                    if first is None:
                        first = entry[0]
                start = t
                entry = [t + gap, 0, 0, None, None]
            else:
                entry[0] = t + gap
            add(entry, 1, v)
        sessions[(prefix, start)] = _stored(entry, start, short)
        return int(entry[0] if first is None else first)

    @staticmethod
    def _arm(timers: Timers, first: int) -> None:
        """Keep one timer at or before the earliest session end ``first``.

        A session that grows keeps its timer: when it fires early, :meth:`_on_timer_ms` arms
        the next one. So a batch that extends a session writes its dict entry only, not a
        timer delete and register each time its end moves."""
        armed = timers._times()
        if armed and armed[0] <= first:
            return
        for t in armed:
            timers.delete(t)
        timers.register(first)

    def _on_timer_ms(self, key: Any, when: int, state: KeyState) -> list[Row]:
        """Emit (and forget) the key's sessions that the watermark reached (end at or before
        it), and arm the timer of the next one."""
        sessions, prefix = shared_dict(state, _SESSIONS)
        return self._fire(sessions, _session_keys(state, sessions, prefix), when, state)

    def fire_group(
        self, space: ObjectSpace, now: int | None, clock: Clock | None
    ) -> tuple[int, list[tuple[Any, list[Row]]]]:
        """Fire the timers of one key group due at ``now``, as the runner fires them one by
        one through :meth:`handle_timer` (the same order, state and output): the number
        fired and each fired key's output rows. A timer of a nested namespace or a key with
        older stores' state goes through :meth:`handle_timer`."""
        fired = 0
        out: list[tuple[Any, list[Row]]] = []
        sessions = None
        register = None
        floor = None if clock is None else clock.now
        for when, prefix, key, names in expired_timers(space, now):
            fired += 1
            if names or prefix + _LEGACY in space:
                rows = self.handle_timer(key, names, when, KeyState(space, prefix, key, (), clock))
                register = None  # (a handler may have replaced the due index)
            else:
                if sessions is None:
                    sessions = shared_dict(KeyRef(space, ""), _SESSIONS)[0]
                found = sessions._between((prefix,), (prefix + "\x00",))
                if len(found) == 1:
                    # The key's one session (the common case), as _fire takes it, without
                    # a KeyRef or Timers: emitted when it ended, else its timer re-armed.
                    at = when if floor is None or floor < when else floor
                    row, end = self._fire_one(sessions, found[0], at)
                    if row is not None:
                        out.append((key, [row]))
                        continue
                    if register is None:
                        register = timer_registrar(space)
                    register(prefix, key, end)
                    continue
                rows = self._fire(sessions, found, when, KeyRef(space, prefix, key, (), clock))
            if rows:
                out.append((key, rows))
        return fired, out

    def _fire(
        self, sessions: PersistedSortedDict, found: list[tuple[str, int]], when: int, ref: KeyRef
    ) -> list[Row]:
        """The rows of the key's sessions (at keys ``found`` of the shared dict) that the
        timer at ``when`` ends, deleted; the timer of the next one armed."""
        if not found:
            return []
        clock = ref.clock
        now = when if clock is None or clock.now is None else max(clock.now, when)
        if len(found) == 1:  # the key's one session (the common case)
            row, end = self._fire_one(sessions, found[0], now)
            if row is None:
                Timers(ref).register(end)
                return []
            return [row]
        prefix = ref.prefix
        open_ = _expand(sessions._data, found)
        ended = [s for s, e in open_.items() if e[0] <= now]
        if len(ended) > 1:
            ended.sort()
        out = []
        for start in ended:
            entry = open_.pop(start)
            del sessions[(prefix, start)]
            out.append(self._row(start, entry[0], entry, 1))
        if open_:
            # The timer that fired was the key's only one: arm the next.
            Timers(ref).register(_earliest_end(open_))
        return out

    def _fire_one(
        self, sessions: PersistedSortedDict, at: tuple[str, int], now: int
    ) -> tuple[Row | None, int]:
        """A key's one session, at key ``at`` of the shared dict, from its stored entry
        [length, count, sum(, min, max)]: its row and end when it ended by ``now`` (the
        entry deleted), else ``None`` and its end, where its timer is to be re-armed."""
        stored = sessions._data[at]
        start = at[1]
        end = start + stored[0]
        if end > now:
            return None, end
        del sessions[at]
        return self._row(start, end, stored, 1), end


def _earliest_end(sessions: dict[int, list[Any]]) -> int:
    """The earliest end of (non-empty) ``sessions``, start -> [end, ...]."""
    if len(sessions) == 1:  # the common case, without a generator
        (entry,) = sessions.values()
        return int(entry[0])
    return min(int(e[0]) for e in sessions.values())


# session_window keeps every key's open sessions in the key group's shared dict
# ``_SESSIONS``: (key state prefix, start) -> [end - start, count, sum] (+ [min, max] when
# an aggregate needs them; the length, a smaller int than the end, encodes shorter). A key
# may instead hold a dict ``_LEGACY`` (start -> [end, count, sum, min, max]), as older
# stores kept sessions per key: it is moved into the shared dict when the key is next used.
_SESSIONS = "session_window"
_LEGACY = "sessions"


def _session_keys(
    state: KeyState, sessions: PersistedSortedDict, prefix: str
) -> list[tuple[str, int]]:
    """The keys ``(prefix, start)`` of the key's open sessions in the shared dict."""
    if state.prefix + _LEGACY in state.space:  # ``_LEGACY in state``, inline
        for start, entry in state.dict(_LEGACY).items():
            sessions[(prefix, start)] = [entry[0] - start, *entry[1:]]
        state.delete(_LEGACY)
    return sessions._between((prefix,), (prefix + "\x00",))


def _expand(data: Any, found: list[tuple[str, int]]) -> dict[int, list[Any]]:
    """The sessions at keys ``found`` of the shared dict's ``data``: start -> [end, count,
    sum, min, max]."""
    return {at[1]: _expand_one(at[1], data[at]) for at in found}


def _expand_one(start: int, entry: list[Any]) -> list[Any]:
    """A stored session entry ``[length, count, sum(, min, max)]`` as ``[end, count, sum,
    min, max]``."""
    if len(entry) == 3:
        return [start + entry[0], entry[1], entry[2], None, None]
    return [start + entry[0], *entry[1:], *(None,) * (5 - len(entry))]


def _ascending(times: list[int]) -> bool:
    n = len(times)
    if n < 3:
        return n < 2 or times[0] <= times[1]
    return all(a <= b for a, b in pairwise(times))


def _stored(entry: list[Any], start: int, short: bool) -> list[Any]:
    """What the shared dict keeps of session ``entry`` (start -> [end, count, sum, min,
    max]): ``[end - start, count, sum]``, with ``min, max`` unless ``short``. Untracked by
    the cyclic collector: the list holds numbers and is never changed in place (a change
    stores a new list), so it can be in no cycle, and a state of millions of sessions
    is not walked by every full collection."""
    if short:
        return untrack([entry[0] - start, entry[1], entry[2]])
    return untrack([entry[0] - start, *entry[1:]])


def session_window(
    gap: Any, value: str = "v", aggs: Sequence[str] = ("count", "sum"), *, time: str | None = None
) -> KeyedOperator:
    """Sessions of each key's events, as Spark's ``session_window(event_time, gap)``.

    An event at time ``t`` joins (and extends) an open session if ``t`` lies within
    ``gap`` of it (``start - gap <= t <= end``, where ``end`` is the session's last event
    plus ``gap``: an event at exactly ``last + gap`` is included); an event that touches
    two sessions merges them; otherwise it opens a new session ``[t, t + gap]``. Events may
    arrive out of order (within the watermark delay). When the watermark reaches a
    session's ``end``, it is emitted once as ``{"start": first event, "end": last event +
    gap, <agg>: ...}`` (aware UTC datetimes; one field per name of ``aggs``, see
    :data:`AGGREGATES`, computed over ``row[value]``) and forgotten. Needs
    ``time_mode="event"``; the event time is the runner's ``event_time`` column (``time=``
    names another column). ``gap`` is a ``timedelta`` or a string like ``"2 minutes"``. Example::

        sim = simulate(session_window("30 minutes", value="amount"), batches,
                       key="user", order_by="ts", time_mode="event", event_time="ts")
        # sim.outputs[i]: [{"user": ..., "start": datetime(..., tzinfo=UTC), "end": ...,
        #                   "count": 3, "sum": 42.0}, ...]

    State: one entry per open session, ``(key, start) -> [end - start, count, sum(, min,
    max)]`` (epoch ms), in a sorted dict the key group's keys share (no object per key: a key's
    first session or its last one closed writes one row), and one event-time timer at or
    before the key's earliest end (a session that grows keeps its timer; when it fires
    early the next one is armed). Cost: O(log n + open sessions of the key) per row;
    writes: one entry per session a batch touched, one row per timer armed or fired.
    """
    return _SessionWindow(
        _check_duration("session_window", "gap", gap),
        _check_column("session_window", "value", value),
        _check_aggs("session_window", aggs),
        _check_optional_column("session_window", "time", time),
    )
