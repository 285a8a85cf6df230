"""Versioned checkpoints by key group: restore of one instance, and the cost of a checkpoint.

* Restore: an operator with 128 key groups holding 1,000,000 dict entries in total (100,000
  keys x a dict of 10 entries), written at parallelism 8 and, separately, at 4. One instance
  of 8 restores its whole range (``Instance.load_all``); we report the rows it read against
  the rows stored, and the time. Restoring at 8 what was written at 4 reads the same rows:
  the storage is by key group, not by instance.
* Checkpoint: 10,000 random entries changed (1 % of 1,000,000), then every instance saves
  and the job commits; median over rounds. The same with 100,000 entries in total (10 %
  dirty) shows the cost follows what changed, not what exists.

    .venv/bin/python -m benchmarks.bench_keygroups [--quick] [--no-record]
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence

import objectspace as osp
from benchmarks.common import (
    fmt_bytes,
    fmt_ms,
    median,
    parse_args,
    print_table,
    record,
    status,
    temp_dir,
)
from benchmarks.diskbytes import Volume, volume

MAX_KG = 128
ENTRIES_PER_KEY = 10
TARGET_REL = 1 / 8 * 1.2  # an instance of 8 reads about 1/8 of the rows


def populate(op: osp.Operator, job: osp.Job, keys: int, parallelism: int) -> int:
    """One checkpoint holding ``keys`` dicts of ENTRIES_PER_KEY entries; returns rows."""
    instances = [op.instance(i, parallelism) for i in range(parallelism)]
    kg = op.key_groups
    for key in range(keys):
        inst = instances[kg.instance_of_key(key, parallelism)]
        d = inst.space_for_key(key).create_dict(f"{key}/d")
        for slot in range(ENTRIES_PER_KEY):
            d[slot] = float(key + slot)
    receipts = [inst.save(1) for inst in instances]
    job.commit(1, receipts)
    return sum(r.rows_written for r in receipts)


def restore_one(op: osp.Operator, parallelism: int) -> tuple[float, int, int]:
    """Time and rows of instance 0's restore; and the entries it holds."""
    started = time.perf_counter()
    inst = op.instance(0, parallelism)
    inst.load_all()
    seconds = time.perf_counter() - started
    entries = sum(len(space.get_dict(oid)) for _, space in inst.loaded().items() for oid in space)
    return seconds, inst.rows_read, entries


def checkpoint_rounds(
    op: osp.Operator,
    job: osp.Job,
    keys: int,
    dirty: int,
    rounds: int,
    parallelism: int,
    vol: Volume | None = None,
) -> tuple[list[float], list[int], list[int]]:
    """Times, logical bytes and bytes at the disk (``vol``'s counter, 0 without one) of
    each round."""
    rng = random.Random(5)
    instances = [op.instance(i, parallelism) for i in range(parallelism)]
    for inst in instances:
        inst.load_all()
    kg = op.key_groups
    times, sizes, disk = [], [], []
    base = job.last_checkpoint() or 0
    for r in range(rounds):
        before = vol.measure() if vol is not None else 0
        for _ in range(dirty):
            key = rng.randrange(keys)
            inst = instances[kg.instance_of_key(key, parallelism)]
            inst.space_for_key(key).get_dict(f"{key}/d")[rng.randrange(ENTRIES_PER_KEY)] = (
                rng.random()
            )
        started = time.perf_counter()
        cp = base + r + 1
        receipts = [inst.save(cp) for inst in instances]
        job.commit(cp, receipts)
        for inst in instances:
            inst.on_saved()
        times.append(time.perf_counter() - started)
        sizes.append(sum(x.bytes_written for x in receipts))
        disk.append(vol.measure() - before if vol is not None else 0)
    return times, sizes, disk


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or "", argv)
    total_keys = 10_000 if args.quick else 100_000
    rounds = 3 if args.quick else 10
    dirty = total_keys // 10 if args.quick else 10_000
    restore_rows = []
    checkpoint_rows = []
    with temp_dir() as tmp:
        for written_at in (8, 4):
            storage = osp.open_storage(f"sqlite:///{os.path.join(tmp, f'r{written_at}.db')}")
            job = storage.job("bench")
            op = job.operator("dicts", max_key_groups=MAX_KG)
            t0 = time.perf_counter()
            stored = populate(op, job, total_keys, written_at)
            build = time.perf_counter() - t0
            seconds = []
            for _ in range(3):
                s, read, entries = restore_one(op, 8)
                seconds.append(s)
            restore_rows.append(
                [
                    f"{written_at}",
                    f"{total_keys * ENTRIES_PER_KEY:,}",
                    f"{stored:,}",
                    f"{read:,}",
                    f"{read / stored:.3f}",
                    f"{entries:,}",
                    fmt_ms(median(seconds)),
                    f"{entries / median(seconds):,.0f}",
                    fmt_ms(build),
                ]
            )
            storage.close()
        for keys in (total_keys // 10, total_keys):
            with volume(label=f"keygroups-{keys}") as vol:
                storage = osp.open_storage(f"sqlite:///{os.path.join(vol.path, 'c.db')}")
                job = storage.job("bench")
                op = job.operator("dicts", max_key_groups=MAX_KG)
                populate(op, job, keys, 8)
                times, sizes, disk = checkpoint_rounds(op, job, keys, dirty, rounds, 8, vol)
                storage.close()
            method = vol.method
            checkpoint_rows.append(
                [
                    f"{keys * ENTRIES_PER_KEY:,}",
                    f"{dirty:,}",
                    fmt_ms(median(times)),
                    f"{fmt_ms(min(times))} / {fmt_ms(max(times))}",
                    fmt_bytes(median(disk)),
                    f"{median(disk) / dirty:.1f} B",
                    fmt_bytes(median(sizes)),
                    f"{median(sizes) / dirty:.1f} B",
                ]
            )
    restore_table = print_table(
        [
            "written at parallelism",
            "entries stored",
            "rows stored",
            "rows read by instance 0 of 8",
            "read / stored",
            "entries restored",
            "restore (median of 3)",
            "entries/s",
            "building the state",
        ],
        restore_rows,
    )
    checkpoint_table = print_table(
        [
            "entries in total",
            "entries changed",
            "checkpoint (save all 8 + commit), median",
            "min / max",
            "bytes at the disk (median)",
            "disk bytes per changed entry",
            "logical bytes (median)",
            "logical bytes per changed entry",
        ],
        checkpoint_rows,
    )
    fraction = float(restore_rows[0][4])
    grow = checkpoint_rows[1][2], checkpoint_rows[0][2]
    verdicts = print_table(
        ["target", "goal", "measured", "verdict"],
        [
            [
                "rows read by one instance of 8",
                "only its key groups (~1/8)",
                f"{fraction:.3f} of the rows",
                status(fraction <= TARGET_REL),
            ],
            [
                "checkpoint of 10,000 changed entries",
                "does not grow with the total",
                f"{grow[0]} at 1,000,000 vs {grow[1]} at 100,000",
                "see table",
            ],
        ],
    )
    if args.record:
        record(
            "keygroups",
            "\n\n".join(
                [
                    "Operator with 128 key groups, SQLite (`sqlite:///`), 100,000 keys x a "
                    "`PersistedDict` of 10 float entries = 1,000,000 entries, one full "
                    "checkpoint. **Restore**: instance 0 of 8 restores its 16 key groups "
                    "(`load_all`).",
                    restore_table,
                    "**Checkpoint**: 10,000 random entries changed across all keys, then the "
                    "8 instances save and the job commits (one catalog transaction); 10 "
                    f"rounds. Bytes at the disk: {method}, per round (sync before and "
                    "after; the storage file on its own loop-mounted ext4 volume).",
                    checkpoint_table,
                    verdicts,
                ]
            ),
            title="Key groups: restore one instance, checkpoint 1 % of 1,000,000 entries",
        )


if __name__ == "__main__":
    main()
