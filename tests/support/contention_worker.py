"""Processes of the contention test (tests/checkpoint/test_contention.py).

``python contention_worker.py writer URL SEED CHECKPOINTS`` runs job ``job-SEED``: an
operator with ``MAX_KEY_GROUPS`` key groups and ``PARALLELISM`` instances, committing
``CHECKPOINTS`` checkpoints as fast as it can (halfway it restarts at ``RESCALED``
instances, restoring from the storage, and checks what it restored). The edits of
checkpoint ``n`` are a function of ``(seed, n)`` only: :func:`reference` recomputes the
state anywhere.

``python contention_worker.py maintainer URL`` loops over every job: ``job.compact()``,
``job.retain(keep_last=2)``, then one ``gc(grace_seconds=0.5)`` of segment storage.

Both print ``ready``, wait for a line on stdin (the start signal; the maintainer then runs
until its stdin closes), and print one JSON report as their last line.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from typing import Any

import objectspace as osp

MAX_KEY_GROUPS = 16
PARALLELISM = 3
RESCALED = 2
KEYS = [f"key-{i}" for i in range(40)]
TOUCHED = 10
SAVE_ATTEMPTS = 5

Edit = tuple[str, str, int]  # (action, key, argument)
State = dict[str, Any]  # object id -> value, or list for "l:" objects


def edits(seed: int, checkpoint: int) -> list[Edit]:
    rng = random.Random(f"{seed}/{checkpoint}")
    out: list[Edit] = []
    for n in range(TOUCHED):
        key = rng.choice(KEYS)
        r = rng.random()
        action = "set" if r < 0.45 else "append" if r < 0.9 else "delete"
        out.append((action, key, checkpoint * 100 + n))
    return out


def apply_to_state(state: State, batch: list[Edit]) -> None:
    for action, key, arg in batch:
        if action == "set":
            state[f"v:{key}"] = arg
        elif action == "append":
            state[f"l:{key}"] = [*state.get(f"l:{key}", []), arg]
        else:
            state.pop(f"v:{key}", None)
            state.pop(f"l:{key}", None)


def reference(seed: int, upto: int) -> State:
    """The state after checkpoints ``1 .. upto``."""
    state: State = {}
    for cp in range(1, upto + 1):
        apply_to_state(state, edits(seed, cp))
    return state


def apply_to_instances(op: osp.Operator, instances: list[osp.Instance], batch: list[Edit]) -> None:
    parallelism = len(instances)
    for action, key, arg in batch:
        space = instances[op.key_groups.instance_of_key(key, parallelism)].space_for_key(key)
        vid, lid = f"v:{key}", f"l:{key}"
        if action == "set":
            if vid in space:
                space.get_value(vid).value = arg
            else:
                space.create_value(vid, arg)
        elif action == "append":
            (space.get_list(lid) if lid in space else space.create_list(lid)).append(arg)
        else:
            for oid in (vid, lid):
                if oid in space:
                    space.delete(oid)


def restore(op: osp.Operator, parallelism: int, checkpoint: int | None = None) -> State:
    """Every object of ``op`` restored through ``parallelism`` fresh instances."""
    state: State = {}
    for index in range(parallelism):
        inst = op.instance(index, parallelism, checkpoint)
        for _, space in inst.spaces():
            for oid in space:
                obj = space.get(oid)
                state[oid] = list(obj) if isinstance(obj, osp.PersistedList) else obj.value  # type: ignore[attr-defined]
    return state


def catalog_of(backend: Any) -> Any:
    return getattr(backend, "catalog", backend)


def _wait_for_start() -> None:
    print("ready", flush=True)
    sys.stdin.readline()


def writer(url: str, seed: int, checkpoints: int) -> dict[str, Any]:
    storage = osp.open_storage(url)
    job = storage.job(f"job-{seed}")
    op = job.operator("op", max_key_groups=MAX_KEY_GROUPS)
    instances = [op.instance(i, PARALLELISM) for i in range(PARALLELISM)]
    report: dict[str, Any] = {
        "job": job.name,
        "committed": [],
        "save_retries": 0,
        "commit_retries": 0,
        "errors": [],
        "mismatch": None,
    }
    _wait_for_start()
    started = time.time()
    for cp in range(1, checkpoints + 1):
        if cp == checkpoints // 2 + 1:
            # restart at another parallelism, restoring under concurrent compaction and GC
            instances = [op.instance(i, RESCALED) for i in range(RESCALED)]
            for inst in instances:
                inst.load_all()
            restored = restore(op, RESCALED, cp - 1)
            if restored != reference(seed, cp - 1):
                report["mismatch"] = f"restore as of {cp - 1} differs from the reference"
        apply_to_instances(op, instances, edits(seed, cp))
        receipts = []
        for inst in instances:
            for attempt in range(SAVE_ATTEMPTS):
                try:
                    receipts.append(inst.save(cp))
                    break
                except osp.StorageError as exc:
                    report["save_retries"] += 1
                    report["errors"].append(f"save {cp}: {exc}")
                    if attempt == SAVE_ATTEMPTS - 1:
                        raise
        for attempt in range(SAVE_ATTEMPTS):
            try:
                job.commit(cp, receipts)
                break
            except osp.StorageError as exc:
                report["commit_retries"] += 1
                report["errors"].append(f"commit {cp}: {exc}")
                if attempt == SAVE_ATTEMPTS - 1:
                    raise
        for inst in instances:
            inst.on_saved()
        report["committed"].append(cp)
    catalog = catalog_of(storage.backend)
    report.update(
        started=started,
        finished=time.time(),
        retries=catalog.retries,
        transactions=catalog.transactions,
    )
    storage.close()
    return report


def maintainer(url: str) -> dict[str, Any]:
    storage = osp.open_storage(url)
    backend: Any = storage.backend
    gc = getattr(backend, "gc", None)
    report: dict[str, Any] = {
        "passes": 0,
        "compacted": 0,
        "retained_writes": 0,
        "stamped": 0,
        "deleted": 0,
        "errors": [],
    }
    _wait_for_start()
    stop = threading.Event()

    def watch() -> None:
        sys.stdin.read()  # returns when the test closes our stdin
        stop.set()

    threading.Thread(target=watch, daemon=True).start()
    # At least two passes, the second one's start after the first one's end, whatever the
    # machine's pace: a slow first pass may outlast every writer.
    while not stop.is_set() or report["passes"] < 2:
        for name in storage.jobs():
            job = storage.job(name)
            try:
                report["compacted"] += job.compact().key_groups
                report["retained_writes"] += job.retain(keep_last=2).writes_removed
            except osp.ObjectSpaceError as exc:
                report["errors"].append(f"{name}: {type(exc).__name__}: {exc}")
        if gc is not None:
            try:
                stats = gc(grace_seconds=0.5)
                report["stamped"] += stats.stamped
                report["deleted"] += len(stats.deleted)
            except osp.ObjectSpaceError as exc:
                report["errors"].append(f"gc: {type(exc).__name__}: {exc}")
        report["passes"] += 1
        time.sleep(0.02)
    catalog = catalog_of(backend)
    report.update(retries=catalog.retries, transactions=catalog.transactions)
    storage.close()
    return report


def main(argv: list[str]) -> int:
    role, url = argv[1], argv[2]
    if role == "writer":
        report = writer(url, int(argv[3]), int(argv[4]))
    elif role == "maintainer":
        report = maintainer(url)
    else:
        raise SystemExit(f"unknown role {role!r}")
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
