"""The seed's Buffer workload on segment files (``file://``), compaction included.

1,000 keys, each a list buffer of 100 (cleared when full), 60 checkpoints with 2 new float
events per key in between, written by 4 instances through the versioned checkpoint API to
``file://<tmp>/segments?catalog=sqlite:///<tmp>/catalog.db`` with the default compaction
policy. Reported: the total bytes of every segment file written (compaction included), the
catalog's size, wall time, and the state restored at the end against the reference.

Run with 16 and with 128 key groups: more, smaller blocks cost more per block.

    .venv/bin/python -m benchmarks.bench_segments [--quick] [--no-record]
"""

from __future__ import annotations

import os
import random
import time
import urllib.parse
from collections.abc import Sequence

import objectspace as osp
from benchmarks.common import (
    fmt_bytes,
    fmt_ms,
    median,
    parse_args,
    print_table,
    record,
    sqlite_size,
    status,
    temp_dir,
)

KEYS = 1_000
CAPACITY = 100
CHECKPOINTS = 60
EVENTS = 2
PARALLELISM = 4
TARGET_BYTES = 1_200_000


def run(folder: str, max_key_groups: int, keys: int, checkpoints: int) -> dict[str, float]:
    catalog = f"sqlite:///{folder}/catalog.db"
    url = f"file://{folder}/segments?" + urllib.parse.urlencode({"catalog": catalog})
    storage = osp.open_storage(url)
    job = storage.job("buffer")
    op = job.operator("buffer100", max_key_groups=max_key_groups)
    instances = [op.instance(i, PARALLELISM) for i in range(PARALLELISM)]
    kg = op.key_groups
    owner = [instances[kg.instance_of_key(k, PARALLELISM)] for k in range(keys)]
    rng = random.Random(11)
    reference: dict[int, list[float]] = {k: [] for k in range(keys)}
    started = time.perf_counter()
    full_writes = 0
    for cp in range(checkpoints):
        for k in range(keys):
            space = owner[k].space_for_key(k)
            oid = f"{k}/buf"
            buf = space.get_list(oid) if oid in space else space.create_list(oid)
            for _ in range(EVENTS):
                value = rng.random()
                buf.append(value)
                reference[k].append(value)
                if len(buf) == CAPACITY:
                    buf.clear()
                    reference[k].clear()
        receipts = [inst.save(cp) for inst in instances]
        job.commit(cp, receipts)
        for inst in instances:
            inst.on_saved()
            full_writes += inst.last_save.full
    seconds = time.perf_counter() - started
    backend = storage.backend
    written = backend.bytes_written  # type: ignore[attr-defined]
    files = backend.files_written  # type: ignore[attr-defined]
    # Restore everything at another parallelism and compare.
    restored: dict[int, list[float]] = {}
    for i in range(3):
        inst = op.instance(i, 3)
        for _, space in inst.spaces():
            for oid in space:
                restored[int(oid.split("/")[0])] = list(space.get_list(oid))
    exact = all(restored.get(k, []) == reference[k] for k in range(keys))
    storage.close()
    return {
        "bytes": written,
        "files": files,
        "full_writes": full_writes,
        "catalog": sqlite_size(f"{folder}/catalog.db"),
        "seconds": seconds,
        "exact": float(exact),
    }


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or "", argv)
    keys = 200 if args.quick else KEYS
    checkpoints = 20 if args.quick else CHECKPOINTS
    repeats = 1 if args.quick else 3
    rows = []
    results = {}
    for max_kg in (16, 128):
        runs = []
        for _ in range(repeats):
            with temp_dir() as tmp:
                runs.append(run(os.path.join(tmp), max_kg, keys, checkpoints))
        result = runs[0] | {"seconds": median([x["seconds"] for x in runs])}
        results[max_kg] = result
        rows.append(
            [
                str(max_kg),
                fmt_bytes(result["bytes"]),
                f"{int(result['files']):,}",
                f"{int(result['full_writes']):,}",
                fmt_bytes(result["catalog"]),
                fmt_ms(result["seconds"]),
                "yes" if result["exact"] else "NO",
            ]
        )
    payload = keys * checkpoints * EVENTS * 8
    table = print_table(
        [
            "max key groups",
            "segment bytes written (all files)",
            "segment files",
            "full writes (first + compactions)",
            "catalog (SQLite) at end",
            "wall, median",
            "restore at p=3 exact",
        ],
        rows,
    )
    verdicts = print_table(
        ["target", "goal", "measured", "verdict"],
        [
            [
                f"segment bytes, {kg} key groups",
                "<= 1.2 MB",
                fmt_bytes(results[kg]["bytes"]),
                status(results[kg]["bytes"] <= TARGET_BYTES),
            ]
            for kg in (16, 128)
        ],
    )
    print(f"raw payload: {fmt_bytes(payload)}")
    if args.record:
        record(
            "segments",
            "\n\n".join(
                [
                    f"{keys:,} keys x list buffer of {CAPACITY}, {checkpoints} checkpoints x "
                    f"{EVENTS} float events per key, {PARALLELISM} instances, default "
                    "`CompactionPolicy` (ratio 3, floor 64 KiB), one segment file per "
                    "instance and checkpoint, segment storage's default zstd levels (9 for "
                    "differential blocks, 3 for full ones). Bytes are the sizes of every "
                    "segment file written, compaction included; the catalog is reported "
                    f"apart. Raw payload: {fmt_bytes(payload)} (8-byte floats). Wall time "
                    f"is the median of {repeats} runs.",
                    table,
                    verdicts,
                ]
            ),
            title="Buffer workload on segment files (file://)",
        )


if __name__ == "__main__":
    main()
