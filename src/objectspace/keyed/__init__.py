"""Per-key state and time: a key's named collections in its key group's space, the clock
of a batch, timers and TTL.

:class:`KeyState` (``state.py``) is what a keyed function sees; :class:`Clock` and the
conversions of times and durations are in ``clock.py``; the due index, :class:`Timers`
and the timer contract (:class:`TimerHandler`, :func:`fire_timer`) in ``timers.py``; the
TTL'd views and :func:`expire` in ``ttl.py``. Everything here is ordinary object-space
state, written with the key group's checkpoint; nothing here knows about operators,
checkpoints, storage or Spark.
"""

from __future__ import annotations

from objectspace.keyed.clock import (
    MAX_MS,
    MIN_MS,
    TIME_MODES,
    UNCLOCKED,
    Clock,
    from_ms,
    parse_duration,
    to_ms,
)
from objectspace.keyed.state import KeyRef, KeyState, key_prefix, prefix_of_repr, shared_dict
from objectspace.keyed.timers import (
    DUE_ID,
    TimerHandler,
    Timers,
    drop_timers,
    due_timers,
    earliest,
    expired_timers,
    fire_timer,
    timer_handler,
    timer_registrar,
)
from objectspace.keyed.ttl import TtlDict, TtlList, TtlQueue, TtlSet, TtlValue, expire

__all__ = [
    "DUE_ID",
    "MAX_MS",
    "MIN_MS",
    "TIME_MODES",
    "UNCLOCKED",
    "Clock",
    "KeyRef",
    "KeyState",
    "TimerHandler",
    "Timers",
    "TtlDict",
    "TtlList",
    "TtlQueue",
    "TtlSet",
    "TtlValue",
    "drop_timers",
    "due_timers",
    "earliest",
    "expire",
    "expired_timers",
    "fire_timer",
    "from_ms",
    "key_prefix",
    "parse_duration",
    "prefix_of_repr",
    "shared_dict",
    "timer_handler",
    "timer_registrar",
    "to_ms",
]
