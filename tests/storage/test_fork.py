"""Storage used in a process forked after it was used (Spark's Python daemon forks its
workers): the child opens connections of its own, and never closes the parent's."""

from __future__ import annotations

import gc
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

import pytest

import objectspace as osp

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

ROUNDS = 40


def _use(storage: osp.Storage, name: str, rounds: int = ROUNDS) -> None:
    """Commit ``rounds`` checkpoints of job ``name``, checking every read sees this
    process's own results."""
    job = storage.job(name)
    op = job.operator("o", max_key_groups=4)
    inst = op.instance(0, 1)
    start = job.last_checkpoint() or 0
    for n in range(start + 1, start + rounds + 1):
        space = inst.space_for_key(name)
        value = space.get_value("v") if "v" in space else space.create_value("v", None)
        value.value = f"{name}-{n}"
        assert job.commit(n, [inst.save(n)]) is True
        inst.on_saved()
        assert job.last_checkpoint() == n, f"{name} read another process's last checkpoint"
        assert [c for c in job.checkpoints()][-1] == n
        assert (
            storage.job(name).operator("o").instance(0, 1).space_for_key(name).get_value("v").value
            == f"{name}-{n}"
        )


def _fork_and_use(storage: osp.Storage, child_work: Callable[[], None]) -> int:
    """Fork; the child runs ``child_work`` while the parent uses ``storage`` too. Returns the
    child's exit status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        status = 0
        try:
            child_work()
            storage.close()  # closes the child's own connections only
            gc.collect()
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            status = 1
        os._exit(status)

    # Both processes on one inherited socket can wait for each other for ever: fail instead.
    def timeout(signum: int, frame: Any) -> None:
        raise TimeoutError("parent and child hang on a shared connection")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(60)
    try:
        _use(storage, "parent")
        signal.alarm(0)
    except BaseException:
        os.kill(pid, signal.SIGKILL)
        raise
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _check(url: str, backend_connection: Callable[[osp.Storage], Any]) -> None:
    storage = osp.open_storage(url)
    _use(storage, "parent", 3)  # connections open before the fork
    inherited = backend_connection(storage)
    assert inherited is not None

    def child() -> None:
        _use(storage, "child")
        assert backend_connection(storage) is not inherited

    assert _fork_and_use(storage, child) == 0
    # The parent's connections were neither used nor closed by the child.
    _use(storage, "parent", 5)
    assert storage.job("child").last_checkpoint() == ROUNDS
    assert storage.job("parent").last_checkpoint() == 3 + ROUNDS + 5
    storage.close()


def test_postgresql_after_fork(postgres_url: str) -> None:
    _check(postgres_url, lambda storage: storage.backend._pool)  # type: ignore[attr-defined]


def test_sqlite_after_fork(tmp_path: Any) -> None:
    _check(f"sqlite:///{tmp_path}/state.db", lambda storage: storage.backend._conn)  # type: ignore[attr-defined]


def test_sqlite_store_after_fork(tmp_path: Any) -> None:
    store = osp.SQLiteStore(os.path.join(tmp_path, "space.db"))
    space = osp.ObjectSpace()
    space.create_value("v", "parent")
    space.checkpoint(store)
    inherited = store.connection

    def child_work() -> None:
        assert store.connection is not inherited
        child = osp.ObjectSpace.load(store.reader())
        assert child.get_value("v").value == "parent"

    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        status = 0
        try:
            child_work()
            store.close()
        except BaseException:
            traceback.print_exc()
            status = 1
        os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    space.get_value("v").value = "after"
    space.checkpoint(store)
    assert osp.ObjectSpace.load(store.reader()).get_value("v").value == "after"
