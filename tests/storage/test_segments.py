"""Segment files on ``file://`` and ``s3://`` (moto's server): layout, partial reads,
corruption detection, and two-phase garbage collection."""

from __future__ import annotations

import os
import pickle
import shutil
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import fsspec
import pytest

import objectspace as osp
from objectspace.checkpoint import Instance, Job, Operator
from objectspace.storage.segments import END_MAGIC, MAGIC, GCStats, SegmentBackend
from tests.support.storage import segment_url

MAX_KG = 8
HUGE = 10**9  # seconds: "now" far in the future, past any grace period


# -- fixtures and helpers -----------------------------------------------------------------


@pytest.fixture(params=["file", "s3"])
def seg_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "file":
        return segment_url(f"file://{tmp_path}/segments", f"sqlite:///{tmp_path}/catalog.db")
    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return segment_url(
        f"s3://{bucket}/state",
        request.getfixturevalue("postgres_url"),
        endpoint_url=server.endpoint,
        key="testing",
        secret="testing",
    )


@pytest.fixture
def storage(seg_url: str) -> Iterator[osp.Storage]:
    s = osp.open_storage(seg_url)
    assert isinstance(s.backend, SegmentBackend)
    yield s
    s.close()


def seg(storage: osp.Storage) -> SegmentBackend:
    backend = storage.backend
    assert isinstance(backend, SegmentBackend)
    return backend


def base_path(backend: SegmentBackend) -> str:
    _, base = fsspec.url_to_fs(backend.root, **backend.storage_options)
    return str(base).rstrip("/")


def files(backend: SegmentBackend) -> set[str]:
    """Every file under the segment root (fsspec paths, as the catalog records them)."""
    fs = backend.fs
    fs.invalidate_cache()
    base = base_path(backend)
    if not fs.exists(base):
        return set()
    return {str(p) for p in fs.find(base)}


def exists(backend: SegmentBackend, path: str) -> bool:
    backend.fs.invalidate_cache()
    return bool(backend.fs.exists(path))


def fill(inst: Instance, checkpoint: int, per_group: int = 3) -> None:
    """Give every key group of ``inst`` a few objects (deterministic)."""
    for g in inst.key_groups:
        space = inst.space(g)
        for n in range(per_group):
            lid = f"list-{n}"
            lst = space.get_list(lid) if lid in space else space.create_list(lid)
            lst.extend([checkpoint, g, f"payload {g}/{n}/{checkpoint}" * 3])
        vid = "value"
        if vid in space:
            space.get_value(vid).value = (g, checkpoint)
        else:
            space.create_value(vid, (g, checkpoint))


def contents(op: Operator, parallelism: int = 1, checkpoint: int | None = None) -> dict:
    out: dict = {}
    for index in range(parallelism):
        inst = op.instance(index, parallelism, checkpoint)
        for g, space in inst.spaces():
            for oid in space:
                obj = space.get(oid)
                if isinstance(obj, osp.PersistedList):
                    out[(g, oid)] = list(obj)
                else:
                    out[(g, oid)] = obj.value  # type: ignore[attr-defined]
    return out


def commit_round(job: Job, instances: list[Instance], checkpoint_id: int) -> None:
    receipts = [inst.save(checkpoint_id) for inst in instances]
    assert job.commit(checkpoint_id, receipts) is True
    for inst in instances:
        inst.on_saved()


def history(storage: osp.Storage, checkpoints: int = 3, parallelism: int = 1) -> Operator:
    """A job ``j`` whose operator ``o`` committed ``checkpoints`` checkpoints."""
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    instances = [op.instance(i, parallelism) for i in range(parallelism)]
    for cp in range(1, checkpoints + 1):
        for inst in instances:
            fill(inst, cp)
        commit_round(job, instances, cp)
    return op


def referenced_files_exist(backend: SegmentBackend) -> None:
    referenced = backend.referenced_segments()
    assert referenced
    on_disk = files(backend)
    missing = referenced - on_disk
    assert not missing, f"referenced segments were deleted: {sorted(missing)}"


# -- layout -------------------------------------------------------------------------------


def test_one_segment_per_instance_and_checkpoint(storage: osp.Storage) -> None:
    backend = seg(storage)
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    instances = [op.instance(i, 3) for i in range(3)]
    for inst in instances:
        fill(inst, 1)
    commit_round(job, instances, 1)
    first = files(backend)
    assert len(first) == 3

    fill(instances[0], 2)
    fill(instances[2], 2)  # instance 1 changes nothing: it writes no file
    commit_round(job, instances, 2)
    second = files(backend)
    assert len(second) == 5 and first < second
    assert not [p for p in second if p.endswith(".tmp")]

    for cp, expected in ((1, 3), (2, 2)):
        chains = backend.chains("j", "o", range(MAX_KG), cp)
        writes = [w for ws in chains.values() for w in ws if w.version == cp]
        by_segment: dict[str, set[int]] = {}
        for w in writes:
            assert w.segment in second
            by_segment.setdefault(w.segment, set()).add(w.key_group)
        assert len(by_segment) == expected
        for groups in by_segment.values():  # one file holds one instance's key groups
            owners = {op.key_groups.instance_of(g, 3) for g in groups}
            assert len(owners) == 1
    for path in second:
        data = backend.fs.cat_file(path)
        assert data.startswith(MAGIC) and not data.endswith(END_MAGIC)  # no tail (version 2)
    assert contents(op, 2) == contents(op, 3)
    assert backend.files_written == 5


def test_rescaled_instance_reads_only_its_ranges(
    storage: osp.Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = seg(storage)
    op = history(storage, checkpoints=1, parallelism=1)  # one file with 16 blocks
    (path,) = files(backend)
    size = backend.fs.size(path)
    chains = backend.chains("j", "o", range(MAX_KG), 1)
    blocks = {g: (ws[0].offset, ws[0].offset + ws[0].length) for g, ws in chains.items()}
    assert len(blocks) == MAX_KG

    calls: list[tuple[str, int | None, int | None]] = []
    real = backend.fs

    class Spy:
        def cat_file(self, p: str, start: int | None = None, end: int | None = None, **kw: Any):
            calls.append((p, start, end))
            return real.cat_file(p, start=start, end=end, **kw)

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

    monkeypatch.setattr(backend, "_fs", Spy())
    inst = op.instance(1, 4)  # key groups 2..3
    assert inst.key_groups == range(2, 4)
    inst.load_all()
    # blocks 2 and 3 lie side by side in the file: one coalesced read
    assert calls == [(path, blocks[2][0], blocks[3][1])]
    read = sum(end - start for _, start, end in calls)  # type: ignore[operator]
    assert read == sum(blocks[g][1] - blocks[g][0] for g in range(2, 4))
    assert read < size / 3
    calls.clear()
    op.instance(0, 1).space(5)  # one key group: one ranged read
    assert calls == [(path, *blocks[5])]


# -- corruption ---------------------------------------------------------------------------


def _rewrite(backend: SegmentBackend, path: str, data: bytes) -> None:
    backend.fs.pipe_file(path, data)
    backend.fs.invalidate_cache()


@pytest.mark.parametrize("where", ["length", "checksum", "payload", "last-byte"])
def test_corrupt_segment_is_detected(storage: osp.Storage, where: str) -> None:
    backend = seg(storage)
    op = history(storage, checkpoints=1)
    chains = backend.chains("j", "o", range(MAX_KG), 1)
    w = chains[5][0]
    assert w.segment is not None
    data = bytearray(backend.fs.cat_file(w.segment))
    pos = {
        "length": w.offset,
        "checksum": w.offset + 6,
        "payload": w.offset + w.length // 2,
        "last-byte": w.offset + w.length - 1,
    }[where]
    data[pos] ^= 0x40
    _rewrite(backend, w.segment, bytes(data))
    with pytest.raises(osp.CorruptStateError) as err:
        op.instance(0, 1).space(5)
    assert w.segment in str(err.value)
    assert op.instance(0, 1).space(4) is not None  # other blocks are still readable


@pytest.mark.parametrize("cut", ["in-payload", "in-header", "before-block", "empty"])
def test_truncated_segment_is_detected(storage: osp.Storage, cut: str) -> None:
    backend = seg(storage)
    op = history(storage, checkpoints=1)
    chains = backend.chains("j", "o", range(MAX_KG), 1)
    w = chains[MAX_KG - 1][0]  # the last block
    assert w.segment is not None
    data = backend.fs.cat_file(w.segment)
    size = {
        "in-payload": w.offset + w.length - 1,
        "in-header": w.offset + 5,
        "before-block": w.offset,
        "empty": 0,
    }[cut]
    _rewrite(backend, w.segment, data[:size])
    with pytest.raises(osp.CorruptStateError) as err:
        op.instance(0, 1).space(MAX_KG - 1)
    assert w.segment in str(err.value)
    assert "truncated" in str(err.value)


def test_missing_segment_is_detected(storage: osp.Storage) -> None:
    backend = seg(storage)
    op = history(storage, checkpoints=2)
    chains = backend.chains("j", "o", range(MAX_KG), 2)
    path = chains[3][-1].segment
    assert path is not None
    backend.fs.rm_file(path)
    backend.fs.invalidate_cache()
    with pytest.raises(osp.CorruptStateError) as err:
        op.instance(0, 1).space(3)
    assert path in str(err.value)
    # checkpoint 1 does not need the file of checkpoint 2
    assert contents(op, 4, checkpoint=1) == contents(op, 1, checkpoint=1)


# -- garbage collection -------------------------------------------------------------------


def superseded(storage: osp.Storage) -> tuple[Operator, set[str]]:
    """Checkpoints 1..5 with a compaction at 4, retained to the last: the files of
    checkpoints 1..4 lose their last reference (those of 4 hold writes the compaction
    superseded)."""
    backend = seg(storage)
    op = history(storage, checkpoints=3)
    job = op.job
    inst = op.instance(0, 1)
    fill(inst, 4)
    commit_round(job, [inst], 4)
    old = files(backend)
    assert len(old) == 4
    assert job.compact().key_groups == MAX_KG  # one full-snapshot file per key group
    inst = op.instance(0, 1)
    fill(inst, 5)
    commit_round(job, [inst], 5)
    assert len(files(backend)) == 4 + MAX_KG + 1
    nothing = backend.gc(grace_seconds=600)  # every file is still referenced
    assert nothing.stamped == 0 and nothing.deleted == []
    stats = job.retain(keep_last=1)
    assert stats.kept == [5]
    assert stats.writes_removed == 4 * MAX_KG
    return op, old


def test_gc_two_phases(storage: osp.Storage) -> None:
    backend = seg(storage)
    op, old = superseded(storage)
    expected = contents(op)
    t0 = time.time()
    first = backend.gc(grace_seconds=600)
    assert first.stamped == 4
    assert first.deleted == []
    assert files(backend) >= old  # phase one deletes nothing
    stamps = {p: s for p, _, s in backend.segments()}
    assert all(stamps[p] is not None and stamps[p] >= t0 - 1 for p in old)
    assert sum(s is not None for s in stamps.values()) == 4

    early = backend.gc(grace_seconds=600, now=time.time() + 300)
    assert early.deleted == [] and early.stamped == 0
    assert files(backend) >= old

    second = backend.gc(grace_seconds=600, now=time.time() + 601)
    assert sorted(second.deleted) == sorted(old)
    assert second.bytes_deleted > 0
    assert not files(backend) & old
    assert {p for p, _, _ in backend.segments()}.isdisjoint(old)
    referenced_files_exist(backend)
    assert contents(op) == contents(op, 3) == expected

    # a referenced file is never deleted, however late
    for _ in range(2):
        backend.gc(grace_seconds=0, now=time.time() + HUGE)
    referenced_files_exist(backend)
    assert files(backend) == backend.referenced_segments()
    assert contents(op, 4) == expected


def test_gc_dry_run_changes_nothing(storage: osp.Storage) -> None:
    backend = seg(storage)
    superseded(storage)
    before_files = files(backend)
    before = backend.segments()
    dry = backend.gc(grace_seconds=600, dry_run=True)
    assert dry.dry_run and dry.stamped == 4 and dry.deleted == []
    assert backend.segments() == before
    backend.gc(grace_seconds=600)  # stamps for real
    stamped = backend.segments()
    assert stamped != before
    dry = backend.gc(grace_seconds=600, dry_run=True, now=time.time() + HUGE)
    assert len(dry.deleted) == 4 and dry.stamped == 0
    assert backend.segments() == stamped
    assert files(backend) == before_files


def test_gc_collects_pending_segments_of_an_abandoned_attempt(storage: osp.Storage) -> None:
    backend = seg(storage)
    op = history(storage, checkpoints=1)
    job = op.job
    abandoned = op.instance(0, 1)
    winner = op.instance(0, 1)
    fill(abandoned, 2)
    fill(winner, 2)
    before = files(backend)
    lost = abandoned.save(2)  # never committed
    (lost_path,) = files(backend) - before
    commit_round(job, [winner], 2)
    assert lost_path in backend.referenced_segments()  # pending, still referenced
    assert backend.gc(grace_seconds=0, now=time.time() + HUGE).deleted == []
    assert exists(backend, lost_path)
    expected = contents(op)

    stats = job.retain(keep_last=2)
    assert stats.pending_removed == len(lost.writes) == MAX_KG
    assert backend.gc(grace_seconds=600).stamped == 1
    assert exists(backend, lost_path)
    gone = backend.gc(grace_seconds=600, now=time.time() + 601)
    assert gone.deleted == [lost_path]
    assert not exists(backend, lost_path)
    with pytest.raises(osp.CheckpointError):
        job.commit(3, [lost])  # its writes are gone
    assert contents(op) == expected
    assert contents(op, 1, checkpoint=1) != expected
    referenced_files_exist(backend)


def test_gc_collects_a_reserved_segment_never_registered(storage: osp.Storage) -> None:
    backend = seg(storage)
    op = history(storage, checkpoints=1)
    backend.catalog.reserve_segment("j/o/000000000002-crashed-00000000.seg")
    path = f"{base_path(backend)}/j/o/000000000002-crashed-00000000.seg"
    backend.fs.pipe_file(path, b"half a segment")
    backend.fs.pipe_file(path + ".tmp", b"half a segment")
    assert exists(backend, path)
    first = backend.gc(grace_seconds=600)
    assert first.stamped == 1 and first.deleted == []
    assert exists(backend, path)
    second = backend.gc(grace_seconds=600, now=time.time() + 601)
    assert second.deleted == [path]
    assert not exists(backend, path) and not exists(backend, path + ".tmp")
    assert path not in {p for p, _, _ in backend.segments()}
    referenced_files_exist(backend)
    assert contents(op)


def test_segments_are_written_at_their_reserved_paths(
    storage: osp.Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each segment is written once, at the path reserved for it (no temporary name to
    rename: on S3 a rename is a copy), and those are the files the catalog knows."""
    backend = seg(storage)
    real_fs = backend.fs
    reserved: list[str] = []
    reserve = backend.catalog.reserve_segment

    def spy_reserve(path: str) -> Any:
        reserved.append(f"{base_path(backend)}/{path}")
        return reserve(path)

    monkeypatch.setattr(backend.catalog, "reserve_segment", spy_reserve)
    if not backend.local:
        written: list[str] = []

        class Spy:
            def pipe_file(self, path: str, data: bytes, **kw: Any) -> Any:
                written.append(path)
                return real_fs.pipe_file(path, data, **kw)

            def mv(self, a: str, b: str, **kw: Any) -> Any:
                raise AssertionError(f"segment {a!r} moved to {b!r}")

            def __getattr__(self, name: str) -> Any:
                return getattr(real_fs, name)

        monkeypatch.setattr(backend, "_fs", Spy())
    op = history(storage, checkpoints=2, parallelism=2)
    op.job.compact()
    monkeypatch.undo()
    assert len(reserved) == len(set(reserved)) >= 5
    if not backend.local:
        assert written == reserved
    assert files(backend) == set(reserved)
    assert backend.referenced_segments() <= set(reserved)


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("fsync", [None, "1", "0"])
def test_local_segments_reach_the_disk_before_the_catalog_makes_them_visible(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, fsync: str | None
) -> None:
    """On a local filesystem every segment file, and the folder that names it, is synced
    before the catalog transaction that makes its blocks visible (so a power failure cannot
    leave a committed checkpoint whose blocks never reached the disk): instances' saves
    together, by the commit (not one sync each); a commit's staged segment as it is
    written. ``fsync=0`` skips the syncs, and the URL keeps the choice."""
    options = {} if fsync is None else {"fsync": fsync}
    url = segment_url(f"file://{tmp_path}/segments", f"sqlite:///{tmp_path}/catalog.db", **options)
    storage = osp.open_storage(url)
    backend = seg(storage)
    assert backend.fsync is (fsync != "0")
    assert ("fsync=0" in backend.url) is (fsync == "0")
    assert pickle.loads(pickle.dumps(backend)).fsync is backend.fsync
    base = str(tmp_path / "segments")
    events: list[tuple[str, Any]] = []
    real_fsync = os.fsync

    def spy_fsync(fd: int) -> None:
        events.append(("fsync", _fd_path(fd)))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy_fsync)
    register, commit = backend.catalog.register_segment, backend.catalog.commit

    def spy_register(*args: Any, **kw: Any) -> Any:
        events.append(("register", f"{base}/{args[4][1]}"))
        return register(*args, **kw)

    def spy_commit(*args: Any, **kw: Any) -> Any:
        placed = {f"{base}/{p[0][1]}" for p in (kw.get("segments") or {}).values()}
        events.append(("commit", placed))
        return commit(*args, **kw)

    monkeypatch.setattr(backend.catalog, "register_segment", spy_register)
    monkeypatch.setattr(backend.catalog, "commit", spy_commit)
    try:
        history(storage, checkpoints=2, parallelism=2)  # saves: one segment per instance
        job = storage.job("j")
        op = job.operator("o", max_key_groups=MAX_KG)
        insts = [op.instance(i, 2) for i in range(2)]
        for inst in insts:
            fill(inst, 3)
        # staged saves: the commit writes one segment for both instances
        receipts = [inst.save(3, stage_bytes=1 << 20) for inst in insts]
        assert job.commit(3, receipts) is True
    finally:
        monkeypatch.undo()
        storage.close()
    segments = sorted(p for p in files_under(tmp_path / "segments") if p.endswith(".seg"))
    assert len(segments) == 5
    commits = [i for i, (what, _) in enumerate(events) if what == "commit"]
    assert len(commits) == 3
    if fsync == "0":
        assert not [p for what, p in events if what == "fsync" and p.startswith(base)]
        return
    registered: list[str] = []
    for i, (what, detail) in enumerate(events):
        if what == "register":
            registered.append(detail)
            # a save's own segment is not synced by the save: the commit syncs them together
            assert ("fsync", detail) not in events[:i]
        if what == "commit":
            synced = [p for w, p in events[:i] if w == "fsync"]
            visible = set(registered) | detail
            for path in visible:
                assert path in synced, f"{path} not synced before the commit"
                assert os.path.dirname(path) in synced[synced.index(path) :]
            registered.clear()
    # each commit of two saves synced their two files with one pass (no sync in between)
    assert all(("fsync", p) in events for p in segments)
    # the folders made for the job and the operator were synced into their parents
    synced_all = [p for w, p in events if w == "fsync"]
    assert base in synced_all and f"{base}/j" in synced_all


def test_a_commit_whose_segment_cannot_be_synced_commits_nothing(tmp_path: Any) -> None:
    """The commit syncs the files of the saves it makes visible: one that is gone (or cannot
    be synced) fails the commit with a StorageError naming it, before anything is
    committed."""
    storage = osp.open_storage(_file_url(tmp_path))
    try:
        op = history(storage, checkpoints=1)
        before = contents(op)
        inst = op.instance(0, 1)
        fill(inst, 2)
        receipt = inst.save(2)
        for path in files_under(tmp_path / "segments"):
            if "/000000000002-" in path:
                os.remove(path)
        with pytest.raises(osp.StorageError, match=r"cannot sync segment .*000000000002-"):
            op.job.commit(2, [receipt])
        assert storage.job("j").last_checkpoint() == 1
        assert contents(op) == before
    finally:
        storage.close()


def files_under(root: Any) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]


def test_a_file_at_a_reserved_path_is_never_replaced(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Segments are immutable: should a file already be where a new segment goes, the
    save fails with a StorageError naming it, the file is left as it was and the
    committed state is unchanged."""
    storage = osp.open_storage(_file_url(tmp_path))
    try:
        backend = seg(storage)
        op = history(storage, checkpoints=1)
        before = contents(op)
        taken = "j/o/000000000002-taken-00000000.seg"
        monkeypatch.setattr(backend, "_path", lambda *a: taken)
        target = tmp_path / "segments" / taken
        target.write_bytes(b"someone else's file")
        inst = op.instance(0, 1)
        fill(inst, 2)
        with pytest.raises(osp.StorageError, match=r"cannot write segment .*taken"):
            inst.save(2)
        assert target.read_bytes() == b"someone else's file"
        assert contents(op) == before
    finally:
        storage.close()


def test_a_segment_written_after_its_reservation_was_collected_is_not_left_forever(
    storage: osp.Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow writer: GC collects the reservation of a segment before the file is written
    (the writer took longer than the grace period). The save fails, which is right, but
    the file it then wrote must not stay on the filesystem forever, unknown to the
    catalog: "never leave an unreferenced file forever"."""
    backend = seg(storage)
    op = history(storage, checkpoints=1)
    publish = backend._publish

    def slow_publish(path: str, blocks: Any, **kw: Any) -> Any:
        later = time.time() + 601
        backend.gc(grace_seconds=600, now=later)  # stamps the fresh reservation
        backend.gc(grace_seconds=600, now=later + 601)  # and collects it
        return publish(path, blocks, **kw)

    monkeypatch.setattr(backend, "_publish", slow_publish)
    inst = op.instance(0, 1)
    fill(inst, 2)
    with pytest.raises(osp.StorageError, match="no longer reserved"):
        inst.save(2)
    monkeypatch.undo()
    for _ in range(3):
        backend.gc(grace_seconds=0, now=time.time() + HUGE)
    leftover = files(backend) - backend.referenced_segments()
    assert not leftover, f"unreferenced segment files left behind for good: {sorted(leftover)}"


def test_gc_never_deletes_a_file_a_reader_is_restoring_from(storage: osp.Storage) -> None:
    """A reader plans its restore, retention then drops the writes it planned: within the
    grace period the files are still there and the restore completes."""
    backend = seg(storage)
    op = history(storage, checkpoints=3)
    job = op.job
    expected_1 = contents(op, 1, checkpoint=1)
    reader = op.instance(0, 1, checkpoint=1)
    chains = backend.chains("j", "o", reader.key_groups, 1)
    job.compact()
    inst = op.instance(0, 1)
    fill(inst, 4)
    commit_round(job, [inst], 4)
    job.retain(keep_last=1)
    backend.gc(grace_seconds=600)
    backend.gc(grace_seconds=600, now=time.time() + 599)
    # the reader reads what it planned, straight from the files
    state = {g: backend.read("j", "o", ws) for g, ws in chains.items()}
    assert len(state) == MAX_KG
    assert sum(len(t) for tables in state.values() for t in tables.values()) > 0
    assert expected_1
    backend.gc(grace_seconds=600, now=time.time() + 601)
    with pytest.raises(osp.CorruptStateError, match="missing"):
        backend.read("j", "o", chains[0])


def test_file_root_layout(tmp_path: Any) -> None:
    url = segment_url(f"file://{tmp_path}/segments", f"sqlite:///{tmp_path}/catalog.db")
    storage = osp.open_storage(url)
    op = history(storage, checkpoints=2, parallelism=2)
    root = os.path.join(tmp_path, "segments")
    found = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
    assert len(found) == 4
    assert all(p.startswith(os.path.join(root, "j", "o") + os.sep) for p in found)
    assert all(p.endswith(".seg") for p in found)
    assert contents(op, 2) == contents(op, 1)
    storage.close()


def _page_size(path: Any) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()


def test_a_new_sqlite_catalog_has_small_pages(tmp_path: Any) -> None:
    """A segment storage's new SQLite catalog gets CATALOG_PAGE_SIZE pages, also when a
    worker (the catalog pickled) creates it; an existing catalog, and ``sqlite:///``
    storage itself, keep theirs."""
    from objectspace.storage.sqlite.backend import CATALOG_PAGE_SIZE, PAGE_SIZE

    assert CATALOG_PAGE_SIZE < PAGE_SIZE
    storage = osp.open_storage(_file_url(tmp_path))
    history(storage, checkpoints=1, parallelism=1)
    storage.close()
    assert _page_size(tmp_path / "catalog.db") == CATALOG_PAGE_SIZE

    made_by_worker = tmp_path / "worker"
    made_by_worker.mkdir()
    backend = seg(osp.open_storage(_file_url(made_by_worker)))
    copy = pickle.loads(pickle.dumps(backend))
    copy.ensure_operator("j", "o", MAX_KG, 1)
    copy.close()
    assert _page_size(made_by_worker / "catalog.db") == CATALOG_PAGE_SIZE

    old = tmp_path / "old"
    old.mkdir()
    conn = sqlite3.connect(old / "catalog.db")
    conn.execute("PRAGMA page_size=4096")
    conn.execute("VACUUM")
    conn.close()
    storage = osp.open_storage(_file_url(old))
    history(storage, checkpoints=1, parallelism=1)
    storage.close()
    assert _page_size(old / "catalog.db") == 4096

    plain = osp.open_storage(f"sqlite:///{tmp_path / 'state.db'}")
    history(plain, checkpoints=1, parallelism=1)
    plain.close()
    assert _page_size(tmp_path / "state.db") == PAGE_SIZE


# -- storage boundaries ---------------------------------------------------------------------


def _file_url(folder: Any) -> str:
    return segment_url(f"file://{folder}/segments", f"sqlite:///{folder}/catalog.db")


def _every_checkpoint(storage: osp.Storage) -> dict[int, Any]:
    """The stored tables of every key group as of every retained checkpoint, as bytes."""
    backend = storage.backend
    return {
        cp: {g: tables for g, (_, tables) in backend.load("j", "o", range(MAX_KG), cp).items()}
        for cp in storage.job("j").checkpoints()
    }


def _disk(root: Any) -> dict[str, bytes]:
    return {
        os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
        for d, _, fs in os.walk(root)
        for f in fs
    }


def _maintain(url: str) -> GCStats:
    copy = osp.open_storage(url)
    try:
        copy.job("j").compact()
        copy.job("j").retain(keep_last=1)
        backend = seg(copy)
        backend.gc(grace_seconds=600)
        return backend.gc(grace_seconds=0, now=time.time() + HUGE)
    finally:
        copy.close()


def test_maintenance_on_a_copy_leaves_the_original_intact(tmp_path: Any) -> None:
    """``cp -a`` of a file:// storage (segments and catalog in one folder): retain, compact
    and gc on the copy delete the copy's files only; the original restores every
    checkpoint byte for byte."""
    original = tmp_path / "original"
    original.mkdir()
    storage = osp.open_storage(_file_url(original))
    history(storage, checkpoints=4, parallelism=2)
    expected = _every_checkpoint(storage)
    assert sorted(expected) == [1, 2, 3, 4]
    storage.close()
    on_disk = _disk(original / "segments")
    shutil.copytree(original, tmp_path / "copy")

    stats = _maintain(_file_url(tmp_path / "copy"))
    assert stats.deleted and all(p.startswith(f"{tmp_path}/copy/") for p in stats.deleted)
    assert not [p for p in stats.deleted if os.path.exists(p)]
    assert _disk(original / "segments") == on_disk
    storage = osp.open_storage(_file_url(original))
    assert _every_checkpoint(storage) == expected
    storage.close()


def test_catalog_with_absolute_paths_is_migrated(tmp_path: Any) -> None:
    """A catalog an older version wrote (absolute paths) reads as before, and a copy of it
    reads and collects its own files."""
    original = tmp_path / "original"
    original.mkdir()
    storage = osp.open_storage(_file_url(original))
    history(storage, checkpoints=3)
    expected = _every_checkpoint(storage)
    storage.close()
    base = f"{original}/segments"
    with sqlite3.connect(original / "catalog.db") as conn:
        conn.execute("UPDATE ckpt_segments SET path = ? || '/' || path", (base,))
        conn.execute("DELETE FROM ckpt_meta WHERE name = 'segment_paths'")
    conn.close()
    shutil.copytree(original, tmp_path / "copy")
    on_disk = _disk(original / "segments")

    copy = osp.open_storage(_file_url(tmp_path / "copy"))
    assert _every_checkpoint(copy) == expected
    assert all(p.startswith(f"{tmp_path}/copy/") for p in seg(copy).referenced_segments())
    copy.close()
    _maintain(_file_url(tmp_path / "copy"))
    assert _disk(original / "segments") == on_disk
    storage = osp.open_storage(_file_url(original))
    assert _every_checkpoint(storage) == expected
    with sqlite3.connect(original / "catalog.db") as conn:
        paths = [p for (p,) in conn.execute("SELECT path FROM ckpt_segments")]
    conn.close()
    assert paths and not [p for p in paths if p.startswith("/")]
    storage.close()


def test_gc_never_deletes_outside_the_root(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    storage = osp.open_storage(_file_url(tmp_path))
    op = history(storage, checkpoints=2)
    expected = contents(op)
    backend = seg(storage)
    outside = tmp_path / "outside"
    outside.mkdir()
    victims = {name: outside / name for name in ("dotdot.seg", "absolute.seg", "linked.seg")}
    for path in victims.values():
        path.write_bytes(b"not objectspace's")
    (outside / "dir").mkdir()
    (outside / "dir" / "in-linked-dir.seg").write_bytes(b"not objectspace's either")
    root = tmp_path / "segments"
    os.symlink(victims["linked.seg"], root / "j" / "o" / "link.seg")
    os.symlink(outside / "dir", root / "j" / "linkdir")
    planted = [
        "../outside/dotdot.seg",
        str(victims["absolute.seg"]),
        "j/o/link.seg",
        "j/linkdir/in-linked-dir.seg",
        "j/o/./../../../outside/dotdot.seg",
    ]
    with sqlite3.connect(tmp_path / "catalog.db") as conn:
        conn.executemany(
            "INSERT INTO ckpt_segments (path, created, bytes, stamped) VALUES (?, 0, 10, 1)",
            [(p,) for p in planted],
        )
    conn.close()
    with caplog.at_level("WARNING", logger="objectspace.storage.segments"):
        dry = backend.gc(grace_seconds=0, dry_run=True, now=time.time() + HUGE)
        first = backend.gc(grace_seconds=0, now=time.time() + HUGE)
        second = backend.gc(grace_seconds=0, now=time.time() + HUGE)
    assert sorted(dry.refused) == sorted(first.refused) == sorted(second.refused)
    assert sorted(first.refused) == sorted(planted)
    assert not [p for p in first.deleted + dry.deleted if "outside" in p or "link" in p]
    for path in [*victims.values(), outside / "dir" / "in-linked-dir.seg"]:
        assert path.read_bytes().startswith(b"not objectspace's")
    assert "refuses to delete" in caplog.text and "../outside/dotdot.seg" in caplog.text
    assert contents(op) == expected
    referenced_files_exist(backend)

    # A planted reference is refused on read too, never followed.
    with sqlite3.connect(tmp_path / "catalog.db") as conn:
        conn.execute(
            "UPDATE ckpt_segments SET path = '../outside/elsewhere.seg' WHERE id = "
            "(SELECT MIN(segment) FROM ckpt_packs)"
        )
    conn.close()
    with pytest.raises(osp.CorruptStateError, match="not inside the storage root"):
        contents(op)
    storage.close()


def test_zstd_levels_default_per_block_kind_and_level_sets_both(tmp_path: Any) -> None:
    import pickle

    from objectspace.storage.segments.backend import FULL_LEVEL, LEVEL

    plain = segment_url(f"file://{tmp_path}/a", f"sqlite:///{tmp_path}/a.db")
    for url, levels in ((plain, (LEVEL, FULL_LEVEL)), (plain + "&level=5", (5, 5))):
        storage = osp.open_storage(url)
        backend = seg(storage)
        assert (backend.level, backend.full_level) == levels
        copy = pickle.loads(pickle.dumps(backend))
        assert (copy.level, copy.full_level) == levels
        storage.close()
    assert (LEVEL, FULL_LEVEL) == (11, 3)
