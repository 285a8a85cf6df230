"""SQLite: the embedded store of one object space, one block per commit.

Each commit appends one row to ``space_blocks``: the commit's edits of every table, encoded
as one compressed, checksummed block (the format of every checkpoint block, :mod:`objectspace.storage.blocks`). Appended rows land
at the end of the table's B-tree, so a commit writes the block's pages and the few pages on
the path to them, whatever the size of the state, where rewriting rows scattered through a
B-tree would dirty a page per edited row. A reader replays the chain: the last
full block (a snapshot) and the differential blocks after it. When the differential blocks
outweigh the snapshot :data:`COMPACT_RATIO` times (and :data:`COMPACT_MIN_BYTES`), or the
chain grows longer than :data:`MAX_CHAIN`, the commit writes a new snapshot instead and
deletes the chain, so the bytes written stay proportional to the bytes changed and a
restore reads at most about ``COMPACT_RATIO + 1`` times the snapshot (or
``COMPACT_MIN_BYTES`` more). A block that fails its checksum raises
:class:`~objectspace.CorruptStateError`; so does a missing block of a chain. A store of an
older format (``docs/formats.md``) is converted the first time it is opened. The store pickles as its path and reconnects lazily.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import zlib
from itertools import filterfalse
from typing import Any

from objectspace.errors import CorruptStateError, StorageError
from objectspace.storage import forks
from objectspace.storage.blocks import decode_block, encode_block
from objectspace.storage.sql.sqlite_files import check_sqlite_file, connect_sqlite
from objectspace.storage.stores.base import Store
from objectspace.tables import (
    DELETED,
    ROW_OVERHEAD,
    CheckpointKind,
    DictReader,
    StateReader,
    StateWriter,
    TableChanges,
    WriteStats,
)

__all__ = [
    "COMPACT_MIN_BYTES",
    "COMPACT_RATIO",
    "MAX_CHAIN",
    "PAGE_SIZE",
    "SCHEMA_VERSION",
    "SQLiteStore",
]

SCHEMA_VERSION = 2
"""The store's format (``docs/formats.md``); an older one is converted on open."""

COMPACT_MIN_BYTES = 32 << 20
"""Differential blocks below this many bytes in all are never compacted into a snapshot."""

MAX_CHAIN = 256
"""At most this many differential blocks follow a snapshot."""

COMPACT_RATIO = 4
"""Differential blocks are compacted into a snapshot when they outweigh it this many times."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS space_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS space_blocks (
    seq INTEGER PRIMARY KEY,
    full INTEGER NOT NULL,
    size INTEGER NOT NULL,
    block BLOB NOT NULL
);
"""

PAGE_SIZE = 1024
"""The page size of a new store file. A commit appends one block, written as its pages plus
a few pages on the path to it (the leaf, page 1): the smaller the page, the fewer bytes
around the block, and reads are no slower than with larger pages. A file created with
another page size keeps it."""

_HALF = 1 << 31  # the row-per-entry format stored CRC-32 checksums minus 2**31
_crc32 = zlib.crc32


def _malformed(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text


class SQLiteStore(Store):
    """An object space's tables in a SQLite file (created on first use).

    ``bytes_written`` counts, per put, the key, the value and
    :data:`objectspace.tables.ROW_OVERHEAD` bytes, plus, the first time a table is stored,
    its name and :data:`~objectspace.tables.ROW_OVERHEAD` (logical bytes: what is stored
    on disk is the compressed block, usually far smaller).
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
        self._names: set[str] = set()  # tables stored (for bytes_written), when known
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
            conn = connect_sqlite(self.path, synchronous=self.synchronous, page_size=PAGE_SIZE)
            try:
                self._open(conn)
            except sqlite3.Error as exc:
                conn.close()
                error = CorruptStateError if _malformed(exc) else StorageError
                raise error(f"cannot open SQLite store {self.path!r}: {exc}") from exc
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _open(self, conn: sqlite3.Connection) -> None:
        """Create the schema, refuse a newer version, convert version 1. A file already of
        this version is only read (no write lock taken)."""
        tables = {
            name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if "space_blocks" in tables and "space_rows" not in tables:
            row = conn.execute(
                "SELECT value FROM space_meta WHERE name = 'schema_version'"
            ).fetchone()
            if row is not None and int(row[0]) == SCHEMA_VERSION:
                return
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            row = conn.execute(
                "SELECT value FROM space_meta WHERE name = 'schema_version'"
            ).fetchone()
            tables = {
                name
                for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
            version = int(row[0]) if row is not None else (1 if "space_rows" in tables else 0)
            if version > SCHEMA_VERSION:
                raise StorageError(
                    f"SQLite store {self.path!r} has schema version {version}, newer than "
                    f"this objectspace understands ({SCHEMA_VERSION}); upgrade objectspace"
                )
            if version == 1 or "space_rows" in tables:
                self._convert(conn, tables)
            if version < SCHEMA_VERSION:
                conn.execute(
                    "INSERT OR REPLACE INTO space_meta VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _convert(self, conn: sqlite3.Connection, tables: set[str]) -> None:
        """Version 1 (a row per entry, checksums verified) into one snapshot block."""
        names = (
            dict(conn.execute("SELECT id, name FROM space_tables").fetchall())
            if "space_tables" in tables
            else {}
        )
        columns = {r[1] for r in conn.execute("PRAGMA table_info(space_rows)")}
        crc = "crc" if "crc" in columns else "NULL"
        state: dict[str, TableChanges] = {}
        for tid, key, value, check in conn.execute(
            f"SELECT tbl, key, value, {crc} FROM space_rows ORDER BY tbl, key"
        ):
            name = names.get(tid)
            if name is None:
                raise CorruptStateError(
                    f"SQLite store {self.path!r} (schema version 1) holds rows of table id "
                    f"{tid}, which has no name in space_tables"
                )
            if check is not None:
                seed = _crc32(name.encode("utf-8"))
                if _crc32(value, _crc32(key, seed) ^ len(key)) - _HALF != check:
                    raise CorruptStateError(
                        f"SQLite store {self.path!r} (schema version 1): the row of table "
                        f"{name!r}, key {key!r} fails its checksum"
                    )
            change = state.get(name)
            if change is None:
                change = state[name] = TableChanges()
            change.rows[key] = value
        block, _ = encode_block(state, True)
        conn.execute(
            "INSERT INTO space_blocks (seq, full, size, block) VALUES "
            "((SELECT COALESCE(MAX(seq), 0) + 1 FROM space_blocks), 1, ?, ?)",
            (len(block), block),
        )
        conn.execute("DELETE FROM space_blocks WHERE seq < (SELECT MAX(seq) FROM space_blocks)")
        conn.execute("DROP TABLE space_rows")
        if "space_tables" in tables:
            conn.execute("DROP TABLE space_tables")

    def close(self) -> None:
        """Close the connection; the next use reopens it."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def writer(self, kind: CheckpointKind = CheckpointKind.DIFFERENTIAL) -> StateWriter:
        return _SQLiteWriter(self, kind)

    def _replay(self, chain: list[tuple[int, int, bytes]]) -> dict[str, dict[bytes, bytes]]:
        """The tables a chain of ``(seq, full, block)`` rows describes, each block verified;
        :class:`CorruptStateError` for a block that fails, or is missing from, the chain."""
        tables: dict[str, dict[bytes, bytes]] = {}
        previous = 0
        for seq, full, block in chain:
            where = f"SQLite store {self.path!r}, block {seq}"
            if not full and seq != previous + 1:
                missing = "the first" if previous == 0 else f"block {previous + 1}"
                raise CorruptStateError(
                    f"SQLite store {self.path!r}: {missing} of its chain is missing "
                    f"(block {seq} follows {previous or 'nothing'})"
                )
            previous = seq
            truncated, rows = decode_block(block, where)
            if full:
                tables.clear()
            for name in truncated:
                tables.pop(name, None)
            table: dict[bytes, bytes] | None = None
            current = None
            for name, key, value in rows:
                if name is not current:
                    current = name
                    table = tables.get(name)
                    if table is None:
                        table = tables[name] = {}
                if value is None:
                    table.pop(key, None)  # type: ignore[union-attr]
                else:
                    table[key] = value  # type: ignore[index]
        return {name: rows for name, rows in tables.items() if rows}

    def _chain(self, conn: sqlite3.Connection) -> list[tuple[int, int, bytes]]:
        return conn.execute(
            "SELECT seq, full, block FROM space_blocks "
            "WHERE seq >= (SELECT COALESCE(MAX(seq), 0) FROM space_blocks WHERE full) "
            "ORDER BY seq"
        ).fetchall()

    def reader(self) -> StateReader:
        """A snapshot of every table, read in one transaction, every block verified against
        its checksum (:class:`CorruptStateError` naming the file and the block)."""
        with self._lock:
            conn = self.connection
            try:
                conn.execute("BEGIN")
                try:
                    chain = self._chain(conn)
                finally:
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                error = CorruptStateError if _malformed(exc) else StorageError
                raise error(f"cannot read SQLite store {self.path!r}: {exc}") from exc
            tables = self._replay(chain)
            self._names = set(tables)
        return DictReader(tables)


class _SQLiteWriter(StateWriter):
    def __init__(self, store: SQLiteStore, kind: CheckpointKind) -> None:
        super().__init__(kind)
        self._store = store

    def _apply(self) -> WriteStats:
        stats = WriteStats()
        store = self._store
        full = self.kind is CheckpointKind.FULL
        changes = self.changes
        written = 0
        puts = deletes = 0
        stored: list[str] = []  # tables this commit puts rows into
        renewed: list[str] = []  # of those, the truncated ones (stored anew)
        truncated = 0
        for name, change in changes.items():  # one pass: a large save's tables are cold
            before = puts
            for key, value in change.rows.items():
                if value is DELETED:
                    deletes += 1
                else:
                    puts += 1
                    written += len(value) + len(key)  # type: ignore[arg-type]
            if change.truncated:
                truncated += 1
                if puts > before:
                    renewed.append(name)
            if puts > before:
                stored.append(name)
        stats.items_written = puts
        stats.items_deleted = 0 if full else deletes
        stats.tables_deleted = truncated
        with store._lock:
            conn = store.connection
            try:
                conn.execute("BEGIN IMMEDIATE")
                names = store._names
                if full or not changes:
                    chain: list[tuple[int, int, int]] = []
                else:
                    chain = conn.execute(
                        "SELECT seq, full, size FROM space_blocks "
                        "WHERE seq >= (SELECT COALESCE(MAX(seq), 0) FROM space_blocks "
                        "WHERE full) ORDER BY seq"
                    ).fetchall()
                if not full and not changes:
                    block = b""
                else:
                    block, _ = encode_block(changes, full)
                base = chain[0][2] if chain and chain[0][1] else 0
                deltas = sum(size for _, is_full, size in chain if not is_full)
                compact = bool(chain) and (
                    len(chain) >= MAX_CHAIN
                    or deltas + len(block) > max(COMPACT_RATIO * base, COMPACT_MIN_BYTES)
                )
                (top,) = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM space_blocks").fetchone()
                if compact:
                    tables = store._replay(store._chain(conn))
                    state = {name: TableChanges(rows=dict(rows)) for name, rows in tables.items()}
                    for name, change in changes.items():
                        table = state.get(name)
                        if change.truncated or table is None:
                            table = state[name] = TableChanges()
                        table.rows.update(change.rows)
                    block, _ = encode_block(state, True)
                    full = True
                # A table's name counts the first time it is stored (as MemoryStore counts),
                # whether or not this commit compacts.
                if self.kind is CheckpointKind.FULL:
                    new_names = set(stored)
                else:  # truncated, or not stored before (mostly none: one C pass says so)
                    new_names = set(renewed)
                    if not names.issuperset(stored):
                        new_names.update(filterfalse(names.__contains__, stored))
                written += sum(len(n.encode("utf-8")) + ROW_OVERHEAD for n in new_names)
                written += ROW_OVERHEAD * puts
                if block:
                    conn.execute(
                        "INSERT INTO space_blocks (seq, full, size, block) VALUES (?, ?, ?, ?)",
                        (top + 1, int(full), len(block), block),
                    )
                    if full:
                        conn.execute("DELETE FROM space_blocks WHERE seq <= ?", (top,))
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StorageError(
                        f"commit to SQLite store {store.path!r} failed: {exc}"
                    ) from exc
                raise
            if self.kind is CheckpointKind.FULL:
                store._names = set(new_names)
            else:
                names.update(new_names)
        stats.bytes_written = written
        return stats
