"""Tests of objectspace.checkpoint: jobs, operators, instances, two-phase checkpoints,
compaction, retention and time travel, on the memory:// and sqlite:/// backends."""

from __future__ import annotations

import dataclasses
import itertools
import multiprocessing
import pickle
import random
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import pytest

import objectspace as osp
from objectspace.checkpoint import EMPTY, CompactionPolicy, Instance, Job, Operator, Receipt
from objectspace.storage import WriteInfo

MAX_KG = 16


# -- fixtures and helpers -----------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "memory":
        return f"memory://{request.node.originalname}-{uuid.uuid4().hex}"
    return f"sqlite:///{tmp_path}/state.db"


@pytest.fixture
def storage(storage_url: str) -> osp.Storage:
    s = osp.open_storage(storage_url)
    yield s
    s.close()


def keys_per_group(max_kg: int = MAX_KG, per_group: int = 1) -> dict[int, list[int]]:
    """``per_group`` int keys for every key group."""
    kgs = osp.KeyGroups(max_kg)
    out: dict[int, list[int]] = {g: [] for g in range(max_kg)}
    k = 0
    while any(len(v) < per_group for v in out.values()):
        g = kgs.key_group(k)
        if len(out[g]) < per_group:
            out[g].append(k)
        k += 1
    return out


def commit_round(job: Job, instances: Iterable[Instance], checkpoint_id: int) -> list[Receipt]:
    instances = list(instances)
    receipts = [inst.save(checkpoint_id) for inst in instances]
    assert job.commit(checkpoint_id, receipts) is True
    for inst in instances:
        inst.on_saved()
    return receipts


def set_value(inst: Instance, key: Any, value: Any, oid: str | None = None) -> None:
    oid = f"v:{key!r}" if oid is None else oid
    space = inst.space_for_key(key)
    if oid in space:
        space.get_value(oid).value = value
    else:
        space.create_value(oid, value)


def get_value(op: Operator, key: Any, oid: str | None = None, checkpoint: int | None = None) -> Any:
    oid = f"v:{key!r}" if oid is None else oid
    inst = op.instance(0, 1, checkpoint)
    space = inst.space_for_key(key)
    return space.get_value(oid).value if oid in space else None


def new_job(storage: osp.Storage) -> Job:
    return storage.job(f"job-{uuid.uuid4().hex[:8]}")


# -- jobs and operators -------------------------------------------------------------------


def test_operator_metadata(storage_url: str) -> None:
    storage = osp.open_storage(storage_url)
    job = storage.job("clicks")
    with pytest.raises(osp.CheckpointError, match="max_key_groups"):
        job.operator("sessions")  # creating needs max_key_groups
    op = job.operator("sessions", max_key_groups=128, schema_version=3)
    assert op.max_key_groups == 128
    assert op.key_groups == osp.KeyGroups(128)
    assert op.schema_version == 3
    default = job.operator("other", max_key_groups=8)
    assert default.schema_version == 1

    with pytest.raises(osp.CheckpointError) as err:
        job.operator("sessions", max_key_groups=64)
    assert "128" in str(err.value) and "64" in str(err.value)

    # a freshly opened storage (what a restart sees) keeps the metadata
    fresh = osp.open_storage(storage_url)
    reopened = fresh.job("clicks").operator("sessions")
    assert reopened.max_key_groups == 128
    assert reopened.schema_version == 3
    assert fresh.job("clicks").operator("sessions", max_key_groups=128).max_key_groups == 128
    with pytest.raises(osp.CheckpointError) as err:
        fresh.job("clicks").operator("sessions", max_key_groups=129)
    assert "128" in str(err.value) and "129" in str(err.value)
    assert sorted(o.name for o in fresh.job("clicks").operators()) == ["other", "sessions"]
    assert "clicks" in fresh.jobs()
    # an operator of the same name in another job is another operator
    assert fresh.job("views").operator("sessions", max_key_groups=4).max_key_groups == 4


def test_schema_version_zero_is_stored(storage: osp.Storage) -> None:
    """BUG: ``schema_version or 1`` in SQLiteBackend.ensure_operator turns 0 into 1."""
    op = storage.job("j").operator("o", max_key_groups=4, schema_version=0)
    assert op.schema_version == 0
    assert storage.job("j").operator("o").schema_version == 0


def test_bad_operator_arguments(storage: osp.Storage) -> None:
    job = storage.job("j")
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ValueError):
            job.operator("o", max_key_groups=bad)
    with pytest.raises(ValueError):
        job.operator("", max_key_groups=4)
    with pytest.raises(ValueError):
        storage.job("")
    with pytest.raises(ValueError):
        CompactionPolicy(max_chain_ratio=0)
    with pytest.raises(ValueError):
        CompactionPolicy(max_chain_length=0)


def test_parallelism_is_recorded_at_commit(storage_url: str) -> None:
    storage = osp.open_storage(storage_url)
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    assert op.parallelism is None
    instances = [op.instance(i, 4) for i in range(4)]
    for k in range(20):
        set_value(instances[op.key_groups.instance_of_key(k, 4)], k, k)
    receipts = [inst.save(1) for inst in instances]
    assert op.parallelism is None  # saved, not committed
    assert job.commit(1, receipts)
    assert op.parallelism == 4
    assert osp.open_storage(storage_url).job("j").operator("o").parallelism == 4

    instances = [op.instance(i, 3) for i in range(3)]
    set_value(instances[op.key_groups.instance_of_key(0, 3)], 0, "x")
    receipts = [inst.save(2) for inst in instances]
    assert op.parallelism == 4
    assert job.commit(2, receipts)
    assert op.parallelism == 3
    assert [o.parallelism for o in job.operators()] == [3]


# -- instances ----------------------------------------------------------------------------


@pytest.mark.parametrize("parallelism", [1, 3, 5, 16])
def test_instance_key_groups(storage: osp.Storage, parallelism: int) -> None:
    op = storage.job("j").operator("o", max_key_groups=MAX_KG)
    kgs = osp.KeyGroups(MAX_KG)
    seen: list[int] = []
    for i in range(parallelism):
        inst = op.instance(i, parallelism)
        assert inst.key_groups == kgs.range_of(i, parallelism)
        seen.extend(inst.key_groups)
    assert seen == list(range(MAX_KG))


def test_space_outside_range_raises(storage: osp.Storage) -> None:
    op = storage.job("j").operator("o", max_key_groups=MAX_KG)
    inst = op.instance(1, 4)  # key groups 4..7
    assert inst.key_groups == range(4, 8)
    inst.space(4)
    inst.space(7)
    with pytest.raises(osp.CheckpointError) as err:
        inst.space(9)
    msg = str(err.value)
    assert "9" in msg and "4..7" in msg and "instance 2" in msg
    for bad in (-1, MAX_KG):
        with pytest.raises(osp.CheckpointError, match=f"key group {bad}"):
            inst.space(bad)
    assert set(inst.loaded()) == {4, 7}


def test_space_for_key_of_another_instance_raises(storage: osp.Storage) -> None:
    op = storage.job("j").operator("o", max_key_groups=MAX_KG)
    mine = op.instance(0, 4)
    foreign = next(k for k in range(1000) if op.key_groups.instance_of_key(k, 4) != 0)
    own = next(k for k in range(1000) if op.key_groups.instance_of_key(k, 4) == 0)
    assert mine.space_for_key(own) is mine.space(mine.key_group(own))
    with pytest.raises(osp.CheckpointError, match="not owned"):
        mine.space_for_key(foreign)


def test_lazy_loading_reads_one_key_group(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    writer = op.instance(0, 1)
    for g, keys in keys_per_group(per_group=2).items():
        for key in keys:
            lst = writer.space_for_key(key).create_list(f"{key!r}/list")
            lst.extend(range(g + 3))
    commit_round(job, [writer], 1)

    chains = storage.backend.chains(job.name, op.name, range(MAX_KG), 1)
    assert set(chains) == set(range(MAX_KG))
    rows = {g: sum(w.rows for w in chain) for g, chain in chains.items()}
    total = sum(rows.values())

    reader = op.instance(0, 1)
    assert reader.rows_read == 0  # nothing read before a space is touched
    key = keys_per_group()[5][0]
    assert list(reader.space_for_key(key).get_list(f"{key!r}/list")) == list(range(8))
    assert set(reader.loaded()) == {5}
    assert reader.rows_read == rows[5]
    assert reader.rows_read < total
    reader.load_all()
    assert reader.rows_read == total


# -- two-phase checkpoints ----------------------------------------------------------------


def test_pending_writes_are_invisible_until_commit(storage_url: str) -> None:
    storage = osp.open_storage(storage_url)
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    writer = op.instance(0, 1)
    set_value(writer, "k", "one")
    commit_round(job, [writer], 1)

    set_value(writer, "k", "two")
    set_value(writer, "new-key", "new")
    receipt = writer.save(2)
    early = op.instance(0, 1)  # created before the commit: restores as of 1
    for reader_op in (op, osp.open_storage(storage_url).job("j").operator("o")):
        assert get_value(reader_op, "k") == "one"
        assert get_value(reader_op, "new-key") is None
        assert reader_op.job.last_checkpoint() == 1
        assert reader_op.job.checkpoints() == [1]

    assert job.commit(2, [receipt]) is True
    writer.on_saved()
    assert get_value(op, "k") == "two"
    assert get_value(op, "new-key") == "new"
    assert get_value(osp.open_storage(storage_url).job("j").operator("o"), "k") == "two"
    assert early.space_for_key("k").get_value("v:'k'").value == "one"
    assert get_value(op, "k", checkpoint=1) == "one"


def test_commit_twice_is_a_noop(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    a = op.instance(0, 1)
    b = op.instance(0, 1)  # a duplicate attempt of the same instance
    set_value(a, "k", "a")
    set_value(b, "k", "b")
    set_value(b, "only-b", "b")
    ra = a.save(1)
    rb = b.save(1)
    assert job.commit(1, [ra]) is True
    info = job.checkpoint_info()
    assert job.commit(1, [ra]) is False
    with pytest.raises(osp.CheckpointConflictError, match="already committed by another"):
        job.commit(1, [rb])  # the duplicate lost: it learns so, and changes nothing
    assert job.checkpoint_info() == info
    assert job.checkpoints() == [1]
    assert get_value(op, "k") == "a"
    assert get_value(op, "only-b") is None


def test_commit_out_of_order_raises(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    inst = op.instance(0, 1)
    set_value(inst, "k", 1)
    commit_round(job, [inst], 1)
    set_value(inst, "k", 3)
    commit_round(job, [inst], 3)  # gaps are allowed
    late = op.instance(0, 1)
    set_value(late, "k", 2)
    with pytest.raises(osp.CheckpointError, match="3"):
        job.commit(2, [])
    with pytest.raises(osp.CheckpointError):
        job.commit(2, [late.save(4)])  # a receipt for 4 given to 2
    assert job.checkpoints() == [1, 3]
    assert get_value(op, "k") == 3


def test_save_must_follow_base(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    inst = op.instance(0, 1)
    set_value(inst, "k", 1)
    commit_round(job, [inst], 5)
    with pytest.raises(osp.CheckpointError, match="5"):
        inst.save(5)
    with pytest.raises(osp.CheckpointError):
        op.instance(0, 1).save(3)


def test_two_receipts_for_one_key_group_are_refused(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    a = op.instance(0, 2)
    b = op.instance(0, 2)  # second attempt of instance 0
    other = op.instance(1, 2)
    key = next(k for k in range(100) if op.key_groups.instance_of_key(k, 2) == 0)
    set_value(a, key, "a")
    set_value(b, key, "b")
    set_value(other, next(k for k in range(100) if op.key_groups.instance_of_key(k, 2) == 1), 1)
    receipts = [a.save(1), b.save(1), other.save(1)]
    with pytest.raises(osp.CheckpointError, match=r"twice|two receipts"):
        job.commit(1, receipts)
    # a forged receipt of another index that reports the same key group
    forged = dataclasses.replace(receipts[1], index=1)
    with pytest.raises(osp.CheckpointError, match="two receipts"):
        job.commit(1, [receipts[0], forged])
    # receipts at different parallelisms of one operator
    p3 = op.instance(2, 3)
    with pytest.raises(osp.CheckpointError, match="parallelism"):
        job.commit(1, [receipts[0], p3.save(1)])
    assert job.checkpoints() == []
    assert job.last_checkpoint() is None
    # refused commits left everything pending: the right set still commits
    assert job.commit(1, [receipts[0], receipts[2]]) is True
    assert get_value(op, key) == "a"


def test_duplicate_attempt_is_never_referenced(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    keys = [ks[0] for ks in keys_per_group().values()]
    first = op.instance(0, 1)
    for k in keys:
        set_value(first, k, ("v1", k))
    commit_round(job, [first], 1)

    good = op.instance(0, 1)
    failed = op.instance(0, 1)  # a failed/duplicate attempt of the same instance
    for k in keys:
        set_value(good, k, ("good", k))
        set_value(failed, k, ("failed", k))
        set_value(failed, k, "extra", oid="extra")
    failed_receipt = failed.save(2)
    good_receipt = good.save(2)
    assert {g for g, _ in failed_receipt.writes} == set(range(MAX_KG))
    assert job.commit(2, [good_receipt]) is True
    good.on_saved()

    expected = {k: ("good", k) for k in keys}  # msgpack keeps tuples
    assert {k: get_value(op, k) for k in keys} == expected
    assert all(get_value(op, k, oid="extra") is None for k in keys)
    committed_ids = {
        w.write_id
        for chain in storage.backend.chains(job.name, op.name, range(MAX_KG), 2).values()
        for w in chain
    }
    assert committed_ids.isdisjoint(w for _, w in failed_receipt.writes)

    # the next checkpoint builds on the committed attempt, not on the failed one
    set_value(good, keys[0], "three")
    commit_round(job, [good], 3)
    assert get_value(op, keys[0]) == "three"
    assert {k: get_value(op, k) for k in keys[1:]} == {k: expected[k] for k in keys[1:]}
    assert all(get_value(op, k, oid="extra") is None for k in keys)


def test_receipts_on_another_base_are_refused(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    k0 = next(k for k in range(100) if op.key_groups.instance_of_key(k, 2) == 0)
    k1 = next(k for k in range(100) if op.key_groups.instance_of_key(k, 2) == 1)
    stale = op.instance(0, 2)  # base: nothing committed
    set_value(stale, k0, "stale")
    bootstrap = op.instance(1, 2)
    set_value(bootstrap, k1, "one")
    commit_round(job, [bootstrap], 1)
    current = op.instance(1, 2)  # base 1
    assert stale.base is None and current.base == 1
    set_value(current, k1, "two")
    r_stale, r_current = stale.save(2), current.save(2)
    with pytest.raises(osp.CheckpointError, match="different"):
        job.commit(2, [r_stale, r_current])
    with pytest.raises(osp.CheckpointError, match="on top of"):
        job.commit(2, [r_stale])
    # an instance restored as of an older checkpoint cannot commit on top of the last one
    commit_round(job, [current], 2)
    old = op.instance(1, 2, checkpoint=1)
    set_value(old, k1, "from the past")
    with pytest.raises(osp.CheckpointError, match="on top of"):
        job.commit(3, [old.save(3)])
    assert job.checkpoints() == [1, 2]
    assert get_value(op, k1) == "two"
    assert get_value(op, k0) is None


def test_receipts_of_another_job_or_checkpoint_are_refused(storage: osp.Storage) -> None:
    job, other_job = storage.job("j"), storage.job("k")
    op = job.operator("o", max_key_groups=MAX_KG)
    other_op = other_job.operator("o", max_key_groups=MAX_KG)
    inst, other = op.instance(0, 1), other_op.instance(0, 1)
    set_value(inst, "k", "mine")
    set_value(other, "k", "theirs")
    mine, theirs = inst.save(1), other.save(1)
    with pytest.raises(osp.CheckpointError, match="job"):
        job.commit(1, [theirs])
    with pytest.raises(osp.CheckpointError, match="another job"):
        job.commit(1, [dataclasses.replace(theirs, job="j")])  # forged job name
    with pytest.raises(osp.CheckpointError, match="checkpoint"):
        job.commit(2, [mine])
    with pytest.raises(osp.CheckpointError):
        job.commit(2, [dataclasses.replace(mine, checkpoint_id=2)])  # writes are version 1
    with pytest.raises(TypeError):
        job.commit(1, [object()])  # type: ignore[list-item]
    assert job.checkpoints() == [] and other_job.checkpoints() == []
    assert job.commit(1, [mine]) is True
    inst.on_saved()
    # a receipt of a committed checkpoint cannot be replayed into the next one
    with pytest.raises(osp.CheckpointError):
        job.commit(2, [dataclasses.replace(mine, checkpoint_id=2, base=1)])
    assert job.checkpoints() == [1]
    assert get_value(op, "k") == "mine"
    assert get_value(other_op, "k") is None  # the other job's pending write stayed pending


def test_commit_spans_operators(storage: osp.Storage) -> None:
    job = storage.job("j")
    a = job.operator("a", max_key_groups=MAX_KG)
    b = job.operator("b", max_key_groups=8)
    ia = [a.instance(i, 2) for i in range(2)]
    ib = [b.instance(0, 1)]
    for k in range(10):
        set_value(ia[a.key_groups.instance_of_key(k, 2)], k, f"a{k}")
        set_value(ib[0], k, f"b{k}")
    receipts = [inst.save(1) for inst in ia + ib]
    assert get_value(a, 3) is None and get_value(b, 3) is None
    assert job.commit(1, receipts)
    assert [get_value(a, k) for k in range(10)] == [f"a{k}" for k in range(10)]
    assert [get_value(b, k) for k in range(10)] == [f"b{k}" for k in range(10)]
    assert (a.parallelism, b.parallelism) == (2, 1)

    # a refused receipt of one operator keeps the other operator's writes invisible too
    for inst in ia + ib:
        inst.on_saved()
    set_value(ia[a.key_groups.instance_of_key(3, 2)], 3, "a-two")
    set_value(ib[0], 3, "b-two")
    good = [inst.save(2) for inst in ia]
    bad = dataclasses.replace(ib[0].save(2), checkpoint_id=3)
    with pytest.raises(osp.CheckpointError):
        job.commit(2, [*good, bad])
    assert (get_value(a, 3), get_value(b, 3)) == ("a3", "b3")
    assert job.checkpoints() == [1]


def test_commit_of_many_key_groups(storage: osp.Storage) -> None:
    """More writes per commit and per retention than one SQL statement takes parameters."""
    job = storage.job("j")
    op = job.operator("o", max_key_groups=1200, compaction=CompactionPolicy(max_chain_length=1))
    inst = op.instance(0, 1)
    for c in range(1, 4):
        for g in range(1200):
            space = inst.space(g)
            if "v" in space:
                space.get_value("v").value = (c, g)
            else:
                space.create_value("v", (c, g))
        assert len(commit_round(job, [inst], c)[0].writes) == 1200
    stats = job.retain(keep_last=1)
    assert stats.writes_removed == 2400  # versions 1 (full) and 2 (its diff): 3 is full
    reader = op.instance(0, 1)
    assert [space.get_value("v").value for _, space in reader.spaces()] == [
        (3, g) for g in range(1200)
    ]


def test_retry_after_an_uncommitted_save_keeps_every_edit(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    inst = op.instance(0, 1)
    lst = inst.space_for_key("k").create_list("l")
    lst.extend([1, 2, 3])
    commit_round(job, [inst], 1)
    lst.append(4)
    inst.save(2)  # its commit never happens
    lst.pop(0)
    commit_round(job, [inst], 3)
    assert list(op.instance(0, 1).space_for_key("k").get_list("l")) == [2, 3, 4]


def _clearing_rounds(storage: osp.Storage, name: str, policy: CompactionPolicy) -> list[bool]:
    """Two lists grown over three rounds (32 kB of floats a round) and both cleared in the
    fourth, then grown again; whether each round wrote the key group full."""
    job = storage.job(name)
    op = job.operator("o", max_key_groups=MAX_KG, compaction=policy)
    inst = op.instance(0, 1)
    space = inst.space_for_key("k")
    lists = [space.create_list("a"), space.create_list("b")]
    rng = random.Random(7)
    fulls = []
    for c in range(7):
        for lst in lists:
            if c == 3:
                lst.clear()
            else:
                lst.extend(rng.random() for _ in range(2000))
        (receipt,) = commit_round(job, [inst], c)
        assert receipt.rows_written
        (chain,) = job.backend.chains(name, "o", range(MAX_KG), c).values()
        fulls.append(chain[-1].full)
    restored = op.instance(0, 1).space_for_key("k")
    assert [list(restored.get_list(n)) for n in "ab"] == [list(lst) for lst in lists]
    return fulls


def test_a_cleared_key_group_is_written_full_when_no_larger(storage: osp.Storage) -> None:
    """``full_when_smaller``: the round that clears the lists writes the key group whole
    (two empty lists: no more rows than the clears' changes), so the chain starts again
    there; without it the chain goes on from the first full write."""
    assert _clearing_rounds(storage, "smaller", CompactionPolicy()) == [
        True,
        False,
        False,
        True,
        False,
        False,
        False,
    ]
    assert _clearing_rounds(storage, "ratio", CompactionPolicy(full_when_smaller=False)) == [
        True,
        False,
        False,
        False,
        False,
        False,
        True,
    ]
    # The clear's full write costs about what its differential write does, and the chain
    # restarting there spares the ratio's later rewrite of the regrown lists (round 6).
    smaller = {i.checkpoint_id: i.bytes for i in storage.job("smaller").checkpoint_info()}
    ratio = {i.checkpoint_id: i.bytes for i in storage.job("ratio").checkpoint_info()}
    assert smaller[3] < 200 and ratio[3] < 200
    assert sum(smaller.values()) < 0.9 * sum(ratio.values())


def test_large_untouched_state_keeps_a_clear_differential(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    inst = op.instance(0, 1)
    space = inst.space_for_key("k")
    space.create_dict("big").update((i, i) for i in range(500))
    lst = space.create_list("l")
    lst.extend(range(20))
    commit_round(job, [inst], 0)
    lst.append(1)
    commit_round(job, [inst], 1)
    lst.clear()
    commit_round(job, [inst], 2)
    chains = job.backend.chains("j", "o", range(MAX_KG), 2)
    assert [[w.full for w in ws] for ws in chains.values()] == [[True, False, False]]


def test_retry_of_a_save_written_full_instead_keeps_every_edit(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    inst = op.instance(0, 1)
    lst = inst.space_for_key("k").create_list("l")
    lst.extend(range(40))
    commit_round(job, [inst], 1)
    lst.append(40)
    commit_round(job, [inst], 2)
    lst.clear()
    inst.save(3)  # full instead of the clear; its commit never happens
    lst.extend([7, 8])
    commit_round(job, [inst], 4)
    assert list(op.instance(0, 1).space_for_key("k").get_list("l")) == [7, 8]


def test_last_checkpoint_and_checkpoints(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    assert job.last_checkpoint() is None
    assert job.checkpoints() == []
    inst = op.instance(0, 1)
    ids = [0, 1, 2, 5, 9]
    for c in ids:
        set_value(inst, c, c)
        commit_round(job, [inst], c)
        assert job.last_checkpoint() == c
    assert job.checkpoints() == ids
    infos = job.checkpoint_info()
    assert [i.checkpoint_id for i in infos] == ids
    assert all(i.writes == 1 for i in infos)
    assert infos[0].full_writes == 1
    assert [i.committed_at for i in infos] == sorted(i.committed_at for i in infos)


def test_receipt_pickles_and_is_small(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    inst = op.instance(0, 1)
    assert len(inst.key_groups) == 16
    for g, keys in keys_per_group().items():
        inst.space_for_key(keys[0]).create_list("big").extend(
            f"item-{g}-{i}-{'x' * (i % 17)}" for i in range(500)
        )
    receipt = inst.save(1)
    assert len(receipt.writes) == 16
    # the state is large (compressed blocks: bytes are what is stored), the receipt is not
    assert receipt.rows_written > 8_000 and receipt.bytes_written > 20_000
    data = pickle.dumps(receipt)
    assert len(data) < 2_000
    copy = pickle.loads(data)
    assert copy == receipt
    assert job.commit(1, [copy]) is True
    assert len(op.instance(0, 1).space_for_key(keys_per_group()[3][0]).get_list("big")) == 500


# -- the storage travels ------------------------------------------------------------------


def test_storage_pickles(storage_url: str) -> None:
    storage = osp.open_storage(storage_url)
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    inst = op.instance(0, 1)
    set_value(inst, "k", "before")
    commit_round(job, [inst], 1)

    copy = pickle.loads(pickle.dumps(storage))
    assert copy.url == storage.url
    assert copy.job("j").checkpoints() == [1]
    copy_op = copy.job("j").operator("o")
    assert copy_op.max_key_groups == MAX_KG
    assert get_value(copy_op, "k") == "before"
    # and writes through the copy are seen by the original
    w = copy_op.instance(0, 1)
    set_value(w, "k", "after")
    assert storage.job("j").commit(2, [w.save(2)])
    assert get_value(op, "k") == "after"
    copy.close()
    assert copy.job("j").last_checkpoint() == 2  # reconnects lazily after close


CHILD_KEYS = [f"user-{i}" for i in range(30)]


def _child_save(storage: osp.Storage, job_name: str, checkpoint_id: int) -> list[Receipt]:
    """Runs in a spawned process: edit the unpickled storage's state at parallelism 4."""
    op = storage.job(job_name).operator("o")
    instances = [op.instance(i, 4) for i in range(4)]
    for key in CHILD_KEYS:
        space = instances[op.key_groups.instance_of_key(key, 4)].space_for_key(key)
        space.get_list(f"{key}/l").append("from the child")
        space.create_value(f"{key}/child", key)
    return [inst.save(checkpoint_id) for inst in instances]


def test_child_process_saves_and_parent_commits(tmp_path: Any) -> None:
    storage = osp.open_storage(f"sqlite:///{tmp_path}/state.db")
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    inst = op.instance(0, 1)
    for key in CHILD_KEYS:
        inst.space_for_key(key).create_list(f"{key}/l").append("from the parent")
    commit_round(job, [inst], 1)

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        receipts = pool.apply(_child_save, (storage, "j", 2))
    assert all(isinstance(r, Receipt) and r.checkpoint_id == 2 for r in receipts)
    assert sum(len(r.writes) for r in receipts) == len(
        {op.key_groups.key_group(k) for k in CHILD_KEYS}
    )
    key = CHILD_KEYS[0]
    assert get_value(op, key, oid=f"{key}/child") is None  # pending until the parent commits
    assert job.commit(2, receipts) is True
    assert op.parallelism == 4
    reader = op.instance(0, 1)
    for key in CHILD_KEYS:  # the child's key groups are the parent's (a stable hash)
        space = reader.space_for_key(key)
        assert list(space.get_list(f"{key}/l")) == ["from the parent", "from the child"]
        assert space.get_value(f"{key}/child").value == key


# -- compaction ---------------------------------------------------------------------------


def entry(c: int, g: int) -> str:
    """The entry appended at checkpoint ``c`` to key group ``g``'s list: with a random-looking
    tail, so that blocks (compressed) grow with their entries as the compaction bounds
    assume (repetitive entries compress into fulls barely larger than one diff)."""
    return f"entry {c:04d} of key group {g:02d} " + random.Random(c * 100 + g).randbytes(48).hex()


def run_appends(
    storage: osp.Storage,
    policy: CompactionPolicy,
    checkpoints: int,
    check: Callable[[int, dict[int, list[WriteInfo]]], None],
    restart_at: int | None = None,
) -> tuple[Job, Operator, dict[int, list[Any]]]:
    """Append to one list per key group at every checkpoint; ``check`` sees every chain."""
    job = new_job(storage)
    op = job.operator("o", max_key_groups=MAX_KG, compaction=policy)
    keys = {g: ks[0] for g, ks in keys_per_group().items()}
    instances = [op.instance(0, 1)]
    parallelism = 1
    written: dict[int, list[Any]] = {}  # key group -> writes made at each version
    for c in range(1, checkpoints + 1):
        if c == restart_at:
            parallelism = 4
            op = storage.job(job.name).operator("o", compaction=policy)
            instances = [op.instance(i, parallelism) for i in range(parallelism)]
        for g, key in keys.items():
            inst = instances[op.key_groups.instance_of(g, parallelism)]
            space = inst.space_for_key(key)
            lst = space.get_list("l") if "l" in space else space.create_list("l")
            lst.append(entry(c, g))
        commit_round(job, instances, c)
        chains = storage.backend.chains(job.name, op.name, range(MAX_KG), c)
        assert set(chains) == set(range(MAX_KG))
        for g, chain in chains.items():
            assert chain[-1].version == c  # every key group was written at c
            written.setdefault(g, []).append(chain[-1])
        check(c, chains)
    return job, op, written


@pytest.mark.parametrize("restart_at", [None, 50])
def test_compaction_bounds_restore_and_write_amplification(
    storage: osp.Storage, restart_at: int | None
) -> None:
    ratio = 3.0
    policy = CompactionPolicy(max_chain_ratio=ratio, max_chain_length=64, min_chain_bytes=0)

    def check(c: int, chains: dict[int, list[Any]]) -> None:
        for g, chain in chains.items():
            assert chain[0].full, (g, chain)
            assert not any(w.full for w in chain[1:])
            restore = sum(w.bytes for w in chain)
            one_write = max((w.bytes for w in chain[1:]), default=0)
            assert restore <= (1 + ratio) * chain[0].bytes + one_write, (c, g, chain)

    job, op, written = run_appends(storage, policy, 100, check, restart_at)
    full_bytes = diff_bytes = first_full = full_count = 0
    for writes in written.values():
        assert len(writes) == 100
        assert writes[0].full and writes[0].version == 1
        first_full += writes[0].bytes
        for w in writes:
            if w.full:
                full_bytes += w.bytes
                full_count += 1
            else:
                diff_bytes += w.bytes
    assert full_count > MAX_KG  # compaction happened ...
    assert full_count <= MAX_KG * 6  # ... but geometrically rarely (not every K checkpoints)
    # each compaction rewrites at most the full version plus the chain it replaces
    assert full_bytes - first_full <= (1 + 1 / ratio) * diff_bytes
    assert full_bytes < diff_bytes
    # the restore as of the last checkpoint is exact and reads what the chains say
    inst = op.instance(0, 1)
    inst.load_all()
    chains = storage.backend.chains(job.name, op.name, range(MAX_KG), 100)
    assert inst.rows_read == sum(w.rows for chain in chains.values() for w in chain)
    for g, key in ((g, ks[0]) for g, ks in keys_per_group().items()):
        assert list(inst.space_for_key(key).get_list("l")) == [entry(c, g) for c in range(1, 101)]


def test_compaction_bounds_chain_length(storage: osp.Storage) -> None:
    policy = CompactionPolicy(max_chain_ratio=1000.0, max_chain_length=5)
    longest = [0]

    def check(c: int, chains: dict[int, list[Any]]) -> None:
        for chain in chains.values():
            assert chain[0].full
            assert len(chain) - 1 <= 5, (c, chain)
            longest[0] = max(longest[0], len(chain) - 1)

    _, _, written = run_appends(storage, policy, 30, check, restart_at=14)
    assert longest[0] == 5
    for writes in written.values():
        versions = [w.version for w in writes if w.full]
        assert versions[0] == 1
        assert all(b - a <= 6 for a, b in itertools.pairwise(versions))


# -- a random keyed workload, for retention and time travel -------------------------------


class Workload:
    """Per key a list, a dict and a value, edited at random; ``ref`` is the plain state."""

    def __init__(self, seed: int, n_keys: int) -> None:
        self.rng = random.Random(seed)
        self.keys: list[Any] = [i * 7 for i in range(n_keys // 2)]
        self.keys += [f"key-{i}" for i in range(n_keys - len(self.keys))]
        self.ref: dict[Any, tuple[list[Any], dict[Any, Any], Any]] = {}

    def edits(self, fraction: float = 0.3) -> list[tuple[Any, tuple[Any, ...]]]:
        rng = self.rng
        out = []
        for key in rng.sample(self.keys, max(1, int(len(self.keys) * fraction))):
            for _ in range(rng.randint(1, 3)):
                lst, dct, _ = self.ref.get(key, ([], {}, None))
                r = rng.random()
                if r < 0.3:
                    edit: tuple[Any, ...] = ("append", rng.choice([rng.randint(-99, 99), "s"]))
                elif r < 0.4 and lst:
                    edit = ("pop", rng.randrange(len(lst)))
                elif r < 0.45:
                    edit = ("clear",)
                elif r < 0.7:
                    edit = ("dset", rng.choice(["a", "b", "c", 1, 2]), rng.randint(0, 9))
                elif r < 0.8 and dct:
                    edit = ("ddel", rng.choice(sorted(dct, key=repr)))
                elif r < 0.84 and dct:
                    edit = ("dclear",)
                elif r < 0.87 and key in self.ref:
                    edit = ("drop",)
                else:
                    edit = ("vset", rng.choice([None, rng.random(), f"v{rng.randint(0, 99)}"]))
                apply_ref(self.ref, key, edit)
                out.append((key, edit))
        return out


def apply_ref(ref: dict[Any, Any], key: Any, edit: tuple[Any, ...]) -> None:
    if key not in ref:
        ref[key] = ([], {}, None)
    lst, dct, _ = ref[key]
    kind = edit[0]
    if kind == "append":
        lst.append(edit[1])
    elif kind == "pop":
        lst.pop(edit[1])
    elif kind == "clear":
        lst.clear()
    elif kind == "dset":
        dct[edit[1]] = edit[2]
    elif kind == "ddel":
        del dct[edit[1]]
    elif kind == "dclear":
        dct.clear()
    elif kind == "drop":
        del ref[key]
    else:
        ref[key] = (lst, dct, edit[1])


def apply_space(space: osp.ObjectSpace, key: Any, edit: tuple[Any, ...]) -> None:
    lid, did, vid = f"{key!r}/list", f"{key!r}/dict", f"{key!r}/value"
    if edit[0] == "drop":  # the key's objects are deleted (and may be recreated later)
        for oid in (lid, did, vid):
            space.delete(oid)
        return
    if lid not in space:
        space.create_list(lid)
        space.create_dict(did)
        space.create_value(vid)
    kind = edit[0]
    if kind == "append":
        space.get_list(lid).append(edit[1])
    elif kind == "pop":
        space.get_list(lid).pop(edit[1])
    elif kind == "clear":
        space.get_list(lid).clear()
    elif kind == "dset":
        space.get_dict(did)[edit[1]] = edit[2]
    elif kind == "ddel":
        del space.get_dict(did)[edit[1]]
    elif kind == "dclear":
        space.get_dict(did).clear()
    else:
        space.get_value(vid).value = edit[1]


def snapshot(ref: dict[Any, Any]) -> dict[str, Any]:
    return {repr(k): (list(lst), dict(dct), val) for k, (lst, dct, val) in ref.items()}


def read_keys(op: Operator, parallelism: int, checkpoint: int | None = None) -> dict[str, Any]:
    """Every key's (list, dict, value), read through instances; checks key group placement."""
    out: dict[str, Any] = {}
    for index in range(parallelism):
        inst = op.instance(index, parallelism, checkpoint)
        for _kg, space in inst.spaces():
            for oid in space:
                krepr, kind = oid.rsplit("/", 1)
                entry = out.setdefault(krepr, [None, None, None])
                obj = space.get(oid)
                if kind == "list":
                    entry[0] = list(obj)
                elif kind == "dict":
                    entry[1] = dict(obj.items())
                else:
                    entry[2] = obj.value
    return {k: tuple(v) for k, v in out.items()}


def run_workload(
    job: Job, op: Operator, checkpoints: Iterable[int], parallelism: int, w: Workload
) -> dict[int, dict[str, Any]]:
    instances = [op.instance(i, parallelism) for i in range(parallelism)]
    recorded = {}
    for c in checkpoints:
        for key, edit in w.edits():
            inst = instances[op.key_groups.instance_of_key(key, parallelism)]
            apply_space(inst.space_for_key(key), key, edit)
        commit_round(job, instances, c)
        recorded[c] = snapshot(w.ref)
    return recorded


# -- retention ----------------------------------------------------------------------------


def test_retention(storage: osp.Storage) -> None:
    job = storage.job("j")
    policy = CompactionPolicy(max_chain_ratio=3.0, max_chain_length=3)
    op = job.operator("o", max_key_groups=MAX_KG, compaction=policy)
    w = Workload(seed=7, n_keys=40)
    recorded = run_workload(job, op, range(1, 20), 2, w)

    # checkpoint 20, with a duplicate attempt of instance 0 that is never committed
    instances = [op.instance(i, 2) for i in range(2)]
    duplicate = op.instance(0, 2)
    for g in duplicate.key_groups:
        duplicate.space(g).create_value("duplicate", g)
    dup_receipt = duplicate.save(20)
    assert dup_receipt.writes
    for key, edit in w.edits():
        apply_space(instances[op.key_groups.instance_of_key(key, 2)].space_for_key(key), key, edit)
    commit_round(job, instances, 20)
    recorded[20] = snapshot(w.ref)
    # a save for the next checkpoint, pending while retention runs
    apply_space(instances[0].space(0), "late", ("vset", "late"))
    next_receipt = instances[0].save(21)

    assert job.checkpoints() == list(range(1, 21))
    for c in (1, 10, 20):
        assert read_keys(op, 2, c) == recorded[c]

    def committed_bytes(*as_of: int) -> int:
        writes = {
            w
            for c in as_of
            for chain in storage.backend.chains(job.name, op.name, range(MAX_KG), c).values()
            for w in chain
        }
        return sum(w.bytes for w in writes)

    pending_bytes = dup_receipt.bytes_written + next_receipt.bytes_written
    before = storage.backend.storage_bytes()
    assert before == committed_bytes(*range(1, 21)) + pending_bytes
    stats = job.retain(keep_last=2)
    after = storage.backend.storage_bytes()
    # what is left: exactly the chains of the kept checkpoints, and the save of 21
    assert after == committed_bytes(19, 20) + next_receipt.bytes_written

    assert job.checkpoints() == [19, 20]
    assert stats.kept == [19, 20]
    assert stats.checkpoints_dropped == 18
    assert stats.writes_removed > 0
    assert stats.pending_removed >= len(dup_receipt.writes)
    assert after < before
    for c in (19, 20):
        assert read_keys(op, 2, c) == recorded[c]
        assert read_keys(op, 5, c) == recorded[c]
    for c in (1, 18):
        with pytest.raises(osp.CheckpointError, match="not restorable"):
            op.instance(0, 2, checkpoint=c)
    # no write of the uncommitted attempt survives
    assert all("duplicate" not in space for _, space in op.instance(0, 1).spaces())
    # the pending save of checkpoint 21 survived, and commits on top of what was kept
    assert job.commit(21, [next_receipt]) is True
    instances[0].on_saved()
    expected = dict(recorded[20])
    assert op.instance(0, 2).space(0).get_value("'late'/value").value == "late"
    got = read_keys(op, 2)
    assert got.pop("'late'") == ([], {}, "late")
    assert got == expected
    # retention again is idempotent for what it keeps
    job.retain(keep_last=2)
    assert job.checkpoints() == [20, 21]
    assert read_keys(op, 2, 20) == recorded[20]


def test_lazy_instance_whose_checkpoint_was_dropped_never_restores_wrong_state(
    storage: osp.Storage,
) -> None:
    """BUG: an instance restores lazily, so retention can drop its checkpoint's chain between
    its creation and its first ``space()``; it then restores an empty space silently."""
    job = storage.job("j")
    op = job.operator("o", max_key_groups=4, compaction=CompactionPolicy(max_chain_length=1))
    writer = op.instance(0, 1)
    lst = writer.space(0).create_list("l")
    for c in range(1, 5):
        lst.append(c)
        commit_round(job, [writer], c)
    as_of_3 = op.instance(0, 1, checkpoint=3)  # restorable when created
    latest = op.instance(0, 1)  # as of 4
    for c in (5, 6):
        lst.append(c)
        commit_round(job, [writer], c)
    job.retain(keep_last=1)
    assert job.checkpoints() == [6]
    for inst, expected in ((as_of_3, [1, 2, 3]), (latest, [1, 2, 3, 4])):
        try:
            space = inst.space(0)
        except osp.CheckpointError:
            continue  # a clear error is fine
        assert "l" in space, f"as of {inst.base}: restored an empty space"
        assert list(space.get_list("l")) == expected


def test_instance_index_and_parallelism_are_checked(storage: osp.Storage) -> None:
    op = storage.job("j").operator("o", max_key_groups=MAX_KG)
    with pytest.raises(IndexError):
        op.instance(4, 4)
    with pytest.raises(IndexError):
        op.instance(-1, 4)
    with pytest.raises(ValueError):
        op.instance(0, MAX_KG + 1)
    with pytest.raises(ValueError):
        op.instance(0, 0)


def test_retention_of_a_missing_job_or_bad_count(storage: osp.Storage) -> None:
    storage.job("j").operator("o", max_key_groups=4)
    with pytest.raises(ValueError):
        storage.job("j").retain(keep_last=0)
    with pytest.raises(osp.CheckpointError):
        storage.job("no-such-job").retain(keep_last=2)


# -- time travel --------------------------------------------------------------------------


def test_time_travel(storage: osp.Storage) -> None:
    job = storage.job("j")
    policy = CompactionPolicy(max_chain_ratio=2.0, max_chain_length=4)
    op = job.operator("o", max_key_groups=MAX_KG, compaction=policy)
    w = Workload(seed=2024, n_keys=60)
    recorded = run_workload(job, op, range(1, 16), 3, w)
    assert len({repr(v) for v in recorded.values()}) == 15  # every checkpoint differs
    assert job.checkpoints() == list(range(1, 16))
    for c, state in recorded.items():
        assert read_keys(op, 3, c) == state, c
    assert read_keys(op, 2) == recorded[15]

    job.retain(keep_last=5)
    assert job.checkpoints() == list(range(11, 16))
    for c in range(11, 16):
        assert read_keys(op, 3, c) == recorded[c], c
        assert read_keys(op, 1, c) == recorded[c], c
    for c in range(1, 11):
        with pytest.raises(osp.CheckpointError):
            op.instance(0, 3, checkpoint=c)


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, -100, 1.5, "3", None, True])
def test_bad_checkpoint_ids(storage: osp.Storage, bad: Any) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    inst = op.instance(0, 1)
    set_value(inst, "k", 1)
    with pytest.raises(ValueError, match="checkpoint id"):
        inst.save(bad)
    with pytest.raises(ValueError, match="checkpoint id"):
        job.commit(bad, [])
    # None means "the last committed checkpoint", EMPTY (-1) "no state at all".
    if bad is not None and bad != EMPTY:
        with pytest.raises(ValueError, match="checkpoint id"):
            op.instance(0, 1, checkpoint=bad)
    assert job.checkpoints() == []


def test_empty_checkpoint_restores_nothing(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    inst = op.instance(0, 1)
    set_value(inst, "k", 1)
    job.commit(1, [inst.save(1)])
    fresh = op.instance(0, 1, checkpoint=EMPTY)
    assert fresh.base is None
    assert all(len(space) == 0 for _, space in fresh.spaces())
    assert any(len(space) for _, space in op.instance(0, 1).spaces())


def test_bad_urls(tmp_path: Any) -> None:
    with pytest.raises(osp.StorageError, match="nope"):
        osp.open_storage("nope://x")
    with pytest.raises(osp.StorageError):
        osp.open_storage("sqlite:///")
    with pytest.raises(osp.StorageError):
        osp.open_storage("sqlite://host/file.db")
    with pytest.raises(TypeError):
        osp.open_storage(None)  # type: ignore[arg-type]
    missing = tmp_path / "no" / "such" / "folder" / "state.db"
    with pytest.raises(osp.StorageError, match="does not exist"):
        osp.open_storage(f"sqlite:///{missing}").job("j").operator("o", max_key_groups=4)
    assert not missing.parent.exists()


def test_malformed_url_raises_storage_error() -> None:
    """BUG: urlparse's ValueError (brackets read as an IPv6 host) escapes open_storage."""
    for url in ("memory://name[1]", "sqlite://[::1/x.db"):
        with pytest.raises(osp.StorageError):
            osp.open_storage(url)


def test_restoring_an_unknown_checkpoint_raises(storage: osp.Storage) -> None:
    job = storage.job("j")
    op = job.operator("o", max_key_groups=MAX_KG)
    with pytest.raises(osp.CheckpointError, match="not restorable"):
        op.instance(0, 1, checkpoint=1)
    inst = op.instance(0, 1)
    set_value(inst, "k", 1)
    commit_round(job, [inst], 2)
    with pytest.raises(osp.CheckpointError, match="not restorable"):
        op.instance(0, 1, checkpoint=1)
    assert get_value(op, "k", checkpoint=2) == 1


def test_compaction_floor_spares_small_chains(storage: osp.Storage) -> None:
    """Below min_chain_bytes a chain is not rewritten however it compares to its full write."""
    job = storage.job("j")
    policy = CompactionPolicy(max_chain_ratio=1.0, min_chain_bytes=10_000)
    op = job.operator("o", max_key_groups=4, compaction=policy)
    inst = op.instance(0, 1)
    values = inst.space(0).create_list("l")
    fulls = []
    for c in range(1, 40):
        values.append(float(c))
        job.commit(c, [inst.save(c)])
        inst.on_saved()
        fulls.append(inst.last_save.full)
    chain = storage.backend.chains(job.name, op.name, range(1), 39)[0]
    diff_bytes = sum(w.bytes for w in chain[1:])
    assert fulls[0] == 1 and sum(fulls) == 1  # only the first write was full
    assert diff_bytes < 10_000 and diff_bytes > chain[0].bytes  # ratio alone would compact
