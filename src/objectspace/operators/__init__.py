"""Keyed stateful operators over object-space state, and the per-key state they use.

An operator is ``op(key, rows, state) -> output rows``; see :mod:`objectspace.operators.library`
for the contract and :class:`KeyState` for the state facade::

    from objectspace import operators as ops

    mean_of_first_five = ops.chain(ops.take(5), ops.aggregate("mean"))
"""

from __future__ import annotations

from objectspace.operators.library import (
    AGGREGATES,
    KeyedOperator,
    Row,
    aggregate,
    buffer,
    chain,
    combine_latest,
    distinct,
    distinct_until_changed,
    scan,
    skip,
    take,
    top_k,
    window,
    zip,
)
from objectspace.operators.state import KeyState
from objectspace.operators.timing import Clock, TimeError, Timers, parse_duration

__all__ = [
    "AGGREGATES",
    "Clock",
    "KeyState",
    "KeyedOperator",
    "Row",
    "TimeError",
    "Timers",
    "aggregate",
    "buffer",
    "chain",
    "combine_latest",
    "distinct",
    "distinct_until_changed",
    "parse_duration",
    "scan",
    "skip",
    "take",
    "top_k",
    "window",
    "zip",
]
