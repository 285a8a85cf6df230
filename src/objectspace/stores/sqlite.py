"""SQLite: the embedded store of one object space, one transaction per commit.

Rows are ``(table id, key, value, checksum)`` in a ``WITHOUT ROWID`` table clustered by
table and key, and each table name is stored once in a dictionary table, so a row costs its
key, its value, a small integer and a 4-byte checksum. The checksum (CRC-32 of the table's
name, the key and the value) is verified when the row is read: a changed byte raises
:class:`~objectspace.CorruptStateError`. Rows written before checksums existed (``NULL``)
are read unverified. The store pickles as its path and reconnects lazily.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import zlib
from itertools import chain, groupby
from operator import itemgetter
from typing import Any

from objectspace.errors import CorruptStateError, StorageError
from objectspace.storage import forks
from objectspace.storage.sql.sqlite_files import check_sqlite_file, connect_sqlite
from objectspace.stores.base import Store
from objectspace.tables import (
    DELETED,
    ROW_OVERHEAD,
    CheckpointKind,
    DictReader,
    StateReader,
    StateWriter,
    WriteStats,
)

__all__ = ["SQLiteStore"]

_SCHEMA_VERSION = 1


_SCHEMA = """
CREATE TABLE IF NOT EXISTS space_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS space_tables (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS space_rows (
    tbl INTEGER NOT NULL,
    key BLOB NOT NULL,
    value BLOB NOT NULL,
    crc INTEGER,
    PRIMARY KEY (tbl, key)
) WITHOUT ROWID;
"""

_HALF = 1 << 31  # checksums are stored minus 2**31: a signed 32-bit integer, 4 bytes in SQLite
_crc32 = zlib.crc32


def _seed(name: str) -> int:
    return _crc32(name.encode("utf-8"))


def _malformed(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text


# A new database's page size. A checkpoint that edits rows all over the key space (the
# Buffer workload) dirties most leaf pages, and fewer, larger WAL frames commit faster: 8 KiB
# and 16 KiB pages took the workload from ~1.04 s to ~0.96-0.99 s (medians of 7) against
# 4 KiB. A checkpoint of a few random edits in a large table writes one whole page per edit,
# which larger pages make dearer (100 edits in 1,000,000 entries: 0.95 ms at 4 KiB, 2.06 ms
# at 16 KiB); 8 KiB keeps most of the first gain at half the second cost.
class SQLiteStore(Store):
    """An object space's tables in a SQLite file (created on first use).

    ``bytes_written`` counts, per put, the key, the value and
    :data:`objectspace.tables.ROW_OVERHEAD` bytes (the table reference and the checksum), plus,
    the first time a table is stored, its name and :data:`~objectspace.tables.ROW_OVERHEAD`.
    """

    def __init__(self, path: str | os.PathLike[str], *, synchronous: str = "NORMAL") -> None:
        try:
            self.path = os.fspath(path)
        except TypeError as exc:
            raise TypeError(f"a SQLite store path is a str or path, not {path!r}") from exc
        if not isinstance(self.path, str):
            raise TypeError(f"a SQLite store path is a str or path, not {path!r}")
        if "\x00" in self.path:
            raise ValueError(f"a SQLite store path holds no NUL byte, not {self.path!r}")
        try:
            self.path.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"a SQLite store path must be valid UTF-8 text, not {self.path!r}"
            ) from exc
        self.synchronous = synchronous
        self._conn: sqlite3.Connection | None = None
        self._table_ids: dict[str, int] = {}
        self._lock = threading.RLock()
        forks.register(self)

    def _after_fork_in_child(self) -> None:
        """In a forked child: never use the parent's SQLite connection (nor close it, which
        could release the parent's locks); the next use opens the child's own."""
        if self._conn is not None:
            forks.abandon(self._conn)
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
            check_sqlite_file(self.path, "space_meta")
            conn = connect_sqlite(self.path, synchronous=self.synchronous)
            try:
                conn.executescript(_SCHEMA)
                columns = {r[1] for r in conn.execute("PRAGMA table_info(space_rows)")}
                if "crc" not in columns:  # written before checksums: NULL, read unverified
                    try:
                        conn.execute("ALTER TABLE space_rows ADD COLUMN crc INTEGER")
                    except sqlite3.OperationalError as exc:  # another process added it
                        if "duplicate column" not in str(exc):
                            raise
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
        """A snapshot of every table, read in one transaction (rows in key order), each row
        verified against its checksum (:class:`CorruptStateError` naming table and key)."""
        with self._lock:
            conn = self.connection
            try:
                conn.execute("BEGIN")
                try:
                    names = dict(conn.execute("SELECT id, name FROM space_tables").fetchall())
                    rows = conn.execute("SELECT tbl, key, value, crc FROM space_rows").fetchall()
                finally:
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                error = CorruptStateError if _malformed(exc) else StorageError
                raise error(f"cannot read SQLite store {self.path!r}: {exc}") from exc
        tables: dict[str, dict[bytes, bytes]] = {}
        crc32 = _crc32
        # Rows come in primary-key order, so each table's rows are one run.
        for tid, run in groupby(rows, key=itemgetter(0)):
            name = names.get(tid)
            if name is None:
                raise CorruptStateError(
                    f"SQLite store {self.path!r} holds rows of table id {tid}, which has no "
                    "name in space_tables"
                )
            seed = _seed(name)
            found = list(run)
            bad = next(
                (
                    key
                    for _, key, value, crc in found
                    if crc is not None and crc32(value, crc32(key, seed) ^ len(key)) - _HALF != crc
                ),
                None,
            )
            if bad is not None:
                raise CorruptStateError(
                    f"SQLite store {self.path!r}: the row of table {name!r}, key {bad!r} fails "
                    "its checksum"
                )
            tables[name] = {key: value for _, key, value, _ in found}
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
                # One flat pass in C-level comprehensions: this runs for every dirty slot. It
                # computes each put's checksum too (a delete's is never stored).
                crc32: Any = _crc32  # called with bytes only: a delete's value is skipped
                puts: list[tuple[int, bytes, Any, int]] = [
                    (
                        tid,
                        key,
                        value,
                        crc32(value, crc32(key, seed) ^ len(key)) - _HALF
                        if value is not DELETED
                        else 0,
                    )
                    for name, change in changes
                    for tid, seed in ((tid_of[name], _seed(name)),)
                    for key, value in change.rows.items()
                ]
                if DELETED in map(_VALUE, puts):
                    deletes = [(tid, key) for tid, key, value, _ in puts if value is DELETED]
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
_INSERT = "INSERT OR REPLACE INTO space_rows (tbl, key, value, crc) VALUES "
_INSERT_CHUNK = _INSERT + ", ".join(["(?, ?, ?, ?)"] * _CHUNK)


def _insert_rows(conn: sqlite3.Connection, rows: list[tuple[int, bytes, Any, int]]) -> None:
    """Insert or replace ``(table id, key, value, checksum)`` rows, in chunks of ``_CHUNK``."""
    whole = len(rows) - len(rows) % _CHUNK
    if whole:
        flat = list(chain.from_iterable(rows[:whole]))
        step = 4 * _CHUNK
        conn.executemany(_INSERT_CHUNK, [flat[i : i + step] for i in range(0, len(flat), step)])
    if whole < len(rows):
        conn.executemany(_INSERT + "(?, ?, ?, ?)", rows[whole:])
