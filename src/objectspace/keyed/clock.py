"""The time a batch runs with, and how times and durations are read.

A time is an int of epoch milliseconds (UTC) everywhere state holds one: ordered, exact and
small when encoded. :func:`to_ms` and :func:`from_ms` convert at the edges, where users
give and get aware ``datetime`` values; :func:`parse_duration` reads a ``timedelta`` or a
string like ``"2 minutes 30 seconds"``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from objectspace.collections import utc_from_ms
from objectspace.errors import TimeError

__all__ = [
    "EPOCH",
    "MAX_DURATION_MS",
    "MAX_MS",
    "MIN_MS",
    "TIME_MODES",
    "UNCLOCKED",
    "UNITS",
    "Clock",
    "from_ms",
    "parse_duration",
    "to_ms",
]

TIME_MODES = (None, "event", "processing")
"""The ``time_mode`` values: no time, event time (the watermark), processing time."""
UNCLOCKED = -(1 << 62)
"""Deadlines below ``UNCLOCKED / 2`` belong to TTL'd entries written before the operator
had a time (event mode, before the first watermark): ``UNCLOCKED + ttl``. They are due as
soon as there is a time, which re-bases them to ``ttl`` after it."""
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""Time 0 of epoch milliseconds."""
UNITS = {
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
"""The units :func:`parse_duration` reads (lower case), in milliseconds."""
MIN_MS = (datetime.min.replace(tzinfo=UTC) - EPOCH) // timedelta(milliseconds=1)
"""The earliest time a ``datetime`` holds (0001-01-01 UTC), in epoch ms."""
MAX_MS = (datetime.max.replace(tzinfo=UTC) - EPOCH) // timedelta(milliseconds=1)
"""The latest time a ``datetime`` holds (9999-12-31 UTC), in epoch ms: an event time or a
timer beyond it (or before :data:`MIN_MS`) has no datetime to show it as, and Spark's
timestamps end there too."""
MAX_DURATION_MS = MAX_MS - MIN_MS
"""The longest duration :func:`parse_duration` accepts (the span of datetimes, about 10,000
years): a longer watermark delay, TTL or window could never elapse."""
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
            unit = match and UNITS.get(match.group(2).lower())
            if not match or unit is None:
                raise TimeError(
                    f"{what} {value!r} is not a duration: write a number and a unit "
                    f"({', '.join(sorted({'ms', 'seconds', 'minutes', 'hours', 'days'}))}), "
                    "e.g. '10 seconds', '1 hour', or a timedelta"
                )
            total += float(match.group(1)) * unit
            pos = match.end()
        ms = round(total) if total <= MAX_DURATION_MS else MAX_DURATION_MS + 1
    else:
        raise TimeError(f"{what} is a timedelta or a str like '10 seconds', not {value!r}")
    if ms < 0:
        raise TimeError(f"{what} {value!r} is negative")
    if ms > MAX_DURATION_MS:
        raise TimeError(
            f"{what} {value!r} is longer than the span of datetimes ({MAX_DURATION_MS} ms, "
            "about 10,000 years)"
        )
    return int(ms)


def to_ms(when: object, what: str = "a time") -> int:
    """``when`` (a :class:`~datetime.datetime`, naive meaning UTC, or an int of epoch
    milliseconds) as epoch milliseconds."""
    if type(when) is int:
        return when
    if isinstance(when, datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return (when - EPOCH) // timedelta(milliseconds=1)
    raise TimeError(
        f"{what} is a datetime (naive meaning UTC) or an int of epoch milliseconds, not {when!r}"
    )


def _from_ms(ms: int) -> datetime:
    """Epoch milliseconds as an aware UTC datetime; :class:`TimeError` outside
    :data:`MIN_MS` .. :data:`MAX_MS`."""
    try:
        return EPOCH + timedelta(0, 0, 0, ms)  # (days, seconds, microseconds, milliseconds)
    except OverflowError:
        raise TimeError(
            f"{ms} epoch ms is outside the datetimes (years 1 to 9999): it has no datetime"
        ) from None


from_ms: Callable[[int], datetime] = utc_from_ms(_from_ms)
"""Epoch milliseconds as an aware UTC datetime; :class:`TimeError` outside
:data:`MIN_MS` .. :data:`MAX_MS`. (An int in range is made a datetime in C when the
extension was built: a timer's time and a window's bounds, for every timer and output row.)"""


@dataclass(frozen=True, slots=True)
class Clock:
    """The time one batch runs with, fixed for the whole batch.

    ``mode``: ``None``, ``"event"`` or ``"processing"``; ``watermark``: epoch ms, the
    watermark of eviction and timers (in event mode ``max(event time of the batches before)
    - delay``, never below 0 nor below the previous batch's, 0 before any event time, as
    Spark's ``eventTimeWatermarkForEviction``; ``None`` outside event mode);
    ``late_watermark``: epoch ms, the previous batch's ``watermark`` (0 for the first), which
    late rows are tested against (Spark's ``eventTimeWatermarkForLateEvents``: a row is late
    when the end of what it would join is at or below it); ``batch_time``: epoch ms of the
    batch's processing time; ``event_time``: the name of the event-time column in event mode
    (the runner's ``event_time``), which the time operators read unless given their own
    ``time=``; ``started``: in event mode, whether an earlier batch saw event time.
    :attr:`now` is the operator's time, used by timers: the watermark in event mode, the
    batch time otherwise. :attr:`ttl_now` is the time of TTL: the same, except that in event
    mode it starts with the first batch after event time was seen (entries written before
    count from then).
    """

    mode: str | None = None
    watermark: int | None = None
    batch_time: int | None = None
    event_time: str | None = None
    late_watermark: int | None = None
    started: bool = True

    @property
    def now(self) -> int | None:
        return self.watermark if self.mode == "event" else self.batch_time

    @property
    def ttl_now(self) -> int | None:
        if self.mode == "event":
            return self.watermark if self.started else None
        return self.batch_time
