"""Versioned checkpoint storage in SQLite: ``sqlite:///path`` and ``memory://name``.

Writes are serialised by SQLite (``BEGIN IMMEDIATE``, WAL, a generous busy timeout), so
several processes, such as Spark tasks on one machine, can share one file. ``memory://``
is the same schema in an in-process SQLite database, shared by every backend object of
that name in the process (a pickled copy in another process starts empty).

Layout: a catalog (jobs, operators, checkpoints, writes) and the data of every write as
rows ``(write id, table id, key, value or NULL for a delete)`` plus the tables it deleted.
Table names are interned once in ``ckpt_tables``, so a row costs its key, its value and two
small integers.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

from objectspace.errors import CheckpointError, StorageError
from objectspace.storage.base import DELETED
from objectspace.storage.sqlite import connect_sqlite
from objectspace.storage.versioned import (
    Backend,
    CheckpointInfo,
    OperatorInfo,
    PendingPart,
    RetentionStats,
    WriteInfo,
    materialize,
)

__all__ = ["ROW_OVERHEAD", "SQLiteBackend"]

SCHEMA_VERSION = 1

# Bytes counted per stored row on top of its key and value: the write and table references.
ROW_OVERHEAD = 8

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ckpt_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ckpt_jobs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    last_checkpoint INTEGER
);
CREATE TABLE IF NOT EXISTS ckpt_operators (
    id INTEGER PRIMARY KEY,
    job INTEGER NOT NULL REFERENCES ckpt_jobs (id),
    name TEXT NOT NULL,
    max_key_groups INTEGER NOT NULL,
    parallelism INTEGER,
    schema_version INTEGER NOT NULL,
    UNIQUE (job, name)
);
CREATE TABLE IF NOT EXISTS ckpt_checkpoints (
    job INTEGER NOT NULL,
    checkpoint INTEGER NOT NULL,
    committed_at REAL NOT NULL,
    writes INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    full_writes INTEGER NOT NULL,
    PRIMARY KEY (job, checkpoint)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ckpt_writes (
    id INTEGER PRIMARY KEY,
    operator INTEGER NOT NULL,
    key_group INTEGER NOT NULL,
    version INTEGER NOT NULL,
    full INTEGER NOT NULL,
    committed INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL,
    rows INTEGER NOT NULL,
    attempt TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS ckpt_writes_chain
    ON ckpt_writes (operator, committed, key_group, version);
CREATE TABLE IF NOT EXISTS ckpt_tables (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS ckpt_rows (
    write INTEGER NOT NULL,
    tbl INTEGER NOT NULL,
    key BLOB NOT NULL,
    value BLOB,
    PRIMARY KEY (write, tbl, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ckpt_truncates (
    write INTEGER NOT NULL,
    tbl INTEGER NOT NULL,
    PRIMARY KEY (write, tbl)
) WITHOUT ROWID;
"""

_MEMORY: dict[str, tuple[sqlite3.Connection, threading.RLock]] = {}
_MEMORY_LOCK = threading.Lock()


def _chunks(items: Sequence[Any], size: int = 500) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class SQLiteBackend(Backend):
    """Checkpoint storage in one SQLite database (a file, or ``memory://`` in-process).

    ``fault_hook``, when set, is called with the name of each step of a write or commit
    (``"write:begin"``, ``"write:rows"``, ``"write:end"``, ``"commit:begin"``,
    ``"commit:mark"``, ``"commit:end"``); an exception it raises aborts the step's
    transaction. Tests use it to interrupt the protocol anywhere.
    """

    STEPS: ClassVar[tuple[str, ...]] = (
        "write:begin",
        "write:rows",
        "write:end",
        "commit:begin",
        "commit:mark",
        "commit:end",
    )

    def __init__(self, path: str | None, *, memory_name: str | None = None) -> None:
        if (path is None) == (memory_name is None):
            raise ValueError("give exactly one of a path or a memory name")
        self.path = os.path.abspath(path) if path is not None else None
        self.memory_name = memory_name
        self.url = f"sqlite:///{self.path}" if self.path else f"memory://{memory_name}"
        self.fault_hook: Callable[[str], None] | None = None
        self._conn: sqlite3.Connection | None = None
        self._lock: threading.RLock = threading.RLock()
        self._table_ids: dict[str, int] = {}
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

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "memory_name": self.memory_name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], memory_name=state["memory_name"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.url!r})"

    # -- connections ------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        if self.memory_name is not None:
            return _MEMORY[self.memory_name][0]
        assert self.path is not None
        conn = connect_sqlite(self.path)
        try:
            self._init_schema(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        try:
            conn.executescript(_SCHEMA)
            row = conn.execute(
                "SELECT value FROM ckpt_meta WHERE name = 'schema_version'"
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT OR IGNORE INTO ckpt_meta VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
            elif int(row[0]) > SCHEMA_VERSION:
                raise StorageError(
                    f"checkpoint storage {self.url!r} has schema version {row[0]}, newer than "
                    f"this objectspace understands ({SCHEMA_VERSION}); upgrade objectspace"
                )
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open checkpoint storage {self.url!r}: {exc}") from exc

    @property
    def connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._open()
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self.memory_name is None:
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
            self._table_ids = {}

    @contextmanager
    def _transaction(self, what: str, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self.connection
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if write:
                    self._table_ids = {}  # ids inserted by the rolled-back transaction
                if isinstance(exc, sqlite3.Error):
                    raise StorageError(f"{what} failed in {self.url!r}: {exc}") from exc
                raise

    def _fault(self, step: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(step)

    # -- catalog ----------------------------------------------------------------------------

    @staticmethod
    def _job_id(conn: sqlite3.Connection, job: str) -> int | None:
        row = conn.execute("SELECT id FROM ckpt_jobs WHERE name = ?", (job,)).fetchone()
        return None if row is None else int(row[0])

    @staticmethod
    def _operator_row(conn: sqlite3.Connection, job: str, operator: str) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = conn.execute(
            "SELECT o.id, o.max_key_groups, o.parallelism, o.schema_version FROM ckpt_operators o "
            "JOIN ckpt_jobs j ON j.id = o.job WHERE j.name = ? AND o.name = ?",
            (job, operator),
        ).fetchone()
        return row

    def _operator_id(self, conn: sqlite3.Connection, job: str, operator: str) -> int:
        row = self._operator_row(conn, job, operator)
        if row is None:
            raise CheckpointError(f"operator {operator!r} of job {job!r} does not exist")
        return int(row[0])

    def ensure_operator(
        self, job: str, operator: str, max_key_groups: int | None, schema_version: int | None
    ) -> OperatorInfo:
        with self._transaction("opening an operator") as conn:
            row = self._operator_row(conn, job, operator)
            if row is None:
                if max_key_groups is None:
                    raise CheckpointError(
                        f"operator {operator!r} of job {job!r} does not exist; give "
                        "max_key_groups to create it"
                    )
                conn.execute("INSERT OR IGNORE INTO ckpt_jobs (name) VALUES (?)", (job,))
                job_id = self._job_id(conn, job)
                conn.execute(
                    "INSERT INTO ckpt_operators (job, name, max_key_groups, schema_version) "
                    "VALUES (?, ?, ?, ?)",
                    (job_id, operator, max_key_groups, schema_version or 1),
                )
                return OperatorInfo(job, operator, max_key_groups, None, schema_version or 1)
            _, stored_max, parallelism, stored_schema = row
            if max_key_groups is not None and max_key_groups != stored_max:
                raise CheckpointError(
                    f"operator {operator!r} of job {job!r} was created with max_key_groups="
                    f"{stored_max}; it cannot be reopened with max_key_groups={max_key_groups} "
                    "(the key space is fixed for the life of the state)"
                )
            if schema_version is not None and schema_version != stored_schema:
                conn.execute(
                    "UPDATE ckpt_operators SET schema_version = ? WHERE id = ?",
                    (schema_version, row[0]),
                )
                stored_schema = schema_version
            return OperatorInfo(job, operator, stored_max, parallelism, stored_schema)

    def operator_info(self, job: str, operator: str) -> OperatorInfo | None:
        with self._lock:
            row = self._operator_row(self.connection, job, operator)
        if row is None:
            return None
        return OperatorInfo(job, operator, row[1], row[2], row[3])

    def jobs(self) -> list[str]:
        with self._lock:
            rows = self.connection.execute("SELECT name FROM ckpt_jobs ORDER BY name").fetchall()
        return [name for (name,) in rows]

    def operators(self, job: str) -> list[OperatorInfo]:
        with self._lock:
            rows = self.connection.execute(
                "SELECT o.name, o.max_key_groups, o.parallelism, o.schema_version "
                "FROM ckpt_operators o JOIN ckpt_jobs j ON j.id = o.job WHERE j.name = ? "
                "ORDER BY o.name",
                (job,),
            ).fetchall()
        return [OperatorInfo(job, *row) for row in rows]

    # -- writing ----------------------------------------------------------------------------

    def _intern_tables(self, conn: sqlite3.Connection, names: set[str]) -> dict[str, int]:
        ids = self._table_ids
        missing = [name for name in names if name not in ids]
        for chunk in _chunks(missing):
            marks = ",".join("?" * len(chunk))
            for tid, name in conn.execute(
                f"SELECT id, name FROM ckpt_tables WHERE name IN ({marks})", list(chunk)
            ):
                ids[name] = tid
        for name in missing:
            if name not in ids:
                cursor = conn.execute("INSERT INTO ckpt_tables (name) VALUES (?)", (name,))
                ids[name] = int(cursor.lastrowid or 0)
        return ids

    def write_pending(
        self,
        job: str,
        operator: str,
        version: int,
        attempt: str,
        parts: Sequence[PendingPart],
    ) -> list[WriteInfo]:
        infos: list[WriteInfo] = []
        if not parts:
            return infos
        with self._transaction(f"writing checkpoint {version} of {job}/{operator}") as conn:
            self._fault("write:begin")
            op_id = self._operator_id(conn, job, operator)
            names = {name for part in parts for name in part.changes}
            ids = self._intern_tables(conn, names)
            now = time.time()
            rows: list[tuple[int, int, bytes, bytes | None]] = []
            truncates: list[tuple[int, int]] = []
            for part in parts:
                cursor = conn.execute(
                    "INSERT INTO ckpt_writes (operator, key_group, version, full, bytes, rows, "
                    "attempt, created) VALUES (?, ?, ?, ?, 0, 0, ?, ?)",
                    (op_id, part.key_group, version, int(part.full), attempt, now),
                )
                write_id = int(cursor.lastrowid or 0)
                written = count = 0
                for name, change in part.changes.items():
                    tid = ids[name]
                    if change.truncated and not part.full:
                        truncates.append((write_id, tid))
                        count += 1
                    for key, value in change.rows.items():
                        if value is DELETED:
                            if part.full:
                                continue
                            rows.append((write_id, tid, key, None))
                            written += len(key) + ROW_OVERHEAD
                        else:
                            rows.append((write_id, tid, key, value))  # type: ignore[arg-type]
                            written += len(key) + len(value) + ROW_OVERHEAD  # type: ignore[arg-type]
                        count += 1
                infos.append(
                    WriteInfo(write_id, part.key_group, version, part.full, written, count)
                )
            conn.executemany(
                "UPDATE ckpt_writes SET bytes = ?, rows = ? WHERE id = ?",
                [(info.bytes, info.rows, info.write_id) for info in infos],
            )
            self._fault("write:rows")
            conn.executemany("INSERT INTO ckpt_rows VALUES (?, ?, ?, ?)", rows)
            if truncates:
                conn.executemany("INSERT INTO ckpt_truncates VALUES (?, ?)", truncates)
            self._fault("write:end")
        return infos

    def commit(
        self,
        job: str,
        checkpoint_id: int,
        base: int | None,
        write_ids: Sequence[int],
        parallelism: Mapping[str, int],
    ) -> bool:
        with self._transaction(f"committing checkpoint {checkpoint_id} of {job}") as conn:
            self._fault("commit:begin")
            row = conn.execute(
                "SELECT id, last_checkpoint FROM ckpt_jobs WHERE name = ?", (job,)
            ).fetchone()
            if row is None:
                raise CheckpointError(f"job {job!r} does not exist")
            job_id, last = row
            if conn.execute(
                "SELECT 1 FROM ckpt_checkpoints WHERE job = ? AND checkpoint = ?",
                (job_id, checkpoint_id),
            ).fetchone():
                return False
            if last is not None and checkpoint_id <= last:
                raise CheckpointError(
                    f"cannot commit checkpoint {checkpoint_id} of job {job!r}: checkpoint "
                    f"{last} is already committed and checkpoints commit in increasing order"
                )
            if base != last:
                raise CheckpointError(
                    f"cannot commit checkpoint {checkpoint_id} of job {job!r}: its writes were "
                    f"made on top of checkpoint {base}, but the last committed one is {last}"
                )
            ids = sorted(set(write_ids))
            if len(ids) != len(write_ids):
                raise CheckpointError(f"checkpoint {checkpoint_id}: a write is named twice")
            total_bytes = full_writes = 0
            for chunk in _chunks(ids):
                marks = ",".join("?" * len(chunk))
                found = conn.execute(
                    f"SELECT w.id, w.version, w.committed, o.job, w.bytes, w.full "
                    f"FROM ckpt_writes w JOIN ckpt_operators o ON o.id = w.operator "
                    f"WHERE w.id IN ({marks})",
                    list(chunk),
                ).fetchall()
                if len(found) != len(chunk):
                    missing = set(chunk) - {r[0] for r in found}
                    raise CheckpointError(
                        f"checkpoint {checkpoint_id} of job {job!r} names writes that do not "
                        f"exist (collected, or never written): {sorted(missing)[:5]}"
                    )
                for write_id, version, committed, owner, nbytes, full in found:
                    if owner != job_id or version != checkpoint_id or committed:
                        raise CheckpointError(
                            f"write {write_id} cannot be part of checkpoint {checkpoint_id} of "
                            f"job {job!r}: it is version {version}"
                            + (" and already committed" if committed else "")
                            + ("" if owner == job_id else " of another job")
                        )
                    total_bytes += nbytes
                    full_writes += full
            self._fault("commit:mark")
            conn.executemany(
                "UPDATE ckpt_writes SET committed = 1 WHERE id = ?", [(i,) for i in ids]
            )
            conn.execute(
                "UPDATE ckpt_jobs SET last_checkpoint = ? WHERE id = ?", (checkpoint_id, job_id)
            )
            conn.execute(
                "INSERT INTO ckpt_checkpoints VALUES (?, ?, ?, ?, ?, ?)",
                (job_id, checkpoint_id, time.time(), len(ids), total_bytes, full_writes),
            )
            for name, p in parallelism.items():
                conn.execute(
                    "UPDATE ckpt_operators SET parallelism = ? WHERE job = ? AND name = ?",
                    (p, job_id, name),
                )
            self._fault("commit:end")
        return True

    # -- reading ----------------------------------------------------------------------------

    def last_checkpoint(self, job: str) -> int | None:
        with self._lock:
            row = self.connection.execute(
                "SELECT last_checkpoint FROM ckpt_jobs WHERE name = ?", (job,)
            ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def checkpoints(self, job: str) -> list[CheckpointInfo]:
        with self._lock:
            rows = self.connection.execute(
                "SELECT c.checkpoint, c.committed_at, c.writes, c.bytes, c.full_writes "
                "FROM ckpt_checkpoints c JOIN ckpt_jobs j ON j.id = c.job WHERE j.name = ? "
                "ORDER BY c.checkpoint",
                (job,),
            ).fetchall()
        return [CheckpointInfo(*row) for row in rows]

    def chains(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, list[WriteInfo]]:
        with self._lock:
            conn = self.connection
            op_id = self._operator_id(conn, job, operator)
            rows = conn.execute(
                "SELECT id, key_group, version, full, bytes, rows FROM ckpt_writes "
                "WHERE operator = ? AND committed = 1 AND key_group >= ? AND key_group < ? "
                "AND version <= ? ORDER BY key_group, version",
                (op_id, key_groups.start, key_groups.stop, as_of),
            ).fetchall()
        chains: dict[int, list[WriteInfo]] = {}
        for write_id, key_group, version, full, nbytes, count in rows:
            info = WriteInfo(write_id, key_group, version, bool(full), nbytes, count)
            if full:
                chains[key_group] = [info]
            else:
                chains.setdefault(key_group, []).append(info)
        return chains

    def read(
        self, job: str, operator: str, writes: Sequence[WriteInfo]
    ) -> dict[str, dict[bytes, bytes]]:
        parts = []
        with self._lock:
            conn = self.connection
            conn.execute("BEGIN")
            try:
                for info in writes:
                    truncated = {
                        name: True
                        for (name,) in conn.execute(
                            "SELECT t.name FROM ckpt_truncates x JOIN ckpt_tables t "
                            "ON t.id = x.tbl WHERE x.write = ?",
                            (info.write_id,),
                        )
                    }
                    rows = conn.execute(
                        "SELECT t.name, r.key, r.value FROM ckpt_rows r JOIN ckpt_tables t "
                        "ON t.id = r.tbl WHERE r.write = ?",
                        (info.write_id,),
                    ).fetchall()
                    parts.append((truncated, rows))
            finally:
                conn.execute("COMMIT")
        return materialize(parts)

    # -- maintenance ------------------------------------------------------------------------

    def retain(self, job: str, keep_last: int) -> RetentionStats:
        if keep_last < 1:
            raise ValueError(f"keep_last must be at least 1, not {keep_last}")
        stats = RetentionStats()
        with self._transaction(f"retention of job {job!r}") as conn:
            job_id = self._job_id(conn, job)
            if job_id is None:
                raise CheckpointError(f"job {job!r} does not exist")
            kept = [
                c
                for (c,) in conn.execute(
                    "SELECT checkpoint FROM ckpt_checkpoints WHERE job = ? "
                    "ORDER BY checkpoint DESC LIMIT ?",
                    (job_id, keep_last),
                )
            ]
            stats.kept = sorted(kept)
            last = max(kept) if kept else None
            doomed: list[int] = []
            if kept:
                oldest = min(kept)
                stats.checkpoints_dropped = conn.execute(
                    "DELETE FROM ckpt_checkpoints WHERE job = ? AND checkpoint < ?",
                    (job_id, oldest),
                ).rowcount
                # Per key group, the chain of the oldest retained checkpoint starts at its
                # newest full write at or before it; everything older is unreachable.
                doomed = [
                    write_id
                    for (write_id,) in conn.execute(
                        "SELECT w.id FROM ckpt_writes w JOIN ckpt_operators o ON o.id = w.operator "
                        "WHERE o.job = ? AND w.committed = 1 AND w.version < ("
                        "  SELECT MAX(f.version) FROM ckpt_writes f WHERE f.operator = w.operator "
                        "  AND f.key_group = w.key_group AND f.committed = 1 AND f.full = 1 "
                        "  AND f.version <= ?)",
                        (job_id, oldest),
                    )
                ]
                stats.writes_removed = len(doomed)
            if last is not None:
                pending = [
                    write_id
                    for (write_id,) in conn.execute(
                        "SELECT w.id FROM ckpt_writes w JOIN ckpt_operators o ON o.id = w.operator "
                        "WHERE o.job = ? AND w.committed = 0 AND w.version <= ?",
                        (job_id, last),
                    )
                ]
                stats.pending_removed = len(pending)
                doomed += pending
            for chunk in _chunks(doomed):
                marks = ",".join("?" * len(chunk))
                stats.rows_removed += conn.execute(
                    f"DELETE FROM ckpt_rows WHERE write IN ({marks})", list(chunk)
                ).rowcount
                conn.execute(f"DELETE FROM ckpt_truncates WHERE write IN ({marks})", list(chunk))
                conn.execute(f"DELETE FROM ckpt_writes WHERE id IN ({marks})", list(chunk))
        return stats

    def storage_bytes(self) -> int:
        """Bytes of stored rows (keys, values and row overhead) across every job."""
        with self._lock:
            row = self.connection.execute(
                "SELECT COALESCE(SUM(LENGTH(key) + COALESCE(LENGTH(value), 0)), 0) + "
                "COUNT(*) * ? FROM ckpt_rows",
                (ROW_OVERHEAD,),
            ).fetchone()
        return int(row[0])
