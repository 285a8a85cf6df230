"""Copies of local stores in storage's file area: a process with no local file for an
instance starts from the newest copy and reads only the writes made since."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import random
import shutil
import sqlite3
from typing import Any

import pytest

from objectspace.checkpoint import CompactionPolicy, copies
from objectspace.checkpoint.local import LocalHead, LocalStore
from objectspace.engine.columns import check_copy_every
from objectspace.keygroups import KeyGroups
from objectspace.storage import open_backend
from objectspace.storage.areas import FsspecArea, LocalArea, check_name
from objectspace.testing import simulate


def _sum(key: Any, rows: list[dict[str, Any]], state: Any) -> list[dict[str, Any]]:
    total = state.value("total", 0)
    seen = state.dict("seen")
    for row in rows:
        total.value += row["x"]
        seen[row["x"] % 5] = seen.get(row["x"] % 5, 0) + 1
        if row["x"] == 13:
            seen.clear()
    return [{"k": key, "total": total.value, "seen": len(seen)}]


def _batches(seed: int, n: int, keys: int = 400, rows: int = 60) -> list[list[dict[str, Any]]]:
    rng = random.Random(seed)
    first = [{"k": k, "x": 1, "t": 0} for k in range(keys)]
    return [first] + [
        [{"k": rng.randrange(keys), "x": rng.randrange(20), "t": i} for i in range(rows)]
        for _ in range(n - 1)
    ]


def _run(batches: list[list[dict[str, Any]]], storage: str, local: str, **kw: Any) -> Any:
    kw.setdefault("parallelism", 2)
    return simulate(
        _sum,
        batches,
        key="k",
        order_by="t",
        storage=storage,
        memory_budget="64 MiB",
        local_dir=local,
        max_key_groups=16,
        retain=None,
        **kw,
    )


def _cold(storage: str, local: str, done: int, batch: list[dict[str, Any]], **kw: Any) -> Any:
    """A new process with no local store: the committed checkpoints replayed empty (as
    simulate needs), then ``batch``."""
    return _run([[] for _ in range(done)] + [batch], storage, local, **kw)


def test_a_process_without_its_local_store_starts_from_a_copy(tmp_path: Any) -> None:
    storage = f"sqlite:///{tmp_path / 'state.db'}"
    batches = _batches(1, 14)
    _run(batches, storage, str(tmp_path / "a"))
    names = sorted(os.listdir(tmp_path / "state.db.files"))
    # copies at checkpoints 0 and 10, two instances
    assert [n.split(".")[1] for n in names] == ["000000000000", "000000000010"] * 2

    last = [{"k": k, "x": 2, "t": 99} for k in (0, 7, 199, 398)]
    plain = simulate(_sum, [*batches, last], key="k", order_by="t", max_key_groups=16)
    cold = _cold(storage, str(tmp_path / "b"), 14, last)
    assert cold.outputs[-1] == plain.outputs[-1]
    stats = cold.stats[-1]
    assert stats.copy_bytes_read > 0
    rebuilt = _cold(storage, str(tmp_path / "c"), 14, last, local_copy_every=None)
    assert rebuilt.outputs[-1] == plain.outputs[-1]
    assert rebuilt.stats[-1].copy_bytes_read == 0
    # From the copy (checkpoint 10): only the writes of checkpoints 11-13 of the key
    # groups touched; without one, every touched key group's whole chain.
    assert 0 < stats.rows_read < rebuilt.stats[-1].rows_read / 3
    assert stats.copy_bytes_written == 0  # the copy it started from is 4 checkpoints old


def test_a_cold_batch_reads_the_pages_of_the_key_groups_it_touches(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold batch touching two keys reads each copy's index and the frames of the
    skeleton and of those keys' key groups, not the instances' whole copies; one touching
    every key takes its own copy whole."""
    storage = f"sqlite:///{tmp_path / 'state.db'}"
    batches = _batches(9, 14, keys=4000, rows=600)
    _run(batches, storage, str(tmp_path / "a"))
    folder = tmp_path / "state.db.files"
    newest = sorted(n for n in os.listdir(folder) if ".000000000010." in n)
    at = {n: int(n.split(".")[2]) for n in newest}
    sizes = {n: os.path.getsize(folder / n) for n in newest}
    reads = _spy_reads(monkeypatch)
    groups = KeyGroups(16)
    two = [next(k for k in range(4000) if groups.instance_of_key(k, 2) == i) for i in (0, 1)]
    last = [{"k": k, "x": 2, "t": 99} for k in two]  # a key of each instance
    plain = simulate(_sum, [*batches, last], key="k", order_by="t", max_key_groups=16)
    cold = _cold(storage, str(tmp_path / "b"), 14, last)
    assert cold.outputs[-1] == plain.outputs[-1]
    frames = [(n, r) for n, ranges in reads for r in ranges if r[1] is not None]
    assert sorted({n for n, _ in frames}) == newest  # both instances' copies, in part
    for name in newest:
        assert sum(b - a for n, (a, b) in frames if n == name) < at[name] / 2
    indexes = sum(sizes[n] - at[n] for n in newest)
    assert cold.stats[-1].copy_bytes_read == indexes + sum(b - a for _, (a, b) in frames)
    rebuilt = _cold(storage, str(tmp_path / "r"), 14, last, local_copy_every=None)
    assert 0 < cold.stats[-1].rows_read < rebuilt.stats[-1].rows_read / 3  # (the writes after)

    # Two batches in one process, touching other key groups: no frame of a copy read twice.
    reads.clear()
    more = [{"k": k, "x": 1, "t": 99} for k in range(100, 4000, 500)]
    _run([[] for _ in range(14)] + [last, more], storage, str(tmp_path / "d"))
    frames = sorted((n, r) for n, ranges in reads for r in ranges if r[1] is not None)
    for (n1, (_, b1)), (n2, (a2, _)) in itertools.pairwise(frames):
        assert n1 != n2 or b1 <= a2  # disjoint

    reads.clear()
    every = [{"k": k, "x": 2, "t": 99} for k in range(0, 4000, 3)]
    plain = simulate(_sum, [*batches, every], key="k", order_by="t", max_key_groups=16)
    cold = _cold(storage, str(tmp_path / "c"), 14, every)
    assert cold.outputs[-1] == plain.outputs[-1]
    whole = [(n, r) for n, ranges in reads for r in ranges if r[1] is not None]
    assert sorted(whole) == sorted((n, (0, at[n])) for n in newest)  # each whole, once
    assert cold.stats[-1].copy_bytes_read == sum(sizes.values())


def test_copies_without_dbstat_are_read_whole(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = f"sqlite:///{tmp_path / 'state.db'}"
    batches = _batches(10, 12)
    with monkeypatch.context() as patch:

        def no_dbstat(db: Any) -> Any:
            raise sqlite3.OperationalError("no such table: dbstat")

        patch.setattr(copies, "_pages", no_dbstat)
        _run(batches, storage, str(tmp_path / "a"))
    folder = tmp_path / "state.db.files"
    newest = sorted(n for n in os.listdir(folder) if ".000000000010." in n)
    at = {n: int(n.split(".")[2]) for n in newest}
    reads = _spy_reads(monkeypatch)
    last = [{"k": 5, "x": 1, "t": 99}]
    plain = simulate(_sum, [*batches, last], key="k", order_by="t", max_key_groups=16)
    cold = _cold(storage, str(tmp_path / "b"), 12, last)
    assert cold.outputs[-1] == plain.outputs[-1]
    frames = [(n, r) for n, ranges in reads for r in ranges if r[1] is not None]
    (name,) = {n for n, _ in frames}  # one key, one instance: its copy, every frame
    assert frames == [(name, (0, at[name]))]
    assert cold.stats[-1].copy_bytes_read > at[name]


@pytest.mark.parametrize("parallelism", [3, 1])
def test_a_rescaled_job_starts_from_the_copies_made_at_the_old_parallelism(
    parallelism: int, tmp_path: Any
) -> None:
    batches = _batches(5, 14)
    every = [{"k": k, "x": 3, "t": 99} for k in range(0, 400, 3)]  # every instance runs
    plain = simulate(_sum, [*batches, every], key="k", order_by="t", max_key_groups=16)
    runs = []
    for copy_every in (10, None):
        storage = f"sqlite:///{tmp_path / f'{copy_every}.db'}"
        # Two instances (copies at checkpoints 0 and 10), then a new process at another
        # parallelism with no local store.
        _run(batches, storage, str(tmp_path / f"a{copy_every}"), local_copy_every=copy_every)
        runs.append(
            _cold(
                storage,
                str(tmp_path / f"b{copy_every}"),
                14,
                every,
                parallelism=parallelism,
                local_copy_every=copy_every,
            )
        )
    seeded, rebuilt = runs
    assert seeded.outputs[-1] == rebuilt.outputs[-1] == plain.outputs[-1]
    # From the old instances' copies (checkpoint 10): the writes of checkpoints 11-13
    # alone; without copies, every key group's whole chain.
    assert seeded.stats[-1].copy_bytes_read > 0
    assert 0 < seeded.stats[-1].rows_read < rebuilt.stats[-1].rows_read / 3
    # The new instances put copies of their own; of the old ones' only the newest stay,
    # as every key group's second holder.
    names = os.listdir(tmp_path / "10.db.files")
    assert sorted((n.split(".")[0].split("-")[1:], n.split(".")[1]) for n in names) == sorted(
        [([str(parallelism), str(i)], "000000000014") for i in range(parallelism)]
        + [(["2", str(i)], "000000000010") for i in range(2)]
    )


@pytest.mark.parametrize("seed", range(3))
def test_cold_starts_give_what_an_uninterrupted_run_gives(seed: int, tmp_path: Any) -> None:
    """Random workloads; the state goes cold (a new local folder) at random checkpoints,
    with compactions between copies (those key groups are rebuilt, the others caught up)
    and at a random parallelism each time (seeded from the old instances' copies)."""
    rng = random.Random(seed)
    batches = _batches(seed, 24)
    storage = f"sqlite:///{tmp_path / 'state.db'}"
    policy = CompactionPolicy(max_chain_length=rng.choice([3, 7, 64]), min_chain_bytes=0)
    plain = simulate(_sum, batches, key="k", order_by="t", max_key_groups=16)
    done = 0
    outputs: list[Any] = []
    for stop in [*sorted(rng.sample(range(2, 23), 3)), 24]:
        run = _run(
            [[] for _ in range(done)] + batches[done:stop],
            storage,
            str(tmp_path / f"local-{stop}"),
            compaction=policy,
            local_copy_every=rng.choice([1, 3, 5]),
            parallelism=rng.choice([1, 2, 3, 5]),
        )
        outputs += run.outputs[done:stop]
        done = stop
    assert outputs == plain.outputs


def _spy_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[Any]]]:
    """The reads of copies from a LocalArea, as ``(name, ranges)``."""
    reads: list[tuple[str, list[Any]]] = []
    real = LocalArea.read

    def read(self: LocalArea, name: str, ranges: Any) -> Any:
        reads.append((name, list(ranges)))
        return real(self, name, ranges)

    monkeypatch.setattr(LocalArea, "read", read)
    return reads


def _flip(path: Any, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_damaged_copy_is_skipped_for_an_older_one(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = f"sqlite:///{tmp_path / 'state.db'}"
    batches = _batches(2, 12)
    _run(batches, storage, str(tmp_path / "a"))
    folder = tmp_path / "state.db.files"
    names = sorted(os.listdir(folder))
    newest = [n for n in names if ".000000000010." in n]
    older = [n for n in names if ".000000000000." in n]
    _flip(folder / newest[0], -1)  # instance 0: its newest index
    _flip(folder / newest[1], 0)  # instance 1: the first frame of its newest copy
    sizes = {n: os.path.getsize(folder / n) for n in names}
    reads = _spy_reads(monkeypatch)
    every = [{"k": k, "x": 3, "t": 99} for k in range(0, 400, 3)]
    plain = simulate(_sum, [*batches, every], key="k", order_by="t", max_key_groups=16)
    cold = _cold(storage, str(tmp_path / "b"), 12, every)
    assert cold.outputs[-1] == plain.outputs[-1]
    by_name: dict[str, list[Any]] = {}
    for name, ranges in reads:
        by_name.setdefault(name, []).extend(ranges)
    at = {n: int(n.split(".")[2]) for n in names}
    frames = {n: [r for r in by_name.get(n, []) if r[1] is not None] for n in names}
    # Instance 0: its newest index only (unsound), then the older copy whole.
    assert set(by_name[newest[0]]) == {(at[newest[0]], None)} and not frames[newest[0]]
    assert frames[older[0]] == [(0, at[older[0]])]
    # Instance 1: its newest copy's first frame fails, so the older copy whole.
    assert frames[newest[1]] and frames[newest[1]][0][0] == 0
    assert frames[older[1]] == [(0, at[older[1]])]
    indexes = sum(sizes[n] - at[n] for n in (*newest, *older))
    assert cold.stats[-1].copy_bytes_read == indexes + sum(
        b - a for n in names for a, b in frames[n]
    )
    # Both started from checkpoint 0's copies: each puts a new one.
    assert len([n for n in os.listdir(folder) if ".000000000012." in n]) == 2


@pytest.mark.parametrize("parallelism", [3, 1])
def test_a_rescale_on_the_same_machine_starts_from_the_stores_it_left(
    parallelism: int, tmp_path: Any
) -> None:
    """Without copies in storage: the local stores at the old parallelism seed the new
    ones before they are deleted, so the first batch at the new parallelism reads nothing
    from storage, where a new folder rebuilds every key group it touches."""
    batches = _batches(7, 10)
    every = [{"k": k, "x": 3, "t": 99} for k in range(0, 400, 3)]
    plain = simulate(_sum, [*batches, every], key="k", order_by="t", max_key_groups=16)
    storage = f"sqlite:///{tmp_path / 'state.db'}"
    local = str(tmp_path / "local")
    warm = _run(
        [*batches, every],
        storage,
        local,
        parallelism={0: 2, len(batches): parallelism},
        local_copy_every=None,
    )
    assert warm.outputs == plain.outputs
    assert warm.stats[-1].rows_read == 0
    assert warm.stats[-1].copy_bytes_read == 0
    # The stores at two instances are gone, those at the new parallelism hold the state.
    names = sorted(n for n in os.listdir(local) if n.endswith(".db"))
    assert [n.split(".")[0].split("-")[1:] for n in names] == [
        [str(parallelism), str(i)] for i in range(parallelism)
    ]
    rebuilt = _run(
        [[] for _ in batches] + [every],
        storage,
        str(tmp_path / "fresh"),
        parallelism=parallelism,
        local_copy_every=None,
    )
    assert rebuilt.outputs[-1] == plain.outputs[-1]
    assert rebuilt.stats[-1].rows_read > 0


def test_a_store_named_for_no_possible_parallelism_is_not_reused(tmp_path: Any) -> None:
    batches = _batches(8, 6)
    every = [{"k": k, "x": 3, "t": 99} for k in range(0, 400, 3)]
    plain = simulate(_sum, [*batches, every], key="k", order_by="t", max_key_groups=16)
    storage = f"sqlite:///{tmp_path / 'state.db'}"
    local = tmp_path / "local"
    _run(batches, storage, str(local), local_copy_every=None)
    (store,) = [n for n in os.listdir(local) if n.endswith("-2-0.db")]
    odd = store.replace("-2-0.db", "-999-0.db")  # more instances than key groups
    shutil.copy(local / store, local / odd)
    os.utime(local / odd)  # the newest
    run = _cold(storage, str(local), len(batches), every, parallelism=3, local_copy_every=None)
    assert run.outputs[-1] == plain.outputs[-1]


@pytest.mark.parametrize("seed", range(3))
def test_rescales_on_one_machine_give_what_an_uninterrupted_run_gives(
    seed: int, tmp_path: Any
) -> None:
    """Random workloads at a random parallelism every few checkpoints, one local folder
    (the stores of each parallelism seed the next's), with and without copies."""
    rng = random.Random(seed)
    batches = _batches(seed + 10, 20)
    plain = simulate(_sum, batches, key="k", order_by="t", max_key_groups=16)
    changes = sorted(rng.sample(range(1, 20), 4))
    schedule = {0: rng.choice([1, 2, 3, 5])} | {c: rng.choice([1, 2, 3, 4, 5]) for c in changes}
    run = _run(
        batches,
        f"sqlite:///{tmp_path / 'state.db'}",
        str(tmp_path / "local"),
        parallelism=schedule,
        local_copy_every=rng.choice([None, 2, 5]),
        compaction=CompactionPolicy(max_chain_length=rng.choice([2, 5]), min_chain_bytes=0),
    )
    assert run.outputs == plain.outputs


def test_a_rescaled_start_skips_a_damaged_old_copy(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = f"sqlite:///{tmp_path / 'state.db'}"
    batches = _batches(6, 12)
    _run(batches, storage, str(tmp_path / "a"))  # copies at 0 and 10 of two instances
    folder = tmp_path / "state.db.files"
    damaged = next(n for n in sorted(os.listdir(folder)) if ".000000000010." in n)
    _flip(folder / damaged, 0)  # its first frame, which every read needs
    operator = damaged.split("-")[0]
    never = [f"abcdef-2-0.000000000011.5.{'0' * 32}.copy"]  # another operator's
    never += [  # parallelisms no run could have
        f"{operator}-{bad}.000000000011.5.{'0' * 32}.copy" for bad in ("0-0", "1000-3")
    ]
    for name in never:
        (folder / name).write_bytes(b"never read")
    reads = _spy_reads(monkeypatch)
    last = [{"k": k, "x": 3, "t": 99} for k in range(0, 400, 7)]
    plain = simulate(_sum, [*batches, last], key="k", order_by="t", max_key_groups=16)
    cold = _cold(storage, str(tmp_path / "b"), 12, last, parallelism=4)
    assert cold.outputs[-1] == plain.outputs[-1]
    read = {name for name, _ in reads}
    assert damaged in read and never[0] not in read
    # The copies named for no possible parallelism: only their index tried (when the new
    # copies were put), found unsound, and deleted then; the other operator's kept.
    assert all(ranges == [(5, None)] for name, ranges in reads if name in never)
    assert [n for n in never if (folder / n).exists()] == never[:1]
    # The damaged copy's key groups came from the older copy of its store.
    assert (damaged.split(".")[0], "000000000000") in {tuple(n.split(".")[:2]) for n in read}
    assert cold.stats[-1].copy_bytes_read > 0


def test_a_cold_start_on_every_storage(any_storage_url: str, tmp_path: Any) -> None:
    """With a file area (sqlite:///, segments on file:// and S3) the cold process starts
    from a copy; without one (memory://, PostgreSQL) it rebuilds from the chains."""
    storage = any_storage_url
    batches = _batches(3, 4)
    _run(batches, storage, str(tmp_path / "a"))
    area = open_backend(storage).file_area()
    if area is not None:
        assert len(area.names()) == 2  # checkpoint 0, per instance
    last = [{"k": 5, "x": 1, "t": 9}, {"k": 301, "x": 4, "t": 9}]
    plain = simulate(_sum, [*batches, last], key="k", order_by="t", max_key_groups=16)
    cold = _cold(storage, str(tmp_path / "b"), 4, last)
    assert cold.outputs[-1] == plain.outputs[-1]
    if area is None:
        assert cold.stats[-1].copy_bytes_read == 0
        assert cold.stats[-1].rows_read > 0
    else:
        assert cold.stats[-1].copy_bytes_read > 0


def test_file_areas(tmp_path: Any) -> None:
    import fsspec

    source = tmp_path / "source"
    source.write_bytes(b"x" * 1000)
    for area in (
        LocalArea(str(tmp_path / "local")),
        FsspecArea(fsspec.filesystem("file"), str(tmp_path / "fs")),
    ):
        assert area.names() == []
        assert area.put("a.db", str(source)) == 1000
        assert area.put("b.db", str(source)) == 1000
        assert area.names() == ["a.db", "b.db"]
        assert area.get("a.db", str(tmp_path / "got")) == 1000
        assert (tmp_path / "got").read_bytes() == b"x" * 1000
        assert area.get("missing", str(tmp_path / "none")) is None
        assert area.read("a.db", [(0, 3), (998, None), (999, 1005), (5, 5)]) == [
            b"xxx",
            b"xx",
            b"x",
            b"",
        ]
        assert area.read("missing", [(0, 1)]) is None
        area.delete(["a.db", "missing"])
        assert area.names() == ["b.db"]
        os.unlink(tmp_path / "got")
    for bad in ("", ".hidden", "a/b", "../x", "é"):
        with pytest.raises(ValueError, match="plain file names"):
            check_name(bad)
    assert open_backend("memory://x").file_area() is None
    for bad_every in (0, -1, 1.5, "10"):
        with pytest.raises(ValueError, match="local_copy_every"):
            check_copy_every(bad_every)  # type: ignore[arg-type]


def test_copies_at_a_new_parallelism_replace_those_of_the_old(tmp_path: Any) -> None:
    """Once the new instances' copies hold every key group twice."""
    storage = f"sqlite:///{tmp_path / 'state.db'}"
    batches = _batches(4, 8)
    plain = simulate(_sum, batches, key="k", order_by="t", max_key_groups=16)
    sim = simulate(
        _sum,
        batches,
        key="k",
        order_by="t",
        storage=storage,
        memory_budget="64 MiB",
        local_dir=str(tmp_path / "local"),
        parallelism={0: 2, 4: 3},
        max_key_groups=16,
        local_copy_every=2,
    )
    assert sim.outputs == plain.outputs
    names = os.listdir(tmp_path / "state.db.files")
    assert sorted((n.split(".")[0].split("-", 1)[1], n.split(".")[1][-1]) for n in names) == [
        ("3-0", "4"),
        ("3-0", "6"),
        ("3-1", "4"),
        ("3-1", "6"),
        ("3-2", "4"),
        ("3-2", "6"),
    ]


def test_a_copy_that_cannot_be_put_is_logged_and_the_batch_goes_on(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    storage = f"sqlite:///{tmp_path / 'state.db'}"
    (tmp_path / "state.db.files").write_text("a file where the folder would be")
    batches = _batches(5, 3)
    plain = simulate(_sum, batches, key="k", order_by="t", max_key_groups=16)
    with caplog.at_level(logging.WARNING, logger="objectspace.engine.residency"):
        sim = _run(batches, storage, str(tmp_path / "a"))
    assert sim.outputs == plain.outputs
    assert sum(s.copy_bytes_written for s in sim.stats) == 0
    assert "no copy of its local store put in LocalArea" in caplog.text


def test_a_copy_reads_the_store_s_own_file_or_a_backup_when_its_log_is_held(
    tmp_path: Any,
) -> None:
    path = str(tmp_path / "s.db")
    store = LocalStore.open(path, b"one")
    assert store is not None
    for g in range(4):
        rows = {f"k{g}-{i}".encode(): b"v" * 40 for i in range(300)}
        store.replace(g, {"state/index": rows}, LocalHead(g + 1, 1, None, 1, 0, 0))

    def copied_at(raw: str) -> Any:
        with contextlib.closing(sqlite3.connect(raw)) as db:
            return db.execute("SELECT value FROM meta WHERE name = 'copied_at'").fetchone()[0]

    store.set_copied_at(7)  # in the log, not yet in the file
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM rows").fetchone()  # holds the log
    with store.frozen(str(tmp_path)) as raw:
        assert raw != path  # a backup: the file alone lacks the log's writes
        assert copied_at(raw) == 7
    reader.execute("COMMIT")
    reader.close()
    store.set_copied_at(8)
    with store.frozen(str(tmp_path)) as raw:
        assert raw == path  # the store's own file, its log emptied into it
        assert os.path.getsize(path + "-wal") == 0
        data = (tmp_path / "s.db").read_bytes()
        (tmp_path / "alone.db").write_bytes(data)
        assert copied_at(str(tmp_path / "alone.db")) == 8  # the file alone is the whole store
        writer = sqlite3.connect(path, isolation_level=None, timeout=0)
        writer.execute("INSERT INTO meta VALUES ('x', 1)")  # another connection writes its log
        assert writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 1  # busy
        writer.close()
        assert (tmp_path / "s.db").read_bytes() == data  # the file stays as it was read
    store.set_copied_at(9)  # the store goes on after the context
    assert store.copied_at() == 9
    store.close()
