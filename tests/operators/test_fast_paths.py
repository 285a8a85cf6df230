"""The per-key fast paths of the execution loop and the operators give exactly what the
general code gives: each is checked against a plain reference over random inputs."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

import objectspace as osp
from objectspace import operators as ops
from tests.operators.test_time_operators import (
    DELAY,
    EVENT,
    SEC,
    event_batches,
    ref_sessions,
    run,
    window_shape,
)

Row = dict[str, Any]


@pytest.mark.parametrize("load", [4, 1000])
def test_sorted_between_equals_irange(load: int) -> None:
    """``_between(low, high)`` of a sorted dict and a sorted set: ``irange`` with the high
    end excluded, over one sublist and over many (a small load splits them)."""
    space = osp.ObjectSpace()
    rng = random.Random(load)
    d = space.create_sorted_dict("d")
    s = space.create_sorted_set("s")
    d._data._list._reset(load)
    s._data._list._reset(load)
    prefixes = [f"{i}/" for i in range(30)] + ["1", "10", "1/", "1/\x00", ""]
    for _ in range(600):
        at = (rng.choice(prefixes), rng.randrange(50))
        d[at] = 0
        s.add(at)
    for _ in range(400):
        prefix = rng.choice([*prefixes, "0", "9/", "zz"])
        low, high = (prefix,), (prefix + "\x00",)
        if rng.random() < 0.3:
            low, high = (prefix, rng.randrange(60)), (prefix, rng.randrange(60))
        for obj in (d, s):
            assert obj._between(low, high) == list(obj.irange(low, high, (True, False)))
    empty = space.create_sorted_dict("e")
    assert empty._between(("a",), ("b",)) == []


@pytest.mark.parametrize("aggs", [("count",), ("count", "sum"), ("max", "count")])
@pytest.mark.parametrize("seed", [4, 5])
def test_session_window_with_short_entries_matches_the_reference(
    aggs: tuple[str, ...], seed: int
) -> None:
    """Without min/max a session's entry is [length, count, sum]; out-of-order rows,
    merges, extensions and early timers give the reference sessions."""
    batches = event_batches(seed, n_batches=12)
    expected = ref_sessions(batches, DELAY, 6 * SEC, aggs)
    op = ops.session_window(timedelta(seconds=6), aggs=aggs, time="ts")
    for got in run(op, batches, window_shape(aggs), **EVENT):
        assert got == expected
    assert sum(map(len, expected)) > 5
