"""TTL expiry cost: expiring k entries of a 1,000,000-entry TTL'd dict costs O(k).

One key's ``state.dict("d", ttl="1 second")`` (``KeyState`` with an explicit processing
clock, as the runner gives it) holds 1,000,000 entries, written so that exactly 10, then
1,000, then 100,000 of them expire at three successive times; the rest live far longer.
Each step runs what the runner runs for a due key group (:func:`objectspace.operators.timing.expire`)
and checkpoints the space differentially on an ``osp.SQLiteStore``. Per step it prints
the seconds of the expiry, of the checkpoint, and the rows and bytes written: all grow
with k, not with the 1,000,000 entries (the due index is ordered by time, so finding the
expired entries pops its front; nothing scans the dict).

    .venv/bin/python -m benchmarks.bench_ttl [--quick] [--no-record]
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import objectspace as osp
from benchmarks.common import fmt_bytes, fmt_ms, parse_args, print_table, record, temp_dir
from objectspace.operators import Clock, KeyState
from objectspace.operators.timing import expire

TOTAL = 1_000_000
STEPS = (10, 1_000, 100_000)
TTL = "1 second"


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    total = 100_000 if args.quick else TOTAL
    steps = (10, 100, 1_000) if args.quick else STEPS
    print(f"TTL expiry: {total:,} entries in one TTL'd dict, expiring {', '.join(map(str, steps))}")
    space = osp.ObjectSpace()
    started = time.perf_counter()
    written = 0
    # Step i's entries are written at time i seconds, so they expire at i + 1 seconds.
    for i, k in enumerate((*steps, total - sum(steps))):
        at = i * 1000 if i < len(steps) else 10**9
        d = KeyState.for_key(space, "k", Clock("processing", batch_time=at)).dict("d", ttl=TTL)
        for j in range(written, written + k):
            d[j] = j
        written += k
    fill = time.perf_counter() - started
    rows = []
    with temp_dir() as tmp:
        store = osp.SQLiteStore(os.path.join(tmp, "ttl.db"))
        t0 = time.perf_counter()
        first = space.checkpoint(store)
        initial = time.perf_counter() - t0
        print(
            f"filled in {fmt_ms(fill)}, first (full) checkpoint {fmt_ms(initial)}: "
            f"{(first.items_written + first.items_deleted):,} rows, {fmt_bytes(first.bytes_written)}"
        )
        for i, k in enumerate(steps):
            now = (i + 1) * 1000
            t0 = time.perf_counter()
            expired = expire(space, now)
            seconds_expire = time.perf_counter() - t0
            t0 = time.perf_counter()
            stats = space.checkpoint(store)
            seconds_checkpoint = time.perf_counter() - t0
            assert expired == k, (expired, k)
            rows.append(
                [
                    f"{k:,}",
                    f"{len(space.get_dict(chr(39) + 'k' + chr(39) + '/d')):,}",
                    fmt_ms(seconds_expire),
                    f"{seconds_expire / k * 1e6:.1f}",
                    fmt_ms(seconds_checkpoint),
                    f"{stats.items_written + stats.items_deleted:,}",
                    f"{(stats.items_written + stats.items_deleted) / k:.2f}",
                    fmt_bytes(stats.bytes_written),
                ]
            )
        store.close()
    table = print_table(
        [
            "k expired",
            "entries left",
            "expire",
            "µs per entry",
            "checkpoint",
            "rows written (upserts + deletes)",
            "rows per entry",
            "bytes written",
        ],
        rows,
    )
    if args.record:
        record("ttl", table, title="TTL expiry: k entries of 1,000,000")


if __name__ == "__main__":
    main()
