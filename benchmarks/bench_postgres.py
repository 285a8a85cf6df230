"""PostgreSQL storage: differential checkpoint throughput, and commits/s under contention.

A throwaway PostgreSQL server is started on 127.0.0.1 from the machine's binaries (as the
test suite does).

* Throughput: an operator with 128 key groups and 4 instances holds 20,000 keys x a dict of
  10 entries; each round changes 50,000 random entries, then the 4 instances save (rows go
  in with ``COPY``) and the job commits (one SERIALIZABLE catalog transaction). Reported:
  dirty entries committed per second, median of the rounds.
* Contention: 8 processes, each its own job with 3 instances and 1,000 keys, commit 30
  checkpoints of 200 changed entries each as fast as they can against one catalog.
  Reported: commits/s over all of them, and serialization retries.

    .venv/bin/python -m benchmarks.bench_postgres [--quick] [--no-record]
"""

from __future__ import annotations

import multiprocessing
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import objectspace as osp
from benchmarks.common import fmt_bytes, fmt_ms, median, parse_args, print_table, record, status

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.servers import start_postgres

MAX_KG = 128
ENTRIES = 10
TARGET_RATE = 300_000


def _populate(op: osp.Operator, job: osp.Job, keys: int, p: int) -> list[osp.Instance]:
    instances = [op.instance(i, p) for i in range(p)]
    kg = op.key_groups
    for key in range(keys):
        d = instances[kg.instance_of_key(key, p)].space_for_key(key).create_dict(f"{key}/d")
        for slot in range(ENTRIES):
            d[slot] = float(slot)
    job.commit(1, [i.save(1) for i in instances])
    for inst in instances:
        inst.on_saved()
    return instances


def throughput(url: str, keys: int, dirty: int, rounds: int) -> dict[str, Any]:
    storage = osp.open_storage(url)
    job = storage.job("throughput")
    op = job.operator("dicts", max_key_groups=MAX_KG)
    p = 4
    instances = _populate(op, job, keys, p)
    kg = op.key_groups
    rng = random.Random(3)
    rates, seconds, sizes = [], [], []
    for r in range(rounds):
        changed = set()
        for _ in range(dirty):
            key = rng.randrange(keys)
            slot = rng.randrange(ENTRIES)
            changed.add((key, slot))
            space = instances[kg.instance_of_key(key, p)].space_for_key(key)
            space.get_dict(f"{key}/d")[slot] = rng.random()
        started = time.perf_counter()
        receipts = [inst.save(r + 2) for inst in instances]
        job.commit(r + 2, receipts)
        for inst in instances:
            inst.on_saved()
        elapsed = time.perf_counter() - started
        seconds.append(elapsed)
        rates.append(len(changed) / elapsed)
        sizes.append(sum(x.bytes_written for x in receipts))
    retries = storage.backend.retries  # type: ignore[attr-defined]
    storage.close()
    return {
        "rate": median(rates),
        "seconds": median(seconds),
        "bytes": median(sizes),
        "retries": retries,
    }


def _writer(args: tuple[str, int, int, int]) -> tuple[int, float, int]:
    url, seed, checkpoints, keys = args
    storage = osp.open_storage(url)
    job = storage.job(f"job-{seed}")
    op = job.operator("o", max_key_groups=16)
    p = 3
    instances = [op.instance(i, p) for i in range(p)]
    kg = op.key_groups
    rng = random.Random(seed)
    started = time.perf_counter()
    for cp in range(1, checkpoints + 1):
        for _ in range(200):
            key = rng.randrange(keys)
            space = instances[kg.instance_of_key(key, p)].space_for_key(key)
            oid = f"{key}/d"
            d = space.get_dict(oid) if oid in space else space.create_dict(oid)
            d[rng.randrange(ENTRIES)] = rng.random()
        job.commit(cp, [i.save(cp) for i in instances])
        for inst in instances:
            inst.on_saved()
    elapsed = time.perf_counter() - started
    retries = storage.backend.retries  # type: ignore[attr-defined]
    storage.close()
    return checkpoints, elapsed, retries


def contention(url: str, writers: int, checkpoints: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    started = time.perf_counter()
    with ctx.Pool(writers) as pool:
        results = pool.map(_writer, [(url, seed, checkpoints, 1000) for seed in range(writers)])
    wall = time.perf_counter() - started
    commits = sum(r[0] for r in results)
    busy = max(r[1] for r in results)
    return {
        "commits": commits,
        "commits_per_s": commits / busy,
        "wall": wall,
        "retries": sum(r[2] for r in results),
    }


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or "", argv)
    keys, dirty, rounds = (2_000, 5_000, 3) if args.quick else (20_000, 50_000, 7)
    writers, checkpoints = (4, 5) if args.quick else (8, 30)
    server = start_postgres()
    try:
        t = throughput(f"{server.url}?schema=bench_throughput", keys, dirty, rounds)
        c = contention(f"{server.url}?schema=bench_contention", writers, checkpoints)
    finally:
        server.stop()
    table1 = print_table(
        [
            "entries in total",
            "entries changed per round",
            "save 4 instances + commit (median)",
            "dirty entries committed / s",
            "bytes written per round",
            "catalog retries",
        ],
        [
            [
                f"{keys * ENTRIES:,}",
                f"{dirty:,} (distinct: fewer)",
                fmt_ms(t["seconds"]),
                f"{t['rate']:,.0f}",
                fmt_bytes(t["bytes"]),
                str(t["retries"]),
            ]
        ],
    )
    table2 = print_table(
        ["writers", "checkpoints each", "commits", "commits / s (all writers)", "retries", "wall"],
        [
            [
                str(writers),
                str(checkpoints),
                f"{c['commits']:,}",
                f"{c['commits_per_s']:.1f}",
                str(c["retries"]),
                fmt_ms(c["wall"]),
            ]
        ],
    )
    verdict = print_table(
        ["target", "goal", "measured", "verdict"],
        [
            [
                "differential checkpoint throughput",
                ">= 300,000 dirty entries/s",
                f"{t['rate']:,.0f}/s",
                status(t["rate"] >= TARGET_RATE),
            ]
        ],
    )
    if args.record:
        record(
            "postgres",
            "\n\n".join(
                [
                    "A throwaway PostgreSQL 15 on 127.0.0.1 (fsync off, as in the tests), "
                    "`postgresql://` storage with its defaults (pool of 4, SERIALIZABLE catalog "
                    "transactions with retry, rows by `COPY`). Dirty entries counts distinct "
                    "(key, slot) pairs changed in the round.",
                    table1,
                    table2,
                    verdict,
                ]
            ),
            title="PostgreSQL: checkpoint throughput and contention",
        )


if __name__ == "__main__":
    main()
