"""Two drivers committing one job never leave a mix of both in the store.

The loser of a checkpoint gets :class:`~objectspace.CheckpointConflictError`; a writer that
acknowledges the lost save anyway cannot commit what it built on it; a driver fenced out by
a newer one (its epoch) cannot commit at all; committing the very same receipts twice stays
an idempotent ``False``. The last tests run two real driver processes on one job.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from typing import Any

import pytest

import objectspace as osp
from objectspace.checkpoint import Instance, Job, Operator
from objectspace.storage.sql import SCHEMA_VERSION
from tests.support.packs import unpack_to_legacy
from tests.support.two_drivers_worker import expected, restore

MAX_KG = 8
KEYS = [f"key-{i}" for i in range(12)]


def _driver(url: str) -> tuple[Job, Operator]:
    """A driver of job "j": its own storage object and job object."""
    job = osp.open_storage(url).job("j")
    return job, job.operator("o", max_key_groups=MAX_KG)


def _edit(inst: Instance, tag: str) -> None:
    for key in KEYS:
        space = inst.space_for_key(key)
        items = space.get_list(key) if key in space else space.create_list(key)
        items.append(tag)


def _state(url: str, checkpoint: int | None = None) -> dict[str, list[Any]]:
    _, op = _driver(url)
    inst = op.instance(0, 1, checkpoint)
    return {
        key: list(inst.space_for_key(key).get_list(key))
        for key in KEYS
        if key in inst.space_for_key(key)
    }


def _started(url: str) -> None:
    """Checkpoint 1, committed by a setup driver: both drivers restore it."""
    job, op = _driver(url)
    inst = op.instance(0, 1)
    _edit(inst, "setup")
    assert job.commit(1, [inst.save(1)]) is True


def test_loser_of_a_checkpoint_gets_a_conflict(any_storage_url: str) -> None:
    url = any_storage_url
    _started(url)
    (job_a, op_a), (job_b, op_b) = _driver(url), _driver(url)
    a, b = op_a.instance(0, 1), op_b.instance(0, 1)
    _edit(a, "a2")
    _edit(b, "b2")
    ra, rb = a.save(2), b.save(2)
    assert job_a.commit(2, [ra]) is True
    with pytest.raises(osp.CheckpointConflictError, match=r"checkpoint 2 of job 'j'.*epoch 0"):
        job_b.commit(2, [rb])
    assert issubclass(osp.CheckpointConflictError, osp.CheckpointError)
    assert job_a.checkpoints() == [1, 2]
    assert _state(url) == {key: ["setup", "a2"] for key in KEYS}


def test_loser_that_acknowledges_anyway_cannot_commit_on_top(any_storage_url: str) -> None:
    url = any_storage_url
    _started(url)
    (job_a, op_a), (job_b, op_b) = _driver(url), _driver(url)
    a, b = op_a.instance(0, 1), op_b.instance(0, 1)
    _edit(a, "a2")
    _edit(b, "b2")
    ra, rb = a.save(2), b.save(2)
    assert job_a.commit(2, [ra]) is True
    with pytest.raises(osp.CheckpointConflictError):
        job_b.commit(2, [rb])
    b.on_saved()  # careless: as if checkpoint 2 were its own
    _edit(b, "b3")
    rb3 = b.save(3)
    # Refused by the job that saw the conflict, and by the store for any other job object.
    with pytest.raises(osp.CheckpointConflictError, match="lost checkpoint 2"):
        job_b.commit(3, [rb3])
    with pytest.raises(osp.CheckpointConflictError, match=r"key group \d+ .*made on top of"):
        _driver(url)[0].commit(3, [rb3])
    assert job_a.last_checkpoint() == 2
    assert _state(url) == {key: ["setup", "a2"] for key in KEYS}
    # The winner goes on as if nothing happened.
    a.on_saved()
    _edit(a, "a3")
    assert job_a.commit(3, [a.save(3)]) is True
    assert _state(url) == {key: ["setup", "a2", "a3"] for key in KEYS}


def test_zombie_with_an_old_epoch_is_refused(any_storage_url: str) -> None:
    url = any_storage_url
    _started(url)
    job_old, op_old = _driver(url)
    assert job_old.fence() == 1
    old = op_old.instance(0, 1)
    _edit(old, "old2")
    job_new, op_new = _driver(url)
    assert job_new.fence() == 2
    assert job_old.current_epoch() == 2
    new = op_new.instance(0, 1)
    _edit(new, "new2")
    with pytest.raises(osp.CheckpointConflictError, match=r"epoch 1.*epoch 2"):
        job_old.commit(2, [old.save(2)])
    assert job_new.commit(2, [new.save(2)]) is True
    assert _state(url) == {key: ["setup", "new2"] for key in KEYS}
    # An unfenced job object (epoch 0) cannot commit either, once the job was fenced.
    new.on_saved()
    _edit(new, "new3")
    receipt = new.save(3)
    with pytest.raises(osp.CheckpointConflictError, match=r"epoch 0.*epoch 2"):
        _driver(url)[0].commit(3, [receipt])
    assert job_new.commit(3, [receipt]) is True


def test_recommitting_the_same_receipts_is_idempotent(any_storage_url: str) -> None:
    url = any_storage_url
    _started(url)
    job, op = _driver(url)
    job.fence()
    inst = op.instance(0, 1)
    _edit(inst, "a2")
    receipt = inst.save(2)
    assert job.commit(2, [receipt]) is True
    info = job.checkpoint_info()
    assert job.commit(2, [receipt]) is False
    assert job.checkpoint_info() == info
    inst.on_saved()
    _edit(inst, "a3")
    assert job.commit(3, [inst.save(3)]) is True


def test_building_on_a_compacted_head_is_not_a_conflict(any_storage_url: str) -> None:
    """An offline compaction (and a retention dropping what it replaced) leaves the same
    state: a driver that built on the replaced write still commits."""
    url = any_storage_url
    _started(url)
    job, op = _driver(url)
    inst = op.instance(0, 1)
    for n in (2, 3):
        _edit(inst, f"a{n}")
        assert job.commit(n, [inst.save(n)]) is True
        inst.on_saved()
    admin, _ = _driver(url)
    assert admin.compact(min_chain_length=1).key_groups > 0
    assert admin.compact(min_chain_length=0).key_groups > 0  # a compaction of a compaction
    admin.retain(keep_last=1)
    _edit(inst, "a4")
    assert job.commit(4, [inst.save(4)]) is True
    assert _state(url) == {key: ["setup", "a2", "a3", "a4"] for key in KEYS}


def test_a_store_of_schema_version_1_is_migrated(tmp_path: Any) -> None:
    path = os.path.join(tmp_path, "old.db")
    url = f"sqlite:///{path}"
    _started(url)
    conn = sqlite3.connect(path)
    for table, column in (("ckpt_jobs", "epoch"), ("ckpt_checkpoints", "epoch")):
        conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    unpack_to_legacy(conn)  # one row per write, as version 1 kept them
    conn.execute("ALTER TABLE ckpt_writes DROP COLUMN parent")
    conn.execute("UPDATE ckpt_meta SET value = '1' WHERE name = 'schema_version'")
    conn.commit()
    conn.close()
    job, op = _driver(url)
    assert job.fence() == 1
    inst = op.instance(0, 1)
    _edit(inst, "a2")
    assert job.commit(2, [inst.save(2)]) is True
    assert _state(url) == {key: ["setup", "a2"] for key in KEYS}
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM ckpt_meta WHERE name = 'schema_version'").fetchone()[
        0
    ] == str(SCHEMA_VERSION)
    conn.close()


WORKER = os.path.join(
    os.path.dirname(os.path.dirname(__file__)), "support", "two_drivers_worker.py"
)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_two_driver_processes_leave_one_drivers_edits(
    kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite:///{tmp_path}/state.db"
        if kind == "sqlite"
        else str(request.getfixturevalue("postgres_url"))
    )
    checkpoints = 25
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, url, tag, str(checkpoints)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for tag in ("A", "B")
    ]
    results = []
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    last = osp.open_storage(url).job("twice").last_checkpoint()
    assert last is not None
    winners = [r for r in results if r["committed"] == list(range(1, last + 1))]
    assert len(winners) == 1, results
    assert restore(osp.open_storage(url)) == expected(winners[0]["tag"], last)
