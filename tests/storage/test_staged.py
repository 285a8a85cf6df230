"""Staged saves: blocks that travel with the receipt and are stored by the commit.

``Instance.save(stage_bytes=...)`` encodes a save without storing it; ``Job.commit`` stores
the blocks in the commit's own transaction (segment storage: in a segment file it writes
just before). Each test runs on every backend of the ``any_storage_url`` fixture; a
backend that does not stage (``supports_staging``) would store its writes at save time
instead, with the same state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

import objectspace as osp
from objectspace.checkpoint import Instance, Job, Operator
from objectspace.errors import CheckpointConflictError, CheckpointError
from objectspace.storage.contract import StagedWrite
from tests.storage.test_backends import MAX_KG, Workload, read_all

STAGE = 1 << 20


@pytest.fixture
def storage(any_storage_url: str) -> Iterator[osp.Storage]:
    s = osp.open_storage(any_storage_url)
    yield s
    s.close()


def stages(storage: osp.Storage) -> bool:
    return bool(storage.backend.supports_staging)


def setup(storage: osp.Storage, name: str, p: int = 3) -> tuple[Job, Operator, list[Instance]]:
    job = storage.job(name)
    op = job.operator("op", max_key_groups=MAX_KG)
    return job, op, [op.instance(i, p) for i in range(p)]


def staged_round(job: Job, instances: list[Instance], checkpoint_id: int) -> None:
    receipts = [inst.save(checkpoint_id, stage_bytes=STAGE) for inst in instances]
    assert job.commit(checkpoint_id, receipts) is True
    for inst in instances:
        inst.on_saved()


def test_staged_saves_restore_exactly_what_stored_saves_do(storage: osp.Storage) -> None:
    job, op, instances = setup(storage, "staged")
    work = Workload(op, seed=3)
    for cp in range(6):
        work.step(instances, cp)
        staged_round(job, instances, cp)
        # the instances go on from their own memory: their heads are the committed writes
        assert read_all(op, 2) == work.snapshot()
    assert job.checkpoints() == list(range(6))
    # a restarted instance at another parallelism builds on the staged chains
    again = [op.instance(i, 2) for i in range(2)]
    work.step(again, 6)
    staged_round(job, again, 6)
    assert read_all(op, 4) == work.snapshot()


def test_a_staged_save_stores_nothing_before_its_commit(storage: osp.Storage) -> None:
    job, op, instances = setup(storage, "nothing")
    Workload(op, seed=1).step(instances, 0)
    receipts = [inst.save(0, stage_bytes=STAGE) for inst in instances]
    pending = storage.backend.write_summary("nothing")
    if stages(storage):
        assert pending == []
        assert all(r.staged and not r.writes for r in receipts if r.rows_written)
    else:
        assert pending and all(not r.staged for r in receipts)
    job.commit(0, receipts)
    summary = storage.backend.write_summary("nothing")
    assert summary and all(s.committed for s in summary)
    if hasattr(storage.backend, "gc"):  # segment storage: the commit wrote one file
        assert len(storage.backend.segments()) == 1
        chains = storage.backend.chains("nothing", "op", range(MAX_KG), 0)
        assert chains and all(w.segment for ws in chains.values() for w in ws)


def test_a_save_larger_than_stage_bytes_stores_its_writes(storage: osp.Storage) -> None:
    job, op, instances = setup(storage, "large", p=1)
    Workload(op, seed=2).step(instances, 0)
    (receipt,) = [instances[0].save(0, stage_bytes=1)]
    assert receipt.staged == () and receipt.writes
    assert job.commit(0, [receipt]) is True


def _staged_receipts(storage: osp.Storage, name: str) -> tuple[Job, Operator, list]:
    job, op, instances = setup(storage, name, p=1)
    Workload(op, seed=4).step(instances, 0, touched=30)
    receipts = [inst.save(0, stage_bytes=STAGE) for inst in instances]
    return job, op, receipts


def test_a_staged_block_that_fails_its_checksum_is_refused(storage: osp.Storage) -> None:
    if not stages(storage):
        pytest.skip("this backend stores writes at save time")
    job, _, receipts = _staged_receipts(storage, "corrupt")
    (receipt,) = receipts
    first = receipt.staged[0]
    flipped = first.block[:-1] + bytes([first.block[-1] ^ 1])
    bad = dataclasses.replace(
        receipt, staged=(dataclasses.replace(first, block=flipped), *receipt.staged[1:])
    )
    with pytest.raises(CheckpointError, match="fails its checksum"):
        job.commit(0, [bad])
    assert job.last_checkpoint() is None
    assert storage.backend.write_summary("corrupt") == []
    assert job.commit(0, [receipt]) is True


@pytest.mark.parametrize("fault", ["version", "key group", "twice"])
def test_a_staged_write_that_does_not_fit_is_refused(storage: osp.Storage, fault: str) -> None:
    if not stages(storage):
        pytest.skip("this backend stores writes at save time")
    job, _, receipts = _staged_receipts(storage, f"misfit-{fault.replace(' ', '')}")
    staged = list(receipts[0].staged)
    first: StagedWrite = staged[0]
    if fault == "version":
        staged[0] = dataclasses.replace(first, version=7)
        match = "is version 7"
    elif fault == "key group":
        staged[0] = dataclasses.replace(first, key_group=MAX_KG)
        match = "key groups 0"
    else:
        staged.append(first)
        match = "twice"
    with pytest.raises(CheckpointError, match=match):
        storage.backend.commit(job.name, 0, None, [], {"op": 1}, job.epoch, staged)
    assert job.last_checkpoint() is None
    assert storage.backend.write_summary(job.name) == []


def test_recommitting_staged_receipts_is_a_noop_and_other_blocks_conflict(
    storage: osp.Storage,
) -> None:
    job, op, receipts = _staged_receipts(storage, "again")
    assert job.commit(0, receipts) is True
    assert job.commit(0, receipts) is False
    if not stages(storage):
        return
    # another attempt of the same instance (on the same base: no state), with other edits
    other = op.instance(0, 1, checkpoint=-1)
    Workload(op, seed=99).step([other], 0, touched=30)
    with pytest.raises(CheckpointConflictError, match="already committed"):
        job.commit(0, [other.save(0, stage_bytes=STAGE)])


def test_on_saved_finds_the_ids_and_refuses_a_save_that_lost(storage: osp.Storage) -> None:
    job, op, _ = setup(storage, "race", p=1)
    winner, loser = op.instance(0, 1), op.instance(0, 1)
    Workload(op, seed=5).step([winner], 0, touched=30)
    Workload(op, seed=6).step([loser], 0, touched=30)
    won = winner.save(0, stage_bytes=STAGE)
    loser.save(0, stage_bytes=STAGE)
    assert job.commit(0, [won]) is True
    if stages(storage):
        with pytest.raises(CheckpointError, match="not the committed ones"):
            loser.on_saved()
        assert loser.pending_save is not None  # left as it was
    winner.on_saved()
    assert winner.pending_save is None
    heads = storage.backend.heads("race", "op", range(MAX_KG), 0)
    assert {g: h for g, h in winner.heads().items() if h is not None} == heads
    # the winner builds on the writes the commit stored
    work = Workload(op, seed=7)
    work.step([winner], 1)
    staged_round(job, [winner], 1)


def test_a_failed_staged_commit_leaves_a_segment_file_for_the_gc(storage: osp.Storage) -> None:
    backend = storage.backend
    if not hasattr(backend, "gc"):
        pytest.skip("not segment storage")
    job, _, receipts = _staged_receipts(storage, "orphan")
    (receipt,) = receipts
    first = receipt.staged[0]
    bad = dataclasses.replace(receipt, staged=(dataclasses.replace(first, version=3),))
    with pytest.raises(CheckpointError, match="is version 3"):
        job.commit(0, [bad])
    published = {p for p, _, _ in backend.segments()}
    assert len(published) == 1  # reserved, written, referenced by nothing
    stats = backend.gc(grace_seconds=0)
    assert set(stats.deleted) == published
    assert backend.segments() == []
    assert job.commit(0, [receipt]) is True
    assert read_all(job.operator("op"), 1)


def test_a_staged_head_must_have_the_parent_the_instance_built_on(storage: osp.Storage) -> None:
    job, op, instances = setup(storage, "parent", p=1)
    (inst,) = instances
    work = Workload(op, seed=8)
    work.step(instances, 0, touched=30)
    staged_round(job, instances, 0)
    work.step(instances, 1, touched=30)
    inst.save(1, stage_bytes=STAGE)
    saved = inst.pending_save
    assert saved is not None
    write = saved.writes[0]
    before = inst.heads()  # the staged writes show as (0, version)
    assert before[write.key_group] == (write.write_id, 1)
    committed = storage.backend.heads("parent", "op", range(MAX_KG), 0)
    parent = committed[write.key_group][0]
    if not stages(storage):
        return
    head = (99, 1, write.digest, parent)
    assert inst.is_staged_head(write.key_group, write, head)
    assert not inst.is_staged_head(write.key_group, write, (99, 1, write.digest, parent + 1))
    assert not inst.is_staged_head(write.key_group, write, (99, 2, write.digest, parent))
    assert not inst.is_staged_head(write.key_group, write, (99, 1, None, parent))


def test_writes_a_commit_stores_keep_no_attempt_name(storage: osp.Storage) -> None:
    """A byte-saving detail of SQL catalogs: the writes a commit stores itself are never
    pending outside it, so their rows keep no attempt name and no time (``created`` 0: the
    checkpoint's ``committed_at`` says when); a pending write's ``created`` is whole
    seconds (a 4-byte integer in SQLite, not an 8-byte float)."""
    from objectspace.storage.sql import SQLBackend

    backend = storage.backend
    sql = backend if isinstance(backend, SQLBackend) else getattr(backend, "catalog", None)
    if not isinstance(sql, SQLBackend) or not stages(storage):
        pytest.skip("not a SQL catalog")
    job, op, instances = setup(storage, "attempts", p=2)
    work = Workload(op, seed=5)
    work.step(instances, 0)
    staged_round(job, instances, 0)
    work.step(instances, 1)
    receipts = [inst.save(1, stage_bytes=0) for inst in instances]  # stored at save time
    job.commit(1, receipts)
    rows = sql._run(
        "reading writes",
        lambda tx: tx.all("SELECT version, attempt, created FROM ckpt_packs"),
        write=False,
    )
    attempts = {inst.attempt for inst in instances}
    assert {a for v, a, _ in rows if v == 0} == {""}
    assert {a for v, a, _ in rows if v == 1} <= attempts
    assert {a for v, a, _ in rows if v == 1}
    assert all(float(c) == int(c) for _, _, c in rows)
    assert {c for v, _, c in rows if v == 0} == {0}
    assert all(c > 1_700_000_000 for v, _, c in rows if v == 1)
    assert read_all(op, 3) == work.snapshot()
