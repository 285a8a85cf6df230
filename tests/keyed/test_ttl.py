"""TTL on KeyState collections (issue 12) in ``simulate``, against a plain Python
reference: entries vanish from reads exactly when the operator's time passes their
expiry, and from storage in that batch's checkpoint, across parallelism, restarts and
replays."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from objectspace.keyed import DUE_ID, Clock, KeyState, earliest, expire
from objectspace.space import ObjectSpace
from objectspace.storage.stores import MemoryStore
from objectspace.testing import simulate

TTL = 6
DELAY = 2


def fn(key: Any, rows: list[dict[str, Any]], state: KeyState) -> list[dict[str, Any]]:
    ttl = timedelta(milliseconds=TTL)
    d = state.dict("d", ttl=ttl)
    sd = state.sorted_dict("sd", ttl=ttl)
    s = state.set("s", ttl=ttl)
    ss = state.sorted_set("ss", ttl=ttl)
    q = state.queue("q", ttl=ttl)
    lst = state.list("l", ttl=ttl)
    v = state.value("v", "none", ttl=ttl)
    out = [{"k": key, **view(d, sd, s, ss, q, lst, v)}]
    for row in rows:
        d[row["item"]] = row["i"]
        sd[row["item"]] = row["i"]
        s.add(row["item"])
        ss.add(row["item"])
        q.enqueue(row["i"])
        lst.append(row["i"])
        v.value = row["i"]
    return out


def view(d: Any, sd: Any, s: Any, ss: Any, q: Any, lst: Any, v: Any) -> dict[str, Any]:
    return {
        "d": sorted(d.items()),
        "sd": list(sd.items()),
        "s": sorted(s),
        "ss": list(ss),
        "q": list(q),
        "l": list(lst),
        "v": v.value,
    }


class Reference:
    """One key's TTL'd state in plain Python: value and expiry (None: written before the
    operator had a time, so it expires TTL after the first one)."""

    def __init__(self) -> None:
        self.d: dict[Any, tuple[Any, int | None]] = {}
        self.s: dict[Any, int | None] = {}
        self.q: list[tuple[Any, int | None]] = []
        self.v: tuple[Any, int | None] | None = None

    def advance(self, now: int | None) -> None:
        if now is None:
            return

        def due(t: int | None) -> int:
            return now + TTL if t is None else t

        self.d = {k: (x, due(t)) for k, (x, t) in self.d.items() if due(t) > now}
        self.s = {k: due(t) for k, t in self.s.items() if due(t) > now}
        self.q = [(x, due(t)) for x, t in self.q if due(t) > now]
        if self.v is not None:
            self.v = (self.v[0], due(self.v[1])) if due(self.v[1]) > now else None

    def view(self) -> dict[str, Any]:
        items = sorted((k, x) for k, (x, _) in self.d.items())
        return {
            "d": items,
            "sd": items,
            "s": sorted(self.s),
            "ss": sorted(self.s),
            "q": [x for x, _ in self.q],
            "l": [x for x, _ in self.q],
            "v": "none" if self.v is None else self.v[0],
        }

    def write(self, row: dict[str, Any], now: int | None) -> None:
        when = None if now is None else now + TTL
        self.d[row["item"]] = (row["i"], when)
        self.s[row["item"]] = when
        self.q.append((row["i"], when))
        self.v = (row["i"], when)


def reference(batches: list[list[dict[str, Any]]], mode: str, times: list[int]):
    keys: dict[Any, Reference] = {}
    max_event = None
    outputs, states = [], []
    watermark = 0  # Spark's: 0 at first, never decreasing; late rows by the previous one
    for b, rows in enumerate(batches):
        if mode == "event":
            previous = watermark
            if max_event is not None:
                watermark = max(watermark, max_event - DELAY)
            # TTL counts from the first batch after event time was seen
            now = None if max_event is None else watermark
            for row in rows:
                max_event = row["ts"] if max_event is None else max(max_event, row["ts"])
            rows = [r for r in rows if r["ts"] > previous]
        else:
            now = times[b]
        for ref in keys.values():
            ref.advance(now)
        by_key: dict[Any, list[dict[str, Any]]] = {}
        for row in rows:
            by_key.setdefault(row["k"], []).append(row)
        out = []
        for key, key_rows in by_key.items():
            ref = keys.setdefault(key, Reference())
            out.append({"k": key, **ref.view()})
            for row in sorted(key_rows, key=lambda r: (r["ts"], r["i"])):
                ref.write(row, now)
        outputs.append(sorted(out, key=repr))
        states.append({k: r.view() for k, r in keys.items()})
    return outputs, states


def random_batches(seed: int) -> list[list[dict[str, Any]]]:
    rng = random.Random(seed)
    batches, clock, i = [], 0, 0
    for _ in range(12):
        rows = []
        for _ in range(rng.randint(0, 6)):
            ts = max(0, clock + rng.randint(-DELAY - 2, 2))
            rows.append({"k": rng.randrange(6), "ts": ts, "i": i, "item": rng.randrange(4)})
            i += 1
        batches.append(rows)
        clock += rng.randint(0, 4)
    batches.append([])
    batches.append([{"k": "end", "ts": clock + 100, "i": i, "item": 0}])
    batches.append([])
    return batches


def stored(sim: Any, checkpoint: int, key: Any) -> dict[str, Any]:
    """The key's state as committed in ``checkpoint``, read raw from storage."""
    space = sim.operator.instance(0, 1, checkpoint=checkpoint).space_for_key(key)
    state = KeyState.for_key(space, key)
    names = ("d", "sd", "s", "ss", "q", "l", "v")
    if not any(n in state for n in names):
        return Reference().view()
    return view(*(state.value(n, "none") if n == "v" else _get(state, n) for n in names))


def _get(state: KeyState, name: str) -> Any:
    getter = {
        "d": state.dict,
        "sd": state.sorted_dict,
        "s": state.set,
        "ss": state.sorted_set,
        "q": state.queue,
        "l": state.list,
    }[name]
    return getter(name)


RUNS: list[dict[str, Any]] = [
    {"parallelism": 1},
    {"parallelism": 3},
    {"parallelism": 8},
    {"parallelism": {0: 8, 6: 3}},
    {"parallelism": 3, "replay": (1, 7)},
]


@pytest.mark.parametrize("mode", ["event", "processing"])
@pytest.mark.parametrize("seed", range(3))
def test_ttl_entries_vanish_from_reads_and_storage_exactly_when_their_time_passes(mode, seed):
    batches = random_batches(seed)
    times = [3 * b for b in range(len(batches))]
    expected, states = reference(batches, mode, times)
    options: dict[str, Any] = (
        {"time_mode": "event", "event_time": "ts", "watermark_delay": f"{DELAY} ms"}
        if mode == "event"
        else {"time_mode": "processing", "batch_times": times}
    )
    for run in RUNS:
        sim = simulate(fn, batches, key="k", order_by=("ts", "i"), retain=None, **options, **run)
        assert [sorted(o, key=repr) for o in sim.outputs] == expected, run
        for b in range(len(batches)):
            for key, state in states[b].items():
                assert stored(sim, b, key) == state, (run, b, key)
        # every TTL record goes with its entry: nothing is left but the last key's
        total = sum(s.entries_expired for s in sim.stats)
        assert total > 0


def test_ttl_in_time_mode_none_counts_in_batch_time():
    def count(key, rows, state):
        seen = state.set("seen", ttl="10 seconds")
        yield {"k": key, "seen": sorted(seen)}
        for row in rows:
            seen.add(row["v"])

    batches = [[{"k": 1, "v": 1}], [{"k": 1, "v": 2}], [{"k": 1, "v": 3}], []]
    sim = simulate(
        count, batches, key="k", order_by="v", batch_times=[0, 5000, 12000, 20000], retain=None
    )
    assert [o[0]["seen"] if o else None for o in sim.outputs] == [[], [1], [2], None]
    # the expired entry is gone from storage in the checkpoint of the batch it expired in
    assert list(sim.operator.instance(0, 1, checkpoint=2).space_for_key(1).get_set("1/seen")) == [
        2,
        3,
    ]
    assert list(sim.operator.instance(0, 1, checkpoint=3).space_for_key(1).get_set("1/seen")) == [3]
    assert [s.entries_expired for s in sim.stats] == [0, 0, 1, 1]


def test_ttl_below_spark_with_an_explicit_clock():
    space = ObjectSpace()
    state = KeyState.for_key(space, "u", Clock("processing", batch_time=1000))
    d = state.dict("d", ttl="1 second")
    for i in range(5):
        d[i] = i
    KeyState.for_key(space, "u", Clock("processing", batch_time=1500)).dict("d", ttl="1 second")[
        0
    ] = 9
    assert earliest(space) == 2000
    assert expire(space, 1999) == 0
    assert expire(space, 2000) == 4
    assert dict(space.get_dict("'u'/d")) == {0: 9}
    assert expire(space, 2500) == 1 and len(space.get_sorted_set(DUE_ID)) == 0
    assert len(space.get_dict("'u'/d")) == 0


def test_ttl_writes_are_o1_rows():
    """Rewriting one entry of a large TTL'd dict writes a constant number of rows."""

    def write(key, rows, state):
        d = state.dict("d", ttl="1 hour")
        for row in rows:
            for j in range(row["n"]):
                d[j] = row["b"]
        return []

    batches = [[{"k": 1, "n": 2000, "b": 0}], [{"k": 1, "n": 1, "b": 1}]]
    sim = simulate(write, batches, key="k", order_by="n", batch_times=[0, 1000])
    assert sim.stats[1].rows_written < 12


def test_expiring_the_front_of_a_ttl_list_writes_rows_for_k_not_for_its_length():
    """A TTL'd list's expired elements are a prefix: expiring k of 5,000 writes O(k) rows
    (the list's stored head moves), and a restore reads the rest back."""
    space = ObjectSpace()
    store = MemoryStore()
    for at, values in ((0, range(10)), (5000, range(10, 5000))):
        KeyState.for_key(space, "u", Clock("processing", batch_time=at)).list(
            "l", ttl="1 second"
        ).extend(values)
    space.checkpoint(store)
    assert expire(space, 1000) == 10
    stats = space.checkpoint(store)
    assert stats.items_written + stats.items_deleted <= 2 * 10 + 8
    restored = ObjectSpace.load(store.reader())
    assert list(restored.get_list("'u'/l")) == list(range(10, 5000))
    assert list(restored.get_list("'u'/l%ttl")) == [6000] * 4990


@pytest.mark.parametrize("seed", range(6))
def test_ttl_list_edits_anywhere_expire_like_a_reference(seed):
    """Random appends, inserts, rewrites, pops and deletes on a TTL'd list, with expiry
    and checkpoint/restore in between: the list holds exactly the reference's unexpired
    elements, whether its expiry times stay in order (O(k) expiry) or not."""
    rng = random.Random(seed)
    space = ObjectSpace()
    store = MemoryStore()
    ref: list[tuple[int, int]] = []  # (value, expires at)
    now = 0
    for step in range(300):
        now += rng.choice((0, 1, 3))
        lst = KeyState.for_key(space, "u", Clock("processing", batch_time=now)).list(
            "l", ttl="10 ms"
        )
        op = rng.choice(("append", "append", "append", "set", "insert", "pop", "pop0", "del"))
        when = now + 10
        if op == "append":
            lst.append(step)
            ref.append((step, when))
        elif op == "set" and ref:
            i = rng.randrange(-len(ref), len(ref))
            lst[i] = step
            ref[i] = (step, when)
        elif op == "insert":
            i = rng.randrange(-len(ref) - 1, len(ref) + 2)
            lst.insert(i, step)
            ref.insert(i, (step, when))
        elif op == "pop" and ref:
            i = rng.randrange(-len(ref), len(ref))
            assert lst.pop(i) == ref.pop(i)[0]
        elif op == "pop0" and ref:
            assert lst.pop(0) == ref.pop(0)[0]
        elif op == "del" and ref:
            k = rng.randrange(len(ref) + 1)
            del lst[:k]
            del ref[:k]
        if rng.random() < 0.3:
            gone = sum(1 for _, t in ref if t <= now)
            assert expire(space, now) == gone
            ref = [(v, t) for v, t in ref if t > now]
        assert list(lst) == [v for v, _ in ref]
        if rng.random() < 0.2:
            space.checkpoint(store)
            if rng.random() < 0.5:
                space = ObjectSpace.load(store.reader())
                lst = space.get_list("'u'/l")
                assert list(lst) == [v for v, _ in ref]
    assert expire(space, now + 11) == len(ref)
    assert len(space.get_list("'u'/l")) == 0


def test_no_time_state_is_kept_when_no_time_is_used():
    def plain(key, rows, state):
        state.dict("d")[rows[0]["ts"]] = 1
        return []

    sim = simulate(plain, [[{"k": 1, "ts": 1}], [{"k": 2, "ts": 2}]], key="k", order_by="ts")
    assert [o.name for o in sim.job.operators()] == ["simulate"]
    assert all(s.batch_time is not None and s.watermark is None for s in sim.stats)


def test_ttl_queue_and_list_edits_keep_their_expiry_times():
    space = ObjectSpace()

    def at(t: int) -> KeyState:
        return KeyState.for_key(space, "u", Clock("processing", batch_time=t))

    q = at(0).queue("q", ttl="10 ms")
    q.enqueue("a")
    q.enqueue("b")
    at(5).queue("q", ttl="10 ms").enqueue("c")
    assert q.dequeue() == "a"  # the user's dequeue moves the front's expiry along
    lst = at(0).list("l", ttl="10 ms")
    lst.extend(["x", "y", "z"])
    at(8).list("l", ttl="10 ms")[0] = "X"  # rewritten: expires at 18, not 10
    at(8).list("l", ttl="10 ms").insert(1, "w")
    assert expire(space, 10) == 1 + 2  # queue: b; list: y, z
    assert list(space.get_queue("'u'/q")) == ["c"]
    assert list(space.get_list("'u'/l")) == ["X", "w"]
    assert expire(space, 15) == 1 and len(space.get_queue("'u'/q")) == 0
    assert expire(space, 18) == 2 and len(space.get_list("'u'/l")) == 0
    assert earliest(space) is None


def test_ttl_views_behave_like_their_collections():
    space = ObjectSpace()
    state = KeyState.for_key(space, 1, Clock("processing", batch_time=0))
    d = state.dict("d", ttl="1 ms")
    d.update({1: "a", 2: "b"})
    assert d.setdefault(3, "c") == "c" and d.pop(1) == "a" and d == {2: "b", 3: "c"}
    assert d.popitem() in ((2, "b"), (3, "c")) and len(d) == 1
    sd = state.sorted_dict("sd", ttl="1 ms")
    sd.update({3: 0, 1: 0, 2: 0})
    assert list(sd) == [1, 2, 3] and list(sd.irange(2, 3)) == [2, 3] and sd.peekitem(0) == (1, 0)
    s = state.sorted_set("s", ttl="1 ms")
    s |= {5, 4}
    s.remove(5)
    assert list(s) == [4] and s[0] == 4
    v = state.value("v", 0, ttl="1 ms")
    assert v.value == 0
    v.value = 7
    assert state.value("v", 0, ttl="1 ms").value == 7
    # every write is indexed once: the records follow deletes
    assert len(space.get_dict("1/d%ttl")) == len(d)
    live = len(d) + len(sd) + len(s) + 1
    assert expire(space, 1) == live == 6
    assert len(d) == len(sd) == len(s) == 0
    assert earliest(space) is None and v.value == 0 and "v" not in state
