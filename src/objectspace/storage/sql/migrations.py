"""Opening a catalog of an older schema version migrates it in place, in the transaction that
opens it (what each version changed: ``docs/formats.md``).

Columns added after version 1 are added (:func:`~objectspace.storage.sql.schema.added_columns`).
Stores of schema version 2 and older kept one row per entry (``ckpt_rows``,
``ckpt_truncates``): each of their writes becomes a block, and the row tables go
(:meth:`Migrations._migrate_rows`). Stores of version 4 and older get their heads from
their committed writes (:meth:`Migrations._fill_heads`). Stores of version 6 and older kept
one row per write (``ckpt_writes``): each becomes a pack of one write with the same id
(:meth:`Migrations._pack_writes`), and the heads of ``ckpt_heads`` are packed in chunks
(:meth:`Migrations._pack_heads`). Indexes of older versions are dropped.
"""

from __future__ import annotations

from abc import abstractmethod

from objectspace.errors import CorruptStateError, StorageError
from objectspace.storage.blocks import block_digest, encode_block
from objectspace.storage.sql.heads import Heads
from objectspace.storage.sql.packs import Entry, encode_entries
from objectspace.storage.sql.schema import DROPPED_INDEXES, added_columns
from objectspace.storage.sql.tx import COMPACTION, Tx, _chunks, _marks
from objectspace.storage.urls import redact_url
from objectspace.tables import DELETED, TableChanges

__all__ = ["SCHEMA_VERSION", "Migrations"]

SCHEMA_VERSION = 7
"""The catalog's schema version; each version's changes are listed in ``docs/formats.md``.
A store of an older version is migrated when it is opened (:meth:`Migrations._check_schema`);
a newer one is refused."""


class Migrations(Heads):
    """The schema check and the migrations of older catalogs."""

    def _check_schema(self, tx: Tx) -> None:
        row = tx.one("SELECT value FROM ckpt_meta WHERE name = 'schema_version'")
        if row is None:
            tx.execute(
                "INSERT INTO ckpt_meta VALUES ('schema_version', ?) ON CONFLICT (name) DO NOTHING",
                (str(SCHEMA_VERSION),),
            )
        elif int(row[0]) > SCHEMA_VERSION:
            raise StorageError(
                f"checkpoint storage {redact_url(self.url)!r} has schema version {row[0]}, newer than "
                f"this objectspace understands ({SCHEMA_VERSION}); upgrade objectspace"
            )
        # Migrate a store of an older schema version (or one just created) in place: the
        # columns added after version 1 (:func:`schema.added_columns`).
        for table, column, declaration in added_columns(self.DIALECT):
            existing = self._columns(tx, table)
            if existing and column not in existing:  # (a legacy table only where it exists)
                tx.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
        if self._columns(tx, "ckpt_rows"):
            self._migrate_rows(tx)
        if row is not None and int(row[0]) < 6:
            # Version 5 indexes writes by (op, version, key_group) (created with the tables),
            # version 6 by nothing else: the indexes of versions 1..5 go.
            for index in DROPPED_INDEXES:
                tx.execute(f"DROP INDEX IF EXISTS {index}")
        legacy_writes = bool(self._columns(tx, "ckpt_writes"))
        if self._columns(tx, "ckpt_heads"):
            self._pack_heads(tx)  # version 7 packs the heads of versions 5 and 6
        elif row is not None and int(row[0]) < 5 and legacy_writes:
            self._fill_heads(tx)  # version 5 keeps each key group's head
        if legacy_writes:
            self._pack_writes(tx)  # version 7 keeps writes in packs
        if row is not None and int(row[0]) < 7:
            self._drop_path_index(tx)  # version 7 has no index of segments by path
        if row is not None and int(row[0]) < SCHEMA_VERSION:
            tx.execute(
                "UPDATE ckpt_meta SET value = ? WHERE name = 'schema_version'",
                (str(SCHEMA_VERSION),),
            )

    def _fill_heads(self, tx: Tx) -> None:
        """Find the heads from the committed writes (a store of schema version 4 or older):
        per operator and key group, the newest committed write in (version, id) order."""
        rows = tx.all(
            "SELECT w.op, w.key_group, w.id, w.version, "
            "CASE WHEN w.attempt = ? THEN 1 ELSE 0 END, w.parent FROM ckpt_writes w "
            "WHERE w.committed = 1 AND NOT EXISTS (SELECT 1 FROM ckpt_writes n "
            "WHERE n.op = w.op AND n.key_group = w.key_group AND n.committed = 1 AND "
            "(n.version > w.version OR (n.version = w.version AND n.id > w.id)))",
            (COMPACTION,),
        )
        tx.execute("DELETE FROM ckpt_head_chunks")
        self._store_head_rows(tx, rows)

    def _pack_heads(self, tx: Tx) -> None:
        """Pack the rows of ``ckpt_heads`` (schema versions 5 and 6) into chunks, and drop
        the table."""
        self._store_head_rows(
            tx, tx.all("SELECT op, key_group, head, version, compaction, parent FROM ckpt_heads")
        )
        tx.execute("DROP TABLE ckpt_heads")

    def _pack_writes(self, tx: Tx) -> None:
        """Turn each write of ``ckpt_writes`` (a store of schema version 6 or older) into a
        pack of that one write with the same id, and drop the table; in the transaction
        that opens the store. The pack ids that follow start above every write id."""
        rows = tx.all(
            "SELECT id, op, key_group, version, is_full, committed, bytes, rows, attempt, "
            "created, segment, seg_offset, seg_length, digest, parent FROM ckpt_writes "
            "ORDER BY id"
        )
        packs = []
        for (
            wid,
            op,
            group,
            version,
            full,
            committed,
            nbytes,
            count,
            attempt,
            created,
            segment,
            offset,
            length,
            digest,
            parent,
        ) in rows:
            entry = Entry(
                0,
                int(group),
                bool(full),
                int(nbytes),
                int(count),
                int(offset or 0),
                int(length or 0),
                None if digest is None else int(digest),
                None if parent is None else int(parent),
            )
            packs.append(
                (
                    int(wid),
                    int(op),
                    int(version),
                    int(committed),
                    str(attempt),
                    float(created),
                    segment,
                    encode_entries([entry], segment is not None),
                )
            )
        tx.executemany(
            "INSERT INTO ckpt_packs (id, op, version, committed, attempt, created, segment, "
            "entries) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            packs,
        )
        tx.execute("DROP TABLE ckpt_writes")
        self._packs_follow(tx, max((p[0] for p in packs), default=0))

    @abstractmethod
    def _drop_path_index(self, tx: Tx) -> None:
        """Drop the unique index of segment paths that ``ckpt_segments`` had before schema
        version 7, if it has it."""

    def _migrate_rows(self, tx: Tx) -> None:
        """Convert a store of schema version 2 or older (one row per entry in ``ckpt_rows``
        and ``ckpt_truncates``) into blocks, write by write, and drop the row tables; in
        the transaction that opens the store. Each write's digest becomes its block's
        checksum; its bytes, the block's size."""
        names = {int(tid): str(name) for tid, name in tx.all("SELECT id, name FROM ckpt_tables")}
        writes = [
            (int(wid), bool(full))
            for wid, full in tx.all(
                "SELECT id, is_full FROM ckpt_writes WHERE segment IS NULL ORDER BY id"
            )
        ]
        pending: list[tuple[int, bool, dict[str, TableChanges]]] = []
        for chunk in _chunks(writes):
            marks = _marks(len(chunk))
            ids = [wid for wid, _ in chunk]
            changes: dict[int, dict[str, TableChanges]] = {wid: {} for wid in ids}
            truncates = tx.all(
                f"SELECT write, tbl FROM ckpt_truncates WHERE write IN ({marks})", ids
            )
            rows = tx.all(
                f"SELECT write, tbl, key, value FROM ckpt_rows WHERE write IN ({marks}) "
                "ORDER BY write, tbl, key",
                ids,
            )
            for wid, tbl, key, value in [(w, t, None, None) for w, t in truncates] + rows:
                name = names.get(int(tbl))
                if name is None:
                    raise CorruptStateError(
                        f"cannot convert {self!r} to blocks: write {wid} names table id {tbl}, "
                        "which has no name in ckpt_tables"
                    )
                table = changes[int(wid)].setdefault(name, TableChanges())
                if key is None:
                    table.truncated = True
                else:
                    table.rows[bytes(key)] = DELETED if value is None else bytes(value)
            pending.extend((wid, full, changes[wid]) for wid, full in chunk)
        for chunk in _chunks(pending):
            blocks = []
            for wid, full, table_changes in chunk:
                block, count = encode_block(table_changes, full)
                tx.execute(
                    "UPDATE ckpt_writes SET bytes = ?, rows = ?, digest = ? WHERE id = ?",
                    (len(block), count, block_digest(block), wid),
                )
                blocks.append((wid, block))
            self._insert_blocks(tx, blocks)
        tx.execute("DROP TABLE ckpt_truncates")
        tx.execute("DROP TABLE ckpt_rows")
