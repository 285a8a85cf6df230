"""SQLite: the embedded store of one object space, one transaction per commit.

Rows are ``(table id, key, value)`` in a ``WITHOUT ROWID`` table clustered by table and key,
and each table name is stored once in a dictionary table, so a row costs its key, its value
and a small integer. The store pickles as its path and reconnects lazily.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from itertools import chain, groupby
from operator import itemgetter
from typing import Any

from objectspace.errors import StorageError
from objectspace.storage import _fork
from objectspace.storage.base import (
    DELETED,
    CheckpointKind,
    DictReader,
    StateReader,
    StateWriter,
    Store,
    WriteStats,
)

__all__ = ["SQLiteStore", "connect_sqlite"]

_SCHEMA_VERSION = 1

# Bytes counted per stored row on top of its key and value: the table reference.
ROW_OVERHEAD = 4

_SCHEMA = """
CREATE TABLE IF NOT EXISTS space_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS space_tables (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS space_rows (
    tbl INTEGER NOT NULL,
    key BLOB NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (tbl, key)
) WITHOUT ROWID;
"""


# A new database's page size. A checkpoint that edits rows all over the key space (the
# Buffer workload) dirties most leaf pages, and fewer, larger WAL frames commit faster: 8 KiB
# and 16 KiB pages took the workload from ~1.04 s to ~0.96-0.99 s (medians of 7) against
# 4 KiB. A checkpoint of a few random edits in a large table writes one whole page per edit,
# which larger pages make dearer (100 edits in 1,000,000 entries: 0.95 ms at 4 KiB, 2.06 ms
# at 16 KiB); 8 KiB keeps most of the first gain at half the second cost.
PAGE_SIZE = 8192
_WAL_BYTES = 4 * 1024 * 1024
_CACHE_KIB = 32 * 1024


def _enable_wal(conn: sqlite3.Connection, seconds: float = 60.0) -> None:
    """Switch to WAL unless the file is in WAL already. Switching can fail with "database is
    locked" at once, without SQLite's busy wait, while another process writes: retry."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def connect_sqlite(
    path: str, *, synchronous: str = "NORMAL", page_size: int = PAGE_SIZE
) -> sqlite3.Connection:
    """Open ``path`` in WAL mode for one writer and concurrent readers.

    ``synchronous=NORMAL`` keeps every committed transaction across a process crash; only an
    operating-system crash or power loss can lose the last commits (never corrupt the file).
    Pass ``"FULL"`` to survive those too, at the cost of an fsync per commit. ``page_size``
    applies to a database created by this call; an existing file keeps its own.
    """
    if synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
        raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise StorageError(f"cannot open SQLite store {path!r}: folder {parent!r} does not exist")
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=60)
        conn.execute(f"PRAGMA page_size={int(page_size)}")  # before WAL fixes the layout
        _enable_wal(conn)
        conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
        # Copy the WAL back into the database once it holds ~4 MiB, whatever the file's page
        # size (SQLite's default is 1,000 pages: 4 MiB only with 4 KiB pages).
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        conn.execute(f"PRAGMA wal_autocheckpoint={max(1, _WAL_BYTES // int(size))}")
        # A checkpoint touches pages all over the file: keep them cached between commits
        # (SQLite's default cache is 2 MB; this is an upper bound, used only as needed).
        conn.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
    except sqlite3.Error as exc:
        raise StorageError(f"cannot open SQLite store {path!r}: {exc}") from exc
    return conn


class SQLiteStore(Store):
    """An object space's tables in a SQLite file (created on first use).

    ``bytes_written`` counts, per put, the key, the value and :data:`ROW_OVERHEAD` bytes for
    the table reference, plus a table's name the first time it is stored.
    """

    def __init__(self, path: str | os.PathLike[str], *, synchronous: str = "NORMAL") -> None:
        self.path = os.fspath(path)
        self.synchronous = synchronous
        self._conn: sqlite3.Connection | None = None
        self._table_ids: dict[str, int] = {}
        self._lock = threading.RLock()
        _fork.register(self)

    def _after_fork_in_child(self) -> None:
        """In a forked child: never use the parent's SQLite connection (nor close it, which
        could release the parent's locks); the next use opens the child's own."""
        if self._conn is not None:
            _fork.abandon(self._conn)
        self._conn = None
        self._lock = threading.RLock()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "synchronous": self.synchronous}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], synchronous=state["synchronous"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    @property
    def connection(self) -> sqlite3.Connection:
        """The store's connection, opened (and the schema created) on first use."""
        if self._conn is None:
            conn = connect_sqlite(self.path, synchronous=self.synchronous)
            try:
                conn.executescript(_SCHEMA)
                row = conn.execute(
                    "SELECT value FROM space_meta WHERE name = 'schema_version'"
                ).fetchone()
                if row is None:
                    conn.execute(
                        "INSERT INTO space_meta VALUES ('schema_version', ?)",
                        (str(_SCHEMA_VERSION),),
                    )
                elif int(row[0]) > _SCHEMA_VERSION:
                    raise StorageError(
                        f"SQLite store {self.path!r} has schema version {row[0]}, newer than "
                        f"this objectspace understands ({_SCHEMA_VERSION}); upgrade objectspace"
                    )
                self._table_ids = dict(
                    (name, tid) for tid, name in conn.execute("SELECT id, name FROM space_tables")
                )
            except sqlite3.Error as exc:
                conn.close()
                raise StorageError(f"cannot open SQLite store {self.path!r}: {exc}") from exc
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def close(self) -> None:
        """Close the connection; the next use reopens it."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def writer(self, kind: CheckpointKind = CheckpointKind.DIFFERENTIAL) -> StateWriter:
        return _SQLiteWriter(self, kind)

    def reader(self) -> StateReader:
        """A snapshot of every table, read in one transaction (rows in key order)."""
        with self._lock:
            conn = self.connection
            conn.execute("BEGIN")
            try:
                names = dict(conn.execute("SELECT id, name FROM space_tables").fetchall())
                rows = conn.execute("SELECT tbl, key, value FROM space_rows").fetchall()
            finally:
                conn.execute("COMMIT")
        tables: dict[str, dict[bytes, bytes]] = {}
        # Rows come in primary-key order, so each table's rows are one run.
        for tid, run in groupby(rows, key=itemgetter(0)):
            tables[names[tid]] = {key: value for _, key, value in run}
        return DictReader(tables)


class _SQLiteWriter(StateWriter):
    def __init__(self, store: SQLiteStore, kind: CheckpointKind) -> None:
        super().__init__(kind)
        self._store = store

    def _apply(self) -> WriteStats:
        stats = WriteStats()
        store = self._store
        full = self.kind is CheckpointKind.FULL
        with store._lock:
            conn = store.connection
            ids = store._table_ids
            added: dict[str, int] = {}
            written = 0
            deletes: list[tuple[int, bytes]] = []
            try:
                conn.execute("BEGIN IMMEDIATE")
                if full:
                    conn.execute("DELETE FROM space_rows")
                new_names = [name for name in self.changes if name not in ids]
                if new_names:
                    # Ids chosen here, inside the write transaction, so that one
                    # executemany stores them all.
                    (top,) = conn.execute(
                        "SELECT COALESCE(MAX(id), 0) FROM space_tables"
                    ).fetchone()
                    added = {name: top + 1 + i for i, name in enumerate(new_names)}
                    conn.executemany(
                        "INSERT INTO space_tables (id, name) VALUES (?, ?)",
                        [(tid, name) for name, tid in added.items()],
                    )
                    written += sum(len(name.encode("utf-8")) for name in new_names)
                    written += ROW_OVERHEAD * len(new_names)
                tid_of = {**ids, **added} if added else ids
                changes = self.changes.items()
                truncates = [(tid_of[name],) for name, change in changes if change.truncated]
                stats.tables_deleted = len(truncates)
                if full:
                    truncates = []
                # One flat pass in C-level comprehensions: this runs for every dirty slot.
                puts: list[tuple[int, bytes, Any]] = [
                    (tid, key, value)
                    for name, change in changes
                    for tid in (tid_of[name],)
                    for key, value in change.rows.items()
                ]
                if DELETED in map(_VALUE, puts):
                    deletes = [(tid, key) for tid, key, value in puts if value is DELETED]
                    stats.items_deleted = len(deletes)
                    puts = [row for row in puts if row[2] is not DELETED]
                    if full:
                        deletes = []
                written += sum(map(len, map(_KEY, puts))) + sum(map(len, map(_VALUE, puts)))
                stats.items_written = len(puts)
                written += ROW_OVERHEAD * len(puts)
                if truncates:
                    conn.executemany("DELETE FROM space_rows WHERE tbl = ?", truncates)
                if deletes:
                    conn.executemany("DELETE FROM space_rows WHERE tbl = ? AND key = ?", deletes)
                if puts:
                    puts.sort()  # in primary-key order: SQLite appends to its B-tree pages
                    _insert_rows(conn, puts)
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StorageError(
                        f"commit to SQLite store {store.path!r} failed: {exc}"
                    ) from exc
                raise
            ids.update(added)  # only once committed: rolled-back ids are never reused
        stats.bytes_written = written
        return stats


_KEY = itemgetter(1)
_VALUE = itemgetter(2)

# Rows per INSERT statement: a multi-row VALUES list binds the same parameters as one
# statement per row but steps the statement once per chunk (measured ~15% faster here).
_CHUNK = 100
_INSERT_CHUNK = "INSERT OR REPLACE INTO space_rows VALUES " + ", ".join(["(?, ?, ?)"] * _CHUNK)


def _insert_rows(conn: sqlite3.Connection, rows: list[tuple[int, bytes, Any]]) -> None:
    """Insert or replace ``(table id, key, value)`` rows, in chunks of ``_CHUNK``."""
    whole = len(rows) - len(rows) % _CHUNK
    if whole:
        flat = list(chain.from_iterable(rows[:whole]))
        step = 3 * _CHUNK
        conn.executemany(_INSERT_CHUNK, [flat[i : i + step] for i in range(0, len(flat), step)])
    if whole < len(rows):
        conn.executemany("INSERT OR REPLACE INTO space_rows VALUES (?, ?, ?)", rows[whole:])
