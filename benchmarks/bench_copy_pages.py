"""How much of a local store's file a reader needs for a few key groups (a design probe).

A copy of an instance's local store is its whole SQLite file. A cold process that touches a
few key groups reads all of it. This probe measures whether the pages of a few key groups
suffice instead: it builds a local store of ``--keys`` floats in ``--key-groups`` key groups
(``simulate`` with a memory budget; ``--updates`` later batches each touch
``--touch`` of the keys and add 1% new ones, so pages get rewritten and allocated as a
running job's do), takes a backup of the file (as a copy does), and maps each key group
to the pages that hold its rows with SQLite's ``dbstat`` table (the ``rows`` table is a
WITHOUT ROWID b-tree keyed by key group first: walking it in order, interior cells
between children, gives each leaf page's range of rows). The *skeleton* is every page but
the ``rows`` table's leaves (the schema, the interior pages, the small tables). For k key
groups it writes the skeleton and those key groups' leaf pages (and the leaf after each
range, where a range scan stops) into a file of the backup's size whose other pages are
zeros, opens it with SQLite, and checks that the rows of those key groups read back equal
to the backup's. Printed: the share of the file those pages are, and the share read when
pages are fetched in frames of 1, 4, 16 or 64 pages (a copy compressed frame by frame).

    .venv/bin/python -m benchmarks.bench_copy_pages [--keys N] [--key-groups G]
        [--updates U] [--touch F]
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

from objectspace.testing import simulate

FRAMES = (1, 4, 16, 64)


def _add(key: Any, rows: list[dict[str, Any]], state: Any) -> list[Any]:
    value = state.value("v", 0.0)
    for row in rows:
        value.value += row["x"]
    return []


def build(folder: str, keys: int, key_groups: int, updates: int, touch: float) -> str:
    """A local store file of ``keys`` floats after the load and ``updates`` batches."""
    rng = random.Random(7)
    batches = [[{"k": k, "x": 1.0} for k in range(keys)]]
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


def leaf_ranges(db: sqlite3.Connection) -> tuple[list[tuple[int, int, int]], int]:
    """``(first row, stop, page)`` of each leaf page of ``rows``, in key order, and the
    rows counted (leaf and interior cells)."""
    info = {
        path: (pageno, kind, ncell)
        for path, pageno, kind, ncell in db.execute(
            "SELECT path, pageno, pagetype, ncell FROM dbstat WHERE name = 'rows' "
            "AND pagetype IN ('leaf', 'internal')"
        )
    }
    found: list[tuple[int, int, int]] = []
    at = 0
    stack: list[tuple[str, int]] = [("/", 0)]
    while stack:  # an in-order walk: child 0, cell 0, child 1, ... (an index b-tree)
        path, child = stack.pop()
        pageno, kind, ncell = info[path]
        if kind == "leaf":
            found.append((at, at + ncell, pageno))
            at += ncell
            continue
        if child > 0 and child <= ncell:
            at += 1  # the interior cell between children child - 1 and child
        below = f"{path}{child:03x}/"
        if below in info:
            stack.append((path, child + 1))
            stack.append((below, 0))
    return found, at


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=250_000)
    parser.add_argument("--key-groups", type=int, default=32)
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--touch", type=float, default=0.05)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="copy-pages-") as folder:
        started = time.perf_counter()
        path = build(folder, args.keys, args.key_groups, args.updates, args.touch)
        built = time.perf_counter() - started
        backup = os.path.join(folder, "backup.db")
        started = time.perf_counter()
        with sqlite3.connect(path) as source, sqlite3.connect(backup) as target:
            source.backup(target)
        backed = time.perf_counter() - started
        db = sqlite3.connect(backup)
        size = db.execute("PRAGMA page_size").fetchone()[0]
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        started = time.perf_counter()
        counts = db.execute("SELECT g, count(*) FROM rows GROUP BY g ORDER BY g").fetchall()
        leaves, walked = leaf_ranges(db)
        skeleton = {1} | {
            p
            for (p,) in db.execute(
                "SELECT pageno FROM dbstat WHERE NOT (name = 'rows' AND pagetype = 'leaf')"
            )
        }
        mapped = time.perf_counter() - started
        bounds, at = {}, 0
        for g, n in counts:
            bounds[g], at = (at, at + n), at + n
        assert walked == at, (walked, at)  # the walk counted every row
        print(
            f"{args.keys:,} floats, {args.key_groups} key groups, {args.updates} updates of "
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
        held = [g for g, _ in counts]
        for k in sorted({1, 2, max(1, len(held) // 8), max(1, len(held) // 4), len(held)}):
            groups = held[:: max(1, len(held) // k)][:k]
            need = set(skeleton)
            for g in groups:
                first, stop = bounds[g]
                hit = [i for i, (a, b, _) in enumerate(leaves) if a < stop and b > first]
                need.update(leaves[i][2] for i in hit)
                if hit and hit[-1] + 1 < len(leaves):
                    need.add(leaves[hit[-1] + 1][2])
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
