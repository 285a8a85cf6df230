"""Keyed stateful operators whose state lives in object-space collections.

The contract below holds for every operator. Each family has its module: ``slicing`` (take,
skip), ``aggregates`` (scan, aggregate), ``windows`` (buffer, window), ``dedup`` (distinct,
distinct_until_changed, dedup), ``timewindows`` (session_window, tumbling_window,
sliding_window), ``expiry`` (expire_after), ``ranking`` (top_k), ``combining`` (combine_latest, zip) and
``chaining`` (chain); what they share is in ``_base``. This module gathers them.

An operator is a callable ``op(key, rows, state) -> rows``: ``rows`` are this key's rows of
one batch (dicts, in order), ``state`` is the key's :class:`~objectspace.keyed.KeyState`,
and the result is the list of output rows (dicts). Output rows do not carry the key; the
runner adds the key column(s) to rows that lack them. Operators are called once per batch
for every key that has rows, so their output over all batches must not depend on where the
batch boundaries fall, except where a docstring says an operator emits "per batch".

Every piece of state is its own persisted object (a value, a queue, a set, ...) under a name
documented in each factory's docstring, so a checkpoint writes only the slots a batch
changed. What goes into state is msgpack-serializable as long as the rows are (dicts, lists,
tuples, numbers, str, bytes, None, datetimes). Operators never hand out an object that
they keep in state: rows kept in state are shallow copies, so a caller that edits an output
row in place (a runner adding the key column, say) cannot change the state behind the
space's back.

Each operator reads its state objects once per call and, where the state is a single value,
keeps the running value in a local variable and stores it once at the end of the call; so
"cost per row" below counts Python work per row, and "writes" counts rows the next
checkpoint writes.

All factories check their arguments and raise :class:`ValueError` with a message naming
the operator and the argument. The operators are plain picklable objects (Spark ships them
to its executors); ``repr`` shows the call that built them.
"""

from __future__ import annotations

from objectspace.operators._base import AGGREGATES, KeyedOperator, Row
from objectspace.operators.aggregates import aggregate, scan
from objectspace.operators.chaining import chain
from objectspace.operators.combining import combine_latest, zip
from objectspace.operators.dedup import dedup, distinct, distinct_until_changed
from objectspace.operators.expiry import expire_after
from objectspace.operators.ranking import top_k
from objectspace.operators.sessions import session_window
from objectspace.operators.slicing import skip, take
from objectspace.operators.timewindows import sliding_window, tumbling_window
from objectspace.operators.windows import buffer, window

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
