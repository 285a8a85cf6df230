"""Stacks checkpointed on SQLite: CPU per operation, rows and logical bytes written.

10,000 stacks in one space (ids ``st/<k>``), checkpointed once empty; then 20 intervals,
each pushing two values on every stack and popping one, then a differential
``space.checkpoint(store)`` on ``osp.SQLiteStore`` (a fresh file per run). Reported: CPU
per operation (the operations and the checkpoints, median of 3 runs), the rows written
and deleted, and the logical bytes (``WriteStats.bytes_written``). Prints its figures;
does not touch BENCHMARKS.md.

    .venv/bin/python -m benchmarks.bench_stack [--quick]
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import objectspace as osp
from benchmarks.common import fmt_bytes, median, parse_args, print_table, temp_dir

STACKS = 10_000
INTERVALS = 20
REPEATS = 3


def run(stacks: int, intervals: int) -> tuple[float, int, int]:
    """One run: (CPU seconds, rows written or deleted, logical bytes)."""
    with temp_dir() as folder:
        store = osp.SQLiteStore(os.path.join(folder, "stacks.db"))
        try:
            space = osp.ObjectSpace()
            objects = [space.create_stack(f"st/{k}") for k in range(stacks)]
            space.checkpoint(store)
            cpu = 0.0
            rows = written = 0
            for i in range(intervals):
                start = time.process_time()
                for stack in objects:
                    stack.push(i * 0.5)
                    stack.push(i * 0.25)
                    stack.pop()
                stats = space.checkpoint(store)
                cpu += time.process_time() - start
                rows += stats.items_written + stats.items_deleted
                written += stats.bytes_written
        finally:
            store.close()
    return cpu, rows, written


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    stacks = 1_000 if args.quick else STACKS
    runs = [run(stacks, INTERVALS) for _ in range(REPEATS)]
    ops = stacks * INTERVALS * 3
    cpu = median([r[0] for r in runs])
    print_table(
        ["stacks", "operations", "CPU us per operation (median)", "each run", "rows", "logical"],
        [
            [
                f"{stacks:,}",
                f"{ops:,}",
                f"{1e6 * cpu / ops:.2f}",
                " / ".join(f"{1e6 * r[0] / ops:.2f}" for r in runs),
                f"{runs[0][1]:,}",
                fmt_bytes(runs[0][2]),
            ]
        ],
    )


if __name__ == "__main__":
    main()
