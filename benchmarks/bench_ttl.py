"""TTL expiry cost: expiring k entries of a 1,000,000-entry TTL'd collection costs O(k).

One key's TTL'd dict (``state.dict("d", ttl="1 second")``), list and queue (``KeyState``
with an explicit processing clock, as the runner gives it) each hold 1,000,000 entries,
written so that exactly 10, then 1,000, then 100,000 of them expire at three successive
times; the rest live far longer. Each step runs what the runner runs for a due key group
(:func:`objectspace.keyed.expire`) and checkpoints the space differentially on
an ``osp.SQLiteStore`` kept on its own loop-mounted volume. Per step it prints the time of
the expiry and of the checkpoint, the rows written, and the bytes that reached the disk
(sectors written to the volume, after ``sync``): all grow with k, not with the 1,000,000
entries. The due index is ordered by time, so finding the expired entries pops its front;
a list's expired elements are a prefix of it, and removing a prefix moves the list's
stored head instead of shifting its slots.

    .venv/bin/python -m benchmarks.bench_ttl [--quick] [--no-record]
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import objectspace as osp
from benchmarks.common import fmt_bytes, fmt_ms, parse_args, print_table, record
from benchmarks.diskbytes import volume
from objectspace.keyed import Clock, KeyState, expire

TOTAL = 1_000_000
STEPS = (10, 1_000, 100_000)
TTL = "1 second"
KINDS = ("dict", "list", "queue")


def _fill(kind: str, total: int, steps: Sequence[int]) -> tuple[osp.ObjectSpace, str]:
    """A space holding one key's TTL'd ``kind`` of ``total`` entries; step i's entries are
    written at i seconds, so they expire at i + 1 seconds."""
    space = osp.ObjectSpace()
    written = 0
    for i, k in enumerate((*steps, total - sum(steps))):
        at = i * 1000 if i < len(steps) else 10**9
        state = KeyState.for_key(space, "k", Clock("processing", batch_time=at))
        if kind == "dict":
            d: Any = state.dict("c", ttl=TTL)
            for j in range(written, written + k):
                d[j] = j
        elif kind == "list":
            state.list("c", ttl=TTL).extend(range(written, written + k))
        else:
            q = state.queue("c", ttl=TTL)
            for j in range(written, written + k):
                q.enqueue(j)
        written += k
    return space, "'k'/c"


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    total = 100_000 if args.quick else TOTAL
    steps = (10, 100, 1_000) if args.quick else STEPS
    print(
        f"TTL expiry: {total:,} entries in one TTL'd dict, list and queue, expiring "
        f"{', '.join(map(str, steps))}"
    )
    rows = []
    method = ""
    for kind in KINDS:
        started = time.perf_counter()
        space, object_id = _fill(kind, total, steps)
        fill = time.perf_counter() - started
        with volume(label="ttl") as vol:
            method = vol.method
            store = osp.SQLiteStore(os.path.join(vol.path, "ttl.db"))
            t0 = time.perf_counter()
            first = space.checkpoint(store)
            initial = time.perf_counter() - t0
            print(
                f"{kind}: filled in {fmt_ms(fill)}, first checkpoint {fmt_ms(initial)}: "
                f"{(first.items_written + first.items_deleted):,} rows"
            )
            for i, k in enumerate(steps):
                now = (i + 1) * 1000
                before = vol.measure()
                t0 = time.perf_counter()
                expired = expire(space, now)
                seconds_expire = time.perf_counter() - t0
                t0 = time.perf_counter()
                stats = space.checkpoint(store)
                seconds_checkpoint = time.perf_counter() - t0
                disk = vol.measure() - before
                assert expired == k, (kind, expired, k)
                n_rows = stats.items_written + stats.items_deleted
                rows.append(
                    [
                        kind,
                        f"{k:,}",
                        f"{len(space.get(object_id)):,}",
                        fmt_ms(seconds_expire),
                        f"{seconds_expire / k * 1e6:.1f}",
                        fmt_ms(seconds_checkpoint),
                        f"{n_rows:,}",
                        f"{n_rows / k:.2f}",
                        fmt_bytes(disk),
                    ]
                )
            store.close()
    table = print_table(
        [
            "collection",
            "k expired",
            "entries left",
            "expire",
            "µs per entry",
            "checkpoint",
            "rows written (upserts + deletes)",
            "rows per entry",
            "bytes to disk",
        ],
        rows,
    )
    print(f"bytes to disk: {method}, with sync before and after each step")
    if args.record:
        record("ttl", table, title="TTL expiry: k entries of 1,000,000")


if __name__ == "__main__":
    main()
