"""Per-key state and time: a key's named collections in its key group's space, the clock
of a batch, timers and TTL.

Everything here is ordinary object-space state, written with the key group's checkpoint;
nothing here knows about operators, checkpoints, storage or Spark.
"""

from __future__ import annotations

from objectspace.keyed.state import KeyState, key_prefix, prefix_of_repr, shared_dict
from objectspace.keyed.timers import (
    DUE_ID,
    TIME_MODES,
    UNCLOCKED,
    Clock,
    Timers,
    TtlDict,
    TtlList,
    TtlQueue,
    TtlSet,
    TtlValue,
    drop_timers,
    due_timers,
    earliest,
    expire,
    fire_timer,
    from_ms,
    parse_duration,
    to_ms,
)

__all__ = [
    "DUE_ID",
    "TIME_MODES",
    "UNCLOCKED",
    "Clock",
    "KeyState",
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
    "fire_timer",
    "from_ms",
    "key_prefix",
    "parse_duration",
    "prefix_of_repr",
    "shared_dict",
    "to_ms",
]
