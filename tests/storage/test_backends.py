"""The backend contract suite: every storage behind ``open_storage`` behaves the same.

Each test runs on the five backends of the ``any_storage_url`` fixture: ``memory://``,
``sqlite:///``, ``postgresql://`` (a real server), and segment files on ``file://`` (SQLite
catalog) and ``s3://`` (moto's server, PostgreSQL catalog).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import posixpath
import random
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlparse

import pytest

import objectspace as osp
from objectspace.checkpoint import CompactionPolicy, Instance, Job, Operator, Receipt

MAX_KG = 16
KEYS = [f"user-{i}" for i in range(48)]

Model = dict[str, tuple[str, Any]]  # object id -> ("value", v) | ("list", [...])


# -- helpers ------------------------------------------------------------------------------


@pytest.fixture
def storage(any_storage_url: str) -> Iterator[osp.Storage]:
    s = osp.open_storage(any_storage_url)
    yield s
    s.close()


class Workload:
    """Deterministic random edits of values and lists, mirrored in a plain-Python model."""

    def __init__(self, op: Operator, seed: int = 0, keys: Sequence[str] = KEYS) -> None:
        self.op = op
        self.keys = list(keys)
        self.rng = random.Random(seed)
        self.model: Model = {}

    def step(self, instances: Sequence[Instance], checkpoint: int, touched: int = 14) -> None:
        parallelism = instances[0].parallelism
        for n in range(touched):
            key = self.rng.choice(self.keys)
            inst = instances[self.op.key_groups.instance_of_key(key, parallelism)]
            assert inst.index == self.op.key_groups.instance_of_key(key, parallelism)
            space = inst.space_for_key(key)
            vid, lid = f"v:{key}", f"l:{key}"
            r = self.rng.random()
            if r < 0.45:
                value = checkpoint * 1000 + n
                if vid in space:
                    space.get_value(vid).value = value
                else:
                    space.create_value(vid, value)
                self.model[vid] = ("value", value)
            elif r < 0.85:
                lst = space.get_list(lid) if lid in space else space.create_list(lid)
                lst.append(checkpoint)
                old = self.model.get(lid, ("list", []))[1]
                self.model[lid] = ("list", [*old, checkpoint])
            else:
                for oid in (vid, lid):
                    if oid in space:
                        space.delete(oid)
                        del self.model[oid]

    def snapshot(self) -> Model:
        return {
            oid: (kind, list(v) if kind == "list" else v) for oid, (kind, v) in self.model.items()
        }


def space_contents(space: osp.ObjectSpace) -> Model:
    out: Model = {}
    for oid in space:
        obj = space.get(oid)
        if isinstance(obj, osp.PersistedValue):
            out[oid] = ("value", obj.value)
        elif isinstance(obj, osp.PersistedList):
            out[oid] = ("list", list(obj))
        else:  # pragma: no cover - the workload only creates values and lists
            raise AssertionError(f"unexpected object {obj!r}")
    return out


def read_all(op: Operator, parallelism: int, checkpoint: int | None = None) -> Model:
    """Every object of the operator, restored through ``parallelism`` fresh instances."""
    state: Model = {}
    for index in range(parallelism):
        inst = op.instance(index, parallelism, checkpoint)
        for kg, space in inst.spaces():
            for oid, value in space_contents(space).items():
                if oid.startswith(("v:", "l:")):
                    assert op.key_groups.key_group(oid[2:]) == kg, f"{oid} in wrong key group"
                assert oid not in state
                state[oid] = value
    return state


def commit_round(job: Job, instances: Sequence[Instance], checkpoint_id: int) -> list[Receipt]:
    receipts = [inst.save(checkpoint_id) for inst in instances]
    assert job.commit(checkpoint_id, receipts) is True
    for inst in instances:
        inst.on_saved()
    return receipts


def backend_kind(url: str) -> str:
    return urlparse(url).scheme


# -- operator metadata --------------------------------------------------------------------


def test_operator_metadata(any_storage_url: str, storage: osp.Storage) -> None:
    job = storage.job("clicks")
    with pytest.raises(osp.CheckpointError, match="max_key_groups"):
        job.operator("sessions")  # creating needs max_key_groups
    op = job.operator("sessions", max_key_groups=MAX_KG, schema_version=2)
    assert (op.max_key_groups, op.schema_version, op.parallelism) == (MAX_KG, 2, None)

    with pytest.raises(osp.CheckpointError) as err:
        job.operator("sessions", max_key_groups=32)
    assert "16" in str(err.value) and "32" in str(err.value)

    again = osp.open_storage(any_storage_url)
    try:
        with pytest.raises(osp.CheckpointError) as err:
            again.job("clicks").operator("sessions", max_key_groups=8)
        assert "16" in str(err.value) and "8" in str(err.value)
        reopened = again.job("clicks").operator("sessions")
        assert (reopened.max_key_groups, reopened.schema_version) == (MAX_KG, 2)
        assert again.job("clicks").operator("sessions", schema_version=3).schema_version == 3
    finally:
        again.close()
    assert job.operator("sessions").schema_version == 3

    instances = [op.instance(i, 4) for i in range(4)]
    Workload(op).step(instances, 1, touched=30)
    receipts = [inst.save(1) for inst in instances]
    assert op.parallelism is None  # saved is not committed
    assert job.commit(1, receipts)
    assert op.parallelism == 4
    instances = [op.instance(i, 2) for i in range(2)]
    instances[0].space(0).create_value("x", 1)
    assert job.commit(2, [inst.save(2) for inst in instances])
    assert op.parallelism == 2
    assert [(o.name, o.max_key_groups, o.parallelism) for o in job.operators()] == [
        ("sessions", MAX_KG, 2)
    ]
    assert "clicks" in storage.jobs()


# -- two-phase commit ---------------------------------------------------------------------


def test_pending_is_invisible_until_commit(any_storage_url: str, storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    work = Workload(op, seed=1)
    instances = [op.instance(i, 2) for i in range(2)]
    work.step(instances, 1)
    commit_round(job, instances, 1)
    one = work.snapshot()

    work.step(instances, 2)
    receipts = [inst.save(2) for inst in instances]
    assert sum(len(r.writes) for r in receipts) > 0
    early = op.instance(0, 1)  # created before the commit: as of checkpoint 1
    other = osp.open_storage(any_storage_url)
    try:
        for reader in (op, other.job("j").operator("o")):
            assert reader.job.last_checkpoint() == 1
            assert reader.job.checkpoints() == [1]
            assert read_all(reader, 1) == one
    finally:
        other.close()

    assert job.commit(2, receipts) is True
    for inst in instances:
        inst.on_saved()
    assert job.last_checkpoint() == 2
    assert read_all(op, 3) == work.snapshot() != one
    assert read_all(op, 1, checkpoint=1) == one
    early.load_all()
    assert {oid: v for _, s in early.spaces() for oid, v in space_contents(s).items()} == one


def test_commit_twice_is_a_noop(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    a = op.instance(0, 1)
    b = op.instance(0, 1)  # a second attempt of the same instance
    a.space_for_key("k").create_value("v", "a")
    b.space_for_key("k").create_value("v", "b")
    b.space_for_key("other").create_value("only-b", 1)
    ra, rb = a.save(1), b.save(1)
    assert job.commit(1, [ra]) is True
    info = job.checkpoint_info()
    assert job.commit(1, [ra]) is False
    for other in ([rb], []):  # other writes lost the checkpoint: a conflict, no change
        with pytest.raises(osp.CheckpointConflictError, match="already committed by another"):
            job.commit(1, other)
    assert job.checkpoint_info() == info
    state = read_all(op, 1)
    assert state == {"v": ("value", "a")}


def test_out_of_order_commit_is_refused(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    inst = op.instance(0, 1)
    inst.space(0).create_value("x", 1)
    commit_round(job, [inst], 1)
    inst.space(0).get_value("x").value = 3
    commit_round(job, [inst], 3)  # gaps are allowed
    late = op.instance(0, 1)
    late.space(0).get_value("x").value = 2
    with pytest.raises(osp.CheckpointError, match="3"):
        job.commit(2, [])
    with pytest.raises(osp.CheckpointError, match="3"):
        job.backend.commit(job.name, 2, 3, [], {})
    # writes made on top of checkpoint 1 cannot be committed after 3
    stale = op.instance(0, 1, checkpoint=1)
    stale.space(0).get_value("x").value = 4
    with pytest.raises(osp.CheckpointError, match="1"):
        job.commit(4, [stale.save(4)])
    assert job.checkpoints() == [1, 3]
    assert read_all(op, 1) == {"x": ("value", 3)}


def test_duplicate_key_group_is_refused(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    a = op.instance(0, 2)
    b = op.instance(0, 2)  # a second attempt of instance 0
    other = op.instance(1, 2)
    a.space(0).create_value("x", "a")
    b.space(0).create_value("x", "b")
    other.space(8).create_value("y", 1)
    ra, rb, ro = a.save(1), b.save(1), other.save(1)
    with pytest.raises(osp.CheckpointError, match=r"twice|two receipts"):
        job.commit(1, [ra, rb, ro])
    forged = dataclasses.replace(rb, index=1)  # claims to be instance 1, holds key group 0
    with pytest.raises(osp.CheckpointError, match="two receipts"):
        job.commit(1, [ra, forged])
    (write_id,) = (w for _, w in ra.writes)
    with pytest.raises(osp.CheckpointError):
        job.backend.commit(job.name, 1, None, [write_id, write_id], {"o": 2})
    with pytest.raises(osp.CheckpointError):  # a write of version 1 given to checkpoint 2
        job.backend.commit(job.name, 2, None, [write_id], {"o": 2})
    foreign = storage.job("other-job")
    foreign.operator("o", max_key_groups=MAX_KG)
    with pytest.raises(osp.CheckpointError):  # a write of another job
        foreign.backend.commit(foreign.name, 1, None, [write_id], {"o": 2})
    assert foreign.checkpoints() == []
    assert job.checkpoints() == []
    assert job.commit(1, [ra, ro]) is True
    assert read_all(op, 2) == {"x": ("value", "a"), "y": ("value", 1)}


# -- time travel, rescaling, compaction ------------------------------------------------------


def test_time_travel_after_retention(storage: osp.Storage) -> None:
    job = storage.job("j")
    # full writes every third version, so retention has something to remove
    op = job.operator("o", max_key_groups=MAX_KG)
    op.compaction = CompactionPolicy(max_chain_length=2)
    work = Workload(op, seed=2)
    instances = [op.instance(i, 3) for i in range(3)]
    for inst in instances:
        inst.load_all()  # every key group takes part, so every chain gets full writes
    snapshots: dict[int, Model] = {}
    for cp in range(1, 8):
        work.step(instances, cp, touched=40)
        commit_round(job, instances, cp)
        snapshots[cp] = work.snapshot()
    for cp, snap in snapshots.items():
        assert read_all(op, 2, checkpoint=cp) == snap, f"checkpoint {cp}"

    stats = job.retain(keep_last=3)
    assert stats.kept == [5, 6, 7]
    assert stats.checkpoints_dropped == 4
    assert stats.writes_removed > 0
    assert job.checkpoints() == [5, 6, 7]
    for cp in (5, 6, 7):
        assert read_all(op, 1, checkpoint=cp) == snapshots[cp], f"checkpoint {cp}"
        assert read_all(op, 4, checkpoint=cp) == snapshots[cp], f"checkpoint {cp}"
    for cp in (1, 4):
        with pytest.raises(osp.CheckpointError, match="not restorable"):
            op.instance(0, 1, checkpoint=cp)
    # the retained history still moves forward
    work.step(instances, 8)
    commit_round(job, instances, 8)
    assert read_all(op, 2) == work.snapshot()
    assert read_all(op, 2, checkpoint=5) == snapshots[5]


def test_rescale(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    work = Workload(op, seed=3)
    instances = [op.instance(i, 4) for i in range(4)]
    for cp in range(1, 4):
        work.step(instances, cp, touched=30)
        commit_round(job, instances, cp)
    expected = work.snapshot()
    assert len(expected) > 10
    at4 = read_all(op, 4)
    assert at4 == expected
    assert read_all(op, 3) == expected
    assert read_all(op, 1) == expected
    assert read_all(op, MAX_KG) == expected

    # go on at parallelism 3, then restore at 4 and 1
    instances = [op.instance(i, 3) for i in range(3)]
    work.step(instances, 4, touched=30)
    commit_round(job, instances, 4)
    assert op.parallelism == 3
    assert read_all(op, 4) == read_all(op, 1) == work.snapshot()
    assert read_all(op, 3, checkpoint=3) == expected


def test_compaction(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    work = Workload(op, seed=4)
    instances = [op.instance(i, 2) for i in range(2)]
    snapshots = {}
    for cp in range(1, 6):
        work.step(instances, cp, touched=30)
        commit_round(job, instances, cp)
        snapshots[cp] = work.snapshot()
    backend = storage.backend
    before = backend.chains(job.name, op.name, range(MAX_KG), 5)
    long_chains = {g for g, ws in before.items() if len(ws) >= 2}
    assert long_chains
    old_ids = {w.write_id for ws in before.values() for w in ws}

    stats = job.compact()
    assert stats.key_groups == len(long_chains)
    assert stats.bytes_written > 0
    after = backend.chains(job.name, op.name, range(MAX_KG), 5)
    assert set(after) == set(before)
    for g, ws in after.items():
        if g in long_chains:
            assert len(ws) == 1, f"key group {g} restores from {ws}"
            assert ws[0].full and ws[0].version == 5
            assert ws[0].write_id not in old_ids
        else:
            assert ws == before[g]
    compacted = {g: after[g][0].write_id for g in long_chains}
    assert read_all(op, 2) == read_all(op, 3) == snapshots[5]
    for cp in range(1, 6):  # history before the compaction is untouched
        assert read_all(op, 1, checkpoint=cp) == snapshots[cp]
    assert job.compact().key_groups == 0  # nothing left to compact

    # later restores start from the compacted write
    instances = [op.instance(i, 2) for i in range(2)]
    work.step(instances, 6, touched=30)
    commit_round(job, instances, 6)
    chains = backend.chains(job.name, op.name, range(MAX_KG), 6)
    for g, write_id in compacted.items():
        assert chains[g][0].write_id == write_id
        assert all(w.version == 6 and not w.full for w in chains[g][1:])
    assert read_all(op, 3) == work.snapshot()
    stats_r = job.retain(keep_last=1)
    older = sum(1 for g in long_chains for w in before[g] if w.version < 5)
    assert stats_r.writes_removed >= older > 0
    assert read_all(op, 1) == read_all(op, 4) == work.snapshot()


def test_retention_drops_writes_superseded_by_compaction(storage: osp.Storage) -> None:
    """After a compaction at checkpoint N, the writes of N that the compacted full write
    replaces are in no restore chain of N or later: retention keeping only later
    checkpoints removes them (the contract: "the writes no retained checkpoint's chains
    use")."""
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    work = Workload(op, seed=6)
    instances = [op.instance(i, 2) for i in range(2)]
    for cp in range(1, 4):
        work.step(instances, cp, touched=30)
        commit_round(job, instances, cp)
    compacted = job.compact().key_groups
    assert compacted > 0
    instances = [op.instance(i, 2) for i in range(2)]
    work.step(instances, 4, touched=30)
    commit_round(job, instances, 4)
    committed = sum(c.writes for c in job.checkpoint_info()) + compacted
    needed = sum(len(ws) for ws in storage.backend.chains("j", "o", range(MAX_KG), 4).values())
    stats = job.retain(keep_last=1)
    assert read_all(op, 1) == work.snapshot()
    assert stats.writes_removed == committed - needed, (
        f"{committed} committed writes, {needed} in the chains of checkpoint 4, "
        f"{stats.writes_removed} removed"
    )


# -- pickling -----------------------------------------------------------------------------


def test_storage_pickles(any_storage_url: str, storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    work = Workload(op, seed=5)
    instances = [op.instance(i, 2) for i in range(2)]
    work.step(instances, 1)
    commit_round(job, instances, 1)  # the original is in use: connections, caches

    copy = pickle.loads(pickle.dumps(storage))
    backend_copy = pickle.loads(pickle.dumps(storage.backend))
    try:
        assert isinstance(copy, osp.Storage)
        assert copy.url == storage.url
        assert type(backend_copy) is type(storage.backend)
        op2 = copy.job("j").operator("o")
        assert read_all(op2, 1) == work.snapshot()
        work.op = op2
        instances = [op2.instance(i, 3) for i in range(3)]
        work.step(instances, 2)
        commit_round(copy.job("j"), instances, 2)
        assert osp.Storage(backend_copy).job("j").last_checkpoint() == 2
        assert osp.Storage(backend_copy).job("j").operator("o").parallelism == 3
    finally:
        copy.close()
        backend_copy.close()
    assert job.last_checkpoint() == 2
    assert read_all(op, 2) == work.snapshot()
    # a pickle of a pickle still works
    twice = pickle.loads(pickle.dumps(pickle.loads(pickle.dumps(storage))))
    try:
        assert twice.job("j").checkpoints() == [1, 2]
    finally:
        twice.close()


# -- user identifiers ---------------------------------------------------------------------

NAMES = {
    "quotes": 'it\'s a "quoted" `name`',
    "sql": "x'); DROP TABLE ckpt_jobs; --",
    "slashes": "a/b\\c//d/",
    "dotdot": "..",
    "dotdot-path": "../../escape",
    "unicode": "é 漢字 🙂 ß",
    "spaces": "  spaced  out  ",
    "percent": "%2F%2e%2e%00",
    "dot": ".",
    "long-unicode": "é" * 50,  # 100 bytes of UTF-8, 300 once percent-encoded
}


def _files_escape_check(url: str, storage: osp.Storage, tmp_path: Any) -> None:
    """Every segment file lies under the segment root."""
    kind = backend_kind(url)
    if kind == "file":
        root = os.path.realpath(os.path.join(tmp_path, "segments"))
        found = []
        for folder, _, files in os.walk(tmp_path):
            for name in files:
                path = os.path.realpath(os.path.join(folder, name))
                if name.startswith("catalog.db"):
                    continue
                found.append(path)
                assert path.startswith(root + os.sep), f"{path} is outside {root}"
        assert found, "no segment file was written"
    elif kind == "s3":
        backend: Any = storage.backend
        bucket = urlparse(url).netloc
        fs = backend.fs
        fs.invalidate_cache()
        keys = fs.find(bucket)
        assert keys, "no segment file was written"
        for key in keys:
            normal = posixpath.normpath(key)
            assert normal.startswith(f"{bucket}/state/"), f"{key!r} is outside {bucket}/state"


@pytest.mark.parametrize("name", list(NAMES.values()), ids=list(NAMES))
def test_user_identifiers(
    any_storage_url: str, storage: osp.Storage, tmp_path: Any, name: str
) -> None:
    canary = storage.job("canary")
    cop = canary.operator("o", max_key_groups=4)
    cinst = cop.instance(0, 1)
    cinst.space(0).create_value("alive", True)
    commit_round(canary, [cinst], 1)

    job = storage.job(name)
    op = job.operator(name, max_key_groups=4)
    other = job.operator(name + "-2", max_key_groups=4)
    inst = op.instance(0, 1)
    inst2 = other.instance(0, 1)
    inst.space_for_key(name).create_value(name, name)
    inst.space_for_key(name).create_list(name + "/list").extend([name, 1])
    inst2.space(3).create_value(name, 2)
    commit_round(job, [inst, inst2], 1)
    inst.space_for_key(name).get_value(name).value = name * 2
    commit_round(job, [inst], 2)

    assert name in storage.jobs()
    assert [o.name for o in job.operators()] == sorted([name, name + "-2"])
    restored = op.instance(0, 1).space_for_key(name)
    assert restored.get_value(name).value == name * 2
    assert list(restored.get_list(name + "/list")) == [name, 1]
    assert other.instance(0, 1).space(3).get_value(name).value == 2
    assert op.instance(0, 1, checkpoint=1).space_for_key(name).get_value(name).value == name
    assert job.compact().key_groups == 1
    job.retain(keep_last=1)
    assert op.instance(0, 1).space_for_key(name).get_value(name).value == name * 2
    # nothing else was touched
    assert canary.checkpoints() == [1]
    assert cop.instance(0, 1).space(0).get_value("alive").value is True
    _files_escape_check(any_storage_url, storage, tmp_path)


def test_heads_are_the_last_writes_of_the_restore_chains(storage: osp.Storage) -> None:
    """``Backend.heads`` gives, per key group, the (write id, version) a restore chain ends
    with, as of the newest checkpoint and as of older ones, before and after a compaction
    (what a Spark worker checks before it adopts another worker's snapshot)."""
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    work = Workload(op, seed=5)
    instances = [op.instance(i, 2) for i in range(2)]
    backend = storage.backend

    def from_chains(as_of: int) -> dict[int, tuple[int, int]]:
        chains = backend.chains(job.name, op.name, range(MAX_KG), as_of)
        return {g: (ws[-1].write_id, ws[-1].version) for g, ws in chains.items() if ws}

    for cp in range(1, 5):
        work.step(instances, cp, touched=20)
        commit_round(job, instances, cp)
    for as_of in (0, 1, 3, 4, 9):
        expected = from_chains(as_of)
        assert backend.heads(job.name, op.name, range(MAX_KG), as_of) == expected
        assert backend.heads(job.name, op.name, range(2, 7), as_of) == {
            g: h for g, h in expected.items() if 2 <= g < 7
        }
    assert backend.heads(job.name, op.name, range(MAX_KG), 4)
    job.compact()
    for as_of in (2, 4):
        assert backend.heads(job.name, op.name, range(MAX_KG), as_of) == from_chains(as_of)


def test_marks_are_durable_per_job_and_overwritten(any_storage_url: str) -> None:
    s = osp.open_storage(any_storage_url)
    try:
        job = s.job("marked")
        assert job.read_mark("m") is None
        job.write_mark("m", "1 100")
        job.write_mark("m", "2 200")
        s.job("other").write_mark("m", "x")
    finally:
        s.close()
    s = osp.open_storage(any_storage_url)  # another connection: the marks were committed
    try:
        assert s.job("marked").read_mark("m") == "2 200"
        assert s.job("other").read_mark("m") == "x"
        assert s.job("marked").read_mark("n") is None
    finally:
        s.close()
