"""Instances kept between batches, and state larger than memory.

A process that runs instances batch after batch (a Spark Python worker, ``simulate`` with a
memory budget) keeps each instance it ran, and adopts it in the next batch when the save
it made is the one committed (:func:`adopt`). With a memory budget (:class:`Residency`),
each instance has a local store on disk (:class:`~objectspace.checkpoint.local.LocalStore`)
holding every key group's committed state by object: the spaces hold only the objects a
batch used, the others are loaded on first use, and after each batch the objects beyond
the budget are dropped from memory, the least recently used first. Another process of the
machine that gets the instance next, or this one after a restart, opens the same local
store and continues from it, reading from storage only the key groups whose committed
state it does not hold.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import stat
import tempfile
import time
from typing import TYPE_CHECKING

from objectspace.checkpoint import Instance, copies, seeds
from objectspace.checkpoint.local import LocalStore, holds_state
from objectspace.errors import StorageError
from objectspace.keygroups import KeyGroups
from objectspace.space import discard as discard_space

if TYPE_CHECKING:
    from objectspace.engine.plan import TaskPlan
    from objectspace.engine.stats import TaskStats
    from objectspace.storage.areas import FileArea

__all__ = ["Residency", "adopt", "heads_match", "instance_identity", "parse_bytes"]

_log = logging.getLogger(__name__)

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_bytes(value: int | str, what: str = "memory_budget") -> int:
    """Bytes from an int or a size such as ``"512 MiB"``, ``"1g"``, ``"64MB"`` (binary
    units: ``k`` = 1024); ``ValueError`` naming ``what`` for anything else."""
    if type(value) is int:
        if value <= 0:
            raise ValueError(f"{what} must be > 0 bytes, not {value}")
        return value
    if isinstance(value, str):
        found = _SIZE.match(value)
        if found:
            number, unit = found.groups()
            size = int(float(number) * _UNITS[unit.lower()])
            if size > 0:
                return size
    raise ValueError(
        f"{what} must be a positive number of bytes or a size like '512 MiB', not {value!r}"
    )


def heads_match(plan: TaskPlan, instance: Instance) -> dict[int, int] | None:
    """Whether, for every key group ``instance`` holds, the store's restore chain as of
    the planned base ends with the write its state ends with once its last save is
    acknowledged (:meth:`Instance.heads`): ``None`` if not, else the ids the commit
    gave the save's staged writes, by key group (``{}``: none staged).

    A staged write had no id when the instance saved it: the chain must end, at the
    saved version, with a write of the very block it staged (its xxh64 digest) whose
    parent is the head the instance held before (:meth:`Instance.is_staged_head`; the
    commit checked that parent was the committed head), so the stored state of that key
    group is the state the save captured."""
    heads = instance.heads()
    if heads.keys() != instance.loaded().keys() or plan.base is None:
        return None
    if not heads:
        return {}
    info = plan.info
    groups = range(min(heads), max(heads) + 1)
    backend = plan.storage.backend
    saved = instance.pending_save
    staged = {} if saved is None else {w.key_group: w for w in saved.writes if not w.write_id}
    if not staged:
        stored = backend.heads(info.job, info.name, groups, plan.base)
        return {} if all(stored.get(g) == head for g, head in heads.items()) else None
    found = backend.head_digests(info.job, info.name, groups, plan.base)
    ids: dict[int, int] = {}
    for key_group, head in heads.items():
        got = found.get(key_group)
        write = staged.get(key_group)
        if write is None:
            if (None if got is None else got[:2]) != head:
                return None
        elif got is None or not instance.is_staged_head(key_group, write, got):
            return None
        else:
            ids[key_group] = got[0]
    return ids


def adopt(plan: TaskPlan, instance: Instance) -> bool:
    """Acknowledge ``instance``'s last save if it is the one committed for the checkpoint
    this batch runs on (its writes, or with none, the heads of every key group it holds,
    are the store's), and say whether the instance now holds exactly that state."""
    saved = instance.pending_save
    if saved is not None and saved.checkpoint_id == plan.base:
        # The driver plans this batch on top of the checkpoint this instance saved: adopt
        # the save if its own writes are the committed ones (then its receipt was the one
        # committed for this index, so no other attempt wrote the key groups it left
        # alone). A save without writes proves nothing: check that no key group it holds
        # changed in the store. A staged save's writes got their ids in the commit.
        ids = saved.write_ids()
        if ids:
            if plan.storage.backend.writes_committed(ids):
                instance.on_saved()
        else:
            staged_ids = heads_match(plan, instance)
            if staged_ids is not None:
                instance.on_saved(staged_ids)
    return instance.base == plan.base and instance.pending_save is None


def instance_identity(plan: TaskPlan, index: int, owner: bool = False) -> bytes:
    """A digest naming instance ``index`` of ``plan``'s operator at its parallelism in its
    storage (with ``owner``: of the runner that plans it too, for what must not outlive
    it)."""
    info = plan.info
    parts: tuple[object, ...] = (
        plan.storage.url,
        info.job,
        info.name,
        info.max_key_groups,
        index,
        plan.parallelism,
    )
    if owner:
        parts = (plan.owner, *parts)
    return hashlib.sha256(repr(parts).encode("utf-8")).digest()


def _operator_digest(plan: TaskPlan) -> str:
    """The start of a local store's file name: the operator whose instances it caches."""
    info = plan.info
    parts = (plan.storage.url, info.job, info.name, info.max_key_groups)
    return hashlib.sha256(repr(parts).encode("utf-8")).hexdigest()[:24]


def _store_name(plan: TaskPlan, index: int) -> str:
    """The name of instance ``index``'s local store (and of its copies)."""
    return f"{_operator_digest(plan)}-{plan.parallelism}-{index}"


# A local store file: <operator digest>-<parallelism>-<index>.db
_STORE_FILE = re.compile(r"^(?P<operator>[0-9a-f]+)-(?P<parallelism>\d+)-(?P<index>\d+)\.db$")


def _reuse(folder: str, operator: str, plan: TaskPlan) -> int:
    """Before :func:`_sweep` deletes them: build this parallelism's local stores of
    ``operator`` in ``folder`` from those a run at another parallelism left there (the
    last such run's, by the files' times, among stores that hold state; those no process
    holds), each from the old stores that share its
    key groups (:func:`~objectspace.checkpoint.seeds.reuse`); the number built. A rescale on the same
    machines then starts from the state they kept, caught up with the writes made since,
    where it rebuilt every key group from storage (with or without copies in storage)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    found: dict[int, dict[int, str]] = {}  # parallelism -> index -> path
    newest: dict[int, float] = {}
    for name in names:
        match = _STORE_FILE.match(name)
        if match is None or match["operator"] != operator:
            continue
        parallelism, index = int(match["parallelism"]), int(match["index"])
        if parallelism == plan.parallelism or not 0 <= index < parallelism:
            continue
        path = os.path.join(folder, name)
        try:
            mtime = os.path.getmtime(path)
        except OSError:
            continue
        if not holds_state(path):
            continue  # (an empty store says nothing of which run was the last)
        found.setdefault(parallelism, {})[index] = path
        newest[parallelism] = max(newest.get(parallelism, mtime), mtime)
    if not found:
        return 0
    groups = KeyGroups(plan.info.max_key_groups)
    for parallelism in [p for p in newest if p > plan.info.max_key_groups]:
        del newest[parallelism]  # (a name no run could make: left to the sweep)
    if not newest:
        return 0
    old = max(newest, key=newest.__getitem__)
    stores = [(path, groups.range_of(index, old)) for index, path in found[old].items()]
    targets = [
        (
            os.path.join(folder, _store_name(plan, index) + ".db"),
            instance_identity(plan, index),
            groups.range_of(index, plan.parallelism),
        )
        for index in range(plan.parallelism)
    ]
    return seeds.reuse(stores, targets)


def _sweep(folder: str, operator: str, parallelism: int) -> list[str]:
    """Delete the local stores of ``operator`` in ``folder`` at another parallelism than
    ``parallelism``, and its private folders (``<store name>-<random>``), each unless a
    process holds its lock; the names deleted."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    deleted = []
    for name in names:
        head, _, rest = name.partition("-")
        if head != operator:
            continue
        p, _, tail = rest.partition("-")
        if name.endswith(".db") and p.isdigit() and int(p) != parallelism:
            path = os.path.join(folder, name)
        elif os.path.isdir(os.path.join(folder, name)) and tail.count("-") == 1:
            path = os.path.join(folder, name, "state.db")  # a private store's folder
        else:
            continue
        if LocalStore.delete_unused(path):
            if path.endswith("state.db"):
                shutil.rmtree(os.path.dirname(path), ignore_errors=True)
            deleted.append(name)
    return deleted


def _private_folder(path: str) -> bool:
    """Create ``path`` (mode 0700) if missing; whether it is a directory, not a link, owned
    by this user and closed to everyone else."""
    getuid = getattr(os, "getuid", None)
    if getuid is None:
        return False
    with contextlib.suppress(FileExistsError):
        os.makedirs(path, 0o700)
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == getuid() and not st.st_mode & 0o077


def default_local_dir() -> str:
    """Where local stores go when the runner names no folder: the first of Spark's local
    directories (``SPARK_LOCAL_DIRS``) or the temporary directory, in
    ``objectspace-local-<uid>``."""
    roots = os.environ.get("SPARK_LOCAL_DIRS", "")
    root = roots.split(",")[0].strip() or tempfile.gettempdir()
    getuid = getattr(os, "getuid", None)
    return os.path.join(root, f"objectspace-local-{getuid() if getuid else 0}")


def _headroom() -> int:
    """A third of the address space this process may still map when it runs under a limit
    (``RLIMIT_AS``, which ``spark.executor.pyspark.memory`` sets on each Python worker),
    else no bound."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit == resource.RLIM_INFINITY:
            return 1 << 62
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (ImportError, OSError, ValueError):
        return 1 << 62
    # The rest is for a batch's rows, its save's encoded edits and blocks.
    return max((limit - mapped) // 3, 1 << 20)


class Residency:
    """The instances one process keeps between batches with their local stores, and the
    memory budget their spaces share: ``budget`` bytes (an estimate of what the resident
    objects hold, :meth:`~objectspace.residents.Residents.nbytes`) for every instance the
    process keeps, so per Python worker under Spark; at most a third of what the process
    may still map when it runs under an address-space limit (a Python worker under
    ``spark.executor.pyspark.memory``). ``root``: the folder of the local stores (created
    private to this user); ``None``: :func:`default_local_dir`.
    """

    def __init__(self, budget: int, root: str | None = None) -> None:
        self.requested = budget
        self.budget = min(budget, _headroom())
        self.root = root
        self.instances: dict[tuple[str, ...], Instance] = {}
        self._private: list[str] = []
        self._swept: set[tuple[str, int]] = set()
        self._sources: dict[tuple[str, str], copies.Source] = {}

    def _folder(self, plan: TaskPlan) -> str:
        folder = self.root or plan.local_dir or default_local_dir()
        if not _private_folder(folder):
            raise PermissionError(
                f"the local store folder {folder!r} is not a private directory of this user "
                "(mode 0700, not a link): name another with local_dir="
            )
        return folder

    @staticmethod
    def _area(plan: TaskPlan) -> FileArea | None:
        """Where the instances put copies of their local stores, if they do."""
        return None if plan.copy_every is None else plan.storage.backend.file_area()

    def _open(self, plan: TaskPlan, index: int) -> LocalStore:
        """Instance ``index``'s local store, locked for this process; a private one (a new
        file, deleted on :meth:`close`) when another process holds it.

        A store is named ``<operator>-<parallelism>-<index>.db`` (``<operator>``: a digest
        of the storage, job, operator and key groups). The first time this process opens
        one of an operator at a parallelism, the stores of that operator at any other
        parallelism (left by a run before a rescale) and private folders left by ended
        processes are deleted, unless a process holds them."""
        folder = self._folder(plan)
        identity = instance_identity(plan, index)
        operator = _operator_digest(plan)
        if (operator, plan.parallelism) not in self._swept:
            self._swept.add((operator, plan.parallelism))
            _reuse(folder, operator, plan)
            _sweep(folder, operator, plan.parallelism)
        name = _store_name(plan, index)
        store = LocalStore.open(os.path.join(folder, name + ".db"), identity)
        if store is None:
            path = tempfile.mkdtemp(prefix=f"{name}-", dir=folder)
            self._private.append(path)
            store = LocalStore.open(os.path.join(path, "state.db"), identity)
            assert store is not None
        area = self._area(plan)
        if area is not None:
            # The key groups it lacks (a new machine, a wiped disk, a rescale) from the
            # copies in storage that hold them (copies.Source, asked by Instance._load_local);
            # one per store and process, keeping what it read of the copies.
            source = self._sources.get((repr(area), name))
            if source is None:
                range_of = KeyGroups(plan.info.max_key_groups).range_of
                source = self._sources[(repr(area), name)] = copies.Source(
                    area, name, store, range_of
                )
            source.local = store
            store.source = source
        return store

    def instance(self, plan: TaskPlan, index: int, stats: TaskStats) -> Instance:
        """Instance ``index`` of ``plan``: the one kept, if its state is the committed one
        the batch runs on, else one over its local store."""
        key = self._key(plan, index)
        kept = self.instances.get(key)
        store: LocalStore | None = None
        if kept is not None:
            local = kept.local
            if local is not None and local.acquire() and adopt(plan, kept):
                stats.cached = True
                # The edits just acknowledged: their plain values leave memory as values,
                # then what still exceeds the budget goes.
                compact_values(kept)
                stats.objects_evicted += self._fit(key)
                del self.instances[key]
                return kept
            del self.instances[key]
            discard(kept)  # stale: another process ran it since, or its save was lost
            if local is not None:
                if local.locked:
                    store = local
                else:
                    local.close()
        if store is None:
            store = self._open(plan, index)
        return plan.restore(index, local=store)

    def keep(self, plan: TaskPlan, index: int, instance: Instance, stats: TaskStats) -> None:
        """Keep ``instance`` after its task (or drop it, in a replay), evict what exceeds
        the budget, and let other processes use its local store until the next task."""
        started = time.perf_counter()
        key = self._key(plan, index)
        if instance.local is not None and isinstance(instance.local.source, copies.Source):
            stats.copy_bytes_read += instance.local.source.take_read()
        if plan.replay:
            if instance.local is not None:
                instance.local.close()
            discard(instance)
            return
        self.instances[key] = instance
        stats.objects_evicted += self._fit(key)
        stats.objects_resident, stats.bytes_resident = instance.resident()
        self._copy(plan, index, instance, stats)
        for kept in self.instances.values():
            if kept.local is not None:
                kept.local.release()
        stats.seconds_save += time.perf_counter() - started

    def _copy(self, plan: TaskPlan, index: int, instance: Instance, stats: TaskStats) -> None:
        """Put a copy of the instance's local store in storage's file area when the last
        is ``plan.copy_every`` checkpoints old or more (see
        :mod:`objectspace.checkpoint.copies`). A copy that cannot be put is only a slower
        cold restore later: the batch goes on."""
        local = instance.local
        area = self._area(plan)
        if local is None or area is None or plan.copy_every is None:
            return
        last = local.copied_at()
        if last is not None and plan.checkpoint_id - last < plan.copy_every:
            return
        saved = instance.pending_save
        if last is not None and saved is not None and any(w.full for w in saved.writes):
            # A save that compacts: the copy would hold that full write only as pending,
            # and a cold start after a later checkpoint would rebuild those key groups
            # from storage. The next batch's copy holds it as the head to catch up from.
            return
        try:
            stats.copy_bytes_written += copies.upload(
                local, area, _store_name(plan, index), plan.checkpoint_id
            )
        except (StorageError, OSError) as exc:
            _log.warning(
                "operator %r instance %d: no copy of its local store put in %r: %s",
                plan.info.name,
                index,
                area,
                exc,
            )

    def _fit(self, current: tuple[str, ...]) -> int:
        """Drop objects of the kept instances until the estimate of what they all hold is
        within the budget: the instances kept longest first, ``current`` (the one a task
        runs or just ran) last, each down to what the others leave of the budget. Only
        objects whose edits are acknowledged go (the rest go after the next adoption).
        Returns how many were dropped."""
        sizes = {k: i.resident()[1] for k, i in self.instances.items()}
        total = sum(sizes.values())
        if total <= self.budget:
            return 0
        dropped = 0
        for k in [*(k for k in self.instances if k != current), current]:
            instance = self.instances.get(k)
            if instance is None:
                continue
            dropped += instance.evict(max(self.budget - (total - sizes[k]), 0))
            total += instance.resident()[1] - sizes[k]
            if total <= self.budget:
                break
        return dropped

    @staticmethod
    def _key(plan: TaskPlan, index: int) -> tuple[str, ...]:
        info = plan.info
        return (
            plan.owner,
            plan.storage.url,
            info.job,
            info.name,
            str(index),
            str(plan.parallelism),
        )

    def close(self) -> None:
        """Close every local store and delete the private ones."""
        for instance in self.instances.values():
            if instance.local is not None:
                instance.local.close()
            discard(instance)
        self.instances.clear()
        for path in self._private:
            shutil.rmtree(path, ignore_errors=True)
        self._private.clear()
        self._sources.clear()


def discard(instance: Instance) -> None:
    """Drop what ``instance`` holds in memory now (:func:`objectspace.space.discard`): for
    an instance no one runs again (a stale one, a replay's). Its local store, if any, is
    the caller's to close."""
    for space in instance.loaded().values():
        discard_space(space)


def compact_values(instance: Instance) -> int:
    """Keep ``instance``'s value objects holding small plain values whose edits are
    acknowledged as those values (:meth:`~objectspace.residents.Residents.compact_values`)."""
    spaces = instance.loaded().values()
    return sum(s.residents.compact_values() for s in spaces if s.residents is not None)
