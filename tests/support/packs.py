"""The catalog's writes as rows, read from and written back to ``ckpt_packs`` on a raw
connection (a ``sqlite3.Connection`` or a DB-API cursor-like object with ``execute``): what
tests that inspect or tamper with the catalog need since writes are packed (schema
version 7)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from objectspace.storage.sql.packs import Entry, Head, decode_entries, decode_heads, encode_entries

__all__ = [
    "LEGACY_WRITES",
    "Write",
    "delete_write",
    "edit_write",
    "heads",
    "unpack_to_legacy",
    "writes",
]


@dataclass(frozen=True)
class Write:
    """One write of the catalog, as a row of the former ``ckpt_writes``."""

    id: int
    pack: int
    op: int
    key_group: int
    version: int
    full: bool
    committed: bool
    bytes: int
    rows: int
    attempt: str
    created: float
    segment: int | None
    seg_offset: int
    seg_length: int
    digest: int | None
    parent: int | None


def _packs(conn: Any, mark: str = "?") -> Iterator[tuple[Any, ...]]:
    yield from conn.execute(
        "SELECT id, op, version, committed, attempt, created, segment, entries FROM ckpt_packs "
        "ORDER BY id"
    ).fetchall()


def writes(conn: Any) -> list[Write]:
    """Every write of the catalog, in id order."""
    found = []
    for pid, op, version, committed, attempt, created, segment, data in _packs(conn):
        for e in decode_entries(bytes(data), f"pack {pid}"):
            found.append(
                Write(
                    pid + e.offset,
                    pid,
                    op,
                    e.key_group,
                    version,
                    e.full,
                    bool(committed),
                    e.bytes,
                    e.rows,
                    attempt,
                    created,
                    segment,
                    e.seg_offset,
                    e.seg_length,
                    e.digest,
                    e.parent,
                )
            )
    return sorted(found, key=lambda w: w.id)


def _rewrite(conn: Any, write_id: int, change: Any, mark: str) -> bool:
    for pid, _, _, _, _, _, segment, data in _packs(conn):
        entries = list(decode_entries(bytes(data), f"pack {pid}"))
        for i, e in enumerate(entries):
            if pid + e.offset == write_id:
                new: Entry | None = change(e)
                if new is None:
                    del entries[i]
                else:
                    entries[i] = new
                if entries:
                    conn.execute(
                        f"UPDATE ckpt_packs SET entries = {mark} WHERE id = {mark}",
                        (encode_entries(entries, segment is not None), pid),
                    )
                else:
                    conn.execute(f"DELETE FROM ckpt_packs WHERE id = {mark}", (pid,))
                return True
    return False


def edit_write(conn: Any, write_id: int, *, mark: str = "?", **fields: Any) -> bool:
    """Change fields of a write's entry (``rows``, ``digest``, ``bytes``, ``parent``...);
    whether the write exists. ``mark``: the connection's parameter mark."""
    return _rewrite(conn, write_id, lambda e: e._replace(**fields), mark)


def delete_write(conn: Any, write_id: int, *, mark: str = "?") -> bool:
    """Remove a write from its pack (the pack with it if it was the last); whether it
    existed."""
    return _rewrite(conn, write_id, lambda e: None, mark)


LEGACY_WRITES = """CREATE TABLE ckpt_writes (
    id INTEGER PRIMARY KEY,
    op BIGINT NOT NULL,
    key_group INTEGER NOT NULL,
    version BIGINT NOT NULL,
    is_full INTEGER NOT NULL,
    committed INTEGER NOT NULL DEFAULT 0,
    bytes BIGINT NOT NULL,
    rows BIGINT NOT NULL,
    attempt TEXT NOT NULL,
    created REAL NOT NULL,
    segment BIGINT,
    seg_offset BIGINT,
    seg_length BIGINT,
    digest BIGINT,
    parent BIGINT
)"""
"""``ckpt_writes`` as schema version 6 declared it (with the columns added by then)."""


def unpack_to_legacy(conn: Any) -> None:
    """Turn the packs of a SQLite store back into one ``ckpt_writes`` row per write (the
    layout of schema version 6 and older), with their ids: a store that the migration of
    an older version must pack again. The caller sets the schema version it stands for."""
    found = writes(conn)
    conn.execute(LEGACY_WRITES)
    conn.executemany(
        "INSERT INTO ckpt_writes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                w.id,
                w.op,
                w.key_group,
                w.version,
                int(w.full),
                int(w.committed),
                w.bytes,
                w.rows,
                w.attempt,
                w.created,
                w.segment,
                w.seg_offset,
                w.seg_length,
                w.digest,
                w.parent,
            )
            for w in found
        ],
    )
    conn.execute("DELETE FROM ckpt_packs")


def heads(conn: Any) -> dict[tuple[int, int], Head]:
    """Every head of the catalog: (operator id, key group) → its head."""
    found = {}
    for op, chunk, data in conn.execute(
        "SELECT op, chunk, heads FROM ckpt_head_chunks ORDER BY op, chunk"
    ).fetchall():
        for group, head in decode_heads(bytes(data), f"chunk {chunk}").items():
            found[(int(op), group)] = head
    return found
