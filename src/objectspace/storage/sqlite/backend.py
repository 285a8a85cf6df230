"""Versioned checkpoint storage in SQLite: ``sqlite:///path`` and ``memory://name``.

Writes are serialised by SQLite (``BEGIN IMMEDIATE``, WAL, a generous busy timeout), so
several processes, such as Spark tasks on one machine, can share one file. ``memory://``
is the same schema in an in-process SQLite database, shared by every backend object of
that name in the process (a pickled copy in another process starts empty).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from objectspace.errors import StorageError
from objectspace.storage import forks
from objectspace.storage.areas import FileArea, LocalArea
from objectspace.storage.sql.base import SQLBackend
from objectspace.storage.sql.schema import SQLITE_SCHEMA, table_script
from objectspace.storage.sql.sqlite_files import (
    WAL_BYTES_STORAGE,
    check_sqlite_file,
    connect_sqlite,
)
from objectspace.storage.sql.tx import Tx

__all__ = ["CATALOG_PAGE_SIZE", "SQLiteBackend"]

_R = TypeVar("_R")


PAGE_SIZE = 1024
"""Page size of a new ``sqlite:///`` file (an existing one keeps its own). A commit writes
every page it touches to the WAL, and a checkpoint's catalog rows and blocks are small, so
small pages write fewer bytes, and restores are as fast."""

CATALOG_PAGE_SIZE = 512
"""Page size of a new SQLite catalog of segment storage (``file://...?catalog=sqlite:///``):
it holds only write records, heads and segment references, small rows that every commit
rewrites a few of on pages spread over several B-trees, so the smallest pages SQLite allows
write the fewest bytes."""

_MEMORY: dict[str, tuple[sqlite3.Connection, threading.RLock]] = {}
_MEMORY_LOCK = threading.Lock()


def _reset_memory_locks() -> None:
    """In a forked child (which has a copy of every ``memory://`` database): locks that
    another thread of the parent held at the fork would never be released."""
    global _MEMORY_LOCK
    _MEMORY_LOCK = threading.Lock()
    for name, (conn, _) in list(_MEMORY.items()):
        _MEMORY[name] = (conn, threading.RLock())


forks.on_fork_in_child(_reset_memory_locks)


class _SQLiteTx:
    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.conn.executemany(sql, rows)

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = self.conn.execute(sql, params).fetchone()
        return row

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, params).fetchall()


class SQLiteBackend(SQLBackend):
    """Checkpoint storage in one SQLite database (a file, or ``memory://`` in-process)."""

    DIALECT = "sqlite"

    def __init__(
        self, path: str | None, *, memory_name: str | None = None, page_size: int | None = None
    ) -> None:
        """``page_size``: of the file, if this backend creates it (an existing file keeps
        its own); :data:`PAGE_SIZE` unless given."""
        super().__init__()
        if (path is None) == (memory_name is None):
            raise ValueError("give exactly one of a path or a memory name")
        self.page_size = PAGE_SIZE if page_size is None else page_size
        self.path = os.path.abspath(path) if path is not None else None
        self.memory_name = memory_name
        self.url = f"sqlite:///{self.path}" if self.path else f"memory://{memory_name}"
        self._conn: sqlite3.Connection | None = None
        self._lock: threading.RLock = threading.RLock()
        if memory_name is not None:
            with _MEMORY_LOCK:
                entry = _MEMORY.get(memory_name)
                if entry is None:
                    conn = sqlite3.connect(
                        ":memory:", isolation_level=None, check_same_thread=False
                    )
                    self._init_schema(conn)
                    entry = _MEMORY[memory_name] = (conn, threading.RLock())
            self._conn, self._lock = entry
        forks.register(self)

    def _after_fork_in_child(self) -> None:
        """In a forked child: never use the parent's SQLite connection (nor close it, which
        could release the parent's locks); the next use opens the child's own."""
        if self.memory_name is not None:
            self._conn, self._lock = _MEMORY[self.memory_name]
            return
        if self._conn is not None:
            forks.abandon(self._conn)
        self._conn = None
        self._lock = threading.RLock()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "memory_name": self.memory_name, "page_size": self.page_size}

    def file_area(self) -> FileArea | None:
        """The folder ``<database path>.files`` (a ``memory://`` store keeps none)."""
        return None if self.path is None else LocalArea(self.path + ".files")

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["path"],
            memory_name=state["memory_name"],
            page_size=state.get("page_size"),
        )

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.url!r})"

    def _columns(self, tx: Tx, table: str) -> set[str]:
        return {str(row[1]) for row in tx.all(f"PRAGMA table_info({table})")}

    def _drop_path_index(self, tx: Tx) -> None:
        """SQLite cannot drop a ``UNIQUE`` constraint: the table is copied into one
        without it (same rows, same ids) and takes its name."""
        if not any(
            row[2]
            for row in tx.all("PRAGMA index_list(ckpt_segments)")
            if str(row[1]).startswith("sqlite_autoindex_")
        ):
            return
        columns = "id, path, created, bytes, stamped"
        tx.execute(table_script("ckpt_segments", "sqlite", as_name="ckpt_segments_v7"))
        tx.execute(f"INSERT INTO ckpt_segments_v7 ({columns}) SELECT {columns} FROM ckpt_segments")
        tx.execute("DROP TABLE ckpt_segments")
        tx.execute("ALTER TABLE ckpt_segments_v7 RENAME TO ckpt_segments")

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        try:
            # One transaction creates the tables and checks (or migrates) them: a new file
            # is whole or empty, and its WAL holds a commit instead of one per table (18
            # kB less at the disk for a new segment catalog).
            try:
                # (executescript commits an open transaction first: it opens its own)
                conn.executescript("BEGIN IMMEDIATE;\n" + SQLITE_SCHEMA)
                self._check_schema(_SQLiteTx(conn))
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open checkpoint storage {self.url!r}: {exc}") from exc

    @property
    def connection(self) -> sqlite3.Connection:
        if self._conn is None:
            assert self.path is not None
            check_sqlite_file(self.path, "ckpt_meta")
            conn = connect_sqlite(self.path, page_size=self.page_size, wal_bytes=WAL_BYTES_STORAGE)
            try:
                self._init_schema(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self.memory_name is None:
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
            self._op_dictionaries = {}
            self._dictionary_by_name = {}

    def _run(self, what: str, work: Callable[[Tx], _R], *, write: bool = True) -> _R:
        with self._lock:
            conn = self.connection
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                result = work(_SQLiteTx(conn))
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StorageError(f"{what} failed in {self.url!r}: {exc}") from exc
                raise
            return result
