"""How much of a local store's file a reader needs for a few key groups.

A copy of an instance's local store is its whole SQLite file, compressed in frames, with a
map of the pages each key group needs (:mod:`objectspace.checkpoint.copies`). This probe
measures what share of the file a reader of a few key groups fetches, and checks that
those pages suffice: it builds a local store of ``--keys`` floats in ``--key-groups`` key groups
(``simulate`` with a memory budget, created in ``--load-batches`` batches; ``--updates`` later batches each touch
``--touch`` of the keys and add 1% new ones, so pages get rewritten and allocated as a
running job's do), takes a backup of the file (as a copy does), and maps each key group
to the pages that hold its rows as a copy's index records them
(:func:`objectspace.checkpoint.copies._map`: SQLite's ``dbstat`` table, an in-order walk of
the ``rows`` b-tree). The *skeleton* is every page but the ``rows`` table's leaves (the
schema, the interior pages, the small tables). For k key groups it writes the skeleton and
those key groups' pages into a file of the backup's size whose other pages are zeros,
opens it with SQLite, and checks that the rows of those key groups read back equal to the
backup's. Printed: the share of the file those pages are, and the share read when
pages are fetched in frames of 1, 2, 4, 16 or 64 pages (a copy compressed frame by frame).

    .venv/bin/python -m benchmarks.bench_copy_pages [--keys N] [--key-groups G]
        [--updates U] [--touch F] [--load-batches L]
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from objectspace.checkpoint import copies
from objectspace.testing import simulate

FRAMES = (1, 2, 4, 16, 64)


def _add(key: Any, rows: list[dict[str, Any]], state: Any) -> list[Any]:
    value = state.value("v", 0.0)
    for row in rows:
        value.value += row["x"]
    return []


def build(
    folder: str, keys: int, key_groups: int, updates: int, touch: float, loads: int = 1
) -> str:
    """A local store file of ``keys`` floats after the load (in ``loads`` batches) and
    ``updates`` batches."""
    rng = random.Random(7)
    step = -(-keys // loads)
    batches = [
        [{"k": k, "x": 1.0} for k in range(start, min(start + step, keys))]
        for start in range(0, keys, step)
    ]
    total = keys
    for _ in range(updates):
        batch = [{"k": k, "x": 1.0} for k in rng.sample(range(total), int(total * touch))]
        batch += [{"k": total + i, "x": 1.0} for i in range(keys // 100)]
        total += keys // 100
        batches.append(batch)
    batches.append([{"k": 0, "x": 1.0}])  # (the last save's edits applied to the rows)
    simulate(
        _add,
        batches,
        key="k",
        order_by="x",
        storage=f"sqlite:///{folder}/state.db",
        memory_budget="64 MiB",
        local_dir=f"{folder}/local",
        max_key_groups=key_groups,
        parallelism=1,
        local_copy_every=None,
    )
    (path,) = glob.glob(f"{folder}/local/*.db")
    return path


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=250_000)
    parser.add_argument("--key-groups", type=int, default=32)
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--touch", type=float, default=0.05)
    parser.add_argument(
        "--load-batches", type=int, default=1, help="batches the keys are created in"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="copy-pages-") as folder:
        started = time.perf_counter()
        path = build(
            folder, args.keys, args.key_groups, args.updates, args.touch, args.load_batches
        )
        built = time.perf_counter() - started
        backup = os.path.join(folder, "backup.db")
        started = time.perf_counter()
        with sqlite3.connect(path) as source, sqlite3.connect(backup) as target:
            source.backup(target)
        backed = time.perf_counter() - started
        started = time.perf_counter()
        size, pages, skeleton, mapped_groups = copies._map(backup)  # what a copy records
        mapped = time.perf_counter() - started
        db = sqlite3.connect(backup)
        print(
            f"{args.keys:,} floats in {args.load_batches} batches, {args.key_groups} key "
            f"groups, {args.updates} updates of "
            f"{args.touch:.0%}: file {pages * size / 1e6:.1f} MB ({pages:,} pages of {size} B), "
            f"skeleton {len(skeleton)} pages; built in {built:.1f} s, backup {backed:.3f} s, "
            f"map {mapped:.3f} s"
        )
        print(
            "| key groups | pages needed | read in frames of "
            + " / ".join(map(str, FRAMES))
            + " pages | rows read back |"
        )
        print("|---:|---:|---|---|")
        held = sorted(mapped_groups)
        for k in sorted({1, 2, max(1, len(held) // 8), max(1, len(held) // 4), len(held)}):
            groups = held[:: max(1, len(held) // k)][:k]
            need = set(skeleton).union(*(mapped_groups[g] for g in groups))
            sparse = os.path.join(folder, "sparse.db")
            with open(backup, "rb") as whole, open(sparse, "wb") as out:
                out.truncate(pages * size)
                for p in sorted(need):
                    whole.seek((p - 1) * size)
                    out.seek((p - 1) * size)
                    out.write(whole.read(size))
            query = "SELECT k, v FROM rows WHERE g = ? ORDER BY k"
            with sqlite3.connect(sparse) as partial:
                try:
                    same = all(
                        partial.execute(query, (g,)).fetchall()
                        == db.execute(query, (g,)).fetchall()
                        for g in groups
                    )
                    partial.execute("SELECT * FROM groups").fetchall()
                    verdict = "equal" if same else "DIFFERENT"
                except sqlite3.DatabaseError as exc:
                    verdict = f"error: {exc}"
            os.unlink(sparse)
            shares = [len({(p - 1) // f for p in need}) * f / pages for f in FRAMES]
            print(
                f"| {k} | {len(need):,} ({len(need) / pages:.1%}) | "
                + " / ".join(f"{s:.1%}" for s in shares)
                + f" | {verdict} |"
            )


if __name__ == "__main__":
    main()
