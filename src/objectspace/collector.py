"""Python's cyclic garbage collector while objectspace works.

:func:`gc_paused` pauses it for a save or a restore (they make no cycles);
:func:`fewer_collections` makes its young collections rarer while a task runs a function,
and can leave the state that exists before the task out of the task's collections; a
process that exists to hold state (a Spark worker, :func:`keep_frozen`) keeps it out
between tasks too.

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
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "KEPT_GROWTH",
    "KEPT_MIN_BLOCKS",
    "YOUNG_THRESHOLD",
    "fewer_collections",
    "gc_paused",
    "keep_frozen",
    "keeps_frozen",
    "release_frozen",
]

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
    block's collections (``gc.freeze()``, both O(1)): the block's older collections walk
    what it made, not the whole state. After the block its objects go back with the
    others (``gc.unfreeze()``), or, in a process that keeps them (:func:`keep_frozen`: a
    Spark worker), stay out together with what the block made and kept. Garbage cycles
    through frozen objects wait for a collection after they go back. Not done when
    anything is frozen already by another (a nested use, or another freezer's objects
    are left as they are).

    Without ``freeze``, objects a process kept frozen go back first: the block's
    collections see everything (a run under a memory budget, whose evictions must free
    their cycles too)."""
    global _freezing, _kept
    before = gc.get_threshold()
    frozen = False
    if freeze:
        if not _freezing and (_kept or gc.get_freeze_count() == 0):  # (counting is O(n))
            gc.freeze()  # (our kept objects: adds what was made since)
            frozen = _freezing = True
    elif _kept and not _freezing:
        release_frozen()
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
            _freezing = False
            if _keep:
                _keep_block()
            else:
                _kept = False
                gc.unfreeze()


# A process's objects kept out of collections between blocks (see keep_frozen) are all
# collected at a block's end once the interpreter's allocated memory blocks (what
# sys.getallocatedblocks counts: O(arenas), not O(objects)) reach KEPT_GROWTH times what
# the last such collection left, and at least KEPT_MIN_BLOCKS more: a state that holds its
# size costs no collection, a growing one a few (geometric), and garbage cycles among
# frozen objects, which never go, grow the count until they are collected.
KEPT_GROWTH = 2.0
KEPT_MIN_BLOCKS = 500_000
_keep = False  # the process keeps frozen objects between blocks
_kept = False  # the frozen objects are ours, kept since a block ended
_freezing = False  # inside a block that froze
_kept_blocks = 0  # the allocated blocks the last full collection of kept objects left


def keep_frozen(keep: bool = True) -> None:
    """Set this process's policy: with ``keep``, the objects a ``fewer_collections(freeze=
    True)`` block froze stay frozen after it, with those it made and kept (what a Spark
    worker or helper does: it exists to hold operators' state, so the state stays out of
    the collections between and during batches instead of being walked again at the end
    of each). Without, they go back now."""
    global _keep
    _keep = keep
    if not keep:
        release_frozen()


def keeps_frozen() -> bool:
    """Whether this process keeps frozen objects between blocks (:func:`keep_frozen`)."""
    return _keep


def release_frozen() -> None:
    """Put the objects this process kept frozen back with the others (nothing when none)."""
    global _kept
    if _kept:
        _kept = False
        gc.unfreeze()


def _keep_block() -> None:
    """At a freezing block's end in a process that keeps: freeze what the block kept too,
    and collect everything when it is time (see KEPT_GROWTH)."""
    global _kept, _kept_blocks
    gc.freeze()
    _kept = True
    blocks = sys.getallocatedblocks()
    if blocks >= max(_kept_blocks * KEPT_GROWTH, _kept_blocks + KEPT_MIN_BLOCKS):
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _kept_blocks = sys.getallocatedblocks()


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
