"""The instances a Python worker keeps between batches, and the instance snapshot files the
workers of a machine share.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import hmac
import logging
import os
import pickle
import stat
import tempfile
from typing import Any

from objectspace.checkpoint import Instance
from objectspace.engine import Residency
from objectspace.engine.residency import discard

__all__ = ["WORKER", "CacheKey", "InstanceCache"]

logger = logging.getLogger(__name__)


# Snapshot files: this header, the digest of the instance's identity (application, runner,
# storage, job, operator, max_key_groups, index, parallelism), an HMAC-SHA256 of everything
# else keyed with the runner's secret, the checkpoint the instance saved (8 bytes), then the
# pickled Instance.to_snapshot(). One file per identity, replaced atomically. The key is made
# on the driver and reaches the tasks only inside the task object, never on disk: a file
# whose MAC does not verify is never unpickled.
_SNAPSHOT_MAGIC = b"objectspace instance snapshot 3\n"
_DIGEST = 32
_SNAPSHOT_KEY_BYTES = 32
# A worker that ran an instance from its own memory this many batches in a row expects to run
# it again and writes no snapshot (the workers do not take turns).
_SKIP_SNAPSHOT_AFTER = 2


# -- instance snapshots shared by the Python workers of a machine ---------------------------


def _private_folder(path: str) -> bool:
    """Create ``path`` (mode 0700) if missing; whether it is a directory, not a link, owned
    by this user and closed to everyone else (the files in it are unpickled)."""
    getuid = getattr(os, "getuid", None)
    if getuid is None:
        return False
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == getuid() and not st.st_mode & 0o077


def _snapshot_mac(key: bytes, identity: bytes, body: bytes | memoryview) -> bytes:
    mac = hmac.new(key, _SNAPSHOT_MAGIC, hashlib.sha256)
    mac.update(identity)
    mac.update(body)
    return mac.digest()


def _write_snapshot(path: str, identity: bytes, checkpoint_id: int, data: Any, key: bytes) -> int:
    """Pickle ``data``, the instance that saved ``checkpoint_id``, into ``path`` atomically
    (a temporary file, then ``os.replace``), authenticated with ``key``; returns the file's
    size."""
    if len(key) < _SNAPSHOT_KEY_BYTES:
        raise ValueError("an instance snapshot needs a key of at least 32 bytes")
    body = checkpoint_id.to_bytes(8, "big", signed=True) + pickle.dumps(
        data, pickle.HIGHEST_PROTOCOL
    )
    digest = _snapshot_mac(key, identity, body)
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".snapshot", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_SNAPSHOT_MAGIC + identity + digest)
            f.write(body)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return len(_SNAPSHOT_MAGIC) + 2 * _DIGEST + len(body)


def _read_snapshot(
    path: str, identity: bytes, checkpoint_id: int, key: bytes
) -> dict[str, Any] | None:
    """The data :func:`_write_snapshot` wrote with ``key`` for ``identity`` and
    ``checkpoint_id``, or ``None`` when the file is missing, unreadable, of another identity
    or checkpoint, truncated, corrupt or not written with ``key``. Only a file whose
    HMAC verifies is unpickled."""
    if len(key) < _SNAPSHOT_KEY_BYTES:
        return None
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    head = len(_SNAPSHOT_MAGIC)
    start = head + 2 * _DIGEST
    if (
        len(blob) <= start + 8
        or blob[:head] != _SNAPSHOT_MAGIC
        or blob[head : head + _DIGEST] != identity
        or blob[start : start + 8] != checkpoint_id.to_bytes(8, "big", signed=True)
    ):
        return None
    body = memoryview(blob)[start:]
    if not hmac.compare_digest(_snapshot_mac(key, identity, body), blob[head + _DIGEST : start]):
        logger.warning(
            "instance snapshot %s does not verify (not written by this runner, or "
            "damaged): ignored, the instance is restored from storage",
            path,
        )
        return None
    payload = body[8:]
    # Unpickling creates thousands of objects: without the cyclic collector running over
    # them meanwhile it takes about half the time (none of them is garbage yet).
    collecting = gc.isenabled()
    gc.disable()
    try:
        data = pickle.loads(payload)
    except Exception:
        return None
    finally:
        if collecting:
            gc.enable()
    return data if isinstance(data, dict) else None


# -- the instances a worker keeps -------------------------------------------------------------

CacheKey = tuple[str, str, str, str, int, int]
"""(owner, storage url, job, operator, index, parallelism), the owner naming the Spark
application and the runner."""


class InstanceCache:
    """The instances one Python worker keeps between batches, and where its snapshot files go.

    ``instances``: by :data:`CacheKey`, the instance as the worker's last task of it left it
    (saved, maybe not acknowledged: the next task checks the save was committed before it
    adopts it). ``streaks``: per instance, how many batches in a row this worker ran it from
    its own memory (a worker that keeps getting an instance writes no snapshot of it).
    ``snapshot_root``: where snapshot folders go outside a Spark worker (``None``: under the
    application's SparkFiles directory in a worker, else the temporary directory);
    ``snapshot_path``, when set, the snapshot folder itself (a helper process takes its
    worker's: see :mod:`objectspace.spark.helpers`). A Spark Python worker runs many tasks: the process keeps one, :data:`WORKER`.
    """

    def __init__(self, snapshot_root: str | None = None) -> None:
        self.instances: dict[CacheKey, Instance] = {}
        self.streaks: dict[CacheKey, int] = {}
        self.snapshot_root = snapshot_root
        self.snapshot_path: str | None = None
        # With a memory budget, the instances kept over local stores instead.
        self.residency: Residency | None = None

    def take(self, key: CacheKey) -> Instance | None:
        """The kept instance of ``key``, removed from the cache (``None``: none)."""
        return self.instances.pop(key, None)

    def next_streak(self, key: CacheKey, from_memory: bool) -> int:
        """How many batches in a row this worker will have run ``key``'s instance from its
        memory once this batch is done: ``from_memory``, this batch did (one more than
        before); else 0."""
        return self.streaks.pop(key, 0) + 1 if from_memory else 0

    def keep(self, key: CacheKey, instance: Instance, streak: int) -> None:
        """Keep ``instance`` under ``key``, with its :meth:`next_streak`."""
        self.instances[key] = instance
        self.streaks[key] = streak

    def clear(self) -> None:
        """Forget every kept instance and streak (and close the local stores)."""
        for instance in self.instances.values():
            discard(instance)
        self.instances.clear()
        self.streaks.clear()
        if self.residency is not None:
            self.residency.close()
            self.residency = None

    def snapshot_folder(self) -> str | None:
        """The folder of snapshot files, or ``None`` when no private one can be had.

        In a Spark worker: under the application's SparkFiles directory, which the workers
        of an executor share and Spark deletes when the application ends. Elsewhere (a task
        run directly): under :attr:`snapshot_root` or in the temporary directory.
        """
        if self.snapshot_path is not None:
            return self.snapshot_path if _private_folder(self.snapshot_path) else None
        root = self.snapshot_root
        if root is None:
            try:
                from pyspark import SparkFiles

                if SparkFiles._is_running_on_worker:
                    root = SparkFiles._root_directory
            except Exception:  # no pyspark, or an internal that moved: use the fallback
                root = None
        if root:
            path = os.path.join(root, "objectspace-instances")
        else:
            getuid = getattr(os, "getuid", None)
            if getuid is None:
                return None
            path = os.path.join(tempfile.gettempdir(), f"objectspace-instances-{getuid()}")
        return path if _private_folder(path) else None


WORKER = InstanceCache()
"""This process's cache: the tasks a Python worker runs find it here."""
