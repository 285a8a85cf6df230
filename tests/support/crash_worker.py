"""The keyed workload of the crash tests (tests/checkpoint/test_crash.py), and a worker that crashes.

The workload is deterministic: the edits of checkpoint ``n`` of operator ``op`` are a
function of ``(seed, op, n)`` only, so a checkpoint that failed can be replayed with the
same edits and a reference (plain Python dicts) can be recomputed anywhere.

Run as a script, it is the writer that dies::

    python crash_worker.py URL SEED K STEP OCCURRENCE

runs checkpoints ``1 .. K-1`` against the storage at ``URL``, then at checkpoint ``K``
calls ``os._exit(CRASH_EXIT)`` from ``SQLiteBackend.fault_hook`` at the ``OCCURRENCE``-th
call of ``STEP`` (or, for ``STEP == "after-commit"``, right after ``job.commit`` returned,
before ``on_saved``). It exits 0 only if the crash never happened.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import objectspace
from objectspace import (
    CompactionPolicy,
    Instance,
    ObjectSpace,
    Receipt,
    SerializationError,
    Storage,
)

JOB = "crash-job"
MAX_KEY_GROUPS = 16
# Operator -> parallelism. Instances save in this order: agg 0, 1, 2, side 0, 1.
OPERATORS = {"agg": 3, "side": 2}
# "side" compacts after two differential versions, so full writes happen mid-run.
COMPACTION = {"agg": CompactionPolicy(), "side": CompactionPolicy(max_chain_length=2)}
KEYS = {"agg": [f"user-{i}" for i in range(50)], "side": [f"item-{i}" for i in range(20)]}
# Per checkpoint: how many keys are touched, and how many edits are made to them.
TOUCHED = {"agg": (20, 30), "side": (8, 12)}

AFTER_COMMIT = "after-commit"  # a failure after job.commit returned, before on_saved
SERIALIZE = "serialize"  # a value ObjectSpace.save cannot encode
CRASH_EXIT = 75  # the worker's exit status when it crashed as planned

Edit = tuple[Any, ...]
KeyState = dict[str, Any]  # {"list": [...], "dict": {...}, "value": ...}
State = dict[str, dict[str, KeyState]]  # operator -> key -> KeyState


class InjectedFault(Exception):
    """The failure a test injects."""


# -- the workload ---------------------------------------------------------------------------


def _value(rng: random.Random) -> Any:
    kind = rng.randrange(5)
    if kind == 0:
        return rng.randrange(-1000, 1000)
    if kind == 1:
        return f"s{rng.randrange(100)}"
    if kind == 2:
        return rng.randrange(1000) / 8
    if kind == 3:
        return None
    return [rng.randrange(10) for _ in range(rng.randrange(3))]


def edits(seed: int, n: int, op: str) -> list[Edit]:
    """The edits of checkpoint ``n`` of operator ``op``."""
    rng = random.Random(f"{seed}/{op}/{n}")
    touched, count = TOUCHED[op]
    keys = rng.sample(KEYS[op], touched)
    out: list[Edit] = []
    for _ in range(count):
        key = rng.choice(keys)
        r = rng.random()
        if r < 0.04:
            out.append(("drop", key))
        elif r < 0.07:
            out.append(("clear", key))
        elif r < 0.27:
            out.append(("append", key, _value(rng)))
        elif r < 0.37:
            out.append(("insert", key, rng.random(), _value(rng)))
        elif r < 0.47:
            out.append(("pop", key, rng.random()))
        elif r < 0.57:
            out.append(("set", key, rng.random(), _value(rng)))
        elif r < 0.75:
            out.append(("dset", key, f"f{rng.randrange(8)}", _value(rng)))
        elif r < 0.85:
            out.append(("ddel", key, f"f{rng.randrange(8)}"))
        else:
            out.append(("value", key, _value(rng)))
    return out


def _apply(edit: Edit, lst: Any, dct: Any, set_value: Callable[[Any], None]) -> None:
    kind = edit[0]
    if kind == "clear":
        lst.clear()
    elif kind == "append":
        lst.append(edit[2])
    elif kind == "insert":
        lst.insert(int(edit[2] * (len(lst) + 1)), edit[3])
    elif kind == "pop":
        if len(lst):
            lst.pop(int(edit[2] * len(lst)))
    elif kind == "set":
        if len(lst):
            lst[int(edit[2] * len(lst))] = edit[3]
    elif kind == "dset":
        dct[edit[2]] = edit[3]
    elif kind == "ddel":
        if edit[2] in dct:
            del dct[edit[2]]
    elif kind == "value":
        set_value(edit[2])
    else:  # pragma: no cover - a bug in edits()
        raise ValueError(f"unknown edit {edit!r}")


def apply_model(state: dict[str, KeyState], edit: Edit) -> None:
    """Apply ``edit`` to the reference: plain Python lists, dicts and values."""
    key = edit[1]
    if edit[0] == "drop":
        state.pop(key, None)
        return
    entry = state.setdefault(key, {"list": [], "dict": {}, "value": None})
    _apply(edit, entry["list"], entry["dict"], lambda v: entry.__setitem__("value", v))


def object_ids(key: str) -> tuple[str, str, str]:
    return f"{key}/list", f"{key}/dict", f"{key}/value"


def apply_space(space: ObjectSpace, edit: Edit) -> None:
    """Apply ``edit`` to the key's persisted list, dict and value in ``space``."""
    lid, did, vid = object_ids(edit[1])
    if edit[0] == "drop":
        if lid in space:
            for object_id in (lid, did, vid):
                space.delete(object_id)
        return
    if lid not in space:
        space.create_list(lid)
        space.create_dict(did)
        space.create_value(vid)
    value = space.get_value(vid)
    _apply(edit, space.get_list(lid), space.get_dict(did), lambda v: setattr(value, "value", v))


def reference(seed: int, upto: int) -> State:
    """The state after committing checkpoints ``1 .. upto`` without any failure."""
    state: State = {op: {} for op in OPERATORS}
    for n in range(1, upto + 1):
        for op in OPERATORS:
            for edit in edits(seed, n, op):
                apply_model(state[op], edit)
    return state


# -- the writer -----------------------------------------------------------------------------


class Writer:
    """Every instance of every operator of the job, restored as of the last checkpoint."""

    def __init__(self, storage: Storage, seed: int) -> None:
        self.storage = storage
        self.seed = seed
        self.job = storage.job(JOB)
        self.operators = {
            name: self.job.operator(
                name, max_key_groups=MAX_KEY_GROUPS, compaction=COMPACTION[name]
            )
            for name in OPERATORS
        }
        self.instances = {
            name: [op.instance(i, OPERATORS[name]) for i in range(OPERATORS[name])]
            for name, op in self.operators.items()
        }

    def all_instances(self) -> list[Instance]:
        return [inst for name in OPERATORS for inst in self.instances[name]]

    def owner(self, op: str, key: str) -> Instance:
        keygroups = self.operators[op].key_groups
        return self.instances[op][keygroups.instance_of_key(key, OPERATORS[op])]

    def edit(self, n: int) -> None:
        for op in OPERATORS:
            for edit in edits(self.seed, n, op):
                apply_space(self.owner(op, edit[1]).space_for_key(edit[1]), edit)

    def ghost(self, n: int) -> None:
        """Edits only a failed attempt of checkpoint ``n`` makes (new keys among them): its
        writes must never become visible, also once ``n`` is replayed without them."""
        for op in OPERATORS:
            for key in KEYS[op][::3]:
                apply_space(self.owner(op, key).space_for_key(key), ("dset", key, "ghost", n))

    def poison(self) -> None:
        """Give a key of the last instance a value that cannot be serialized."""
        last = self.instances["side"][-1]
        key = next(k for k in KEYS["side"] if self.owner("side", k) is last)
        apply_space(last.space_for_key(key), ("value", key, object()))

    def save(self, n: int, receipts: list[Receipt]) -> None:
        """Save every instance in order, appending each receipt as soon as it is returned."""
        for inst in self.all_instances():
            receipts.append(inst.save(n))

    def on_saved(self) -> None:
        for inst in self.all_instances():
            inst.on_saved()

    def checkpoint(self, n: int) -> None:
        """Edit, save, commit and acknowledge checkpoint ``n``."""
        self.edit(n)
        receipts: list[Receipt] = []
        self.save(n, receipts)
        if not self.job.commit(n, receipts):
            raise AssertionError(f"checkpoint {n} was already committed")
        self.on_saved()


def snapshot(storage: Storage, checkpoint: int | None = None) -> State:
    """The state of every key as restored by fresh instances from ``storage``, as of
    ``checkpoint`` (default: the last committed one)."""
    job = storage.job(JOB)
    state: State = {}
    for name, parallelism in OPERATORS.items():
        op = job.operator(name, max_key_groups=MAX_KEY_GROUPS)
        keys = state[name] = {}
        for index in range(parallelism):
            inst = op.instance(index, parallelism, checkpoint)
            for key_group, space in inst.spaces():
                for object_id in space:
                    key, _, part = object_id.rpartition("/")
                    if inst.key_group(key) != key_group:
                        raise AssertionError(f"{object_id!r} restored in key group {key_group}")
                    obj = space.get(object_id)
                    entry = keys.setdefault(key, {})
                    if part == "list":
                        entry[part] = list(space.get_list(object_id))
                    elif part == "dict":
                        entry[part] = dict(space.get_dict(object_id).items())
                    elif part == "value":
                        entry[part] = space.get_value(object_id).value
                    else:
                        raise AssertionError(f"unexpected object {object_id!r}: {obj!r}")
    return state


# -- failing on purpose ---------------------------------------------------------------------


class Fault:
    """A ``fault_hook`` that calls ``action`` at the ``occurrence``-th call of ``step``."""

    def __init__(self, step: str, occurrence: int, action: Callable[[], None]) -> None:
        self.step = step
        self.occurrence = occurrence
        self.action = action
        self.seen = 0
        self.fired = 0

    def __call__(self, step: str) -> None:
        if step != self.step:
            return
        self.seen += 1
        if self.seen == self.occurrence:
            self.fired += 1
            self.action()


def _raise() -> None:
    raise InjectedFault("injected")


@dataclass
class Crash:
    """What a writer that failed at checkpoint ``k`` left behind."""

    writer: Writer
    last: int  # the last checkpoint whose commit returned (0: none)
    pending: int  # writes stored as pending by saves that returned, never committed
    receipts: list[Receipt]
    error: BaseException
    fired: int


def crash_in_process(
    storage: Storage, seed: int, k: int, step: str, occurrence: int, *, ghost: bool = True
) -> Crash:
    """Run checkpoints ``1 .. k-1``, then fail checkpoint ``k`` at ``step`` with an exception.

    With ``ghost``, the failed attempt also makes edits a replay of ``k`` does not make
    (unless the failure comes after the commit, which makes the attempt's edits durable).
    """
    writer = Writer(storage, seed)
    last = 0
    for n in range(1, k):
        writer.checkpoint(n)
        last = n
    hook = Fault(step, occurrence, _raise)
    storage.backend.fault_hook = hook  # type: ignore[attr-defined]
    receipts: list[Receipt] = []
    try:
        writer.edit(k)
        if ghost and step != AFTER_COMMIT:
            writer.ghost(k)
        if step == SERIALIZE:
            writer.poison()
        writer.save(k, receipts)
        writer.job.commit(k, receipts)
        last = k
        if step == AFTER_COMMIT:
            hook.fired += 1
            _raise()
        writer.on_saved()
    except (InjectedFault, SerializationError) as exc:
        error: BaseException = exc
    else:
        raise AssertionError(f"checkpoint {k} did not fail at {step} #{occurrence}")
    finally:
        storage.backend.fault_hook = None  # type: ignore[attr-defined]
    pending = 0 if last == k else sum(len(r.writes) for r in receipts)
    fired = 1 if step == SERIALIZE else hook.fired
    return Crash(writer, last, pending, receipts, error, fired)


def _exit() -> None:
    os._exit(CRASH_EXIT)


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def gc_main(argv: list[str]) -> int:
    """``crash_worker.py gc URL STEP OCCURRENCE``: one garbage-collection pass of the segment
    storage at ``URL`` (every unreferenced file past its grace period), killed with SIGKILL
    at the ``OCCURRENCE``-th ``STEP`` of the pass."""
    url, step, occurrence = argv[2], argv[3], int(argv[4])
    storage = objectspace.open_storage(url)
    storage.backend.fault_hook = Fault(step, occurrence, _kill)  # type: ignore[attr-defined]
    storage.backend.gc(grace_seconds=0, now=time.time() + 10**9)  # type: ignore[attr-defined]
    return 0


def main(argv: list[str]) -> int:
    if argv[1] == "gc":
        return gc_main(argv)
    url, seed, k, step, occurrence = argv[1], int(argv[2]), int(argv[3]), argv[4], int(argv[5])
    storage = objectspace.open_storage(url)
    writer = Writer(storage, seed)
    for n in range(1, k):
        writer.checkpoint(n)
    storage.backend.fault_hook = Fault(step, occurrence, _exit)  # type: ignore[attr-defined]
    writer.edit(k)
    if step != AFTER_COMMIT:
        writer.ghost(k)  # as crash_in_process does
    receipts: list[Receipt] = []
    writer.save(k, receipts)
    writer.job.commit(k, receipts)
    if step == AFTER_COMMIT:
        _exit()
    writer.on_saved()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
