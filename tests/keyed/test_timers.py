"""Timers, watermarks and batch time (issue 12) in ``simulate``, against plain Python
references over random keyed inputs with event times: out of order within the delay,
late rows, quiet keys, rescales, replays and failed first attempts."""

from __future__ import annotations

import random
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from objectspace import operators as ops
from objectspace.errors import TimeError
from objectspace.keyed import DUE_ID, Clock, KeyState, due_timers, earliest, parse_duration
from objectspace.keyed.clock import MAX_MS, MIN_MS, from_ms, to_ms
from objectspace.keyed.timers import TIMERS_ID
from objectspace.space import ObjectSpace
from objectspace.testing import simulate

GAP = 7
DELAY = 5
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ms(when: datetime) -> int:
    return (when - EPOCH) // timedelta(milliseconds=1)


def sessions(key: Any, rows: list[dict[str, Any]], state: KeyState) -> list[dict[str, Any]]:
    """Counts a key's rows; one timer GAP after its last row (the previous one deleted)."""
    count = state.value("n", 0)
    last = state.value("last")
    for row in rows:
        if last.value is not None:
            state.timers.delete(last.value + GAP)
        count.value += 1
        last.value = max(row["ts"], last.value or row["ts"])
        state.timers.register(last.value + GAP)
    return []


def on_timer(key: Any, when: datetime, state: KeyState) -> list[dict[str, Any]]:
    count = state.value("n", 0)
    out = [{"k": key, "when": ms(when), "n": count.value}]
    state.delete("n")
    state.delete("last")
    return out


def reference(batches: list[list[dict[str, Any]]], delay: int) -> tuple[list[Counter[Any]], int]:
    """The same in plain Python: per batch the output multiset; and the late rows."""
    max_event: int | None = None
    counts: dict[Any, int] = {}
    last: dict[Any, int] = {}
    timers: dict[Any, set[int]] = {}
    outputs = []
    late = 0
    watermark = 0  # Spark's: 0 at first, never decreasing; late rows by the previous one
    for rows in batches:
        previous = watermark
        if max_event is not None:
            watermark = max(watermark, max_event - delay)
        for row in rows:
            max_event = row["ts"] if max_event is None else max(max_event, row["ts"])
        by_key: dict[Any, list[dict[str, Any]]] = {}
        for row in rows:
            if row["ts"] <= previous:
                late += 1
                continue
            by_key.setdefault(row["k"], []).append(row)
        for key, key_rows in by_key.items():
            for row in sorted(key_rows, key=lambda r: (r["ts"], r["i"])):
                if key in last:
                    timers[key].discard(last[key] + GAP)
                counts[key] = counts.get(key, 0) + 1
                last[key] = max(row["ts"], last.get(key, row["ts"]))
                timers.setdefault(key, set()).add(last[key] + GAP)
        out: Counter[Any] = Counter()
        for key in list(timers):
            for when in sorted(t for t in timers[key] if t <= watermark):
                timers[key].discard(when)
                out[(key, when, counts.pop(key, 0))] += 1
                last.pop(key, None)
        outputs.append(out)
    return outputs, late


def random_batches(seed: int, n_batches: int = 8, keys: int = 12) -> list[list[dict[str, Any]]]:
    rng = random.Random(seed)
    batches = []
    clock = 0
    i = 0
    for _ in range(n_batches):
        rows = []
        for _ in range(rng.randint(0, 10)):
            # mostly in order, some out of order within the delay, a few late
            ts = clock + rng.randint(-DELAY, 3) if rng.random() > 0.1 else clock - 3 * DELAY
            rows.append({"k": rng.randrange(keys), "ts": max(ts, 0), "i": i})
            i += 1
        batches.append(rows)
        clock += rng.randint(0, 6)
    batches.append([])  # a batch with no rows fires what is due
    batches.append([{"k": "far", "ts": clock + 1000, "i": i}])
    batches.append([])
    return batches


def as_counter(rows: list[dict[str, Any]]) -> Counter[Any]:
    return Counter((r["k"], r["when"], r["n"]) for r in rows)


RUNS: list[dict[str, Any]] = [
    {"parallelism": 1},
    {"parallelism": 3},
    {"parallelism": 8},
    {"parallelism": {0: 3, 4: 8}},  # a restart at another parallelism
    {"parallelism": 3, "replay": (2, 5)},  # failed first attempts, then committed
]


@pytest.mark.parametrize("seed", range(4))
def test_event_timers_match_the_reference_across_parallelism_restart_and_replay(seed: int):
    batches = random_batches(seed)
    expected, late = reference(batches, DELAY)
    for run in RUNS:
        sim = simulate(
            sessions,
            batches,
            key="k",
            order_by=("ts", "i"),
            time_mode="event",
            event_time="ts",
            watermark_delay=timedelta(milliseconds=DELAY),
            on_timer=on_timer,
            **run,
        )
        got = [as_counter(out) for out in sim.outputs]
        assert got == expected, run
        assert sum(s.rows_late for s in sim.stats) == late, run
        assert sum(s.timers_fired for s in sim.stats) == sum(sum(c.values()) for c in expected)
        for i in run.get("replay", ()):
            assert as_counter(sim.first_attempts[i]) == expected[i]


def test_a_committed_batch_replayed_fires_the_same_timers_with_the_same_times():
    batches = random_batches(11)
    url = "memory://timers-replay-committed"
    first = simulate(
        sessions,
        batches,
        key="k",
        order_by=("ts", "i"),
        time_mode="processing",
        on_timer=on_timer,
        storage=url,
        batch_times=[1000 * i for i in range(len(batches))],
        retain=None,
    )
    # Run the last two batches again: the store holds them, so they replay; the batch times
    # given now are ignored for them (the recorded ones stand).
    again = simulate(
        sessions,
        batches,
        key="k",
        order_by=("ts", "i"),
        time_mode="processing",
        on_timer=on_timer,
        storage=first.storage,
        batch_times=[5 + 1000 * i for i in range(len(batches))],
        retain=None,
    )
    assert [s.replay for s in again.stats] == [True] * len(batches)
    assert [as_counter(o) for o in again.outputs] == [as_counter(o) for o in first.outputs]
    assert [s.batch_time for s in again.stats] == [s.batch_time for s in first.stats]


def test_timers_of_keys_without_rows_fire_and_instances_without_rows_run():
    def fn(key, rows, state):
        for row in rows:
            state.timers.register(row["ts"] + 100)
        return []

    def handler(key, when, state):
        yield {"k": key, "when": ms(when)}

    batches = [
        [{"k": k, "ts": 10} for k in range(20)],
        [{"k": "x", "ts": 50}],
        [],
        [{"k": "y", "ts": 500}],
        [],
    ]
    for p in (1, 8):
        sim = simulate(
            fn,
            batches,
            key="k",
            order_by="ts",
            time_mode="event",
            event_time="ts",
            on_timer=handler,
            parallelism=p,
        )
        assert [len(o) for o in sim.outputs] == [0, 0, 0, 0, 21]
        assert sorted(r["when"] for r in sim.outputs[4]) == [110] * 20 + [150]
        # batch 4 has no rows: every instance with a due key group ran
        assert sim.stats[4].rows_in == 0 and sim.stats[4].timers_fired == 21
        assert sim.stats[4].instances == (
            1
            if p == 1
            else len({sim.operator.key_groups.instance_of_key(k, p) for k in [*range(20), "x"]})
        )


def test_a_timer_registered_and_deleted_in_one_batch_never_fires():
    def fn(key, rows, state):
        for row in rows:
            state.timers.register(row["ts"])
            state.timers.register(row["ts"] + 1)
            state.timers.delete(row["ts"])
            state.timers.delete(12345)  # a timer that does not exist: a no-op
        assert [ms(t) for t in state.timers.list()] == sorted(r["ts"] + 1 for r in rows)
        return []

    def handler(key, when, state):
        yield {"k": key, "when": ms(when)}

    batches = [[{"k": 1, "ts": 5}, {"k": 2, "ts": 9}], [{"k": 3, "ts": 100}], []]
    sim = simulate(
        fn, batches, key="k", order_by="ts", time_mode="event", event_time="ts", on_timer=handler
    )
    # watermark 9 in batch 1, 100 in batch 2; the timers at 5 and 9 never fire
    assert [(r["k"], r["when"]) for r in sim.outputs[1]] == [(1, 6)]
    assert [(r["k"], r["when"]) for r in sim.outputs[2]] == [(2, 10)]
    assert sum(s.timers_fired for s in sim.stats) == 2


def test_processing_time_timers_fire_at_their_batch_time_and_list_is_ascending_utc():
    seen = {}

    def fn(key, rows, state):
        seen[key] = (state.batch_time, state.watermark)
        state.timers.register(datetime(1970, 1, 1, 0, 0, 3))  # naive: UTC
        state.timers.register(1000)
        assert state.timers.list() == [EPOCH + timedelta(seconds=1), EPOCH + timedelta(seconds=3)]
        return []

    def handler(key, when, state):
        assert when.tzinfo is UTC
        yield {"k": key, "when": ms(when), "at": ms(state.batch_time)}

    sim = simulate(
        fn,
        [[{"k": 1, "ts": 0}], [], []],
        key="k",
        order_by="ts",
        time_mode="processing",
        on_timer=handler,
        batch_times=[0, 1500, 4000],
    )
    assert seen[1] == (EPOCH, None)
    assert sim.outputs == [
        [],
        [{"k": 1, "when": 1000, "at": 1500}],
        [{"k": 1, "when": 3000, "at": 4000}],
    ]


def test_chain_routes_each_timer_to_the_operator_that_registered_it():
    class Delay:
        """Holds each row until the watermark passes its ts, then emits it."""

        def __call__(self, key, rows, state):
            held = state.dict("held")
            for row in rows:
                held[row["ts"]] = row["v"]
                state.timers.register(row["ts"])
            return []

        def on_timer(self, key, when, state):
            held = state.dict("held")
            yield {"ts": ms(when), "v": held.pop(ms(when))}

    op = ops.chain(ops.take(100), Delay(), ops.scan("sum", value="v"))
    batches = [
        [{"k": 1, "ts": 1, "v": 1.0}, {"k": 1, "ts": 2, "v": 2.0}],
        [{"k": 1, "ts": 10, "v": 5.0}],
        [],
    ]
    sim = simulate(op, batches, key="k", order_by="ts", time_mode="event", event_time="ts")
    assert sim.outputs[0] == []
    assert [r["sum"] for r in sim.outputs[1]] == [1.0, 3.0]  # fired in time order, then scanned
    assert [r["sum"] for r in sim.outputs[2]] == [8.0]


def test_late_rows_are_kept_with_late_rows_keep():
    def fn(key, rows, state):
        yield {"k": key, "n": len(rows)}

    # Batch 2 tests late rows against batch 1's watermark (100, Spark's rule): both are late.
    batches = [[{"k": 1, "ts": 100}], [], [{"k": 1, "ts": 1}, {"k": 1, "ts": 99}]]
    drop = simulate(fn, batches, key="k", order_by="ts", time_mode="event", event_time="ts")
    keep = simulate(
        fn, batches, key="k", order_by="ts", time_mode="event", event_time="ts", late_rows="keep"
    )
    assert drop.outputs[2] == []
    assert drop.stats[2].rows_late == 2 and drop.stats[2].late_watermark == 100
    assert keep.outputs[2] == [{"k": 1, "n": 2}] and keep.stats[2].rows_late == 2


def test_event_time_may_be_a_datetime_column():
    def fn(key, rows, state):
        for row in rows:
            state.timers.register(row["ts"] + timedelta(seconds=1))
        return []

    def handler(key, when, state):
        yield {"k": key, "when": when}

    t0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    batches = [[{"k": "a", "ts": t0}], [{"k": "b", "ts": t0 + timedelta(seconds=5)}], []]
    sim = simulate(
        fn, batches, key="k", order_by="ts", time_mode="event", event_time="ts", on_timer=handler
    )
    assert sim.outputs[2] == [{"k": "a", "when": t0 + timedelta(seconds=1)}]


def test_time_options_are_checked():
    fn = sessions
    with pytest.raises(TimeError, match="event_time"):
        simulate(fn, [], key="k", order_by="ts", time_mode="event")
    with pytest.raises(TimeError, match="time_mode"):
        simulate(fn, [], key="k", order_by="ts", time_mode="wall")
    with pytest.raises(TimeError, match="'ten seconds'"):
        simulate(
            fn,
            [],
            key="k",
            order_by="ts",
            time_mode="event",
            event_time="ts",
            watermark_delay="ten seconds",
        )
    with pytest.raises(TimeError, match="late_rows"):
        simulate(fn, [], key="k", order_by="ts", late_rows="skip")
    with pytest.raises(TimeError, match="time_mode"):
        simulate(sessions, [[{"k": 1, "ts": 1}]], key="k", order_by="ts")


def test_parse_duration():
    assert parse_duration("10 seconds") == 10_000
    assert parse_duration("1 hour") == 3_600_000
    assert parse_duration("2 minutes") == 120_000
    assert parse_duration("1h 30 min") == 5_400_000
    assert parse_duration(timedelta(days=1)) == 86_400_000
    for bad in ("", "ten seconds", "10 parsecs", "10", 10):
        with pytest.raises(
            TimeError, match=None if not isinstance(bad, str) or not bad else repr(bad)
        ):
            parse_duration(bad, "ttl")


def test_timers_below_spark_on_a_space_with_an_explicit_clock():
    space = ObjectSpace()
    state = KeyState.for_key(space, "u1", Clock("event", watermark=0))
    state.namespace("op").timers.register(50)
    state.timers.register(20)
    KeyState.for_key(space, "u2", Clock("event", watermark=0)).timers.register(30)
    assert earliest(space) == 20
    assert due_timers(space, 25) == [(20, state.prefix, "u1", ())]
    assert [(w, k, n) for w, _, k, n in due_timers(space, 100)] == [
        (30, "u2", ()),
        (50, "u1", ("op",)),
    ]
    assert earliest(space) is None and len(space.get_sorted_set(DUE_ID)) == 0


def test_a_retried_attempt_keeps_its_batch_time():
    def fn(key, rows, state):
        time.sleep(0.002)  # batch times are in ms: let two batches differ
        yield {"k": key, "at": state.batch_time}

    sim = simulate(
        fn,
        [[{"k": 1, "ts": 0}], [{"k": 1, "ts": 1}]],
        key="k",
        order_by="ts",
        time_mode="processing",
        replay=(0, 1),
    )
    for i in (0, 1):
        assert sim.first_attempts[i] == sim.outputs[i]
    assert sim.outputs[0][0]["at"] < sim.outputs[1][0]["at"]


def test_a_timer_costs_one_row_and_no_object_per_key():
    """Registering a timer writes one row and firing one deletes one: the due index is the
    only persisted structure (no timers-by-key set, no object per key with timers)."""

    def fn(key, rows, state):
        for row in rows:
            state.timers.register(row["ts"] + 1000)
        return []

    def on_timer(key, when, state):
        return []

    n = 200
    batches = [
        [{"k": k, "ts": 1} for k in range(n)],  # 200 timers at 1001, none due
        [{"k": k, "ts": 500} for k in range(n, 2 * n)],  # 200 more at 1500
        [{"k": -1, "ts": 10_000}],  # watermark 500: nothing due
        [],  # watermark 10,000: all 400 fire (the -1 key's at 11,000 stays)
    ]
    sim = simulate(
        fn,
        batches,
        key="k",
        order_by="ts",
        max_key_groups=4,
        time_mode="event",
        event_time="ts",
        on_timer=on_timer,
    )
    assert sim.stats[3].timers_fired == 2 * n
    assert sim.stats[1].rows_written <= n + 8
    assert sim.stats[3].rows_written <= 2 * n + 8  # 400 timers fired
    assert [ms(t) for t in sim.state(-1).timers.list()] == [11_000]


def test_a_batch_run_again_by_a_restarted_driver_keeps_its_batch_time(tmp_path) -> None:
    """The batch time is recorded before the batch runs: a new driver (a restart) that runs
    an uncommitted batch again uses that time, as Spark keeps a batch's timestamp in its
    offset log; the next batch takes a new time."""
    import objectspace as osp
    from objectspace.engine import TimeDriver, TimeOptions

    options = TimeOptions.of("processing", None, None, "drop", None)
    url = f"sqlite:///{tmp_path}/s.db"
    first = osp.open_storage(url)
    planned = TimeDriver(first.job("j"), "op", options).plan(0, None, False, None)
    first.close()  # the driver dies before batch 0 commits
    time.sleep(0.01)
    again = osp.open_storage(url)
    try:
        driver = TimeDriver(again.job("j"), "op", options)
        replanned = driver.plan(0, None, False, None)
        assert replanned.clock.batch_time == planned.clock.batch_time
        time.sleep(0.01)
        later = TimeDriver(again.job("j"), "op", options).plan(1, None, False, None)
        assert later.clock.batch_time > planned.clock.batch_time
    finally:
        again.close()


def test_a_store_with_the_earlier_timers_by_key_set_is_read_and_the_set_dropped():
    """A space written by an earlier version kept a sorted set ``TIMERS_ID`` of live
    ``(prefix, when)`` beside the due index: an index entry missing from it (a deleted
    timer) never fires, the live ones do, and the set is deleted on first use."""
    space = ObjectSpace()
    clock = Clock("event", watermark=None)
    a = KeyState.for_key(space, "a", clock)
    b = KeyState.for_key(space, "b", clock)
    due = space.create_sorted_set(DUE_ID)
    legacy = space.create_sorted_set(TIMERS_ID)
    for state, when, live in ((a, 10, True), (a, 20, False), (b, 15, True)):
        due.add((when, "t", state.prefix, state.key, ()))
        if live:
            legacy.add((state.prefix, when))
    assert [ms(t) for t in a.timers.list()] == [10]
    assert TIMERS_ID not in space
    fired = [(when, key) for when, _, key, _ in due_timers(space, 100)]
    assert fired == [(10, "a"), (15, "b")]
    assert len(due) == 0


def test_a_root_namespace_timer_is_indexed_without_its_empty_namespace_path():
    """A timer of a key's root namespace is ``(when, "t", prefix, key)`` in the due index
    (no empty path to encode in every row); a nested one keeps its path, and both fire
    with their key and path."""
    space = ObjectSpace()
    state = KeyState.for_key(space, 7, Clock("event", watermark=None))
    state.timers.register(10)
    state.namespace("op").timers.register(20)
    assert sorted(len(e) for e in space.get_sorted_set(DUE_ID)) == [4, 5]
    fired = [(when, key, names) for when, _, key, names in due_timers(space, 100)]
    assert fired == [(10, 7, ()), (20, 7, ("op",))]


def test_fired_timers_leave_the_due_index_at_once_unless_registered_again():
    """The timers a call fires leave the due index together when the firing ends (one
    slice for a due prefix); a handler that registers a fired timer again keeps it, and
    deletes and saves are exactly those of firing one by one."""
    from objectspace import MemoryStore
    from objectspace.keyed import expired_timers

    store = MemoryStore()
    space = ObjectSpace()
    clock = Clock("event", watermark=0)
    states = {k: KeyState.for_key(space, k, clock) for k in ("a", "b", "c")}
    for k, t in (("a", 10), ("b", 20), ("c", 30), ("a", 40), ("b", 90)):
        states[k].timers.register(t)
    space.checkpoint(store)
    seen = []
    for when, _, key, _ in expired_timers(space, 50):
        seen.append((when, key))
        assert when in [x for x in states[key].timers._times()]  # listed while it fires
        if (when, key) == (30, "c"):
            states["a"].timers.register(10)  # fired already: registered again
            states["b"].timers.delete(90)  # not due: deleted
    assert seen == [(10, "a"), (20, "b"), (30, "c"), (40, "a")]
    due = space.get_sorted_set(DUE_ID)
    assert [e[0] for e in due] == [10]
    assert states["a"].timers._times() == [10]
    space.checkpoint(store)
    restored = ObjectSpace.load(store.reader())
    assert [(e[0], e[3]) for e in restored.get_sorted_set(DUE_ID)] == [(10, "a")]
    # Not a prefix (a TTL-like element of the index stays in front): one by one.
    space.get_sorted_set(DUE_ID).add((5, "e", "x"))
    assert [(w, k) for w, _, k, _ in expired_timers(space, 50)] == [(10, "a")]
    assert list(space.get_sorted_set(DUE_ID)) == [(5, "e", "x")]


def test_epoch_ms_become_the_exact_datetime_across_the_datetimes() -> None:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    for ms in (MIN_MS, MIN_MS + 1, -86_400_001, -1, 0, 1, 999, 1_767_226_404_123, MAX_MS):
        assert from_ms(ms) == epoch + timedelta(milliseconds=ms)
        assert to_ms(from_ms(ms), "t") == ms
    for ms in (MIN_MS - 1, MAX_MS + 1):
        with pytest.raises(TimeError, match="outside the datetimes"):
            from_ms(ms)
