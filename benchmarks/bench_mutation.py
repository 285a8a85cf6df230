"""Mutation overhead of the ten persisted types against their plain Python counterparts.

Each row runs the same operations (``OPS`` in total, default 200,000) on a persisted object
and on its plain counterpart, side by side in one process, median of 5 repeats of the
process CPU time; each repeat uses a fresh space (and a fresh counterpart), so the persisted
timings include the dirty tracking (the edit page grows as it would between two
checkpoints), but no checkpoint.
Both loops bind the method to a local first and call it with the same arguments, so the
ratio is the cost of the persisted type over the plain one. Target: <= 3x.

    .venv/bin/python -m benchmarks.bench_mutation [--quick] [--no-record] [--profile]
"""

from __future__ import annotations

import gc
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from sortedcontainers import SortedDict, SortedSet

import objectspace as osp
from benchmarks.common import (
    median,
    parse_args,
    print_table,
    profile,
    record,
    status,
)

OPS = 200_000
REPEATS = 5
TARGET_RATIO = 3.0
ARRAY_LENGTH = 1_000
KEY_RANGE = 10_000


# -- plain counterparts ------------------------------------------------------------------------


class Box:
    """A tiny object with one attribute: the counterpart of a persisted value."""

    __slots__ = ("value",)

    def __init__(self, value: Any = None) -> None:
        self.value = value


class _Node:
    __slots__ = ("next", "prev", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        self.prev: _Node | None = None
        self.next: _Node | None = None


class PlainLinkedList:
    """A minimal pure-Python doubly linked list whose ``append`` returns the node."""

    __slots__ = ("count", "first", "last")

    def __init__(self) -> None:
        self.first: _Node | None = None
        self.last: _Node | None = None
        self.count = 0

    def append(self, value: Any) -> _Node:
        node = _Node(value)
        last = self.last
        node.prev = last
        if last is None:
            self.first = node
        else:
            last.next = node
        self.last = node
        self.count += 1
        return node

    def popleft(self) -> Any:
        node = self.first
        if node is None:
            raise IndexError("pop from empty linked list")
        nxt = node.next
        self.first = nxt
        if nxt is None:
            self.last = None
        else:
            nxt.prev = None
        node.next = None
        self.count -= 1
        return node.value


class FwdValue:
    """A persisted value's API forwarding to a slot, without tracking (the Python floor)."""

    __slots__ = ("_value",)

    def __init__(self, value: Any = None) -> None:
        self._value = value

    @property
    def value(self) -> Any:
        return self._value

    @value.setter
    def value(self, value: Any) -> None:
        self._value = value


class FwdArray:
    __slots__ = ("_data",)

    def __init__(self, length: int, fill: Any) -> None:
        self._data = [fill] * length

    def __setitem__(self, index: int, value: Any) -> None:
        self._data[index] = value


class FwdList:
    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: list[Any] = []

    def append(self, value: Any) -> None:
        self._data.append(value)


class FwdQueue:
    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: deque[Any] = deque()

    def enqueue(self, value: Any) -> None:
        self._data.append(value)

    def dequeue(self) -> Any:
        return self._data.popleft()


class FwdStack:
    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: list[Any] = []

    def push(self, value: Any) -> None:
        self._data.append(value)

    def pop(self) -> Any:
        return self._data.pop()


class FwdSet:
    __slots__ = ("_data",)

    def __init__(self, data: Any) -> None:
        self._data = data

    def add(self, value: Any) -> None:
        self._data.add(value)

    def discard(self, value: Any) -> None:
        self._data.discard(value)


class FwdDict:
    __slots__ = ("_data",)

    def __init__(self, data: Any) -> None:
        self._data = data

    def __setitem__(self, key: Any, value: Any) -> None:
        self._data[key] = value


# -- the workloads -------------------------------------------------------------------------------
# Each workload gets the operation count and an RNG, precomputes its inputs, and returns
# three zero-argument loops over the same inputs, each on a fresh object: on the persisted
# type, on the plain counterpart, and on a forwarding wrapper (the persisted type's method
# names, a Python method that forwards to the builtin, no tracking: the floor any
# pure-Python type pays) or None.

Loops = tuple[Callable[[], None], Callable[[], None], Callable[[], None] | None]


def _values(n: int, rng: random.Random) -> list[float]:
    return [rng.random() for _ in range(n)]


def value_loops(n: int, rng: random.Random) -> Loops:
    values = _values(n, rng)

    def loop(make: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            v = make()
            for x in values:
                v.value = x

        return run

    return (
        loop(lambda: osp.ObjectSpace().create_value("v", 0.0)),
        loop(lambda: Box(0.0)),
        loop(lambda: FwdValue(0.0)),
    )


def array_loops(n: int, rng: random.Random) -> Loops:
    pairs = [(rng.randrange(ARRAY_LENGTH), rng.random()) for _ in range(n)]

    def loop(make: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            a = make()
            for i, x in pairs:
                a[i] = x

        return run

    return (
        loop(lambda: osp.ObjectSpace().create_array("a", ARRAY_LENGTH, fill=0.0)),
        loop(lambda: [0.0] * ARRAY_LENGTH),
        loop(lambda: FwdArray(ARRAY_LENGTH, 0.0)),
    )


def list_loops(n: int, rng: random.Random) -> Loops:
    values = _values(n, rng)

    def loop(make: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            append = make().append
            for x in values:
                append(x)

        return run

    return loop(lambda: osp.ObjectSpace().create_list("l")), loop(list), loop(FwdList)


def _pairs_loop(
    values: list[float], make: Callable[[], Any], put: str, take: str
) -> Callable[[], None]:
    """``put(x)`` then ``take()`` for each value: two operations each."""

    def run() -> None:
        obj = make()
        put_, take_ = getattr(obj, put), getattr(obj, take)
        for x in values:
            put_(x)
            take_()

    return run


def queue_loops(n: int, rng: random.Random) -> Loops:
    values = _values(n // 2, rng)
    return (
        _pairs_loop(values, lambda: osp.ObjectSpace().create_queue("q"), "enqueue", "dequeue"),
        _pairs_loop(values, deque, "append", "popleft"),
        _pairs_loop(values, FwdQueue, "enqueue", "dequeue"),
    )


def stack_loops(n: int, rng: random.Random) -> Loops:
    values = _values(n // 2, rng)
    return (
        _pairs_loop(values, lambda: osp.ObjectSpace().create_stack("s"), "push", "pop"),
        _pairs_loop(values, list, "append", "pop"),
        _pairs_loop(values, FwdStack, "push", "pop"),
    )


def linked_loops(n: int, rng: random.Random) -> Loops:
    values = _values(n // 2, rng)
    return (
        _pairs_loop(
            values, lambda: osp.ObjectSpace().create_linked_list("ll"), "append", "popleft"
        ),
        _pairs_loop(values, PlainLinkedList, "append", "popleft"),
        None,
    )


def linked_vs_deque_loops(n: int, rng: random.Random) -> Loops:
    values = _values(n // 2, rng)
    return (
        _pairs_loop(
            values, lambda: osp.ObjectSpace().create_linked_list("ll"), "append", "popleft"
        ),
        _pairs_loop(values, deque, "append", "popleft"),
        None,
    )


def _add_discard(
    n: int, rng: random.Random, make_persisted: Callable[[], Any], make_plain: Callable[[], Any]
) -> Loops:
    pairs = [(rng.randrange(KEY_RANGE), rng.randrange(KEY_RANGE)) for _ in range(n // 2)]

    def loop(make: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            s = make()
            add, discard = s.add, s.discard
            for a, d in pairs:
                add(a)
                discard(d)

        return run

    return loop(make_persisted), loop(make_plain), loop(lambda: FwdSet(make_plain()))


def set_loops(n: int, rng: random.Random) -> Loops:
    return _add_discard(n, rng, lambda: osp.ObjectSpace().create_set("s"), set)


def sorted_set_loops(n: int, rng: random.Random) -> Loops:
    return _add_discard(n, rng, lambda: osp.ObjectSpace().create_sorted_set("s"), SortedSet)


def _setitem(
    n: int, rng: random.Random, make_persisted: Callable[[], Any], make_plain: Callable[[], Any]
) -> Loops:
    pairs = [(rng.randrange(KEY_RANGE), rng.random()) for _ in range(n)]

    def loop(make: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            d = make()
            for k, v in pairs:
                d[k] = v

        return run

    return loop(make_persisted), loop(make_plain), loop(lambda: FwdDict(make_plain()))


def dict_loops(n: int, rng: random.Random) -> Loops:
    return _setitem(n, rng, lambda: osp.ObjectSpace().create_dict("d"), dict)


def sorted_dict_loops(n: int, rng: random.Random) -> Loops:
    return _setitem(n, rng, lambda: osp.ObjectSpace().create_sorted_dict("d"), SortedDict)


# (type, operation, counterpart, factory, counts against the target)
CASES: list[tuple[str, str, str, Callable[..., Any], bool]] = [
    ("Value", "`.value = x`", "attribute of a tiny `__slots__` object", value_loops, True),
    ("Array", f"`a[i] = x` (length {ARRAY_LENGTH:,})", "`list` setitem", array_loops, True),
    ("List", "`append(x)`", "`list.append`", list_loops, True),
    ("Queue", "`enqueue` + `dequeue`", "`deque.append` + `popleft`", queue_loops, True),
    ("Stack", "`push` + `pop`", "`list.append` + `pop`", stack_loops, True),
    (
        "LinkedList",
        "`append` + `popleft`",
        "minimal pure-Python doubly linked list",
        linked_loops,
        True,
    ),
    (
        "LinkedList",
        "`append` + `popleft`",
        "(for information) `deque.append` + `popleft`",
        linked_vs_deque_loops,
        False,
    ),
    ("Set", f"`add` + `discard` (keys < {KEY_RANGE:,})", "`set`", set_loops, True),
    (
        "SortedSet",
        f"`add` + `discard` (keys < {KEY_RANGE:,})",
        "`sortedcontainers.SortedSet`",
        sorted_set_loops,
        True,
    ),
    ("Dict", f"`d[k] = v` (keys < {KEY_RANGE:,})", "`dict`", dict_loops, True),
    (
        "SortedDict",
        f"`d[k] = v` (keys < {KEY_RANGE:,})",
        "`sortedcontainers.SortedDict`",
        sorted_dict_loops,
        True,
    ),
]


def _time(fn: Callable[[], None]) -> float:
    """Process CPU seconds of ``fn()``: a preemption on a shared machine does not count."""
    gc.collect()
    start = time.process_time()
    fn()
    return time.process_time() - start


def measure(
    factory: Callable[..., Loops], ops: int, repeats: int, seed: int = 1
) -> tuple[float, float, float | None]:
    """Median seconds of the persisted, plain and forwarding loops, in rotating order."""
    loops = [fn for fn in factory(ops, random.Random(seed)) if fn is not None]
    for fn in loops:  # warm up (imports, allocator)
        fn()
    times: list[list[float]] = [[] for _ in loops]
    for i in range(repeats):
        for j in range(len(loops)):
            k = (i + j) % len(loops)
            times[k].append(_time(loops[k]))
    medians = [median(t) for t in times]
    return medians[0], medians[1], medians[2] if len(medians) > 2 else None


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    ops = 20_000 if args.quick else OPS
    repeats = 3 if args.quick else REPEATS
    print(f"Mutation overhead: {ops:,} operations per row, median of {repeats} repeats\n")

    headers = [
        "type",
        "operation",
        "plain counterpart",
        "persisted ns/op",
        "plain ns/op",
        "ratio",
        "target <= 3x",
        "forwarding wrapper ns/op",
        "persisted / wrapper",
    ]
    rows = []
    missed = []
    for kind, op, counterpart, factory, counted in CASES:
        p, c, w = measure(factory, ops, repeats)
        ratio = p / c
        ok = ratio <= TARGET_RATIO
        if counted and not ok:
            missed.append((kind, factory))
        rows.append(
            [
                kind,
                op,
                counterpart,
                f"{p / ops * 1e9:.0f}",
                f"{c / ops * 1e9:.0f}",
                f"{ratio:.2f}x",
                status(ok) if counted else "-",
                "-" if w is None else f"{w / ops * 1e9:.0f}",
                "-" if w is None else f"{p / w:.2f}x",
            ]
        )
        print(
            f"  {kind:<11} {p / ops * 1e9:7.0f} ns/op vs {c / ops * 1e9:6.0f} ns/op  {ratio:5.2f}x"
        )
    print()
    table = print_table(headers, rows)
    summary = (
        f"{sum(1 for r in rows if r[6] == 'met')} of "
        f"{sum(1 for c in CASES if c[4])} types within 3x; missed: "
        + (", ".join(kind for kind, _ in missed) or "none")
        + "."
    )
    print()
    print(summary)

    if args.profile:
        for kind, factory in missed:
            persisted = factory(ops, random.Random(1))[0]
            profile(persisted, label=f"{kind}: {ops:,} operations")

    if args.record:
        body = "\n\n".join(
            [
                f"{OPS:,} operations per row (a paired row such as enqueue + dequeue counts as "
                f"two), median of {REPEATS} repeats, persisted and plain loops alternating in one "
                "process. Each repeat uses a fresh space, so the persisted figures include the "
                "dirty tracking of an edit page (no checkpoint in the timed loop). Inputs are "
                "precomputed random floats/ints; methods are bound to locals in every loop. "
                "Times are process CPU time (`time.process_time`), so that time slices lost "
                "to other processes on a shared machine do not count. "
                "The forwarding wrapper has the persisted type's method names and forwards each "
                "call to the builtin without tracking: the floor of any pure-Python wrapper, so "
                "`persisted / wrapper` is the cost of the dirty tracking itself.",
                table,
                summary,
            ]
        )
        record("mutation", body, title="Mutation overhead vs plain Python")


if __name__ == "__main__":
    main()
