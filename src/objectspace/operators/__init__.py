"""Keyed stateful operators over object-space state.

An operator is ``op(key, rows, state) -> output rows``; see :mod:`objectspace.operators.library`
for the contract and :class:`objectspace.keyed.KeyState` for the state facade::

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
    dedup,
    distinct,
    distinct_until_changed,
    expire_after,
    scan,
    session_window,
    skip,
    sliding_window,
    take,
    top_k,
    tumbling_window,
    window,
    zip,
)

__all__ = [
    "AGGREGATES",
    "KeyedOperator",
    "Row",
    "aggregate",
    "buffer",
    "chain",
    "combine_latest",
    "dedup",
    "distinct",
    "distinct_until_changed",
    "expire_after",
    "scan",
    "session_window",
    "skip",
    "sliding_window",
    "take",
    "top_k",
    "tumbling_window",
    "window",
    "zip",
]
