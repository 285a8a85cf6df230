"""An operator that runs a key group's keys at once (``run_group`` / ``fire_group``) gives
exactly what calling it key by key gives: the same output rows in the same order, and the
same committed state (entries, timers) after every batch."""

from __future__ import annotations

import gc
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from objectspace import operators as ops
from objectspace.collections import PersistedSortedDict, PersistedSortedSet, _impl, untrack
from objectspace.keyed import KeyRef, KeyState, shared_dict
from objectspace.keyed.clock import Clock
from objectspace.keyed.timers import _timer_index, due_timers
from objectspace.space import ObjectSpace
from objectspace.testing import simulate

Row = dict[str, Any]
SEC = 1000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class KeyByKey:
    """The operator ``op`` without its key-group methods: the runner calls it per key and
    fires its timers one by one through ``handle_timer``."""

    def __init__(self, op: Any) -> None:
        self.op = op

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> Any:
        return self.op(key, rows, state)

    def late_time(self, event_ms: int) -> int:
        return int(self.op.late_time(event_ms))

    def handle_timer(self, key: Any, names: tuple[str, ...], when: int, state: KeyState) -> Any:
        return self.op.handle_timer(key, names, when, state)


def stream(seed: int, n_batches: int = 14) -> list[list[Row]]:
    """Many keys, rows out of order (sessions that merge, grow backwards), float values
    (a sum in another order would differ), int and datetime event times, late rows."""
    rng = random.Random(seed)
    batches = []
    top = 0
    for b in range(n_batches):
        rows = []
        for _ in range(rng.randint(0, 40)):
            roll = rng.random()
            if roll < 0.1 and top:
                ts = top - rng.randint(5, 40) * SEC
            elif roll < 0.4 and top:
                ts = top - rng.randint(0, 8) * SEC
            else:
                ts = b * 10 * SEC + rng.randint(0, 14) * SEC
            rows.append({"k": rng.randrange(25), "ts": ts, "v": rng.random() * 10})
        batches.append(rows)
        top = max([top, *(r["ts"] for r in rows)])
    batches.append([{"k": 0, "ts": 10**6 * SEC, "v": 0.5}])
    batches.append([])
    if seed % 2:  # times as datetimes: the key-by-key path within the key group's
        for rows in batches:
            for row in rows:
                row["ts"] = EPOCH + timedelta(milliseconds=row["ts"])
    return batches


def committed(sim: Any) -> list[tuple[int, str, Any]]:
    """Every object of every key group of the last checkpoint, as plain values."""
    out = []
    for index in range(3):
        out.extend(_committed(sim.operator.instance(index, 3)))
    return out


def _committed(instance: Any) -> list[tuple[int, str, Any]]:
    out = []
    for key_group in sorted(instance.key_groups):
        space = instance.space(key_group)
        for object_id in sorted(space):
            obj = space.get(object_id)
            if isinstance(obj, PersistedSortedDict):
                value: Any = list(obj.items())
            elif isinstance(obj, PersistedSortedSet):
                value = list(obj)
            else:
                value = repr(obj)
            out.append((key_group, object_id, value))
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("aggs", [("count", "sum"), ("min", "max", "mean")])
def test_session_window_by_key_group_equals_key_by_key(seed: int, aggs: tuple[str, ...]) -> None:
    batches = stream(seed)
    op = ops.session_window("6 seconds", aggs=aggs)
    options = dict(
        key="k", order_by="ts", time_mode="event", event_time="ts", watermark_delay="5 seconds"
    )
    # A restart at another parallelism, and a replayed batch.
    runs = dict(max_key_groups=8, parallelism={0: 1, 6: 3}, replay=[4], **options)
    fast = simulate(op, batches, **runs)
    slow = simulate(KeyByKey(op), batches, **runs)
    assert fast.outputs == slow.outputs
    assert sum(map(len, fast.outputs)) > 20
    assert committed(fast) == committed(slow)
    assert [s.timers_fired for s in fast.stats] == [s.timers_fired for s in slow.stats]


def test_session_state_and_timers_are_left_out_of_the_collector() -> None:
    """With the C extension, what session_window keeps between batches (each session's
    stored entry, each key's timer dict and timer entries) and the columns a task hands
    it are untracked by the cyclic collector: full collections do not walk a state of
    millions of them, and a batch's new entries do not count towards the next one."""
    if _impl.IMPLEMENTATION != "c":
        pytest.skip("the pure-Python build tracks every container")
    op = ops.session_window("10 seconds", value="v", aggs=("count", "sum"))
    space = ObjectSpace()
    clock = Clock("event", watermark=0, event_time="ts")
    times = [untrack([1_000, 2_000]), untrack([5_000])]
    values = [untrack([1.0, 2.0]), untrack([3.0])]
    keys = [(f"{k}/", k, (times[k], values[k])) for k in range(2)]
    op.run_columns(space, keys, clock)  # type: ignore[attr-defined]
    sessions = shared_dict(KeyRef(space, ""), "session_window")[0]
    assert sorted(sessions.items()) == [
        (("0/", 1_000), [11_000, 2, 3.0]),
        (("1/", 5_000), [10_000, 1, 3.0]),
    ]
    assert not any(map(gc.is_tracked, sessions._data.values()))
    index = _timer_index(space, False)
    assert index is not None and sorted(index.by_prefix) == ["0/", "1/"]
    for whens in index.by_prefix.values():
        assert not gc.is_tracked(whens)
        assert not any(map(gc.is_tracked, whens.values()))
    # a session that grows keeps its entry untracked; a tracked one would show here
    op.run_columns(space, [("0/", 0, (untrack([3_000]), untrack([4.0])))], clock)  # type: ignore[attr-defined]
    assert sessions[("0/", 1_000)] == [12_000, 3, 7.0]
    assert not any(map(gc.is_tracked, sessions._data.values()))
    fired, out = op.fire_group(space, 15_000, Clock("event", watermark=15_000, event_time="ts"))  # type: ignore[attr-defined]
    assert fired == 2 and [key for key, _ in out] == [0, 1]
    assert len(sessions) == 0


def test_a_key_with_two_due_timers_fires_from_its_sessions_as_they_are() -> None:
    """A key whose first due timer emits its session finds no session at its second: the
    group path reads a key's sessions afresh after the key fired, as handle_timer does."""
    outputs = []
    for by_group in (True, False):
        space = ObjectSpace()
        op = ops.session_window("10 seconds", aggs=("count",))
        clock = Clock("event", watermark=0, event_time="ts", late_watermark=0)
        for key in ("a", "b", "c"):
            state = KeyState.for_key(space, key, clock)
            op(key, [{"ts": 1000}, {"ts": 2000}], state)  # one session each, timer at 12 s
        KeyState.for_key(space, "a", clock).timers.register(5000)  # a second, earlier timer
        later = Clock("event", watermark=20000, event_time="ts", late_watermark=0)
        if by_group:
            fired, out = op.fire_group(space, 20000, later)
        else:
            out = []
            fired = 0
            for when, prefix, key, names in due_timers(space, 20000):
                fired += 1
                rows = op.handle_timer(key, names, when, KeyState(space, prefix, key, (), later))
                if rows:
                    out.append((key, rows))
        assert fired == 4
        assert not len(shared_dict(KeyRef(space, ""), "session_window")[0])
        outputs.append(out)
    assert outputs[0] == outputs[1]
    assert [key for key, _ in outputs[0]] == ["a", "b", "c"]
