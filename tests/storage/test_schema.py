"""One SQL schema, rendered per dialect: a SQLite store and a PostgreSQL store agree with each
other and with :mod:`objectspace.storage.sql.schema`, read back from each database."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql as pg_sql

import objectspace as osp
from objectspace.storage.sql import schema

# Schema read back from a database: tables → (columns (name, neutral type, nullable) in
# order, primary key, unique column sets); indexes → (table, columns).
Shape = tuple[
    dict[str, tuple[list[tuple[str, str, bool]], tuple[str, ...], set[tuple[str, ...]]]],
    dict[str, tuple[str, tuple[str, ...]]],
]

_SQLITE_TYPES = {
    "INTEGER": "int32",
    "BIGINT": "int64",
    "REAL": "float",
    "TEXT": "text",
    "BLOB": "bytes",
}
_PG_TYPES = {
    "integer": "int32",
    "bigint": "int64",
    "double precision": "float",
    "text": "text",
    "bytea": "bytes",
}


def expected() -> Shape:
    tables = {
        t.name: (
            [(c.name, c.type, c.nullable) for c in t.columns],
            t.primary_key,
            {*t.unique, *((c.name,) for c in t.columns if c.unique)},
        )
        for t in schema.TABLES
        if not t.legacy  # never created; dropped when converted (ckpt_writes)
    }
    indexes = {i.name: (i.table, i.columns) for i in schema.INDEXES}
    return tables, indexes


def sqlite_shape(path: Path) -> Shape:
    conn = sqlite3.connect(path)
    try:
        tables: dict[str, Any] = {}
        names = [
            n
            for (n,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'ckpt%'"
            )
        ]
        for name in names:
            info = conn.execute(
                'SELECT name, type, "notnull", pk FROM pragma_table_info(?) ORDER BY cid', (name,)
            ).fetchall()
            key = tuple(c for c, _, _, pk in sorted(info, key=lambda r: r[3]) if pk)
            rowid = conn.execute(
                "SELECT sql NOT LIKE '%WITHOUT ROWID%' FROM sqlite_master WHERE name = ?", (name,)
            ).fetchone()[0]
            columns = [
                (
                    c,
                    "id" if key == (c,) and t == "INTEGER" and rowid else _SQLITE_TYPES[t],
                    not (notnull or pk),
                )
                for c, t, notnull, pk in info
            ]
            unique = {
                tuple(
                    col
                    for (col,) in conn.execute(
                        "SELECT name FROM pragma_index_info(?) ORDER BY seqno", (index,)
                    )
                )
                for index, origin in conn.execute(
                    "SELECT name, origin FROM pragma_index_list(?)", (name,)
                )
                if origin == "u"
            }
            tables[name] = (columns, key, unique)
        indexes = {
            index: (
                table,
                tuple(
                    col
                    for (col,) in conn.execute(
                        "SELECT name FROM pragma_index_info(?) ORDER BY seqno", (index,)
                    )
                ),
            )
            for index, table in conn.execute(
                "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
            )
        }
        return tables, indexes
    finally:
        conn.close()


def postgres_shape(url: str) -> Shape:
    base, _, query = url.partition("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(pg_sql.SQL("SET search_path TO {}").format(pg_sql.Identifier(query)))
        tables: dict[str, Any] = {}
        names = [
            n
            for (n,) in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() ORDER BY table_name"
            )
        ]
        for name in names:
            columns = [
                (c, "id" if identity == "YES" else _PG_TYPES[t], nullable == "YES")
                for c, t, nullable, identity in conn.execute(
                    "SELECT column_name, data_type, is_nullable, is_identity "
                    "FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name = %s "
                    "ORDER BY ordinal_position",
                    (name,),
                )
            ]
            constraints: dict[tuple[str, str], list[str]] = {}
            for cname, ctype, column in conn.execute(
                "SELECT tc.constraint_name, tc.constraint_type, k.column_name "
                "FROM information_schema.table_constraints tc "
                "JOIN information_schema.key_column_usage k "
                "ON k.constraint_name = tc.constraint_name AND k.table_schema = tc.table_schema "
                "WHERE tc.table_schema = current_schema() AND tc.table_name = %s "
                "AND tc.constraint_type IN ('PRIMARY KEY', 'UNIQUE') ORDER BY k.ordinal_position",
                (name,),
            ):
                constraints.setdefault((cname, ctype), []).append(column)
            key = next(tuple(c) for (_, t), c in constraints.items() if t == "PRIMARY KEY")
            unique = {tuple(c) for (_, t), c in constraints.items() if t == "UNIQUE"}
            tables[name] = (columns, key, unique)
        indexes: dict[str, tuple[str, tuple[str, ...]]] = {}
        for index, table, column in conn.execute(
            "SELECT i.relname, t.relname, a.attname "
            "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
            "JOIN pg_class t ON t.oid = x.indrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace "
            "CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY AS k(attnum, pos) "
            "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum "
            "WHERE n.nspname = current_schema() "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid) "
            "ORDER BY i.relname, k.pos"
        ):
            _, columns_so_far = indexes.get(index, (table, ()))
            indexes[index] = (table, (*columns_so_far, column))
        return tables, indexes


def _open(url: str) -> None:
    storage = osp.open_storage(url)
    storage.job("j").operator("o", max_key_groups=4)
    storage.close()


def test_sqlite_and_postgresql_agree_with_the_definition(tmp_path: Path, postgres_url: str) -> None:
    path = tmp_path / "state.db"
    _open(f"sqlite:///{path}")
    _open(postgres_url)
    from_sqlite = sqlite_shape(path)
    from_postgres = postgres_shape(postgres_url)
    assert from_sqlite == from_postgres
    assert from_sqlite == expected()


# The SQLite DDL of schema version 1 (before the schema was rendered from one definition):
# int64 columns declared INTEGER, no ckpt_gc_trash, no epoch/parent/digest columns.
_SQLITE_V1 = """
CREATE TABLE ckpt_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ckpt_jobs (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, last_checkpoint INTEGER);
CREATE TABLE ckpt_operators (
    id INTEGER PRIMARY KEY, job INTEGER NOT NULL REFERENCES ckpt_jobs (id), name TEXT NOT NULL,
    max_key_groups INTEGER NOT NULL, parallelism INTEGER, schema_version INTEGER NOT NULL,
    UNIQUE (job, name));
CREATE TABLE ckpt_checkpoints (
    job INTEGER NOT NULL, checkpoint INTEGER NOT NULL, committed_at REAL NOT NULL,
    writes INTEGER NOT NULL, bytes INTEGER NOT NULL, full_writes INTEGER NOT NULL, base BIGINT,
    PRIMARY KEY (job, checkpoint)) WITHOUT ROWID;
CREATE TABLE ckpt_writes (
    id INTEGER PRIMARY KEY, op INTEGER NOT NULL, key_group INTEGER NOT NULL,
    version INTEGER NOT NULL, is_full INTEGER NOT NULL, committed INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL, rows INTEGER NOT NULL, attempt TEXT NOT NULL, created REAL NOT NULL,
    segment INTEGER, seg_offset INTEGER, seg_length INTEGER);
CREATE INDEX ckpt_writes_chain ON ckpt_writes (op, committed, key_group, version);
CREATE INDEX ckpt_writes_segment ON ckpt_writes (segment);
CREATE TABLE ckpt_segments (
    id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, created REAL NOT NULL,
    bytes INTEGER NOT NULL, stamped REAL);
CREATE TABLE ckpt_tables (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE ckpt_rows (
    write INTEGER NOT NULL, tbl INTEGER NOT NULL, key BLOB NOT NULL, value BLOB,
    PRIMARY KEY (write, tbl, key)) WITHOUT ROWID;
CREATE TABLE ckpt_truncates (
    write INTEGER NOT NULL, tbl INTEGER NOT NULL, PRIMARY KEY (write, tbl)) WITHOUT ROWID;
INSERT INTO ckpt_meta VALUES ('schema_version', '1');
"""


def _integer_class(shape: Shape) -> Shape:
    """``shape`` with ``int32`` and ``int64`` merged: SQLite's INTEGER and BIGINT are one affinity."""
    tables, indexes = shape
    merged = {
        name: (
            [(c, "int" if t in ("int32", "int64") else t, n) for c, t, n in columns],
            key,
            unique,
        )
        for name, (columns, key, unique) in tables.items()
    }
    return merged, indexes


def test_a_version_1_sqlite_store_is_migrated_to_the_definition(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(_SQLITE_V1)
    conn.close()
    storage = osp.open_storage(f"sqlite:///{path}")
    assert storage.jobs() == []
    _open(f"sqlite:///{path}")
    storage.close()
    assert _integer_class(sqlite_shape(path)) == _integer_class(expected())


def test_rendered_scripts() -> None:
    """The renderings differ only where the dialects do."""
    sqlite_ddl, postgres_ddl = schema.create_script("sqlite"), schema.create_script("postgresql")
    assert "INTEGER PRIMARY KEY," in sqlite_ddl and "IDENTITY" not in sqlite_ddl
    assert "WITHOUT ROWID" in sqlite_ddl and "WITHOUT ROWID" not in postgres_ddl
    assert "BYTEA" in postgres_ddl and "BLOB" not in postgres_ddl
    assert (
        schema.added_columns("sqlite")
        == schema.added_columns("postgresql")
        == [
            ("ckpt_jobs", "epoch", "BIGINT NOT NULL DEFAULT 0"),
            ("ckpt_checkpoints", "epoch", "BIGINT NOT NULL DEFAULT 0"),
            ("ckpt_writes", "digest", "BIGINT"),
            ("ckpt_writes", "parent", "BIGINT"),
        ]
    )
