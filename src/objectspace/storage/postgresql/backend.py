"""Versioned checkpoint storage in PostgreSQL: ``postgresql://user@host:port/db``.

* Connections come from a bounded ``psycopg_pool`` pool that keeps none idle beyond
  ``max_idle`` seconds and gets one back after every unit of work, so hundreds of Spark
  tasks do not hold hundreds of idle connections.
* Catalog updates run in SERIALIZABLE transactions, retried on serialization failure and
  deadlock with exponential backoff and full jitter, up to ``max_retries``; retries are
  counted in :attr:`PostgresBackend.retries`.
* Blocks are loaded with ``COPY``; every user-given name is a query parameter, never SQL.
* A process forked after the backend was used (Spark's Python daemon forks its workers)
  opens a pool of its own and leaves the parent's connections alone (``storage.forks``).

URL options (query string): ``pool_max`` (default 4), ``pool_idle`` seconds (default 30),
``max_retries`` (default 30), ``connect_timeout`` seconds (default 10), ``schema`` (default
``public``); any other option goes to libpq.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

from objectspace.errors import StorageError
from objectspace.storage import forks
from objectspace.storage.sql.base import SQLBackend
from objectspace.storage.sql.packs import SPAN
from objectspace.storage.sql.schema import POSTGRES_SCHEMA
from objectspace.storage.sql.tx import Tx
from objectspace.storage.urls import redact_text, redact_url

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import sql as pg_sql
    from psycopg_pool import ConnectionPool
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "PostgreSQL storage needs psycopg and psycopg_pool: pip install 'objectspace[postgresql]'"
    ) from exc

__all__ = ["PostgresBackend"]

_R = TypeVar("_R")


# SQLSTATEs worth retrying: serialization_failure, deadlock_detected.
_RETRYABLE = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)


def _pg(sql: str) -> str:
    return sql.replace("?", "%s")


_FEW_ROWS = 8


class _PgTx:
    __slots__ = ("cur",)

    def __init__(self, cur: psycopg.Cursor[Any]) -> None:
        self.cur = cur

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        return self.cur.execute(_pg(sql), params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        # psycopg runs executemany in pipeline mode, and a serialization failure inside it
        # (routine under contention: the transaction is retried) is also logged as "error
        # ignored terminating <psycopg.Pipeline ...>"; a few rows go one statement each.
        if len(rows) <= _FEW_ROWS:
            statement = _pg(sql)
            for row in rows:
                self.cur.execute(statement, row)
        else:
            self.cur.executemany(_pg(sql), rows)

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        return self.cur.execute(_pg(sql), params).fetchone()

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.cur.execute(_pg(sql), params).fetchall()


class PostgresBackend(SQLBackend):
    """Checkpoint catalog and blocks in PostgreSQL (see the module docstring)."""

    DIALECT = "postgresql"

    def __init__(self, url: str) -> None:
        super().__init__()
        parsed = urlparse(url)
        options = dict(parse_qsl(parsed.query))
        try:
            self.pool_max = int(options.pop("pool_max", 4))
            self.pool_idle = float(options.pop("pool_idle", 30))
            self.max_retries = int(options.pop("max_retries", 30))
            self.connect_timeout = int(options.pop("connect_timeout", 10))
        except ValueError as exc:
            raise StorageError(f"bad option in {redact_url(url)!r}: {exc}") from exc
        self.schema = options.pop("schema", "public")
        if self.pool_max < 1:
            raise StorageError(f"pool_max must be >= 1 in {redact_url(url)!r}")
        self.url = url
        scheme = "postgresql" if parsed.scheme in ("postgresql", "postgres") else parsed.scheme
        self._conninfo = urlunparse(parsed._replace(scheme=scheme, query=urlencode(options)))
        self.retries = 0
        self.transactions = 0
        self._pool: ConnectionPool[Any] | None = None
        self._pool_lock = threading.Lock()
        self._schema_ready = False
        forks.register(self)

    def _after_fork_in_child(self) -> None:
        """In a forked child: forget the parent's pool (its connections are the parent's
        sessions) without closing it; the next use opens a pool of the child's own."""
        if self._pool is not None:
            forks.abandon(self._pool)
        self._pool = None
        self._pool_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"PostgresBackend({redact_url(self.url)!r})"

    def _error(self, exc: BaseException) -> str:
        """``exc`` as text without this URL's secrets (a driver may quote its conninfo)."""
        return redact_text(exc, [self.url, self._conninfo])

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(pg_sql.SQL("SET search_path TO {}").format(pg_sql.Identifier(self.schema)))
        conn.commit()

    @property
    def pool(self) -> ConnectionPool[Any]:
        if self._pool is None:
            with self._pool_lock:
                if self._pool is None:
                    pool: ConnectionPool[Any] = ConnectionPool(
                        self._conninfo,
                        kwargs={"connect_timeout": self.connect_timeout},
                        min_size=0,
                        max_size=self.pool_max,
                        max_idle=self.pool_idle,
                        timeout=60,
                        configure=self._configure,
                        open=False,
                        name="objectspace",
                    )
                    try:
                        pool.open(wait=False)
                    except psycopg.Error as exc:
                        raise StorageError(
                            f"cannot connect to {self!r}: {self._error(exc)}"
                        ) from exc
                    self._pool = pool
        return self._pool

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        # A direct connection first: a wrong host, port or database fails here within
        # connect_timeout, where the pool would keep retrying in the background.
        try:
            conn = psycopg.connect(self._conninfo, connect_timeout=self.connect_timeout)
        except psycopg.Error as exc:
            raise StorageError(f"cannot connect to {self!r}: {self._error(exc)}") from exc
        try:
            with conn.transaction():
                self._configure_schema(conn)
        except psycopg.Error as exc:
            raise StorageError(
                f"cannot open checkpoint storage {self!r}: {self._error(exc)}"
            ) from exc
        finally:
            conn.close()
        self._schema_ready = True

    def _columns(self, tx: Tx, table: str) -> set[str]:
        rows = tx.all(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = ?",
            (table,),
        )
        return {str(name) for (name,) in rows}

    def _configure_schema(self, conn: psycopg.Connection[Any]) -> None:
        # One creator at a time: concurrent CREATE ... IF NOT EXISTS can collide.
        conn.execute("SELECT pg_advisory_xact_lock(7368519843)")
        conn.execute(
            pg_sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(pg_sql.Identifier(self.schema))
        )
        conn.execute(
            pg_sql.SQL("SET LOCAL search_path TO {}").format(pg_sql.Identifier(self.schema))
        )
        conn.execute(POSTGRES_SCHEMA)
        with conn.cursor() as cur:
            self._check_schema(_PgTx(cur))

    def _run(self, what: str, work: Callable[[Tx], _R], *, write: bool = True) -> _R:
        self._ensure_schema()
        attempt = 0
        while True:
            try:
                with self.pool.connection() as conn:
                    conn.isolation_level = (
                        psycopg.IsolationLevel.SERIALIZABLE
                        if write
                        else psycopg.IsolationLevel.REPEATABLE_READ
                    )
                    conn.read_only = not write
                    with conn.transaction(), conn.cursor() as cur:
                        result = work(_PgTx(cur))
                    self.transactions += 1
                    return result
            except _RETRYABLE as exc:
                attempt += 1
                self.retries += 1
                if attempt > self.max_retries:
                    raise StorageError(
                        f"{what} failed in {self!r}: still conflicting after "
                        f"{self.max_retries} retries ({exc.sqlstate}: {exc})"
                    ) from exc
                # Exponential backoff with full jitter, capped at 2 s.
                time.sleep(random.uniform(0, min(2.0, 0.005 * 2**attempt)))
            except psycopg.Error as exc:
                raise StorageError(f"{what} failed in {self!r}: {self._error(exc)}") from exc

    def _drop_path_index(self, tx: Tx) -> None:
        tx.execute("ALTER TABLE ckpt_segments DROP CONSTRAINT IF EXISTS ckpt_segments_path_key")

    def _new_pack_id(self, tx: Tx) -> int:
        """From the identity's sequence, times the span (concurrent writers never meet: no
        read of the highest id, which serializable transactions would conflict on)."""
        row = tx.one("SELECT nextval(pg_get_serial_sequence('ckpt_packs', 'id'))")
        assert row is not None
        return int(row[0]) * SPAN

    def _packs_follow(self, tx: Tx, top: int) -> None:
        tx.execute(
            "SELECT setval(pg_get_serial_sequence('ckpt_packs', 'id'), ?, false)",
            (top // SPAN + 1,),
        )

    def _insert_blocks(self, tx: Tx, blocks: list[tuple[int, bytes]]) -> None:
        if not blocks:
            return
        cur = tx.cur  # type: ignore[attr-defined]
        with cur.copy("COPY ckpt_blocks (write, data) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "bytea"])
            for block in blocks:
                copy.write_row(block)
