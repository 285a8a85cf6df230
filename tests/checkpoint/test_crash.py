"""Crash anywhere: interrupt the writer at every step of save/commit, restore, and find
exactly the last committed checkpoint — nothing lost, nothing half-applied.

The workload (tests/support/crash_worker.py) is a job with two operators ("agg" at parallelism 3,
"side" at parallelism 2, 16 key groups each) holding, per key, a list, a dict and a value,
edited at random from a seed. A checkpoint N saves every instance, commits the receipts
with ``job.commit`` and acknowledges with ``on_saved``. A failure is injected at
checkpoint K:

* an exception from ``SQLiteBackend.fault_hook`` at each of ``SQLiteBackend.STEPS`` (for
  the write steps, in the first instance that writes, and in the third, after two
  instances' pending writes are stored), a value ``ObjectSpace.save`` cannot serialize,
  and an exception after ``job.commit`` returned but before ``on_saved``; for the
  ``memory://`` and ``sqlite:///`` backends;
* ``os._exit`` in a subprocess at each of those steps (and right after ``job.commit``
  returned), on SQLite.

The failed attempt also makes "ghost" edits that the replay does not make. Then the writer
is dropped, a fresh storage object restores fresh instances, and the state of every key
must equal the reference as of the last checkpoint whose commit returned; replaying from
there (same edits, no ghosts) must end where a failure-free run ends, without a trace of
the failed attempt, and retention must remove exactly the pending writes it stored.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections import Counter
from pathlib import Path

import pytest

import objectspace
from objectspace import SerializationError, Storage
from objectspace.storage.segments import SegmentBackend
from objectspace.storage.sqlite import SQLiteBackend
from tests.support.crash_worker import (
    AFTER_COMMIT,
    CRASH_EXIT,
    JOB,
    MAX_KEY_GROUPS,
    OPERATORS,
    SERIALIZE,
    InjectedFault,
    Writer,
    crash_in_process,
    reference,
    snapshot,
)
from tests.support.packs import writes

SEED = 20240517
K = 4  # the checkpoint that fails
END = 6  # the last checkpoint of every run
WORKER = Path(__file__).resolve().parents[1] / "support" / "crash_worker.py"

WRITE_STEPS = [s for s in SQLiteBackend.STEPS if s.startswith("write:")]
COMMIT_STEPS = [s for s in SQLiteBackend.STEPS if s.startswith("commit:")]
# (step, occurrence): the write steps run once per instance that has edits to write.
HOOK_FAULTS = (
    [(s, 1) for s in WRITE_STEPS] + [(s, 3) for s in WRITE_STEPS] + [(s, 1) for s in COMMIT_STEPS]
)
FAULTS = [*HOOK_FAULTS, (SERIALIZE, 1), (AFTER_COMMIT, 1)]


def fault_id(fault: tuple[str, int]) -> str:
    return f"{fault[0]}#{fault[1]}"


def test_steps_are_the_documented_ones() -> None:
    # If the backend grows a step, this file must cover it.
    assert set(WRITE_STEPS) | set(COMMIT_STEPS) == set(SQLiteBackend.STEPS)
    assert WRITE_STEPS == ["write:begin", "write:rows", "write:end"]
    assert COMMIT_STEPS == ["commit:begin", "commit:mark", "commit:end"]


# -- helpers --------------------------------------------------------------------------------


def make_url(backend: str, tmp_path: Path) -> str:
    if backend == "memory":
        return f"memory://crash-{uuid.uuid4().hex}"
    return f"sqlite:///{tmp_path / 'state.db'}"


def expected_last(k: int, step: str) -> int:
    """The last checkpoint a failure at ``step`` of checkpoint ``k`` leaves committed."""
    return k if step == AFTER_COMMIT else k - 1


def uncommitted_writes(storage: Storage) -> int:
    conn = storage.backend.connection  # type: ignore[attr-defined]
    return sum(not w.committed for w in writes(conn))


def check_catalog(storage: Storage) -> None:
    """No half-written write: every write has its block, every block has its write, and
    every retained checkpoint has exactly the committed writes of its version."""
    conn = storage.backend.connection  # type: ignore[attr-defined]
    found = writes(conn)
    blocks = {w for (w,) in conn.execute("SELECT write FROM ckpt_blocks")}
    assert blocks <= {w.id for w in found}  # no orphan block
    assert [w.id for w in found if w.segment is None and w.id not in blocks] == []
    last = conn.execute("SELECT last_checkpoint FROM ckpt_jobs WHERE name = ?", (JOB,)).fetchone()
    if last is not None and last[0] is not None:
        assert [w.id for w in found if w.committed and w.version > last[0]] == []
    counts = conn.execute("SELECT checkpoint, writes FROM ckpt_checkpoints").fetchall()
    held = Counter(w.version for w in found if w.committed)
    assert [(c, n) for c, n in counts] == [(c, held[c]) for c, _ in counts]


def verify_recovery(url: str, last: int, pending: int) -> None:
    """Restore from a fresh storage object after a crash, check it, and finish the run."""
    storage = objectspace.open_storage(url)
    job = storage.job(JOB)
    assert job.last_checkpoint() == (last or None)
    assert job.checkpoints() == list(range(1, last + 1))
    for name, parallelism in OPERATORS.items():
        op = job.operator(name, max_key_groups=MAX_KEY_GROUPS)
        assert op.parallelism == (parallelism if last else None)
    # Nothing lost, nothing half-applied: exactly the reference as of the last commit.
    assert snapshot(storage) == reference(SEED, last)
    assert uncommitted_writes(storage) == pending
    check_catalog(storage)

    # The failed attempt's pending writes are at a version after the last commit: a
    # receipt naming them could still be committed, so retention keeps them for now.
    stats = job.retain(keep_last=2)
    assert stats.pending_removed == 0
    assert uncommitted_writes(storage) == pending
    assert snapshot(storage) == reference(SEED, last)

    # Replay the failed checkpoint with the same edits, and finish the run.
    writer = Writer(storage, SEED)
    for n in range(last + 1, END + 1):
        writer.checkpoint(n)
    check_catalog(storage)
    # The failed attempt's writes (with edits the replay did not make) stay invisible.
    assert snapshot(storage) == reference(SEED, END)
    assert snapshot(storage, last + 1) == reference(SEED, last + 1)
    stats = job.retain(keep_last=2)
    assert stats.pending_removed == pending  # exactly the failed attempt's stored writes
    assert uncommitted_writes(storage) == 0
    check_catalog(storage)

    fresh = objectspace.open_storage(url)
    assert fresh.job(JOB).last_checkpoint() == END
    assert fresh.job(JOB).checkpoints() == [END - 1, END]
    assert snapshot(fresh) == reference(SEED, END)


# -- the workload itself --------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_failure_free_run_matches_reference(backend: str, tmp_path: Path) -> None:
    url = make_url(backend, tmp_path)
    writer = Writer(objectspace.open_storage(url), SEED)
    for n in range(1, END + 1):
        writer.checkpoint(n)
        assert snapshot(objectspace.open_storage(url)) == reference(SEED, n)
    info = objectspace.open_storage(url).job(JOB).checkpoint_info()
    assert [c.checkpoint_id for c in info] == list(range(1, END + 1))
    # The run exercises what a crash could break: compaction into full versions after the
    # first checkpoint, and key groups left unchanged by some checkpoints.
    assert any(c.full_writes for c in info[1:])
    assert any(c.writes < 2 * MAX_KEY_GROUPS for c in info)
    assert reference(SEED, END) != reference(SEED, END - 1)


# -- exceptions injected into the store -----------------------------------------------------


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize("k", [1, K])
@pytest.mark.parametrize("fault", FAULTS, ids=fault_id)
def test_exception_anywhere_restores_last_commit(
    backend: str, k: int, fault: tuple[str, int], tmp_path: Path
) -> None:
    step, occurrence = fault
    url = make_url(backend, tmp_path)
    crash = crash_in_process(objectspace.open_storage(url), SEED, k, step, occurrence)
    assert crash.fired == 1
    assert isinstance(crash.error, SerializationError if step == SERIALIZE else InjectedFault)
    assert crash.last == expected_last(k, step)
    if step in COMMIT_STEPS or (step in WRITE_STEPS and occurrence > 1) or step == SERIALIZE:
        assert crash.pending > 0  # pending writes of the failed attempt are in the store
    else:
        assert crash.pending == 0
    last, pending = crash.last, crash.pending
    del crash  # the task fails: its instances are gone
    verify_recovery(url, last, pending)


@pytest.mark.parametrize("fault", [f for f in FAULTS if f[0] != SERIALIZE], ids=fault_id)
def test_exception_then_retry_with_the_same_instances(fault: tuple[str, int]) -> None:
    """The writer survives the failure and retries checkpoint K from the same instances:
    edits of a save that was never committed are written again by the next save."""
    step, occurrence = fault
    url = make_url("memory", Path())
    crash = crash_in_process(objectspace.open_storage(url), SEED, K, step, occurrence, ghost=False)
    writer = crash.writer
    assert crash.fired == 1
    if crash.last < K:
        receipts: list[objectspace.Receipt] = []
        writer.save(K, receipts)
        assert writer.job.commit(K, receipts) is True
    writer.on_saved()
    assert snapshot(objectspace.open_storage(url)) == reference(SEED, K)
    for n in range(K + 1, END + 1):
        writer.checkpoint(n)
    assert snapshot(objectspace.open_storage(url)) == reference(SEED, END)
    stats = writer.job.retain(keep_last=2)
    assert stats.pending_removed == crash.pending
    assert uncommitted_writes(writer.storage) == 0


def test_commit_failure_leaves_receipts_committable() -> None:
    """A commit that failed inside its transaction changed nothing: the same receipts
    commit afterwards, exactly once."""
    url = make_url("memory", Path())
    crash = crash_in_process(objectspace.open_storage(url), SEED, K, "commit:end", 1, ghost=False)
    job = crash.writer.job
    assert job.last_checkpoint() == K - 1
    assert job.commit(K, crash.receipts) is True
    assert job.commit(K, crash.receipts) is False  # committing twice is a no-op
    crash.writer.on_saved()
    assert job.last_checkpoint() == K
    assert snapshot(objectspace.open_storage(url)) == reference(SEED, K)
    assert uncommitted_writes(crash.writer.storage) == 0


# -- os._exit in a subprocess ---------------------------------------------------------------


@pytest.mark.parametrize("fault", [*HOOK_FAULTS, (AFTER_COMMIT, 1)], ids=fault_id)
def test_process_exit_anywhere_restores_last_commit(fault: tuple[str, int], tmp_path: Path) -> None:
    step, occurrence = fault
    url = make_url("sqlite", tmp_path)
    result = subprocess.run(
        [sys.executable, str(WORKER), url, str(SEED), str(K), step, str(occurrence)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == CRASH_EXIT, result.stderr
    # What the dead writer had committed and stored, recomputed in-process from the seed.
    expected = crash_in_process(
        objectspace.open_storage(make_url("memory", tmp_path)), SEED, K, step, occurrence
    )
    assert expected.last == expected_last(K, step)
    verify_recovery(url, expected.last, expected.pending)


# -- garbage collection killed between forgetting a segment and deleting its file -----------


def test_gc_killed_between_forget_and_delete_leaves_nothing_behind(tmp_path: Path) -> None:
    """SIGKILL after the GC forgot a segment and before it deleted the file: the next pass
    deletes the file (nothing the catalog forgot stays on disk for good)."""
    root = tmp_path / "segments"
    url = f"file://{root}?catalog=" + urllib.parse.quote(f"sqlite:///{tmp_path / 'catalog.db'}")
    storage = objectspace.open_storage(url)
    writer = Writer(storage, SEED)
    for n in range(1, END + 1):
        writer.checkpoint(n)
    writer.job.compact()
    writer.job.retain(keep_last=1)  # every file written before the compaction is garbage
    backend = storage.backend
    assert isinstance(backend, SegmentBackend)
    assert backend.gc(grace_seconds=600).stamped > 2
    expected = snapshot(storage)
    storage.close()

    def on_disk() -> set[str]:
        return {str(p) for p in root.rglob("*.seg")}

    before = on_disk()
    result = subprocess.run(
        [sys.executable, str(WORKER), "gc", url, "gc:forgotten", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr
    storage = objectspace.open_storage(url)
    backend = storage.backend
    assert isinstance(backend, SegmentBackend)
    known = {p for p, _, _ in backend.segments()}
    forgotten = before - known
    assert len(forgotten) > 2  # one transaction forgot every collectable file
    left = forgotten & on_disk()
    assert len(left) == len(forgotten) - 1  # and the pass died before deleting the second
    stats = backend.gc(grace_seconds=0, now=time.time() + 10**9)
    assert left <= set(stats.deleted)
    assert on_disk() == backend.referenced_segments()
    assert snapshot(storage) == expected
    storage.close()
