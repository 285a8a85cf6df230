"""Python's cyclic garbage collector while objectspace works.

:func:`gc_paused` pauses it for a save or a restore (they make no cycles);
:func:`fewer_collections` makes its young collections rarer while a task runs a function,
and can leave the state that exists before the task out of the task's collections.

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
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["YOUNG_THRESHOLD", "fewer_collections", "gc_paused"]

# Allocations between two young collections while a task runs (the interpreter's default:
# 700). The older generations keep their multipliers, so a full collection is considered
# every 5,000,000 allocations instead of every 70,000.
YOUNG_THRESHOLD = 50_000


@contextmanager
def fewer_collections(freeze: bool = False) -> Iterator[None]:
    """Run the block with the young generation's threshold at :data:`YOUNG_THRESHOLD`
    (unless it is already higher, or the collector is off), then restore the thresholds.
    Nested uses are free. As a decorator (``@fewer_collections()``) it covers each call.

    ``freeze``: also leave every object that exists when the block starts out of the
    block's collections (``gc.freeze()``, then ``gc.unfreeze()`` after it, both O(1)):
    the block's older collections walk what it made, not the whole state. Garbage cycles
    through those older objects wait for a collection after the block. Not done when
    anything is frozen already (a nested use, or another freezer's objects are left as
    they are)."""
    before = gc.get_threshold()
    frozen = freeze and gc.get_freeze_count() == 0
    if frozen:
        gc.freeze()
    try:
        if before[0] == 0 or before[0] >= YOUNG_THRESHOLD:
            yield
            return
        gc.set_threshold(YOUNG_THRESHOLD, *before[1:])
        try:
            yield
        finally:
            gc.set_threshold(*before)
    finally:
        if frozen:
            gc.unfreeze()


_GC_LOCK = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the block (nested and concurrent uses
    count: the last one out enables it again, if it was enabled before the first one).

    A save or restore allocates a container per dirty object or stored entry, none of them
    in a cycle; each few hundred allocations would otherwise start a collection, and some
    of those traverse every object of the state (a 200,000-entry state: a quarter of a
    differential save's time). Nothing is lost: cycles made meanwhile are collected later.
    """
    global _gc_pauses, _gc_was_enabled
    with _GC_LOCK:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()
