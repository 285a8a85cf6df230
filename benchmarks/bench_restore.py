"""Restore throughput from SQLite: ``osp.ObjectSpace.load(store.reader())``.

Three full-checkpointed spaces in SQLite files: one dict of 1,000,000 entries (int keys,
float values); 1,000 lists of 1,000 floats; and both in one space. Each restore opens a
fresh ``SQLiteStore`` on the file and times ``ObjectSpace.load(store.reader())``, median of
3, split into the reader (``store.reader()``: the SQL fetch and grouping rows by table) and
the decode (``ObjectSpace.load`` on that reader). Throughput is entries (dict entries + list
items) per second of the whole restore. Target: >= 500,000 entries/s.

Then versioned ``sqlite:///`` storage: 1,000 keys in 128 key groups, each a dict of 1,000
entries (int keys, float values) or a list of 1,000 floats, full-checkpointed (one block per
key group) and restored with ``Instance.load_all()``. Target: >= 1,000,000 entries/s.

    .venv/bin/python -m benchmarks.bench_restore [--quick] [--no-record] [--profile]
"""

from __future__ import annotations

import gc
import os
import random
import time
from collections.abc import Sequence
from typing import Any

import objectspace as osp
from benchmarks.common import (
    fmt_bytes,
    fmt_ms,
    median,
    parse_args,
    print_table,
    profile,
    record,
    sqlite_size,
    status,
    temp_dir,
)

DICT_ENTRIES = 1_000_000
LISTS = 1_000
LIST_ITEMS = 1_000
REPEATS = 3
TARGET_RATE = 500_000


def build(dict_entries: int, lists: int, list_items: int) -> osp.ObjectSpace:
    rng = random.Random(3)
    space = osp.ObjectSpace()
    if dict_entries:
        d = space.create_dict("dict")
        for k in range(dict_entries):
            d[k] = rng.random()
    for i in range(lists):
        space.create_list(f"list/{i}").extend([rng.random() for _ in range(list_items)])
    return space


def fingerprint(space: osp.ObjectSpace) -> dict[str, tuple[int, int]]:
    """Per object: its length and a hash of its content (to check a restore cheaply)."""
    out = {}
    for object_id in space:
        obj = space.get(object_id)
        if isinstance(obj, osp.PersistedDict):
            out[object_id] = (len(obj), hash(frozenset(obj.items())))
        else:
            content = tuple(obj)  # type: ignore[call-overload]
            out[object_id] = (len(content), hash(content))
    return out


def restore_once(path: str) -> tuple[float, float, float, osp.ObjectSpace]:
    """Seconds of the reader, of the decode, and process CPU seconds, on a fresh store."""
    store = osp.SQLiteStore(path)
    gc.collect()
    perf = time.perf_counter
    cpu = time.process_time()
    start = perf()
    reader = store.reader()
    mid = perf()
    space = osp.ObjectSpace.load(reader)
    end = perf()
    cpu = time.process_time() - cpu
    store.close()
    return mid - start, end - mid, cpu, space


VERSIONED_KEYS = 1_000
VERSIONED_TARGET = 1_000_000


def build_versioned(url: str, keys: int, kind: str) -> int:
    """A full checkpoint of ``keys`` keys (128 key groups), each a dict of 1,000 int → float
    entries or a list of 1,000 floats, in versioned storage at ``url``; returns the entries."""
    rng = random.Random(3)
    storage = osp.open_storage(url)
    job = storage.job("restore")
    op = job.operator(kind, max_key_groups=128)
    inst = op.instance(0, 1)
    for key in range(keys):
        space = inst.space_for_key(key)
        if kind == "dicts":
            d = space.create_dict(f"{key}/d")
            for slot in range(LIST_ITEMS):
                d[slot] = rng.random()
        else:
            space.create_list(f"{key}/l").extend([rng.random() for _ in range(LIST_ITEMS)])
    job.commit(1, [inst.save(1)])
    storage.close()
    return keys * LIST_ITEMS


def restore_versioned(url: str, kind: str) -> tuple[float, float, int]:
    """Seconds and CPU seconds of restoring every key group at parallelism 1 from a fresh
    storage object (``Instance.load_all``: chains, blocks, decode), and the entries read."""
    storage = osp.open_storage(url)
    op = storage.job("restore").operator(kind)
    gc.collect()
    cpu = time.process_time()
    start = time.perf_counter()
    inst = op.instance(0, 1)
    inst.load_all()
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu
    entries = sum(len(space.get(oid)) for _, space in inst.spaces() for oid in space)
    storage.close()
    return seconds, cpu, entries


def versioned(args: Any, repeats: int) -> None:
    """Restore throughput of versioned ``sqlite:///`` storage (blocks)."""
    keys = VERSIONED_KEYS // (10 if args.quick else 1)
    rows = []
    with temp_dir() as tmp:
        for kind in ("dicts", "lists"):
            url = f"sqlite:///{os.path.join(tmp, kind + '.db')}"
            entries = build_versioned(url, keys, kind)
            runs = [restore_versioned(url, kind) for _ in range(repeats)]
            assert all(n == entries for _, _, n in runs), "restored state differs in size"
            seconds, cpu = median([r[0] for r in runs]), median([r[1] for r in runs])
            rate = entries / seconds
            rows.append(
                [
                    f"{keys:,} {kind} x {LIST_ITEMS:,} ({'int → float' if kind == 'dicts' else 'floats'})",
                    f"{entries:,}",
                    fmt_bytes(sqlite_size(url[len("sqlite:///") :])),
                    fmt_ms(seconds),
                    fmt_ms(cpu),
                    f"{rate:,.0f}",
                    f"{entries / cpu:,.0f}",
                    status(rate >= VERSIONED_TARGET),
                ]
            )
    table = print_table(
        [
            "state (128 key groups)",
            "entries",
            "file",
            "restore (median)",
            "process CPU",
            "entries/s",
            "entries per CPU-s",
            "target >= 1M/s",
        ],
        rows,
    )
    if args.record:
        body = "\n\n".join(
            [
                "Versioned `sqlite:///` storage: one full checkpoint (one block per key group), "
                f"restored at parallelism 1 from a fresh storage object, median of {repeats}: "
                "`Instance.load_all()` reads the chains and blocks in one SQLite snapshot, "
                "verifies and decodes the blocks and loads the spaces.",
                table,
            ]
        )
        record("restore_versioned", body, title="Restore throughput from versioned SQLite (blocks)")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    scale = 10 if args.quick else 1
    repeats = 1 if args.quick else REPEATS
    n_dict, n_lists = DICT_ENTRIES // scale, LISTS // scale
    cases = [
        (f"1 dict x {n_dict:,} entries", n_dict, 0),
        (f"{n_lists:,} lists x {LIST_ITEMS:,} floats", 0, n_lists),
        ("both in one space", n_dict, n_lists),
    ]
    print(f"Restore from SQLite, median of {repeats}")
    headers = [
        "state",
        "entries",
        "rows",
        "file",
        "full checkpoint",
        "restore (median)",
        "reader (SQL fetch)",
        "decode (load)",
        "process CPU",
        "entries/s",
        "entries per CPU-s",
        "target >= 500k/s",
    ]
    rows = []
    verdicts = []
    with temp_dir() as tmp:
        for label, n, lists in cases:
            path = os.path.join(tmp, f"restore-{n}-{lists}.db")
            original = build(n, lists, LIST_ITEMS)
            store = osp.SQLiteStore(path)
            start = time.perf_counter()
            stats = original.checkpoint(store, osp.CheckpointKind.FULL)
            full_s = time.perf_counter() - start
            store.close()
            expected = fingerprint(original)
            del original  # restore into a process that holds no other state
            entries = n + lists * LIST_ITEMS
            reads, decodes, totals, cpus = [], [], [], []
            for i in range(repeats):
                read_s, decode_s, cpu_s, restored = restore_once(path)
                if i == 0:
                    assert fingerprint(restored) == expected, "restored state differs"
                del restored
                reads.append(read_s)
                decodes.append(decode_s)
                totals.append(read_s + decode_s)
                cpus.append(cpu_s)
            total = median(totals)
            rate = entries / total
            ok = rate >= TARGET_RATE
            verdicts.append((label, rate, ok))
            row = [
                label,
                f"{entries:,}",
                f"{stats.items_written:,}",
                fmt_bytes(sqlite_size(path)),
                fmt_ms(full_s),
                fmt_ms(total),
                fmt_ms(median(reads)),
                fmt_ms(median(decodes)),
                fmt_ms(median(cpus)),
                f"{rate:,.0f}",
                f"{entries / median(cpus):,.0f}",
                status(ok),
            ]
            rows.append(row)
            print("  " + " | ".join(row))
            if args.profile and not ok:
                profile(
                    lambda path=path: osp.ObjectSpace.load(osp.SQLiteStore(path).reader()),
                    label=f"restore of {label}",
                )
    print()
    table = print_table(headers, rows)
    summary = "; ".join(
        f"{label}: {rate:,.0f} entries/s ({status(ok)})" for label, rate, ok in verdicts
    )
    print()
    print(summary)
    if args.quick:
        print("(--quick: sizes shrunk, targets not comparable)")

    if args.record:
        body = "\n\n".join(
            [
                "Full-checkpointed spaces in SQLite (int keys / float values; list items are "
                f"floats). Each of {REPEATS} restores opens a fresh `SQLiteStore` and times "
                "`osp.ObjectSpace.load(store.reader())`: *reader* is `store.reader()` (the SQL "
                "fetch of every row, grouped by table), *decode* is `ObjectSpace.load` on it. "
                "Entries: dict entries + list items (rows also count index and metadata rows). "
                "The file is in the OS page cache (it was just written). Process CPU "
                "(`time.process_time`) is shown because the machine may be shared.",
                table,
            ]
        )
        record("restore", body, title="Restore throughput from SQLite")
    print()
    versioned(args, repeats)


if __name__ == "__main__":
    main()
