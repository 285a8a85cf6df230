"""State larger than memory under ``simulate``: a memory budget keeps only the objects in
use as Python objects, and changes nothing a function sees."""

from __future__ import annotations

import os
import random
from typing import Any

import pytest

from objectspace.checkpoint import CompactionPolicy
from objectspace.checkpoint.local import LocalHead, LocalStore
from objectspace.engine.residency import Residency, parse_bytes
from objectspace.errors import CorruptStateError
from objectspace.residents import COMPACT_BYTES
from objectspace.testing import simulate


def _fn(key: Any, rows: list[dict[str, Any]], state: Any) -> list[dict[str, Any]]:
    """A bit of every kind of state a key may hold, and a timer now and then."""
    total = state.value("total", 0)
    seen = state.dict("seen")
    recent = state.list("recent")
    out = []
    for row in rows:
        total.value += row["x"]
        seen[row["x"] % 7] = seen.get(row["x"] % 7, 0) + 1
        recent.append(row["x"])
        if len(recent) > 3:
            recent.pop(0)
        if row["x"] % 11 == 0 and "flag" in state:
            state.delete("flag")
        elif row["x"] % 5 == 0:
            state.value("flag", True)
        if row["x"] % 13 == 0:
            state.clear()
            out.append({"k": key, "total": -1, "seen": 0, "recent": 0})
            return out
    out.append(
        {
            "k": key,
            "total": total.value,
            "seen": len(seen),
            "recent": sum(recent),
            "flag": "flag" in state,
        }
    )
    return out


def _count(key: Any, rows: list[dict[str, Any]], state: Any) -> list[dict[str, Any]]:
    n = state.value("n", 0)
    n.value += len(rows)
    return [{"k": key, "count": n.value}]


def _batches(seed: int, n: int = 8, keys: int = 60, rows: int = 40) -> list[list[dict[str, Any]]]:
    rng = random.Random(seed)
    out = []
    t = 0
    for _ in range(n):
        batch = []
        for _ in range(rows):
            t += 1
            batch.append({"k": rng.randrange(keys), "x": rng.randrange(100), "t": t})
        out.append(batch)
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("budget", [1, 2000, 50_000, 10**9])
def test_outputs_are_those_of_an_unbounded_run(seed: int, budget: int, tmp_path: Any) -> None:
    batches = _batches(seed)
    kwargs: dict[str, Any] = {
        "key": "k",
        "order_by": "t",
        "max_key_groups": 16,
        "parallelism": {0: 2, 3: 3, 6: 1},
        "replay": [2, 5],
        "compaction": CompactionPolicy(max_chain_length=3, min_chain_bytes=0),
    }
    plain = simulate(_fn, batches, **kwargs)
    bounded = simulate(_fn, batches, memory_budget=budget, local_dir=str(tmp_path), **kwargs)
    assert bounded.outputs == plain.outputs
    assert bounded.first_attempts == plain.first_attempts
    for k in range(60):
        a, b = plain.state(k), bounded.state(k)
        assert sorted(a.ids()) == sorted(b.ids())
        if "total" in a:
            assert a.value("total").value == b.value("total").value
            assert dict(a.dict("seen")) == dict(b.dict("seen"))
            assert list(a.list("recent")) == list(b.list("recent"))
    stats = bounded.stats
    if budget == 1:
        # only the objects of the keys a batch touched stay after it, and they go next
        assert sum(s.objects_evicted for s in stats) > 0
        assert sum(s.objects_loaded for s in stats) > 0
    if budget == 10**9:
        assert sum(s.objects_evicted for s in stats) == 0
    if budget == 1:
        # Each batch ends holding at most the objects of the keys it touched (four a key).
        for batch, s in zip(batches, stats, strict=True):
            assert s.objects_resident <= 4 * len({row["k"] for row in batch})


def test_a_tiny_budget_keeps_only_the_batch_s_keys(tmp_path: Any) -> None:
    batches = [[{"k": i, "x": 1, "t": i} for i in range(b * 100, b * 100 + 100)] for b in range(5)]
    batches.append([{"k": 3, "x": 1, "t": 1000}])
    sim = simulate(
        _count,
        batches,
        key="k",
        order_by="t",
        memory_budget="1 KiB",
        local_dir=str(tmp_path),
    )
    last = sim.stats[-1]
    assert last.objects_loaded >= 1  # key 3, from batch 0, came back from the local store
    assert last.objects_resident <= 8
    assert last.bytes_read == 0  # nothing read from storage: the local store had it
    assert sim.outputs[-1] == [{"k": 3, "count": 2}]


def test_plain_values_leave_memory_as_values_between_batches(tmp_path: Any) -> None:
    batches = [[{"k": i, "x": 1, "t": i} for i in range(100)]]
    batches += [[{"k": 7, "x": 1, "t": 100 + b}] for b in range(3)]
    kwargs: dict[str, Any] = {"key": "k", "order_by": "t", "parallelism": 1}
    bounded = simulate(_count, batches, memory_budget=10**9, local_dir=str(tmp_path), **kwargs)
    assert bounded.outputs == simulate(_count, batches, **kwargs).outputs
    stats = bounded.stats
    assert stats[0].objects_resident == 100
    # From the next batch on, only the key it touches is an object; the other 99 keys'
    # counts are kept as plain values, nothing evicted and nothing read back.
    assert [s.objects_resident for s in stats[1:]] == [1, 1, 1]
    assert sum(s.objects_evicted for s in stats) == 0
    assert sum(s.objects_loaded for s in stats) == 0
    per_object = stats[0].bytes_resident // 100
    assert stats[1].bytes_resident == per_object + 99 * COMPACT_BYTES < per_object * 100 * 0.6


def test_a_new_process_continues_from_the_local_store(tmp_path: Any) -> None:
    storage = f"sqlite:///{tmp_path / 'state.db'}"
    first = [[{"k": i, "x": 1, "t": i} for i in range(500)]]
    simulate(
        _count,
        first,
        key="k",
        order_by="t",
        storage=storage,
        memory_budget="1 MiB",
        local_dir=str(tmp_path / "local"),
    )
    # A later run (a restarted process) touching one key reads nothing from storage.
    sim = simulate(
        _count,
        [[], [{"k": 7, "x": 1, "t": 1}]],
        key="k",
        order_by="t",
        storage=storage,
        memory_budget="1 MiB",
        local_dir=str(tmp_path / "local"),
    )
    assert sim.outputs[-1] == [{"k": 7, "count": 2}]
    assert sim.stats[-1].bytes_read == 0  # the local store was current: nothing read
    assert sim.stats[-1].objects_loaded == 1


class _Held:
    """What Residency._fit asks of a kept instance: n objects of 100 bytes each."""

    def __init__(self, n: int) -> None:
        self.n = n

    def resident(self) -> tuple[int, int]:
        return self.n, self.n * 100

    def evict(self, budget: int) -> int:
        keep = min(self.n, budget // 100)
        dropped, self.n = self.n - keep, keep
        return dropped


def test_the_budget_is_shared_by_the_kept_instances_oldest_evicted_first(tmp_path: Any) -> None:
    residency = Residency(1000, str(tmp_path))
    held = {("a",): _Held(8), ("b",): _Held(8), ("c",): _Held(8)}
    residency.instances = held  # type: ignore[assignment]
    # 2,400 bytes for 1,000: b (kept longest) goes whole, c down to what is left, a stays.
    assert residency._fit(("a",)) == 14
    assert [h.n for h in held.values()] == [8, 0, 2]
    assert residency._fit(("a",)) == 0  # within the budget now
    held[("d",)] = _Held(30)  # the instance a task just ran, over the budget alone
    assert residency._fit(("d",)) == 8 + 2 + 20
    assert [h.n for h in held.values()] == [0, 0, 0, 10]


def test_parse_bytes() -> None:
    assert parse_bytes("512 MiB") == 512 << 20
    assert parse_bytes("1g") == 1 << 30
    assert parse_bytes(4096) == 4096
    for bad in ("", "x", "-1 MiB", 0, "0", 1.5, None):
        with pytest.raises(ValueError, match="memory_budget"):
            parse_bytes(bad)  # type: ignore[arg-type]


def test_a_damaged_local_row_is_rebuilt_from_storage(tmp_path: Any) -> None:
    batches = [[{"k": i, "x": 1, "t": i} for i in range(50)], [{"k": 1, "x": 1, "t": 99}]]
    local = tmp_path / "local"
    storage = f"sqlite:///{tmp_path / 'state.db'}"
    simulate(
        _count,
        batches,
        key="k",
        order_by="t",
        storage=storage,
        memory_budget=1,
        local_dir=str(local),
    )
    import sqlite3

    (path,) = [p for p in local.iterdir() if p.suffix == ".db"]
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM rows").fetchone()[0] > 50
    db.execute("UPDATE rows SET v = x'00' || v")
    db.commit()
    db.close()
    sim = simulate(
        _count,
        [[], [], [{"k": 2, "x": 1, "t": 100}]],
        key="k",
        order_by="t",
        storage=storage,
        memory_budget=1,
        local_dir=str(local),
    )
    assert sim.outputs[-1] == [{"k": 2, "count": 2}]
    assert sim.stats[-1].bytes_read > 0  # the key group came from storage again


def test_a_local_store_of_another_identity_starts_afresh(tmp_path: Any) -> None:
    path = str(tmp_path / "x.db")
    store = LocalStore.open(path, b"one")
    assert store is not None
    store.replace(3, {"state/index": {b"a": b"k"}}, LocalHead(1, 1, None, 1, 0, 0))
    assert LocalStore.open(path, b"two") is None  # locked by the first
    store.close()
    other = LocalStore.open(path, b"two")
    assert other is not None and other.heads([3]) == {}
    other.close()
    with pytest.raises(CorruptStateError):
        bad = LocalStore.open(path, b"two")
        assert bad is not None
        bad._db.execute("INSERT INTO rows VALUES (3, ?, ?)", (b"a\x00\x00K", b"xxxxxx"))
        try:
            bad.fetch(3, "a")
        finally:
            bad.close()


def test_residency_refuses_a_folder_open_to_others(tmp_path: Any) -> None:
    folder = tmp_path / "open"
    folder.mkdir()
    os.chmod(folder, 0o777)
    with pytest.raises(PermissionError, match="private"):
        simulate(
            _count,
            [[{"k": 1, "t": 1}]],
            key="k",
            order_by="t",
            memory_budget=1,
            local_dir=str(folder),
        )
    assert Residency(1).budget == 1


def _timed(key: Any, rows: list[dict[str, Any]], state: Any) -> list[dict[str, Any]]:
    """TTL'd entries and event-time timers of every key, under a tiny budget."""
    seen = state.dict("seen", ttl="30 seconds")
    for row in rows:
        seen[row["x"] % 5] = row["x"]
        state.timers.register(row["ts"] + 20_000)
    return [{"k": key, "seen": sorted(seen.items())}]


class _Fire:
    def __call__(self, key: Any, rows: list[dict[str, Any]], state: Any) -> list[dict[str, Any]]:
        return _timed(key, rows, state)

    def on_timer(self, key: Any, when: Any, state: Any) -> list[dict[str, Any]]:
        return [
            {"k": key, "fired": when, "seen": sorted(state.dict("seen", ttl="30 seconds").items())}
        ]


@pytest.mark.parametrize("op", ["sessions", "timers"])
def test_timers_ttl_and_windows_under_a_tiny_budget(op: str, tmp_path: Any) -> None:
    from objectspace import operators as ops

    rng = random.Random(7)
    batches = []
    t = 0
    for _ in range(10):
        rows = []
        for _ in range(30):
            t += rng.randrange(0, 3000)
            rows.append({"k": rng.randrange(25), "x": rng.randrange(50), "ts": t, "seq": t})
        batches.append(rows)
    fn: Any = ops.session_window("10 seconds", value="x") if op == "sessions" else _Fire()
    kwargs: dict[str, Any] = {
        "key": "k",
        "order_by": "seq",
        "time_mode": "event",
        "event_time": "ts",
        "watermark_delay": "5 seconds",
        "max_key_groups": 8,
        "parallelism": {0: 2, 5: 1},
        "replay": [4],
    }
    plain = simulate(fn, batches, **kwargs)
    bounded = simulate(fn, batches, memory_budget=1, local_dir=str(tmp_path), **kwargs)
    assert bounded.outputs == plain.outputs
    assert (
        sum(s.timers_fired for s in bounded.stats) == sum(s.timers_fired for s in plain.stats) > 0
    )
    assert sum(s.objects_loaded for s in bounded.stats) > 0


def test_local_stores_of_another_parallelism_are_deleted_unless_in_use(tmp_path: Any) -> None:
    """After a rescale the stores of the old parallelism (and private folders of ended
    processes) go, the first time a process opens the operator's stores at the new one; a
    store another process holds stays."""
    local = tmp_path / "local"
    storage = f"sqlite:///{tmp_path / 'state.db'}"
    batches = [[{"k": i, "x": 1, "t": b * 100 + i} for i in range(40)] for b in range(3)]

    def run(parallelism: int, rows: list[list[dict[str, Any]]]) -> Any:
        return simulate(
            _count,
            rows,
            key="k",
            order_by="t",
            storage=storage,
            parallelism=parallelism,
            memory_budget=1,
            local_dir=str(local),
            local_copy_every=None,  # (no copies: what the local stores alone give)
        )

    def stores() -> set[str]:
        return {p.name for p in local.iterdir() if p.suffix == ".db"}

    run(2, batches[:1])
    at_two = stores()
    assert len(at_two) == 2 and {n.split("-")[1] for n in at_two} == {"2"}
    (leftover,) = [n for n in at_two if n.endswith("-2-0.db")]
    operator = leftover.split("-")[0]
    (local / f"{operator}-2-1-abc123").mkdir()  # an ended process's private folder
    held = LocalStore.open(str(local / leftover), b"held elsewhere")
    assert held is not None
    try:
        sim = run(3, [[], *batches[1:2]])
        assert [r["count"] for r in sorted(sim.outputs[-1], key=lambda r: r["k"])] == [2] * 40
        names = stores()
        assert {n.split("-")[1] for n in names} == {"2", "3"}
        assert leftover in names  # held by another process: kept
        assert sim.stats[-1].rows_read > 0  # its key groups rebuilt from storage
        assert not (local / f"{operator}-2-1-abc123").exists()
    finally:
        held.close()
    sim = run(4, [[], [], *batches[2:]])
    assert [r["count"] for r in sorted(sim.outputs[-1], key=lambda r: r["k"])] == [3] * 40
    assert {n.split("-")[1] for n in stores()} == {"4"}
    assert sim.stats[-1].rows_read == 0  # the stores at three, none held, seeded those at four
    assert not [p for p in local.iterdir() if p.suffix == ".lock" and "-2-" in p.name]
