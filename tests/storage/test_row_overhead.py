"""One ``ROW_OVERHEAD``: the stores and the checkpoint backends count a stored row the same way."""

from __future__ import annotations

from pathlib import Path

import objectspace as osp
from objectspace import tables
from objectspace.storage import sql as sql_storage
from objectspace.storage.stores import sqlite as sqlite_store


def test_one_row_overhead() -> None:
    assert tables.ROW_OVERHEAD == 8
    assert sql_storage.ROW_OVERHEAD is tables.ROW_OVERHEAD
    assert sqlite_store.ROW_OVERHEAD is tables.ROW_OVERHEAD


def test_sqlite_store_counts_key_value_and_row_overhead(tmp_path: Path) -> None:
    """A differential checkpoint of existing tables: the memory store's count (keys and values)
    plus ``ROW_OVERHEAD`` per row written."""
    counts = []
    for store in (osp.MemoryStore(), sqlite_store.SQLiteStore(tmp_path / "s.db")):
        space = osp.ObjectSpace()
        d = space.create_dict("d")
        d[1] = 2.0
        space.checkpoint(store)
        d[1] = 3.0
        d[2] = 4.0
        stats = space.checkpoint(store)
        counts.append((stats.bytes_written, stats.items_written))
        if isinstance(store, sqlite_store.SQLiteStore):
            store.close()
    (memory_bytes, rows), (sqlite_bytes, sqlite_rows) = counts
    assert rows == sqlite_rows > 0
    assert sqlite_bytes == memory_bytes + rows * tables.ROW_OVERHEAD
