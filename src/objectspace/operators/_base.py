"""What every operator shares: the row and operator types, argument checks, row access."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeAlias

from objectspace.errors import TimeError
from objectspace.keyed import KeyState, parse_duration, to_ms

__all__ = ["AGGREGATES", "KeyedOperator", "Row"]


Row: TypeAlias = dict[str, Any]
"""One row: column name → value."""

KeyedOperator: TypeAlias = Callable[[Any, list[Row], KeyState], Iterable[Row]]
"""``op(key, rows, state) -> output rows``: the shape every operator here has."""

AGGREGATES = ("sum", "count", "mean", "min", "max")
"""The aggregates :func:`scan` and :func:`aggregate` compute."""


def _check_int(op: str, name: str, value: object, minimum: int) -> int:
    if type(value) is not int or value < minimum:
        raise ValueError(f"{op}: {name} must be an int >= {minimum}, got {value!r}")
    return value


def _check_column(op: str, name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{op}: {name} must be a non-empty column name (str), got {value!r}")
    return value


def _check_optional_column(op: str, name: str, value: object) -> str | None:
    return None if value is None else _check_column(op, name, value)


def _check_sources(op: str, sources: object) -> tuple[str, ...]:
    if isinstance(sources, str | bytes) or not isinstance(sources, Iterable):
        raise ValueError(f"{op}: sources must be a list of source names, got {sources!r}")
    names = tuple(sources)
    if not names:
        raise ValueError(f"{op}: sources must name at least one source")
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{op}: a source name is a non-empty str, got {name!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"{op}: sources must be distinct, got {list(names)!r}")
    return names


def _check_agg(op: str, agg: object) -> str:
    if agg not in AGGREGATES:
        raise ValueError(f"{op}: unknown aggregate {agg!r}; valid ones are {', '.join(AGGREGATES)}")
    return agg


def _field(op: _Operator, row: Row, column: str) -> Any:
    """``row[column]``, with an error naming the operator when the column is missing."""
    try:
        return row[column]
    except KeyError:
        raise KeyError(f"{op!r}: input row has no column {column!r}: {row!r}") from None
    except TypeError:
        raise TypeError(f"{op!r}: input rows are dicts, got {type(row).__name__}") from None


_UNITS_MS = {
    "millisecond": 1,
    "second": 1000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 604_800_000,
}


def _check_duration(op: str, name: str, value: object) -> int:
    """A positive duration (``timedelta`` or a string like ``"2 minutes"``) in milliseconds."""
    ms = parse_duration(value, f"{op}: {name}")
    if ms <= 0:
        raise TimeError(f"{op}: {name} must be a positive duration, got {value!r}")
    return ms


def _format_duration(ms: int) -> str:
    """``ms`` as the shortest string :func:`parse_duration` reads back (``'2 minutes'``)."""
    for unit, size in reversed(_UNITS_MS.items()):
        if ms % size == 0:
            n = ms // size
            return f"'{n} {unit}{'s' if n != 1 else ''}'"
    raise AssertionError(ms)  # pragma: no cover - milliseconds always divide


def _row_times(op: _Operator, state: KeyState, rows: list[Row]) -> list[int]:
    """The time of each row in epoch ms: its event time in event mode (column ``op.time``,
    else the runner's ``event_time``), else the batch time."""
    clock = state.clock
    if clock is None or clock.mode != "event":
        now = None if clock is None else clock.batch_time
        if now is None:
            raise ValueError(
                f"{op!r} needs time: run it with time_mode='event' (and event_time) or "
                "time_mode='processing'"
            )
        return [now] * len(rows)
    column = getattr(op, "time", None) or clock.event_time
    if column is None:
        raise ValueError(f"{op!r}: which column holds the event time? pass time=<column>")
    try:
        what = f"event-time column {column!r}"
        return [to_ms(row[column], what) for row in rows]
    except KeyError:
        raise KeyError(f"{op!r}: an input row has no event-time column {column!r}") from None
    except TypeError as exc:
        raise TypeError(f"{op!r}: event-time column {column!r}: {exc}") from exc


def _now_millis(state: KeyState) -> int | None:
    """The operator's time in epoch ms: the watermark in event mode (``None`` before the
    first batch), the batch time otherwise."""
    clock = state.clock
    return None if clock is None else clock.now


_ATOMS = (int, float, str, bytes, bool, type(None))


def _hashable(value: Any) -> Any:
    """``value`` as a hashable, msgpack-serializable equivalent.

    Lists and tuples become tuples (recursively), dicts become tuples of ``(key, value)``
    pairs sorted by key, sets become frozensets; other values are returned as they are.
    """
    if isinstance(value, _ATOMS):
        return value
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, set | frozenset):
        return frozenset(_hashable(v) for v in value)
    return value


class _Operator:
    """Base of the operators: a picklable callable whose ``repr`` is the factory call."""

    __slots__ = ()
    name = ""

    def _args(self) -> Iterable[str]:
        return ()

    def __repr__(self) -> str:
        return f"{self.name}({', '.join(self._args())})"

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        raise NotImplementedError


class _TimedOperator(_Operator):
    """An operator that registers timers in its own namespace. It implements the timer
    contract (:class:`~objectspace.keyed.TimerHandler`) by its :meth:`_on_timer_ms`, and
    offers the users' form ``on_timer(key, when, state)`` for calling it by hand."""

    __slots__ = ()

    def handle_timer(
        self, key: Any, names: tuple[str, ...], when_ms: int, state: KeyState
    ) -> list[Row]:
        return self._on_timer_ms(key, when_ms, state.path(names) if names else state)

    def on_timer(self, key: Any, when: datetime, state: KeyState) -> list[Row]:
        """The output rows of this operator's timer at ``when``, ``state`` being the
        namespace the operator runs in."""
        return self._on_timer_ms(key, to_ms(when), state)

    def _on_timer_ms(self, key: Any, when: int, state: KeyState) -> list[Row]:
        """What the timer at ``when`` (epoch ms) of ``state``'s namespace does."""
        raise NotImplementedError


class _CountOperator(_Operator):
    """An operator whose one argument is a count ``n`` (``take(3)``)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def _args(self) -> Iterable[str]:
        return (repr(self.n),)


class _ByOperator(_Operator):
    """An operator whose one argument is an optional column ``by`` (``distinct(by='x')``)."""

    __slots__ = ("by",)

    def __init__(self, by: str | None) -> None:
        self.by = by

    def _args(self) -> Iterable[str]:
        return () if self.by is None else (f"by={self.by!r}",)
