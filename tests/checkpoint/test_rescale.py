"""Rescale: state stored by key group survives restarts at any parallelism.

A keyed workload (per key a list, a dict and a value, edited at random) runs through
instances of one operator and is checkpointed every step; at chosen checkpoints the job
"restarts" from a freshly opened storage at another parallelism. After every restart and at
the end, the state of every key, read back through new instances at the current
parallelism, equals a reference run that keeps plain Python state and never rescales.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import objectspace as osp
from objectspace.checkpoint import CompactionPolicy, Instance, Job, Operator

Edit = tuple[Any, ...]
State = dict[str, tuple[list[Any], dict[Any, Any], Any]]


@pytest.fixture(params=["memory", "sqlite"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "memory":
        return f"memory://{request.node.originalname}-{uuid.uuid4().hex}"
    return f"sqlite:///{tmp_path}/state.db"


# -- the workload and its reference -------------------------------------------------------


def make_keys(n_keys: int, rng: random.Random) -> list[Any]:
    """Half ints (some negative, some large), half strs (some non-ASCII)."""
    ints = rng.sample(range(-(10**12), 10**12), n_keys // 2)
    strs = [f"user-{i}" if i % 5 else f"ключ-{i}" for i in range(n_keys - len(ints))]
    return ints + strs


def random_edits(rng: random.Random, ref: dict[Any, Any], keys: list[Any], n: int) -> list:
    """``n`` random edits of keys; applied to ``ref`` as they are drawn."""
    out: list[tuple[Any, Edit]] = []
    for _ in range(n):
        key = rng.choice(keys)
        lst, dct, _ = ref.get(key, ([], {}, None))
        r = rng.random()
        if r < 0.3:
            edit: Edit = ("append", rng.choice([rng.randint(-(10**6), 10**6), f"x{rng.random()}"]))
        elif r < 0.42 and lst:
            edit = ("pop", rng.choice([-1, rng.randrange(len(lst))]))
        elif r < 0.47:
            edit = ("clear",)
        elif r < 0.7:
            edit = ("dset", rng.choice(["a", "b", "c", "d", 1, 2, 3]), rng.randint(0, 99))
        elif r < 0.82 and dct:
            edit = ("ddel", rng.choice(sorted(dct, key=repr)))
        elif r < 0.85 and dct:
            edit = ("dclear",)
        elif r < 0.88 and key in ref:
            edit = ("drop",)
        else:
            edit = ("vset", rng.choice([None, rng.randint(0, 10**9), f"v{rng.randint(0, 99)}"]))
        apply_ref(ref, key, edit)
        out.append((key, edit))
    return out


def apply_ref(ref: dict[Any, Any], key: Any, edit: Edit) -> None:
    lst, dct, _ = ref.setdefault(key, ([], {}, None))
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


def apply_space(space: osp.ObjectSpace, key: Any, edit: Edit) -> None:
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


def reference_state(ref: dict[Any, Any]) -> State:
    return {repr(k): (list(lst), dict(dct), val) for k, (lst, dct, val) in ref.items()}


def stored_state(op: Operator, parallelism: int, keys: list[Any]) -> State:
    """Every key's state, read through new instances at ``parallelism`` (all key groups)."""
    by_repr = {repr(k): k for k in keys}
    found: dict[str, list[Any]] = {}
    for index in range(parallelism):
        inst = op.instance(index, parallelism)
        assert inst.key_groups == op.key_groups.range_of(index, parallelism)
        for kg, space in inst.spaces():
            for oid in space:
                krepr, kind = oid.rsplit("/", 1)
                # each key's objects live in the space of the key's key group
                assert op.key_groups.key_group(by_repr[krepr]) == kg, oid
                entry = found.setdefault(krepr, [None, None, None])
                obj = space.get(oid)
                if kind == "list":
                    entry[0] = list(obj)
                elif kind == "dict":
                    entry[1] = dict(obj.items())
                else:
                    assert kind == "value", oid
                    entry[2] = obj.value
    return {k: (v[0], v[1], v[2]) for k, v in found.items()}


# -- the run ------------------------------------------------------------------------------


def run_with_restarts(
    url: str,
    *,
    seed: int,
    n_keys: int,
    checkpoints: int,
    edits_per_checkpoint: int,
    restarts: dict[int, int],
    initial_parallelism: int = 4,
    max_key_groups: int = 64,
    compaction: CompactionPolicy | None = None,
    crash_before_restart: bool = True,
) -> list[tuple[int, int]]:
    """Run the workload; restart at ``restarts`` (checkpoint -> new parallelism).

    Returns the (checkpoint, parallelism) of every state check, each of which asserted
    equality with the reference.
    """
    rng = random.Random(seed)
    keys = make_keys(n_keys, rng)
    ref: dict[Any, Any] = {}
    job_name = f"job-{uuid.uuid4().hex[:10]}"
    storage = osp.open_storage(url)
    job: Job = storage.job(job_name)
    op = job.operator("state", max_key_groups=max_key_groups, compaction=compaction)
    p = initial_parallelism
    instances: list[Instance] = [op.instance(i, p) for i in range(p)]
    checks: list[tuple[int, int]] = []

    for c in range(1, checkpoints + 1):
        for key, edit in random_edits(rng, ref, keys, edits_per_checkpoint):
            inst = instances[op.key_groups.instance_of_key(key, p)]
            apply_space(inst.space_for_key(key), key, edit)
        receipts = [inst.save(c) for inst in instances]
        assert job.commit(c, receipts) is True
        for inst in instances:
            inst.on_saved()
        assert job.last_checkpoint() == c

        if c in restarts:
            if crash_before_restart and c < checkpoints:
                # the old attempt edits and saves c + 1, then dies before the commit
                for key, edit in random_edits(random.Random(c), {}, keys, 20):
                    inst = instances[op.key_groups.instance_of_key(key, p)]
                    apply_space(inst.space_for_key(key), key, ("vset", ("crashed", edit)))
                for inst in instances:
                    inst.save(c + 1)
            old_p, p = p, restarts[c]
            storage.close()
            storage = osp.open_storage(url)  # a restart: nothing survives but the storage
            job = storage.job(job_name)
            op = job.operator("state", compaction=compaction)
            assert op.max_key_groups == max_key_groups
            assert op.parallelism == old_p
            assert stored_state(op, p, keys) == reference_state(ref), (c, p)
            checks.append((c, p))
            instances = [op.instance(i, p) for i in range(p)]
            assert all(inst.base == c for inst in instances)

    final = osp.open_storage(url).job(job_name).operator("state")
    assert final.parallelism == p
    assert stored_state(final, p, keys) == reference_state(ref)
    checks.append((checkpoints, p))
    # and as of the end, at a parallelism never used in the run
    assert stored_state(final, 5, keys) == reference_state(ref)
    assert len(ref) > n_keys // 2  # the workload touched most keys
    return checks


def test_rescale(storage_url: str) -> None:
    checks = run_with_restarts(
        storage_url,
        seed=1234,
        n_keys=200,
        checkpoints=30,
        edits_per_checkpoint=120,
        restarts={5: 3, 12: 7, 20: 1, 25: 16},
    )
    assert checks == [(5, 3), (12, 7), (20, 1), (25, 16), (30, 16)]


def test_rescale_with_eager_compaction(storage_url: str) -> None:
    """Short chains: restores cross full versions written at other parallelisms."""
    checks = run_with_restarts(
        storage_url,
        seed=99,
        n_keys=80,
        checkpoints=16,
        edits_per_checkpoint=60,
        restarts={3: 2, 7: 16, 11: 5},
        max_key_groups=16,
        compaction=CompactionPolicy(max_chain_ratio=0.5, max_chain_length=2),
    )
    assert [p for _, p in checks] == [2, 16, 5, 5]


def test_rescale_sees_only_its_key_groups(storage_url: str) -> None:
    """After a restart, an instance reads the rows of its own key groups only."""
    storage = osp.open_storage(storage_url)
    job = storage.job("j")
    op = job.operator("state", max_key_groups=32)
    rng = random.Random(5)
    keys = make_keys(100, rng)
    ref: dict[Any, Any] = {}
    writers = [op.instance(i, 4) for i in range(4)]
    for key, edit in random_edits(rng, ref, keys, 400):
        apply_space(writers[op.key_groups.instance_of_key(key, 4)].space_for_key(key), key, edit)
    assert job.commit(1, [w.save(1) for w in writers])
    chains = storage.backend.chains("j", "state", range(32), 1)
    rows = {g: sum(w.rows for w in chain) for g, chain in chains.items()}
    for p in (3, 7):
        for i in range(p):
            inst = op.instance(i, p)
            inst.load_all()
            assert inst.rows_read == sum(rows.get(g, 0) for g in inst.key_groups)
            assert inst.rows_read < sum(rows.values())


# -- the same, with hypothesis drawing the parallelisms -----------------------------------


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    initial=st.integers(1, 16),
    restarts=st.dictionaries(st.integers(1, 7), st.integers(1, 16), max_size=4),
)
def test_rescale_drawn_parallelisms(
    storage_url: str, seed: int, initial: int, restarts: dict[int, int]
) -> None:
    # every example runs its own job (unique name) in the fixture's storage
    checks = run_with_restarts(
        storage_url,
        seed=seed,
        n_keys=40,
        checkpoints=8,
        edits_per_checkpoint=25,
        restarts=restarts,
        initial_parallelism=initial,
        max_key_groups=16,
        compaction=CompactionPolicy(max_chain_ratio=1.0, max_chain_length=3),
    )
    assert [c for c, _ in checks] == [*sorted(restarts), 8]
