"""Python's cyclic garbage collector while a task runs: :func:`fewer_collections`.

A worker holds an operator's state as millions of long-lived objects. At the interpreter's
default thresholds (a young collection every 700 allocations, a full one whenever the
objects promoted since the last reach a quarter of the old ones) a batch that creates and
keeps objects — rows, session entries, timers — keeps triggering full collections that walk
the whole state: a cost per event that grows with the state (20-25% of a task's CPU at
100,000 sessionization keys, ``benchmarks/bench_session_task``). Objects are still freed by
reference counting the moment they are unused; only garbage *cycles* wait a little longer.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["YOUNG_THRESHOLD", "fewer_collections"]

# Allocations between two young collections while a task runs (the interpreter's default:
# 700). The older generations keep their multipliers, so a full collection is considered
# every 5,000,000 allocations instead of every 70,000.
YOUNG_THRESHOLD = 50_000


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the block with the young generation's threshold at :data:`YOUNG_THRESHOLD`
    (unless it is already higher, or the collector is off), then restore the thresholds.
    Nested uses are free."""
    before = gc.get_threshold()
    if before[0] == 0 or before[0] >= YOUNG_THRESHOLD:
        yield
        return
    gc.set_threshold(YOUNG_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
