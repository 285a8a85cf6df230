"""Resident memory of a persisted object: bytes of RSS per key in one ``ObjectSpace``.

Each case runs in a fresh subprocess and creates ``--keys`` objects in one space, with the
ids keyed state uses (``f"{key!r}/v"``): a value holding a float, a dict of 10 small
int -> int entries, a list of 100 floats. It reads VmRSS (``/proc/self/status``) before and
after, and prints bytes per key (the id strings and the space's index entries included):

* create:  after creating the objects (each is new and dirty);
* save:    after ``space.checkpoint(MemoryStore())`` (save, commit, ``on_saved``), with the
           store dropped afterwards (a fork of the process wrote its tables to a file): what
           the save leaves behind in the objects, and what fragmentation it leaves;
* restore: in another fresh subprocess, ``ObjectSpace.load`` of those tables, the RSS
           before taken with the tables already in memory;
* between uses (the value case): in a third, a space with a backing (as an instance's key
           groups with a memory budget), the keys created a tenth at a time, each tenth
           saved before the next, its values then kept as plain values
           (``Residents.compact_values``, as the next batch of an instance does) until
           their next use, and the next tenth's objects reuse the memory the last tenth's
           freed.

Freed memory is handed back to the system (``malloc_trim``) before each reading, so a
reading is what the live objects hold, with what fragmentation leaves.

By default both implementations run: the C extension, and the pure-Python classes
(``OBJECTSPACE_PURE_PYTHON=1``). The list case uses at most ``--list-keys`` keys (100
floats each; its store would not fit in memory at a million keys).

    .venv/bin/python -m benchmarks.bench_object_memory [--keys N] [--impl c|python|both]
        [--cases value,dict,list] [--list-keys N]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from benchmarks.common import print_table

CASES = ("value", "dict", "list")
DESCRIPTIONS = {
    "value": "value holding a float",
    "dict": "dict of 10 int -> int",
    "list": "list of 100 floats",
}
TARGET = 150  # bytes of RSS per resident float value


def rss() -> int:
    """VmRSS of this process in bytes, after a collection and a malloc_trim."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _create(case: str, n: int) -> Any:
    import objectspace as osp

    space = osp.ObjectSpace()
    if case == "value":
        for i in range(n):
            space.create_value(f"{i!r}/v", float(i))
    elif case == "dict":
        for i in range(n):
            d = space.create_dict(f"{i!r}/v")
            for k in range(10):
                d[k] = k + i % 7
    elif case == "list":
        for i in range(n):
            space.create_list(f"{i!r}/v").extend([float(i + k) for k in range(100)])
    else:
        raise ValueError(f"unknown case {case!r}")
    return space


def child_create(case: str, n: int, dump: str) -> dict[str, Any]:
    import objectspace as osp
    from objectspace.collections._impl import IMPLEMENTATION

    before = rss()
    space = _create(case, n)
    created = rss()
    store = osp.MemoryStore()
    space.checkpoint(store)
    _dump_in_fork(store, dump)
    del store
    saved = rss()
    assert len(space) == n
    return {
        "impl": IMPLEMENTATION,
        "create": (created - before) / n,
        "save": (saved - before) / n,
    }


class _NoBacking:
    """A backing that holds nothing (the objects' saved state does not matter here)."""

    def fetch(self, object_id: str) -> None:
        return None

    def ids(self, prefix: str = "") -> Any:
        return iter(())

    def rows(self) -> Any:
        return iter(())


def child_between(n: int) -> dict[str, Any]:
    """A value per key in a backed space (as an instance's key groups with a memory
    budget), saved, then kept between uses as plain values (``Residents.compact_values``)."""
    import objectspace as osp

    before = rss()
    space = osp.ObjectSpace(backing=_NoBacking())
    residents = space.residents
    assert residents is not None
    rounds = 10  # as batches do: each uses a tenth of the keys, then they leave memory
    for r in range(rounds):
        for i in range(r * n // rounds, (r + 1) * n // rounds):
            space.create_value(f"{i!r}/v", float(i))
        store = osp.MemoryStore()
        space.checkpoint(store)
        del store
        residents.compact_values()
    assert len(residents.compact) == n and residents.count() == 0
    return {"between": (rss() - before) / n}


def _dump_in_fork(store: Any, dump: str) -> None:
    """Pickle the store's tables to ``dump`` from a forked child, so that this process
    allocates nothing for it."""
    pid = os.fork()
    if pid == 0:  # the child
        status = 1
        try:
            with open(dump, "wb") as f:
                pickle.dump(store.dump(), f, protocol=pickle.HIGHEST_PROTOCOL)
            status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise RuntimeError("writing the store's tables failed")


def child_restore(n: int, dump: str) -> dict[str, Any]:
    import objectspace as osp
    from objectspace.tables import DictReader

    with open(dump, "rb") as f:
        reader = DictReader(pickle.load(f))
    before = rss()
    space = osp.ObjectSpace.load(reader)
    restored = rss()
    assert len(space) == n
    return {"restore": (restored - before) / n}


def _run(args: list[str], pure: bool) -> dict[str, Any]:
    env = dict(os.environ)
    if pure:
        env["OBJECTSPACE_PURE_PYTHON"] = "1"
    else:
        env.pop("OBJECTSPACE_PURE_PYTHON", None)
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_object_memory", *args],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def measure(case: str, n: int, pure: bool) -> dict[str, Any]:
    """One case in fresh subprocesses: create and save in one, restore in another."""
    with tempfile.TemporaryDirectory(prefix="osp-bench-memory-") as d:
        dump = os.path.join(d, "tables.pickle")
        result = _run(["--child", case, "--keys", str(n), "--dump", dump], pure)
        result.update(_run(["--child", "restore", "--keys", str(n), "--dump", dump], pure))
    result["between"] = None
    if case == "value":
        result.update(_run(["--child", "between", "--keys", str(n)], pure))
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000, help="objects per case")
    parser.add_argument(
        "--list-keys", type=int, default=100_000, help="at most this many keys for the list case"
    )
    parser.add_argument("--impl", choices=("c", "python", "both"), default="both")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated subset")
    parser.add_argument("--child", choices=(*CASES, "restore", "between"), help=argparse.SUPPRESS)
    parser.add_argument("--dump", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="10,000 keys")
    parser.add_argument("--no-record", action="store_true", help="(nothing is recorded anyway)")
    args = parser.parse_args(argv)
    if args.child == "restore":
        print(json.dumps(child_restore(args.keys, args.dump)))
        return
    if args.child == "between":
        print(json.dumps(child_between(args.keys)))
        return
    if args.child:
        print(json.dumps(child_create(args.child, args.keys, args.dump)))
        return
    keys = 10_000 if args.quick else args.keys
    impls = {"c": [False], "python": [True], "both": [False, True]}[args.impl]
    rows = []
    for case in args.cases.split(","):
        n = min(keys, args.list_keys) if case == "list" else keys
        for pure in impls:
            r = measure(case, n, pure)
            if not pure and r["impl"] != "c":
                sys.exit("the C extension is not built: OBJECTSPACE_PURE_PYTHON is not set")
            rows.append(
                [
                    DESCRIPTIONS[case],
                    r["impl"],
                    f"{n:,}",
                    f"{r['create']:,.0f} B",
                    f"{r['save']:,.0f} B",
                    f"{r['restore']:,.0f} B",
                    "-" if r["between"] is None else f"{r['between']:,.0f} B",
                ]
            )
            print(f"  {case} ({r['impl']}): {rows[-1][3:]}", file=sys.stderr, flush=True)
    print()
    print_table(
        [
            "object per key",
            "impl",
            "keys",
            "after create",
            "after save",
            "after restore",
            "between uses (kept as a value)",
        ],
        rows,
    )
    print(f"\nTarget: <= {TARGET} B of RSS per resident float value.")


if __name__ == "__main__":
    main()
