"""Differential checkpoint time of 100 edits in a large PersistedDict.

For dict sizes 10,000 / 100,000 / 1,000,000 (int keys, float values) and for MemoryStore and
SQLiteStore: build the dict, take a FULL checkpoint (its time and bytes are reported), then
20 rounds of 100 random edits of distinct keys (80 sets of an existing or new key, 20 deletes
of an existing key) each followed by a timed ``space.checkpoint(store)``; the median round is
reported.
Target: <= 5 ms at 1,000,000 entries, and the cost must not grow with the state size: shown
by the number of Python-level calls of one checkpoint (counted with cProfile), which must be
the same at every size, next to the time growth from the smallest to the largest size.

    .venv/bin/python -m benchmarks.bench_checkpoint [--quick] [--no-record] [--profile]
"""

from __future__ import annotations

import cProfile
import os
import pstats
import random
import time
from collections.abc import Callable, Sequence

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
    time_call,
)

SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000, 10_000)
ROUNDS = 20
EDITS = 100
TARGET_SECONDS = 0.005


def build(n: int) -> tuple[osp.ObjectSpace, osp.PersistedDict]:
    space = osp.ObjectSpace()
    d = space.create_dict("d")
    rng = random.Random(n)
    for k in range(n):
        d[k] = rng.random()
    return space, d


def edit(d: osp.PersistedDict, n: int, rng: random.Random) -> None:
    """``EDITS`` edits of distinct keys: 20 % deletes of present keys, 80 % sets (keys up to
    10 % beyond ``n``, so some insert), the same mix every round and at every size."""
    deletes: set[int] = set()
    while len(deletes) < EDITS // 5:
        k = rng.randrange(n)
        if k in d:
            deletes.add(k)
    sets: set[int] = set()
    while len(sets) < EDITS - len(deletes):
        k = rng.randrange(n + n // 10)
        if k not in deletes:
            sets.add(k)
    for k in deletes:
        del d[k]
    for k in sets:
        d[k] = rng.random()


def run(n: int, make_store: Callable[[], osp.Store], rounds: int) -> dict[str, float]:
    space, d = build(n)
    store = make_store()
    full_s, full = time_call(lambda: space.checkpoint(store, osp.CheckpointKind.FULL))
    rng = random.Random(7)
    times: list[float] = []
    written: list[int] = []
    rows: list[int] = []
    perf = time.perf_counter
    for _ in range(rounds):
        edit(d, n, rng)
        start = perf()
        stats = space.checkpoint(store)
        times.append(perf() - start)
        written.append(stats.bytes_written)
        rows.append(stats.items_written + stats.items_deleted)
    # One more round under cProfile: how many Python-level calls a checkpoint makes. Equal
    # counts across sizes show the work does not depend on the state size; what remains of a
    # time difference is memory and SQLite page-cache behaviour.
    edit(d, n, rng)
    profiler = cProfile.Profile()
    profiler.enable()
    space.checkpoint(store)
    profiler.disable()
    calls = pstats.Stats(profiler).total_calls  # type: ignore[attr-defined]
    result = {
        "calls": calls,
        "full_s": full_s,
        "full_bytes": full.bytes_written,
        "diff_median": median(times),
        "diff_min": min(times),
        "diff_max": max(times),
        "diff_bytes": median(written),
        "diff_rows": median(rows),
    }
    if isinstance(store, osp.SQLiteStore):
        store.close()
        result["file"] = sqlite_size(store.path)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    sizes = QUICK_SIZES if args.quick else SIZES
    rounds = 5 if args.quick else ROUNDS
    print(f"Differential checkpoint of {EDITS} edits in a PersistedDict, median of {rounds} rounds")
    headers = [
        "store",
        "dict entries",
        "full checkpoint",
        "full bytes",
        "diff checkpoint (median)",
        "min / max",
        "diff rows",
        "diff bytes",
        "Python calls per diff checkpoint",
    ]
    rows = []
    results: dict[tuple[str, int], dict[str, float]] = {}
    with temp_dir() as tmp:
        for store_name in ("MemoryStore", "SQLiteStore"):
            for n in sizes:

                def make_store(n: int = n, store_name: str = store_name) -> osp.Store:
                    if store_name == "MemoryStore":
                        return osp.MemoryStore()
                    return osp.SQLiteStore(os.path.join(tmp, f"dict-{n}.db"))

                r = results[store_name, n] = run(n, make_store, rounds)
                row = [
                    store_name,
                    f"{n:,}",
                    fmt_ms(r["full_s"]),
                    fmt_bytes(r["full_bytes"]),
                    fmt_ms(r["diff_median"]),
                    f"{fmt_ms(r['diff_min'])} / {fmt_ms(r['diff_max'])}",
                    f"{r['diff_rows']:.0f}",
                    fmt_bytes(r["diff_bytes"]),
                    f"{r['calls']:,}",
                ]
                rows.append(row)
                print("  " + " | ".join(row))
        if args.profile:
            n = sizes[-1]
            space, d = build(n)
            store = osp.SQLiteStore(os.path.join(tmp, "profile.db"))
            space.checkpoint(store, osp.CheckpointKind.FULL)
            rng = random.Random(7)

            def diff_rounds() -> None:
                for _ in range(rounds):
                    edit(d, n, rng)
                    space.checkpoint(store)

            profile(diff_rounds, label=f"{rounds} differential rounds, SQLite, {n:,} entries")
            store.close()
    print()
    table = print_table(headers, rows)

    largest, smallest = sizes[-1], sizes[0]
    targets = []
    for store_name in ("MemoryStore", "SQLiteStore"):
        big = results[store_name, largest]["diff_median"]
        small = results[store_name, smallest]["diff_median"]
        growth = big / small
        targets.append(
            [
                f"diff checkpoint, {largest:,} entries, {store_name}",
                "<= 5 ms",
                fmt_ms(big),
                status(big <= TARGET_SECONDS),
            ]
        )
        targets.append(
            [
                f"work independent of size, {store_name}",
                "same Python calls per checkpoint at every size",
                " / ".join(f"{results[store_name, n]['calls']:,}" for n in sizes),
                status(len({results[store_name, n]["calls"] for n in sizes}) == 1),
            ]
        )
        targets.append(
            [
                f"time growth {smallest:,} -> {largest:,} entries, {store_name}",
                f"(information; {largest // smallest}x the state)",
                f"{growth:.2f}x",
                "-",
            ]
        )
    print()
    target_table = print_table(["target", "goal", "measured", "verdict"], targets)
    if args.quick:
        print("(--quick: sizes shrunk, targets not comparable)")

    if args.record:
        body = "\n\n".join(
            [
                f"A space with one `PersistedDict` (int keys, float values) of each size; a FULL "
                f"checkpoint first, then {ROUNDS} rounds of {EDITS} random edits of distinct keys (80 "
                f"sets of an existing or new key, 20 deletes of an existing key) each followed by a timed differential "
                f"`space.checkpoint(store)`. SQLite: a fresh file per size, WAL, "
                f"synchronous=NORMAL (the store's default). Diff rows and bytes: median per round. Python calls: "
                "counted by cProfile over one extra round; equal counts mean the work does not "
                "depend on the state size (the residual time growth is CPU cache and SQLite "
                "page-cache/B-tree depth). The max is one round's spike, not a trend: preemption "
                "on a shared machine, and on SQLite the WAL auto-checkpoint (every 1,000 WAL "
                "pages) that runs inside some commit.",
                table,
                target_table,
            ]
        )
        record("checkpoint", body, title="Differential checkpoint of 100 edits in a large dict")


if __name__ == "__main__":
    main()
