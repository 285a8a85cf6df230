"""The keyed operator library against plain Python references.

Each operator runs over random keyed streams split into random batches through a small
harness that imitates the Spark runner: one object space per key group, a ``KeyState`` per
key, a checkpoint of every space to its own store after each batch, and at random a
"restart" that replaces every space with one loaded from its store. The output of each key,
concatenated over the batches, must equal a reference computed by plain Python over the
key's whole stream (or, for operators that emit per batch, over its batches).
"""

from __future__ import annotations

import copy
import functools
import math
import operator
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import objectspace as osp
from objectspace import operators as ops
from objectspace.keyed import KeyState

Row = dict[str, Any]
Event = tuple[Any, Row]
FlatRef = Callable[[list[Row]], list[Row]]
BatchRef = Callable[[list[list[Row]]], list[Row]]

KEYS: list[Any] = [0, 1, -7, 2**40, "1", "a", "a/b", "ключ", ""]
SOURCES = ["a", "b", "c"]


# -- the harness ----------------------------------------------------------------------------


class Harness:
    """Runs one operator the way the runner does: per key group a space and a store."""

    def __init__(self, op: ops.KeyedOperator, max_key_groups: int = 16) -> None:
        self.op = op
        self.groups = osp.KeyGroups(max_key_groups)
        self.spaces: dict[int, osp.ObjectSpace] = {}
        self.stores: dict[int, osp.MemoryStore] = {}
        self.outputs: dict[Any, list[Row]] = {}
        self.batches_out: dict[Any, list[list[Row]]] = {}
        self.stats: list[osp.WriteStats] = []

    def space_of(self, key: Any) -> osp.ObjectSpace:
        group = self.groups.key_group(key)
        if group not in self.spaces:
            self.spaces[group] = osp.ObjectSpace()
            self.stores[group] = osp.MemoryStore()
        return self.spaces[group]

    def run_batch(self, events: list[Event]) -> None:
        by_key: dict[Any, list[Row]] = {}
        for key, row in events:
            by_key.setdefault(key, []).append(row)
        for key, rows in by_key.items():
            state = KeyState.for_key(self.space_of(key), key)
            out = list(self.op(key, copy.deepcopy(rows), state))
            kept = copy.deepcopy(out)
            self.outputs.setdefault(key, []).extend(kept)
            self.batches_out.setdefault(key, []).append(kept)
            # The runner adds the key column to output rows that lack it, in place: an
            # operator that hands out an object it keeps in state would see its state change.
            for row in out:
                row.setdefault("k", key)
        total = osp.WriteStats()
        for group, space in self.spaces.items():
            total += space.checkpoint(self.stores[group])
        self.stats.append(total)

    def restart(self) -> None:
        self.spaces = {
            group: osp.ObjectSpace.load(store.reader()) for group, store in self.stores.items()
        }


def key_streams(events: list[Event], batches: list[list[Event]]) -> dict[Any, Any]:
    """Per key: its whole stream, and its non-empty batches."""
    flat: dict[Any, list[Row]] = {}
    for key, row in events:
        flat.setdefault(key, []).append(row)
    per_batch: dict[Any, list[list[Row]]] = {}
    for batch in batches:
        rows_of: dict[Any, list[Row]] = {}
        for key, row in batch:
            rows_of.setdefault(key, []).append(row)
        for key, rows in rows_of.items():
            per_batch.setdefault(key, []).append(rows)
    return {key: (flat[key], per_batch[key]) for key in flat}


def split(events: list[Event], sizes: list[int]) -> list[list[Event]]:
    batches, i = [], 0
    for size in sizes:
        if i >= len(events):
            break
        batches.append(events[i : i + size])
        i += size
    if i < len(events):
        batches.append(events[i:])
    return batches


# -- references -----------------------------------------------------------------------------


def ref_take(n: int) -> FlatRef:
    return lambda rows: rows[:n]


def ref_skip(n: int) -> FlatRef:
    return lambda rows: rows[n:]


def _agg(agg: str, values: list[Any]) -> Any:
    if agg == "count":
        return len(values)
    if agg == "sum":
        return functools.reduce(operator.add, values, 0)
    if agg == "mean":
        return functools.reduce(operator.add, values, 0) / len(values)
    return min(values) if agg == "min" else max(values)


def ref_scan(agg: str, value: str = "v", out: str | None = None) -> FlatRef:
    name = out or agg

    def ref(rows: list[Row]) -> list[Row]:
        values = [r.get(value) for r in rows]
        return [{name: _agg(agg, values[: i + 1])} for i in range(len(values))]

    return ref


def ref_aggregate(agg: str, value: str = "v", out: str | None = None) -> BatchRef:
    name = out or agg

    def ref(batches: list[list[Row]]) -> list[Row]:
        values: list[Any] = []
        result = []
        for batch in batches:
            values += [r.get(value) for r in batch]
            result.append({name: _agg(agg, values)})
        return result

    return ref


def ref_buffer(count: int, skip: int | None = None, value: str | None = None) -> FlatRef:
    step = skip or count

    def ref(rows: list[Row]) -> list[Row]:
        items = [r if value is None else r[value] for r in rows]
        result, start = [], 0
        while start + count <= len(items):
            result.append({"items": items[start : start + count]})
            start += step
        return result

    return ref


def ref_window(count: int, skip: int | None = None) -> FlatRef:
    step = skip or count

    def ref(rows: list[Row]) -> list[Row]:
        return [
            {**row, "window": w}
            for j, row in enumerate(rows)
            for w in range(j // step + 1)
            if w * step <= j < w * step + count
        ]

    return ref


def ref_distinct(by: str | None = None) -> FlatRef:
    def ref(rows: list[Row]) -> list[Row]:
        seen: list[Any] = []
        result = []
        for row in rows:
            v = row if by is None else row[by]
            if not any(v == s for s in seen):
                seen.append(v)
                result.append(row)
        return result

    return ref


def ref_distinct_until_changed(by: str | None = None) -> FlatRef:
    def ref(rows: list[Row]) -> list[Row]:
        values = [row if by is None else row[by] for row in rows]
        return [row for i, row in enumerate(rows) if i == 0 or values[i] != values[i - 1]]

    return ref


def ref_top_k(k: int, by: str) -> BatchRef:
    def ref(batches: list[list[Row]]) -> list[Row]:
        seen: list[tuple[int, Row]] = []
        previous: list[int] = []
        result = []
        for batch in batches:
            seen += [(len(seen) + i, row) for i, row in enumerate(batch)]
            best = sorted(seen, key=lambda p: (-p[1][by], p[0]))[:k]
            if [i for i, _ in best] != previous:
                previous = [i for i, _ in best]
                result += [{**row, "rank": r} for r, (_, row) in enumerate(best)]
        return result

    return ref


def ref_combine_latest(sources: list[str]) -> FlatRef:
    def ref(rows: list[Row]) -> list[Row]:
        latest: dict[str, Any] = {}
        result = []
        for row in rows:
            latest[row["source"]] = row["v"]
            if all(s in latest for s in sources):
                result.append({s: latest[s] for s in sources})
        return result

    return ref


def ref_zip(sources: list[str]) -> FlatRef:
    def ref(rows: list[Row]) -> list[Row]:
        values: dict[str, list[Any]] = {s: [] for s in sources}
        result: list[Row] = []
        for row in rows:
            values[row["source"]].append(row["v"])
            n = len(result)
            if all(len(v) > n for v in values.values()):
                result.append({s: values[s][n] for s in sources})
        return result

    return ref


def compose(*refs: FlatRef) -> FlatRef:
    return lambda rows: functools.reduce(lambda acc, ref: ref(acc), refs, rows)


def ref_take5_mean(batches: list[list[Row]]) -> list[Row]:
    taken: list[Any] = []
    result = []
    for batch in batches:
        new = batch[: 5 - len(taken)]
        if new:
            taken += [r["v"] for r in new]
            result.append({"mean": _agg("mean", taken)})
    return result


# -- the cases ------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    op: ops.KeyedOperator
    ref: Callable[[Any], list[Row]]
    batched: bool = False
    rows: str = "values"  # which of ROW_STRATEGIES makes the rows


CASES = [
    Case("take", ops.take(3), ref_take(3)),
    Case("take0", ops.take(0), ref_take(0)),
    Case("skip", ops.skip(4), ref_skip(4)),
    *(Case(f"scan-{a}", ops.scan(a), ref_scan(a)) for a in ops.AGGREGATES),
    Case("scan-out", ops.scan("sum", value="v", out="total"), ref_scan("sum", out="total")),
    *(
        Case(f"aggregate-{a}", ops.aggregate(a), ref_aggregate(a), batched=True)
        for a in ops.AGGREGATES
    ),
    Case("buffer", ops.buffer(3, value="v"), ref_buffer(3, value="v")),
    Case("buffer-rows", ops.buffer(2), ref_buffer(2)),
    Case("buffer-overlap", ops.buffer(3, skip=1, value="v"), ref_buffer(3, 1, "v")),
    Case("buffer-gaps", ops.buffer(2, skip=3), ref_buffer(2, 3)),
    Case("buffer-1", ops.buffer(1, value="v"), ref_buffer(1, value="v")),
    Case("window", ops.window(3), ref_window(3)),
    Case("window-overlap", ops.window(3, skip=2), ref_window(3, 2)),
    Case("window-gaps", ops.window(2, skip=3), ref_window(2, 3)),
    Case("distinct", ops.distinct(), ref_distinct(), rows="few"),
    Case("distinct-by", ops.distinct(by="v"), ref_distinct("v"), rows="few"),
    Case(
        "distinct_until_changed",
        ops.distinct_until_changed(),
        ref_distinct_until_changed(),
        rows="few",
    ),
    Case(
        "distinct_until_changed-by",
        ops.distinct_until_changed(by="v"),
        ref_distinct_until_changed("v"),
        rows="few",
    ),
    Case("top_k", ops.top_k(3, by="v"), ref_top_k(3, "v"), batched=True),
    Case("top_1", ops.top_k(1, by="v"), ref_top_k(1, "v"), batched=True),
    Case(
        "combine_latest",
        ops.combine_latest(SOURCES),
        ref_combine_latest(SOURCES),
        rows="sourced",
    ),
    Case(
        "combine_latest-2",
        ops.combine_latest(["a", "b"]),
        ref_combine_latest(["a", "b"]),
        rows="sourced2",
    ),
    Case("zip", ops.zip(SOURCES), ref_zip(SOURCES), rows="sourced"),
    Case("zip-1", ops.zip(["b"]), ref_zip(["b"]), rows="sourced1"),
    Case("chain-take-mean", ops.chain(ops.take(5), ops.aggregate("mean")), ref_take5_mean, True),
    Case(
        "chain-skip-take-scan",
        ops.chain(ops.skip(2), ops.take(6), ops.scan("sum")),
        compose(ref_skip(2), ref_take(6), ref_scan("sum")),
    ),
    Case(
        "chain-distinct-buffer",
        ops.chain(ops.distinct(by="v"), ops.buffer(2, skip=1, value="v")),
        compose(ref_distinct("v"), ref_buffer(2, 1, "v")),
    ),
    Case(
        "chain-nested",
        ops.chain(ops.chain(ops.skip(1), ops.take(4)), ops.chain(ops.take(2), ops.window(2, 1))),
        compose(ref_skip(1), ref_take(4), ref_take(2), ref_window(2, 1)),
    ),
]

values = st.one_of(
    st.integers(-20, 20),
    st.sampled_from([0.5, -1.25, 2.0, 3.75]),
    st.floats(-100, 100, allow_nan=False),
)
ROW_STRATEGIES = {
    "values": st.fixed_dictionaries(
        {"v": values}, optional={"tags": st.lists(st.integers(0, 1), max_size=2)}
    ),
    "few": st.fixed_dictionaries(
        {"v": st.sampled_from([0, 1, 1.0, 2])}, optional={"tags": st.just([1, [2]])}
    ),
    "sourced": st.fixed_dictionaries({"source": st.sampled_from(SOURCES), "v": values}),
    "sourced2": st.fixed_dictionaries({"source": st.sampled_from(["a", "b"]), "v": values}),
    "sourced1": st.fixed_dictionaries({"source": st.just("b"), "v": values}),
}


def events_of(case: Case) -> st.SearchStrategy[list[Event]]:
    return st.lists(st.tuples(st.sampled_from(KEYS), ROW_STRATEGIES[case.rows]), max_size=50)


def check(
    case: Case, events: list[Event], batches: list[list[Event]], restarts: list[bool]
) -> Harness:
    harness = Harness(case.op)
    for batch, restart in zip(batches, restarts, strict=True):
        if restart:
            harness.restart()
        harness.run_batch(batch)
    for key, (flat, per_batch) in key_streams(events, batches).items():
        expected = case.ref(per_batch if case.batched else flat)
        assert harness.outputs[key] == expected, f"{case.name}: key {key!r}"
    return harness


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_operator_matches_reference(case: Case, data: st.DataObject) -> None:
    events = data.draw(events_of(case), label="events")
    sizes = data.draw(st.lists(st.integers(1, 12), max_size=12), label="batch sizes")
    batches = split(events, sizes)
    restarts = data.draw(
        st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)), label="restarts"
    )
    check(case, events, batches, restarts)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_state_survives_a_restart_after_every_batch(case: Case) -> None:
    """A fixed stream, batches of one or two rows per key, a restart before every batch."""
    events: list[Event] = []
    for i in range(40):
        key = KEYS[i % 3]
        if case.rows.startswith("sourced"):
            pool = {"sourced": SOURCES, "sourced2": ["a", "b"], "sourced1": ["b"]}[case.rows]
            row = {"source": pool[(i * 7) % len(pool)], "v": (i * 5) % 4}
        else:
            row = {"v": [3, 1, 4, 1, 5, 9, 2, 6, 5, 3][i % 10] + (i % 3) * 0.5}
        if case.rows == "few":
            row = {"v": [0, 1, 1, 1.0, 2, 2, 0][(i // 3) % 7]}
        events.append((key, row))
    batches = [events[i : i + 5] for i in range(0, len(events), 5)]
    always = check(case, events, batches, [True] * len(batches))
    never = check(case, events, batches, [False] * len(batches))
    assert always.outputs == never.outputs


# -- examples -------------------------------------------------------------------------------


def run(op: ops.KeyedOperator, batches: list[list[Row]], key: Any = "k1") -> list[list[Row]]:
    harness = Harness(op)
    for i, rows in enumerate(batches):
        if i % 2:
            harness.restart()
        harness.run_batch([(key, row) for row in rows])
    return harness.batches_out[key]


def concat(batches: list[list[Row]]) -> list[Row]:
    return [row for batch in batches for row in batch]


def test_take5_average_example() -> None:
    """The seed's ``xs.Take(5).Average()``."""
    op = ops.chain(ops.take(5), ops.aggregate("mean"))
    out = run(
        op, [[{"v": 1}, {"v": 2}], [{"v": 3.0}], [{"v": 4}, {"v": 5}, {"v": 100}], [{"v": 7}]]
    )
    assert out == [[{"mean": 1.5}], [{"mean": 2.0}], [{"mean": 3.0}], []]


def test_chain_namespaces_do_not_collide() -> None:
    rows = [[{"v": i}] for i in range(6)]
    assert run(ops.chain(ops.take(4), ops.take(2)), rows) == [
        [{"v": 0}],
        [{"v": 1}],
        [],
        [],
        [],
        [],
    ]
    assert concat(run(ops.chain(ops.skip(2), ops.skip(1)), rows)) == [{"v": i} for i in (3, 4, 5)]
    space = osp.ObjectSpace()
    state = KeyState.for_key(space, 5)
    ops.chain(ops.take(3), ops.take(1))(5, [{"v": 1}], state)
    assert sorted(space) == ["5/0/seen", "5/1/seen"]
    assert space.get_value("5/0/seen").value == 1
    assert space.get_value("5/1/seen").value == 1


def test_scan_and_aggregate_examples() -> None:
    rows = [[{"v": 3}, {"v": 1}], [{"v": 2}]]
    assert run(ops.scan("max"), rows) == [[{"max": 3}, {"max": 3}], [{"max": 3}]]
    assert run(ops.scan("mean", out="m"), rows) == [[{"m": 3.0}, {"m": 2.0}], [{"m": 2.0}]]
    assert run(ops.aggregate("count", value="missing"), rows) == [[{"count": 2}], [{"count": 3}]]
    assert run(ops.aggregate("min"), rows) == [[{"min": 1}], [{"min": 1}]]


def test_buffer_window_examples() -> None:
    rows = [[{"v": i} for i in range(4)], [{"v": i} for i in range(4, 7)]]
    assert run(ops.buffer(3, skip=2, value="v"), rows) == [
        [{"items": [0, 1, 2]}],
        [{"items": [2, 3, 4]}, {"items": [4, 5, 6]}],
    ]
    assert run(ops.window(2, skip=1), [[{"v": 0}, {"v": 1}], [{"v": 2}]]) == [
        [{"v": 0, "window": 0}, {"v": 1, "window": 0}, {"v": 1, "window": 1}],
        [{"v": 2, "window": 1}, {"v": 2, "window": 2}],
    ]


def test_distinct_whole_rows_with_nested_lists() -> None:
    rows = [[{"v": 1, "t": [1, [2]]}, {"v": 1, "t": [1, [2]]}], [{"v": 1, "t": [1, [3]]}]]
    rows.append([{"t": [1, [2]], "v": 1.0}, {"v": None}, {"v": None}])
    assert run(ops.distinct(), rows) == [[rows[0][0]], [rows[1][0]], [{"v": None}]]
    nested = [[{"m": {"a": 1, "b": [1]}}, {"m": {"b": [1], "a": 1}}], [{"m": {"a": 2, "b": [1]}}]]
    assert run(ops.distinct(), nested) == [[nested[0][0]], [nested[1][0]]]
    assert run(ops.distinct(by="m"), nested) == [[nested[0][0]], [nested[1][0]]]
    assert run(ops.distinct_until_changed(by="v"), [[{"v": None}, {"v": None}], [{"v": None}]]) == [
        [{"v": None}],
        [],
    ]


def test_top_k_ties_and_no_change() -> None:
    rows = [[{"v": 5, "i": 0}, {"v": 5, "i": 1}], [{"v": 1, "i": 2}], [{"v": 6, "i": 3}]]
    assert run(ops.top_k(2, by="v"), rows) == [
        [{"v": 5, "i": 0, "rank": 0}, {"v": 5, "i": 1, "rank": 1}],
        [],
        [{"v": 6, "i": 3, "rank": 0}, {"v": 5, "i": 0, "rank": 1}],
    ]


def test_top_k_keeps_only_k_rows() -> None:
    space = osp.ObjectSpace()
    state = KeyState.for_key(space, "x")
    ops.top_k(2, by="v")("x", [{"v": i} for i in range(10)], state)
    assert len(state.sorted_set("order")) == 2
    assert dict(state.dict("rows")) == {9: {"v": 8}, 10: {"v": 9}}


def test_combine_latest_and_zip_examples() -> None:
    rows = [[{"source": "a", "v": 1}, {"source": "a", "v": 2}], [{"source": "b", "v": 10}]]
    rows.append([{"source": "a", "v": 3}, {"source": "b", "v": 20}])
    assert concat(run(ops.combine_latest(["a", "b"]), rows)) == [
        {"a": 2, "b": 10},
        {"a": 3, "b": 10},
        {"a": 3, "b": 20},
    ]
    assert concat(run(ops.zip(["a", "b"]), rows)) == [{"a": 1, "b": 10}, {"a": 2, "b": 20}]


@pytest.mark.parametrize("factory", [ops.combine_latest, ops.zip])
def test_unknown_source_is_refused_before_any_state_changes(
    factory: Callable[[list[str]], ops.KeyedOperator],
) -> None:
    space = osp.ObjectSpace()
    state = KeyState.for_key(space, 1)
    op = factory(["a", "b"])
    op(1, [{"source": "a", "v": 1}], state)
    space.checkpoint(osp.MemoryStore())
    with pytest.raises(ValueError, match="'z'"):
        op(1, [{"source": "b", "v": 2}, {"source": "z", "v": 3}], state)
    assert not space.is_dirty


def test_buffer_write_cost_per_row_is_constant() -> None:
    """buffer(100): a checkpoint after 2 new rows per key writes O(1) rows per key."""
    n_keys = 50
    keys = list(range(n_keys))
    harness = Harness(ops.buffer(100, value="v"))
    for b in range(80):
        harness.run_batch([(k, {"k": k, "v": float(b * 2 + j)}) for k in keys for j in range(2)])
    per_key = [s.items_written / n_keys for s in harness.stats]
    # Two queue items, the queue's head and tail, and "n": 5 rows, as the buffer fills
    # (batches 1..49) and once it is full and emitting (50..79).
    assert all(w <= 5 for w in per_key[1:]), per_key
    assert per_key[10] == per_key[45] == per_key[79]
    deleted = harness.stats[79].items_deleted / n_keys
    assert deleted == 2  # the two items that left the buffer
    assert harness.outputs[0] == [{"items": [float(i) for i in range(100)]}]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_operators_pickle_and_repr(case: Case) -> None:
    clone = pickle.loads(pickle.dumps(case.op))
    assert repr(clone) == repr(case.op)
    assert type(clone) is type(case.op)


def test_repr_shows_the_call() -> None:
    op = ops.chain(ops.take(5), ops.aggregate("mean"), ops.zip(["a", "b"]))
    assert repr(op) == (
        "chain(take(5), aggregate('mean', value='v', out='mean'), "
        "zip(['a', 'b'], source='source', value='v'))"
    )


BAD_ARGUMENTS: list[Callable[[], object]] = [
    lambda: ops.take(-1),
    lambda: ops.take("3"),  # type: ignore[arg-type]
    lambda: ops.take(True),
    lambda: ops.take(1.5),  # type: ignore[arg-type]
    lambda: ops.skip(-1),
    lambda: ops.scan("median"),
    lambda: ops.scan("sum", value=""),
    lambda: ops.scan("sum", out=3),  # type: ignore[arg-type]
    lambda: ops.aggregate("avg"),
    lambda: ops.aggregate("mean", value=None),  # type: ignore[arg-type]
    lambda: ops.buffer(0),
    lambda: ops.buffer(2, skip=0),
    lambda: ops.buffer(2, value=""),
    lambda: ops.window(0),
    lambda: ops.window(2, skip=-1),
    lambda: ops.distinct(by=1),  # type: ignore[arg-type]
    lambda: ops.distinct_until_changed(by=""),
    lambda: ops.top_k(0, "v"),
    lambda: ops.top_k(2, ""),
    lambda: ops.top_k(2, None),  # type: ignore[arg-type]
    lambda: ops.combine_latest([]),
    lambda: ops.combine_latest("ab"),
    lambda: ops.combine_latest(["a", "a"]),
    lambda: ops.combine_latest(["a", 1]),  # type: ignore[list-item]
    lambda: ops.combine_latest(["a"], source=""),
    lambda: ops.zip([]),
    lambda: ops.zip(5),  # type: ignore[arg-type]
    lambda: ops.zip(["a"], value=""),
    lambda: ops.chain(),
    lambda: ops.chain(ops.take(1), 5),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("make", BAD_ARGUMENTS)
def test_bad_arguments_raise_value_error(make: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        make()


def test_unknown_aggregate_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="sum, count, mean, min, max"):
        ops.aggregate("median")


def test_bad_rows_raise_clear_errors() -> None:
    state = KeyState.for_key(osp.ObjectSpace(), 1)
    with pytest.raises(KeyError, match="no column 'v'"):
        ops.scan("sum")(1, [{"x": 1}], state)
    with pytest.raises(ValueError, match="None"):
        ops.scan("min")(1, [{"v": None}], state)
    with pytest.raises(ValueError, match="cannot rank"):
        ops.top_k(2, by="v")(1, [{"v": math.nan}], state)
