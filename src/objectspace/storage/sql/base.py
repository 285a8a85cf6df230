"""The checkpoint catalog and block store in SQL, shared by the SQLite and PostgreSQL backends.

Layout: a catalog (jobs, operators, checkpoints, writes, segment files) and the data of
every write as one block (:mod:`objectspace.storage.blocks`): a row ``(write id, bytes)`` of
``ckpt_blocks``, or a range of a segment file that the write references by path, offset and
length. Blocks are appended in write-id order, so they land at the end of their B-tree. The
writes one transaction stores for one operator at one version share one row of
``ckpt_packs`` (:mod:`objectspace.storage.sql.packs`): a checkpoint adds a row per operator
and save to the catalog, not a row and an index entry per key group.

A dialect subclass supplies connections and transactions (:meth:`SQLBackend._run`), the
schema (the DDL of both dialects is in :mod:`objectspace.storage.sql.schema`), pack ids and
bulk block insertion. SQL here is written with ``?`` parameters.

Blocks are verified on read (:func:`objectspace.storage.blocks.replay`): each write's
catalog entry keeps its row count and its block's checksum as its digest (``None`` in stores
written before digests existed: those are not cross-checked), and a restore checks every
write of its chains is there, with its block and its table names, and that no retained
checkpoint lost one of its writes. Any mismatch raises
:class:`~objectspace.CorruptStateError` naming the job, operator, key group and checkpoint.

Stores of schema version 2 and older kept one row per entry (``ckpt_rows``,
``ckpt_truncates``): opening one converts each of its writes into a block, in one
transaction, and drops the row tables (:meth:`SQLBackend._migrate_rows`). Stores of
version 6 and older kept one row per write (``ckpt_writes``): opening one turns each into a
pack of one write with the same id (:meth:`SQLBackend._pack_writes`).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

from objectspace.errors import (
    CheckpointConflictError,
    CheckpointError,
    CorruptStateError,
    StorageError,
)
from objectspace.storage.blocks import (
    Block,
    Dictionary,
    block_digest,
    block_intact,
    encode_block,
    replay,
    sample,
)
from objectspace.storage.contract import (
    CheckpointInfo,
    OperatorInfo,
    PendingPart,
    RetentionStats,
    StagedWrite,
    WriteInfo,
    WriteSummary,
)
from objectspace.storage.sql.catalog import SegmentEntry, SegmentPlacement, stage_parts
from objectspace.storage.sql.packs import (
    HEAD_CHUNK,
    SPAN,
    Entry,
    Head,
    Pack,
    decode_entries,
    decode_heads,
    encode_entries,
    encode_heads,
)
from objectspace.storage.sql.schema import DROPPED_INDEXES, Dialect, added_columns
from objectspace.storage.sql.segment_queries import SegmentQueries, _chunks, _marks
from objectspace.storage.urls import redact_url
from objectspace.tables import DELETED, ROW_OVERHEAD, TableChanges

__all__ = ["ROW_OVERHEAD", "SCHEMA_VERSION", "SQLBackend", "SegmentEntry", "Tx"]

SCHEMA_VERSION = 7
"""7: writes packed per operator, version and transaction in ``ckpt_packs``, heads per 64 key
groups in ``ckpt_head_chunks``; 6: blocks name
their table folders (templates for numbered ones), no index by segment; 5: writes indexed
by (op, version, key_group), heads in ``ckpt_heads``; 4: writes indexed by (op, key_group,
version), a commit rewrites no index entry; 3: one block per write in ``ckpt_blocks`` (2 and
older: one row per entry in ``ckpt_rows``)."""

# The attempt name of the committed full writes that compaction adds.
COMPACTION = "compaction"
# The attempt name of the writes a commit stores itself (staged writes): an attempt name
# tells pending writes apart, and these are never pending outside the commit; empty, it
# costs a pack no bytes.
_COMMITTED_ATTEMPT = ""
# Their ``created``: 0, which SQLite stores in no byte (the commit's time is the
# checkpoint's ``committed_at``); a pending write records when it was stored.
_COMMITTED_CREATED = 0.0


def _stamp() -> float:
    """``ckpt_packs.created``: when a write was stored, in whole seconds (SQLite stores a
    whole ``REAL`` as a 4-byte integer, a fractional one in 8 bytes; nothing reads it
    finer)."""
    return float(int(time.time()))


_R = TypeVar("_R")

# Packs read per query when walking back from the newest (heads as of an older checkpoint).
_PACK_PAGE = 64


class Tx(Protocol):
    """One transaction: statements with ``?`` parameters."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any: ...
    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...
    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None: ...
    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...


class SQLBackend(SegmentQueries):
    """Catalog and row storage over a SQL database; see the module docstring.

    ``fault_hook``, when set, is called with the name of each step of a write or commit
    (:attr:`STEPS`) inside its transaction; an exception it raises aborts the transaction.
    Tests use it to interrupt the protocol anywhere.
    """

    STEPS: ClassVar[tuple[str, ...]] = (
        "write:begin",
        "write:rows",
        "write:end",
        "commit:begin",
        "commit:mark",
        "commit:end",
    )

    url: str

    def __init__(self) -> None:
        self.fault_hook: Callable[[str], None] | None = None
        self._names_by_id: dict[int, str] = {}
        # Trained dictionaries: per operator id (writers), and their bytes by id (readers);
        # both only of committed rows, which never change.
        self._op_dictionaries: dict[int, Dictionary] = {}
        self._dictionaries: dict[int, bytes] = {}
        self._dictionary_by_name: dict[tuple[str, str], Dictionary] = {}
        # Per job, ranges of checkpoints (after, upto] found to hold all their writes.
        self._complete: dict[str, list[tuple[int, int]]] = {}

    # -- what a dialect provides ------------------------------------------------------------

    @abstractmethod
    def _run(self, what: str, work: Callable[[Tx], _R], *, write: bool = True) -> _R:
        """Run ``work`` in one transaction and commit it; roll back if it raises.

        Errors of the database become :class:`~objectspace.StorageError` naming ``what``.
        A dialect may retry ``work`` on transient conflicts.
        """

    def _insert_blocks(self, tx: Tx, blocks: list[tuple[int, bytes]]) -> None:
        """Store ``(write id, block)`` pairs (in write-id order: appended to the table)."""
        tx.executemany("INSERT INTO ckpt_blocks (write, data) VALUES (?, ?)", blocks)

    def _fault(self, step: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(step)

    DIALECT: ClassVar[Dialect]
    """Which rendering of :mod:`objectspace.storage.sql.schema` the store uses."""

    @abstractmethod
    def _columns(self, tx: Tx, table: str) -> set[str]:
        """The names of the columns of ``table``."""

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

    def _store_head_rows(self, tx: Tx, rows: Sequence[Sequence[Any]]) -> None:
        """Store heads given as rows ``(op, key group, write, version, compaction,
        parent)``, in chunks."""
        heads: dict[int, dict[int, Head]] = {}
        for op, group, wid, version, compaction, parent in rows:
            heads.setdefault(int(op), {})[int(group)] = Head(
                int(wid), int(version), bool(compaction), None if parent is None else int(parent)
            )
        for op, found in sorted(heads.items()):
            self._store_heads(tx, op, found)

    @staticmethod
    def _store_heads(tx: Tx, op_id: int, heads: Mapping[int, Head]) -> None:
        """Write the chunks of ``heads`` (every head of each chunk named)."""
        chunks: dict[int, dict[int, Head]] = {}
        for group, head in heads.items():
            chunks.setdefault(group // HEAD_CHUNK, {})[group] = head
        tx.executemany(
            "INSERT INTO ckpt_head_chunks (op, chunk, heads) VALUES (?, ?, ?) "
            "ON CONFLICT (op, chunk) DO UPDATE SET heads = excluded.heads",
            [(op_id, chunk, encode_heads(found)) for chunk, found in sorted(chunks.items())],
        )

    def _read_heads(self, tx: Tx, op_id: int, key_groups: Sequence[int] | range) -> dict[int, Head]:
        """The heads of ``key_groups`` that have one (one query per 500 chunks)."""
        if isinstance(key_groups, range):
            rows = tx.all(
                "SELECT chunk, heads FROM ckpt_head_chunks WHERE op = ? AND chunk >= ? "
                "AND chunk <= ?",
                (op_id, key_groups.start // HEAD_CHUNK, (key_groups.stop - 1) // HEAD_CHUNK),
            )
        else:
            rows = []
            for chunk in _chunks(sorted({g // HEAD_CHUNK for g in key_groups})):
                rows += tx.all(
                    "SELECT chunk, heads FROM ckpt_head_chunks WHERE op = ? AND chunk IN "
                    f"({_marks(len(chunk))})",
                    [op_id, *chunk],
                )
        wanted = key_groups if isinstance(key_groups, range) else set(key_groups)
        found: dict[int, Head] = {}
        for chunk, data in rows:
            try:
                chunk_heads = decode_heads(data, f"key groups {int(chunk) * HEAD_CHUNK}..")
            except CorruptStateError as exc:
                raise CorruptStateError(
                    f"{self._operator_names(tx, op_id)} in {self!r}: {exc}"
                ) from exc
            for group, head in chunk_heads.items():
                if group in wanted:
                    found[group] = head
        return found

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

    def _packs_follow(self, tx: Tx, top: int) -> None:
        """New pack ids must exceed ``top`` (the highest id the converted writes kept): a
        dialect that numbers packs from a sequence moves it on."""

    def _new_pack_id(self, tx: Tx) -> int:
        """The id of a new pack: the next multiple of :data:`~objectspace.storage.sql.packs.SPAN`
        above every pack's id (its writes then cannot meet another pack's)."""
        row = tx.one("SELECT MAX(id) FROM ckpt_packs")
        top = 0 if row is None or row[0] is None else int(row[0])
        return (top // SPAN + 1) * SPAN

    _PACK_COLUMNS = "p.id, p.op, p.version, p.committed, p.attempt, p.created, p.segment, p.entries"

    @staticmethod
    def _operator_names(tx: Tx, op_id: int) -> str:
        """``job 'j' operator 'o'`` of an operator id, for errors (its id if it has no row)."""
        row = tx.one(
            "SELECT j.name, o.name FROM ckpt_operators o JOIN ckpt_jobs j ON j.id = o.job "
            "WHERE o.id = ?",
            (op_id,),
        )
        return f"operator id {op_id}" if row is None else f"job {row[0]!r} operator {row[1]!r}"

    def _decode_pack(self, tx: Tx, row: Sequence[Any]) -> Pack:
        pid, op, version, committed, attempt, created, segment, entries = row
        try:
            decoded = decode_entries(entries, f"pack {pid}")
        except CorruptStateError as exc:
            raise CorruptStateError(
                f"{self._operator_names(tx, int(op))} checkpoint {version} in {self!r}: {exc}"
            ) from exc
        return Pack(
            int(pid),
            int(op),
            int(version),
            bool(committed),
            str(attempt),
            float(created),
            None if segment is None else int(segment),
            decoded,
        )

    def _packs(self, tx: Tx, where: str, params: Sequence[Any] = ()) -> list[Pack]:
        """The packs ``SELECT ... FROM ckpt_packs p {where}`` finds, decoded."""
        return [
            self._decode_pack(tx, row)
            for row in tx.all(f"SELECT {self._PACK_COLUMNS} FROM ckpt_packs p {where}", params)
        ]

    def _insert_pack(
        self,
        tx: Tx,
        op_id: int,
        version: int,
        attempt: str,
        entries: Sequence[Entry],
        *,
        committed: bool = False,
        segment: int | None = None,
    ) -> list[int]:
        """Store ``entries`` (their offsets are ignored: 0, 1, ...) as one pack; their write
        ids, in order."""
        pack_id = self._new_pack_id(tx)
        entries = [e._replace(offset=i) for i, e in enumerate(entries)]
        tx.execute(
            "INSERT INTO ckpt_packs (id, op, version, committed, attempt, created, segment, "
            "entries) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                pack_id,
                op_id,
                version,
                int(committed),
                attempt,
                _COMMITTED_CREATED if attempt == _COMMITTED_ATTEMPT else _stamp(),
                segment,
                encode_entries(entries, segment is not None),
            ),
        )
        return [pack_id + i for i in range(len(entries))]

    def _writes_by_id(self, tx: Tx, ids: Sequence[int]) -> dict[int, tuple[Pack, Entry]]:
        """The pack and entry of each of ``ids`` that exists: one query per 250 ids. A write
        lives in the pack whose id is its own (a write of an older store) or the multiple of
        :data:`~objectspace.storage.sql.packs.SPAN` below it."""
        found: dict[int, tuple[Pack, Entry]] = {}
        wanted = sorted(set(ids))
        for chunk in _chunks(wanted, 250):
            candidates = sorted({*chunk, *(w - w % SPAN for w in chunk)})
            packs = self._packs(tx, f"WHERE p.id IN ({_marks(len(candidates))})", candidates)
            offsets = {pack.id: (pack, {e.offset: e for e in pack.entries}) for pack in packs}
            for w in chunk:
                for base in (w, w - w % SPAN):
                    held = offsets.get(base)
                    if held is None:
                        continue
                    pack, entries = held
                    entry = entries.get(w - base)
                    if entry is not None:
                        found[w] = (pack, entry)
                        break
        return found

    def _advance_heads(
        self, tx: Tx, op_id: int, written: Sequence[tuple[int, int, int, bool, int | None]]
    ) -> None:
        """Make each just committed write ``(write, key_group, version, compaction,
        parent)`` its key group's head, unless the head is newer in (version, id) order (a
        compaction of an older checkpoint): the chunks of the written key groups, read and
        rewritten."""
        groups = [group for _, group, *_ in written]
        chunks = {g // HEAD_CHUNK for g in groups}
        heads = self._read_heads(
            tx, op_id, [c * HEAD_CHUNK + i for c in sorted(chunks) for i in range(HEAD_CHUNK)]
        )
        for wid, group, version, compaction, parent in written:
            old = heads.get(group)
            if old is None or (version, wid) > (old.version, old.write):
                heads[group] = Head(wid, version, compaction, parent)
        self._store_heads(tx, op_id, heads)

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

    # -- catalog ----------------------------------------------------------------------------

    @staticmethod
    def _job_id(tx: Tx, job: str) -> int | None:
        row = tx.one("SELECT id FROM ckpt_jobs WHERE name = ?", (job,))
        return None if row is None else int(row[0])

    @staticmethod
    def _operator_row(tx: Tx, job: str, operator: str) -> tuple[Any, ...] | None:
        return tx.one(
            "SELECT o.id, o.max_key_groups, o.parallelism, o.schema_version FROM ckpt_operators o "
            "JOIN ckpt_jobs j ON j.id = o.job WHERE j.name = ? AND o.name = ?",
            (job, operator),
        )

    @staticmethod
    def _column_by_id(tx: Tx, table: str, column: str, ids: set[int]) -> dict[int, Any]:
        """``column`` of each row of ``table`` whose ``id`` is one of ``ids`` (rows that
        exist): one query per 500 ids."""
        found: dict[int, Any] = {}
        for chunk in _chunks(sorted(ids)):
            for rid, value in tx.all(
                f"SELECT id, {column} FROM {table} WHERE id IN ({_marks(len(chunk))})",
                list(chunk),
            ):
                found[int(rid)] = value
        return found

    def _operator_id(self, tx: Tx, job: str, operator: str) -> int:
        row = self._operator_row(tx, job, operator)
        if row is None:
            raise CheckpointError(f"operator {operator!r} of job {job!r} does not exist")
        return int(row[0])

    def ensure_operator(
        self, job: str, operator: str, max_key_groups: int | None, schema_version: int | None
    ) -> OperatorInfo:
        version = 1 if schema_version is None else schema_version

        def work(tx: Tx) -> OperatorInfo:
            row = self._operator_row(tx, job, operator)
            if row is None:
                if max_key_groups is None:
                    raise CheckpointError(
                        f"operator {operator!r} of job {job!r} does not exist; give "
                        "max_key_groups to create it"
                    )
                orphan = tx.one(
                    "SELECT p.op, p.version FROM ckpt_packs p WHERE NOT EXISTS "
                    "(SELECT 1 FROM ckpt_operators o WHERE o.id = p.op) LIMIT 1"
                )
                if orphan is not None:
                    raise CorruptStateError(
                        f"cannot create operator {operator!r} of job {job!r} in {self!r}: the "
                        f"catalog holds writes (checkpoint {orphan[1]}) of operator id "
                        f"{orphan[0]}, whose operator row is missing"
                    )
                tx.execute(
                    "INSERT INTO ckpt_jobs (name) VALUES (?) ON CONFLICT (name) DO NOTHING", (job,)
                )
                tx.execute(
                    "INSERT INTO ckpt_operators (job, name, max_key_groups, schema_version) "
                    "VALUES (?, ?, ?, ?)",
                    (self._job_id(tx, job), operator, max_key_groups, version),
                )
                return OperatorInfo(job, operator, max_key_groups, None, version)
            op_id, stored_max, parallelism, stored_schema = row
            if max_key_groups is not None and max_key_groups != stored_max:
                raise CheckpointError(
                    f"operator {operator!r} of job {job!r} was created with max_key_groups="
                    f"{stored_max}; it cannot be reopened with max_key_groups={max_key_groups} "
                    "(the key space is fixed for the life of the state)"
                )
            if schema_version is not None and schema_version != stored_schema:
                tx.execute(
                    "UPDATE ckpt_operators SET schema_version = ? WHERE id = ?",
                    (schema_version, op_id),
                )
                stored_schema = schema_version
            return OperatorInfo(job, operator, stored_max, parallelism, stored_schema)

        return self._run(f"opening operator {job}/{operator}", work)

    def operator_info(self, job: str, operator: str) -> OperatorInfo | None:
        row = self._run(
            "reading an operator", lambda tx: self._operator_row(tx, job, operator), write=False
        )
        return None if row is None else OperatorInfo(job, operator, row[1], row[2], row[3])

    def jobs(self) -> list[str]:
        rows = self._run(
            "listing jobs",
            lambda tx: tx.all("SELECT name FROM ckpt_jobs ORDER BY name"),
            write=False,
        )
        return [name for (name,) in rows]

    def operators(self, job: str) -> list[OperatorInfo]:
        rows = self._run(
            "listing operators",
            lambda tx: tx.all(
                "SELECT o.name, o.max_key_groups, o.parallelism, o.schema_version "
                "FROM ckpt_operators o JOIN ckpt_jobs j ON j.id = o.job WHERE j.name = ? "
                "ORDER BY o.name",
                (job,),
            ),
            write=False,
        )
        return [OperatorInfo(job, *row) for row in rows]

    # -- writing ----------------------------------------------------------------------------

    def _insert_write(
        self,
        tx: Tx,
        op_id: int,
        key_group: int,
        version: int,
        full: bool,
        attempt: str,
        nbytes: int,
        rows: int,
        *,
        committed: bool = False,
        digest: int | None = None,
        parent: int | None = None,
    ) -> int:
        """Store one write as a pack of its own (a compaction's)."""
        if committed and attempt == COMPACTION:
            parent = self._compacted_origin(tx, op_id, key_group, version)
        [write_id] = self._insert_pack(
            tx,
            op_id,
            version,
            attempt,
            [Entry(0, key_group, full, nbytes, rows, 0, 0, digest, parent)],
            committed=committed,
        )
        if committed:
            self._advance_heads(
                tx, op_id, [(write_id, key_group, version, attempt == COMPACTION, parent)]
            )
        return write_id

    def _newest_as_of(
        self, tx: Tx, op_id: int, key_groups: Sequence[int], as_of: int
    ) -> dict[int, tuple[int, int, str, int | None]]:
        """Per key group of ``key_groups`` with a committed write as of ``as_of``: the
        newest in (version, id) order, as (id, version, attempt, parent); read from the
        newest packs back (for heads newer than ``as_of``: restores of an older
        checkpoint)."""
        wanted = set(key_groups)
        found: dict[int, tuple[int, int, str, int | None]] = {}
        # newest first, a page of packs at a time: a key group written recently stops the
        # walk early (a pack's entries hold a key group once)
        after: tuple[int, int] | None = None
        while len(found) < len(wanted):
            where = "WHERE p.op = ? AND p.committed = 1 AND p.version <= ?"
            params: list[Any] = [op_id, as_of]
            if after is not None:
                where += " AND (p.version < ? OR (p.version = ? AND p.id < ?))"
                params += [after[0], after[0], after[1]]
            page = self._packs(
                tx, f"{where} ORDER BY p.version DESC, p.id DESC LIMIT {_PACK_PAGE}", params
            )
            for pack in page:
                for e in pack.entries:
                    if e.key_group in wanted and e.key_group not in found:
                        found[e.key_group] = (
                            pack.id + e.offset,
                            pack.version,
                            pack.attempt,
                            e.parent,
                        )
            if len(page) < _PACK_PAGE:
                break
            after = (page[-1].version, page[-1].id)
        return found

    def _heads_tx(
        self, tx: Tx, op_id: int, key_groups: Sequence[int], as_of: int
    ) -> dict[int, tuple[int, str, int | None]]:
        """Per key group with committed state as of ``as_of``: its head, the newest
        committed write (id, attempt, parent). From ``ckpt_head_chunks`` when the head is not
        newer than ``as_of``, as at every commit, which builds on the last committed
        checkpoint; otherwise from the packs, newest first (:meth:`_newest_as_of`)."""
        heads: dict[int, tuple[int, str, int | None]] = {}
        older = []
        for group, record in sorted(self._read_heads(tx, op_id, key_groups).items()):
            if record.version <= as_of:
                heads[group] = (
                    record.write,
                    COMPACTION if record.compaction else "",
                    record.parent,
                )
            else:
                older.append(group)
        for key_group, (wid, _, attempt, parent) in self._newest_as_of(
            tx, op_id, older, as_of
        ).items():
            heads[key_group] = (wid, attempt, parent)
        return heads

    def _compacted_origin(self, tx: Tx, op_id: int, key_group: int, version: int) -> int | None:
        """The write a compaction of ``key_group`` as of ``version`` stands for: the head it
        replaces, or that head's origin when the head is a compaction itself. A writer that
        built on the origin built on the same state, so its commit is not refused."""
        head = self._heads_tx(tx, op_id, [key_group], version).get(key_group)
        if head is None:
            return None
        wid, attempt, parent = head
        return parent if attempt == COMPACTION else wid

    supports_staging = True

    def stage_pending(
        self,
        job: str,
        operator: str,
        version: int,
        attempt: str,
        parts: Sequence[PendingPart],
    ) -> list[StagedWrite]:
        return stage_parts(self, job, operator, version, attempt, parts)

    def write_staged(
        self, job: str, operator: str, version: int, attempt: str, staged: Sequence[StagedWrite]
    ) -> list[WriteInfo]:
        if not staged:
            return []

        def work(tx: Tx) -> list[WriteInfo]:
            self._fault("write:begin")
            op_id = self._operator_id(tx, job, operator)
            for w in staged:
                if w.version != version or w.operator != operator:
                    raise CheckpointError(
                        f"staged write of key group {w.key_group} is version {w.version} of "
                        f"operator {w.operator!r}, not version {version} of {operator!r}"
                    )
            write_ids = self._insert_staged(tx, op_id, version, attempt, staged)
            self._fault("write:end")
            return [
                WriteInfo(wid, w.key_group, w.version, w.full, len(w.block), w.rows)
                for wid, w in zip(write_ids, staged, strict=True)
            ]

        return self._run(f"writing checkpoint {version} of {job}/{operator}", work)

    def _insert_staged(
        self, tx: Tx, op_id: int, version: int, attempt: str, staged: Sequence[StagedWrite]
    ) -> list[int]:
        """Insert staged writes of one operator as one pending pack of ``version`` and
        ``attempt`` with their blocks (the commit stores them with attempt
        :data:`_COMMITTED_ATTEMPT`, and their time is not kept)."""
        write_ids = self._insert_pack(
            tx,
            op_id,
            version,
            attempt,
            [
                Entry(0, w.key_group, w.full, len(w.block), w.rows, 0, 0, w.digest, w.parent)
                for w in staged
            ],
        )
        self._fault("write:rows")
        self._insert_blocks(tx, [(wid, w.block) for wid, w in zip(write_ids, staged, strict=True)])
        return write_ids

    def head_digests(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, tuple[int, int, int | None, int | None]]:
        def work(tx: Tx) -> dict[int, tuple[int, int, int | None, int | None]]:
            heads = self._heads_as_of(tx, self._operator_id(tx, job, operator), key_groups, as_of)
            found = {
                wid: (entry.digest, entry.parent)
                for wid, (_, entry) in self._writes_by_id(
                    tx, [wid for wid, _ in heads.values()]
                ).items()
            }
            return {g: (wid, v, *found.get(wid, (None, None))) for g, (wid, v) in heads.items()}

        return self._run("reading chain heads", work, write=False)

    # -- trained dictionaries ---------------------------------------------------------------

    def _operator_dictionary_tx(self, tx: Tx, op_id: int) -> Dictionary | None:
        """The operator's trained dictionary, if it has one (cached once committed)."""
        cached = self._op_dictionaries.get(op_id)
        if cached is not None:
            return cached
        row = tx.one("SELECT id, data FROM ckpt_dictionaries WHERE op = ?", (op_id,))
        return None if row is None else Dictionary(int(row[0]), bytes(row[1]))

    def _store_dictionary_tx(self, tx: Tx, op_id: int, data: bytes) -> Dictionary:
        """Store a dictionary trained for the operator, unless another writer stored one
        first; returns the operator's dictionary (the first one stored)."""
        tx.execute(
            "INSERT INTO ckpt_dictionaries (op, data) VALUES (?, ?) ON CONFLICT (op) DO NOTHING",
            (op_id, data),
        )
        row = tx.one("SELECT id, data FROM ckpt_dictionaries WHERE op = ?", (op_id,))
        assert row is not None
        return Dictionary(int(row[0]), bytes(row[1]))

    def _remember_dictionary(self, op_id: int, dictionary: Dictionary) -> None:
        """Cache a committed dictionary of the operator."""
        self._op_dictionaries[op_id] = dictionary
        self._dictionaries[dictionary.id] = dictionary.data

    def operator_dictionary(self, job: str, operator: str) -> Dictionary | None:
        """The trained dictionary of the operator's blocks, if it has one yet."""

        known = self._dictionary_by_name.get((job, operator))
        if known is not None:
            return known

        def work(tx: Tx) -> tuple[int, Dictionary | None]:
            op_id = self._operator_id(tx, job, operator)
            return op_id, self._operator_dictionary_tx(tx, op_id)

        op_id, dictionary = self._run("reading the operator's dictionary", work, write=False)
        if dictionary is not None:
            self._remember_dictionary(op_id, dictionary)
            self._dictionary_by_name[(job, operator)] = dictionary
        return dictionary

    def offer_dictionary(self, job: str, operator: str, payloads: Sequence[bytes]) -> None:
        """Sample block payloads of the operator (encoded without a trained dictionary);
        once there are enough, train a dictionary and store it (unless one is stored)."""
        data = sample(f"{self.url}#{job}#{operator}", payloads)
        if data is None:
            return

        def work(tx: Tx) -> tuple[int, Dictionary]:
            op_id = self._operator_id(tx, job, operator)
            return op_id, self._store_dictionary_tx(tx, op_id, data)

        op_id, dictionary = self._run("storing the operator's dictionary", work)
        self._remember_dictionary(op_id, dictionary)
        self._dictionary_by_name[(job, operator)] = dictionary

    def dictionary(self, dict_id: int) -> bytes | None:
        """The bytes of trained dictionary ``dict_id`` (``None``: not in the catalog)."""
        data = self._dictionaries.get(dict_id)
        if data is None:
            row = self._run(
                "reading a dictionary",
                lambda tx: tx.one("SELECT data FROM ckpt_dictionaries WHERE id = ?", (dict_id,)),
                write=False,
            )
            if row is None:
                return None
            data = self._dictionaries[dict_id] = bytes(row[0])
        return data

    def reserve_segment(self, path: str) -> int:
        """Record a segment path before its file is written, so no file escapes the GC;
        returns the segment's id."""

        def work(tx: Tx) -> int:
            row = tx.one(
                "INSERT INTO ckpt_segments (path, created, bytes) VALUES (?, ?, 0) RETURNING id",
                (path, time.time()),
            )
            assert row is not None
            return int(row[0])

        return self._run(f"reserving segment {path}", work)

    def table_names(self, ids: Sequence[int]) -> dict[int, str]:
        """Names of interned table ids (ids never change once committed: cached)."""
        cache = self._names_by_id
        missing = sorted({i for i in ids if i not in cache})
        if missing:

            def work(tx: Tx) -> list[tuple[Any, ...]]:
                found: list[tuple[Any, ...]] = []
                for chunk in _chunks(missing):
                    found += tx.all(
                        f"SELECT id, name FROM ckpt_tables WHERE id IN ({_marks(len(chunk))})",
                        list(chunk),
                    )
                return found

            for tid, name in self._run("reading table names", work, write=False):
                cache[int(tid)] = name
        return {i: cache[i] for i in ids if i in cache}

    @staticmethod
    def _claim_segment(tx: Tx, segment_id: int, path: str, size: int) -> None:
        """Record the size of a published segment that :meth:`reserve_segment` reserved
        (and unstamp it); refused when the GC collected the reservation meanwhile."""
        updated = tx.execute(
            "UPDATE ckpt_segments SET bytes = ?, stamped = NULL WHERE id = ?",
            (size, segment_id),
        ).rowcount
        if updated != 1:
            raise StorageError(
                f"segment {path!r} is no longer reserved in the catalog (collected after "
                "its grace period?); the write must be retried"
            )

    def register_segment(
        self,
        job: str,
        operator: str,
        version: int,
        attempt: str,
        segment: tuple[int, str],
        size: int,
        entries: Sequence[SegmentEntry],
        *,
        committed: bool = False,
        parents: Sequence[int | None] | None = None,
    ) -> list[WriteInfo]:
        """Record a published segment's blocks as writes (pending unless ``committed``);
        ``segment`` is the (id, path) :meth:`reserve_segment` gave; ``parents``, per entry,
        the write its edits were made on top of (see :class:`PendingPart`)."""
        segment_id, path = segment

        def work(tx: Tx) -> list[WriteInfo]:
            self._fault("write:begin")
            op_id = self._operator_id(tx, job, operator)
            self._claim_segment(tx, segment_id, path, size)
            self._fault("write:rows")
            packed = [
                Entry(
                    0,
                    key_group,
                    full,
                    nbytes,
                    rows,
                    offset,
                    length,
                    digest,
                    None if parents is None else parents[i],
                )
                for i, (key_group, full, nbytes, rows, offset, length, digest) in enumerate(entries)
            ]
            if committed and attempt == COMPACTION:
                packed = [
                    e._replace(parent=self._compacted_origin(tx, op_id, e.key_group, version))
                    for e in packed
                ]
            write_ids = self._insert_pack(
                tx, op_id, version, attempt, packed, committed=committed, segment=segment_id
            )
            if committed:
                self._advance_heads(
                    tx,
                    op_id,
                    [
                        (wid, e.key_group, version, attempt == COMPACTION, e.parent)
                        for wid, e in zip(write_ids, packed, strict=True)
                    ],
                )
            self._fault("write:end")
            return [
                WriteInfo(
                    wid,
                    e.key_group,
                    version,
                    e.full,
                    e.bytes,
                    e.rows,
                    path,
                    e.seg_offset,
                    e.seg_length,
                )
                for wid, e in zip(write_ids, packed, strict=True)
            ]

        return self._run(f"registering segment {path}", work)

    def write_compacted(
        self,
        job: str,
        operator: str,
        key_group: int,
        version: int,
        tables: Mapping[str, Mapping[bytes, bytes]],
    ) -> WriteInfo:
        """Store a key group's state as of ``version`` as a committed full write.

        Restores as of ``version`` or later start from it (it sorts after the writes it
        replaces); the writes it replaces stay until retention drops them.
        """
        changes = {name: TableChanges(rows=dict(rows)) for name, rows in tables.items()}

        def work(tx: Tx) -> WriteInfo:
            op_id = self._operator_id(tx, job, operator)
            dictionary = self._operator_dictionary_tx(tx, op_id)
            block, count = encode_block(changes, True, dictionary=dictionary, compact=True)
            write_id = self._insert_write(
                tx,
                op_id,
                key_group,
                version,
                True,
                COMPACTION,
                len(block),
                count,
                committed=True,
                digest=block_digest(block),
            )
            self._insert_blocks(tx, [(write_id, block)])
            return WriteInfo(write_id, key_group, version, True, len(block), count)

        return self._run(f"compacting key group {key_group} of {job}/{operator}", work)

    def commit(
        self,
        job: str,
        checkpoint_id: int,
        base: int | None,
        write_ids: Sequence[int],
        parallelism: Mapping[str, int],
        epoch: int = 0,
        staged: Sequence[StagedWrite] = (),
        *,
        segments: Mapping[str, SegmentPlacement] | None = None,
    ) -> bool:
        """See :meth:`Backend.commit`. ``segments`` (segment storage): per operator, where
        its staged writes' blocks were published, as a reserved segment file: they are
        recorded there instead of in ``ckpt_blocks``."""
        ids = sorted(set(write_ids))
        if len(ids) != len(write_ids):
            raise CheckpointError(f"checkpoint {checkpoint_id}: a write is named twice")
        by_operator: dict[str, list[StagedWrite]] = {}
        for write in staged:
            by_operator.setdefault(write.operator, []).append(write)

        def work(tx: Tx) -> bool:
            self._fault("commit:begin")
            row = tx.one("SELECT id, last_checkpoint, epoch FROM ckpt_jobs WHERE name = ?", (job,))
            if row is None:
                raise CheckpointError(f"job {job!r} does not exist")
            job_id, last, current = row
            if int(current) != epoch:
                raise CheckpointConflictError(
                    f"cannot commit checkpoint {checkpoint_id} of job {job!r}: this writer "
                    f"holds epoch {epoch}, but the job was fenced by a newer driver at epoch "
                    f"{current} (last committed checkpoint: {last})"
                )
            done = tx.one(
                "SELECT epoch, writes FROM ckpt_checkpoints WHERE job = ? AND checkpoint = ?",
                (job_id, checkpoint_id),
            )
            if done is not None:
                self._check_recommit(tx, job, job_id, checkpoint_id, ids, epoch, done, staged)
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
            every = sorted(
                {*ids, *self._store_staged(tx, job, checkpoint_id, by_operator, segments)}
            )
            total_bytes = full_writes = 0
            parents: dict[int, list[tuple[int, int, int]]] = {}  # op → (write, group, parent)
            # op → (write, group, version, compaction, parent): the new heads
            groups: dict[int, list[tuple[int, int, int, bool, int | None]]] = {}
            found = self._writes_by_id(tx, every)
            if len(found) != len(every):
                missing = sorted(set(every) - set(found))
                raise CheckpointError(
                    f"checkpoint {checkpoint_id} of job {job!r} names writes that do not "
                    f"exist (collected, or never written): {missing[:5]}"
                )
            owners = self._column_by_id(
                tx, "ckpt_operators", "job", {pack.op for pack, _ in found.values()}
            )
            packs: dict[int, Pack] = {}
            for write_id in every:
                pack, entry = found[write_id]
                version, committed, owner = pack.version, pack.committed, owners.get(pack.op)
                if owner != job_id or version != checkpoint_id or committed:
                    raise CheckpointError(
                        f"write {write_id} cannot be part of checkpoint {checkpoint_id} of "
                        f"job {job!r}: it is version {version}"
                        + (" and already committed" if committed else "")
                        + ("" if owner == job_id else " of another job")
                    )
                packs[pack.id] = pack
                total_bytes += entry.bytes
                full_writes += entry.full
                groups.setdefault(pack.op, []).append(
                    (write_id, entry.key_group, version, False, entry.parent)
                )
                if entry.parent is not None:
                    parents.setdefault(pack.op, []).append(
                        (write_id, entry.key_group, entry.parent)
                    )
            named = set(every)
            for pack in packs.values():
                left = [pack.id + e.offset for e in pack.entries if pack.id + e.offset not in named]
                if left:
                    raise CheckpointError(
                        f"checkpoint {checkpoint_id} of job {job!r} names some of the writes "
                        f"stored together with write {pack.id + pack.entries[0].offset} but not "
                        f"{left[:5]}: a save's writes commit together"
                    )
            for op, written in groups.items():
                counts = Counter(group for _, group, *_ in written)
                if len(counts) != len(written):
                    twice = min(g for g, n in counts.items() if n > 1)
                    raise CheckpointError(
                        f"checkpoint {checkpoint_id} of job {job!r} writes key group {twice} "
                        f"of operator id {op} twice"
                    )
            self._check_parents(tx, job, checkpoint_id, base, parents)
            self._fault("commit:mark")
            for chunk in _chunks(sorted(packs)):
                tx.execute(
                    f"UPDATE ckpt_packs SET committed = 1 WHERE id IN ({_marks(len(chunk))})",
                    list(chunk),
                )
            for op, written in sorted(groups.items()):
                self._advance_heads(tx, op, written)
            tx.execute(
                "UPDATE ckpt_jobs SET last_checkpoint = ? WHERE id = ?", (checkpoint_id, job_id)
            )
            tx.execute(
                "INSERT INTO ckpt_checkpoints (job, checkpoint, committed_at, writes, bytes, "
                "full_writes, base, epoch) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job_id,
                    checkpoint_id,
                    time.time(),
                    len(every),
                    total_bytes,
                    full_writes,
                    base,
                    epoch,
                ),
            )
            for name, p in sorted(parallelism.items()):
                tx.execute(
                    "UPDATE ckpt_operators SET parallelism = ? WHERE job = ? AND name = ?",
                    (p, job_id, name),
                )
            self._fault("commit:end")
            return True

        return self._run(f"committing checkpoint {checkpoint_id} of {job}", work)

    def _store_staged(
        self,
        tx: Tx,
        job: str,
        checkpoint_id: int,
        by_operator: Mapping[str, Sequence[StagedWrite]],
        segments: Mapping[str, SegmentPlacement] | None = None,
    ) -> list[int]:
        """Check the staged writes of a commit and store them as pending writes (the
        commit then marks them, with the others, in the same transaction); their ids."""
        stored: list[int] = []
        for operator, writes in sorted(by_operator.items()):
            row = self._operator_row(tx, job, operator)
            if row is None:
                raise CheckpointError(f"operator {operator!r} of job {job!r} does not exist")
            op_id, max_key_groups = int(row[0]), int(row[1])
            seen: set[int] = set()
            for w in writes:
                where = f"staged write of key group {w.key_group} of operator {operator!r}"
                if w.version != checkpoint_id:
                    raise CheckpointError(
                        f"{where} is version {w.version}, not checkpoint {checkpoint_id}"
                    )
                if not 0 <= w.key_group < max_key_groups:
                    raise CheckpointError(
                        f"{where}: the operator has key groups 0..{max_key_groups - 1}"
                    )
                if w.key_group in seen:
                    raise CheckpointError(f"{where} is named twice")
                seen.add(w.key_group)
                if not block_intact(w.block) or block_digest(w.block) != w.digest:
                    raise CheckpointError(f"{where}: its block fails its checksum")
            placement = None if segments is None else segments.get(operator)
            if placement is None:
                stored.extend(
                    self._insert_staged(tx, op_id, checkpoint_id, _COMMITTED_ATTEMPT, writes)
                )
                continue
            (segment_id, path), size, offsets = placement
            self._claim_segment(tx, segment_id, path, size)
            stored.extend(
                self._insert_pack(
                    tx,
                    op_id,
                    checkpoint_id,
                    _COMMITTED_ATTEMPT,
                    [
                        Entry(
                            0,
                            w.key_group,
                            w.full,
                            len(w.block),
                            w.rows,
                            offset,
                            length,
                            w.digest,
                            w.parent,
                        )
                        for w, (offset, length) in zip(writes, offsets, strict=True)
                    ],
                    segment=segment_id,
                )
            )
        return stored

    def _check_recommit(
        self,
        tx: Tx,
        job: str,
        job_id: int,
        checkpoint_id: int,
        ids: Sequence[int],
        epoch: int,
        done: tuple[Any, ...],
        staged: Sequence[StagedWrite] = (),
    ) -> None:
        """Accept committing a committed checkpoint again only with the very writes (and
        epoch) that committed it, staged writes matched by key group and digest; anything
        else lost the race to another writer."""
        won_epoch, won_writes = int(done[0]), int(done[1])
        # the checkpoint's committed writes (not compactions): (operator, key group) → write
        names = dict(tx.all("SELECT id, name FROM ckpt_operators WHERE job = ?", (job_id,)))
        committed_here: dict[tuple[str, int], tuple[int, int | None]] = {}
        for pack in self._packs(
            tx,
            "JOIN ckpt_operators o ON o.id = p.op WHERE o.job = ? AND p.version = ? "
            "AND p.committed = 1 AND p.attempt != ? ORDER BY p.id",
            (job_id, checkpoint_id, COMPACTION),
        ):
            for e in pack.entries:
                committed_here[(str(names[pack.op]), e.key_group)] = (pack.id + e.offset, e.digest)
        staged_same = True
        for w in staged:
            record = committed_here.get((w.operator, w.key_group))
            if record is None or record[1] is None or record[1] != w.digest:
                staged_same = False
                break
        mine: dict[int, tuple[int, int]] = {
            wid: (pack.version, int(pack.committed))
            for wid, (pack, _) in self._writes_by_id(tx, ids).items()
            if pack.op in names
        }
        same = (
            staged_same
            and won_epoch == epoch
            and won_writes == len(ids) + len(staged)
            and len(mine) == len(ids)
            and all(v == (checkpoint_id, 1) for v in mine.values())
        )
        if same:
            return
        won = sorted(wid for wid, _ in committed_here.values())[:5]
        lost = sorted(w for w, (_, c) in mine.items() if not c)[:5]
        raise CheckpointConflictError(
            f"checkpoint {checkpoint_id} of job {job!r} was already committed by another "
            f"writer (epoch {won_epoch}, {won_writes} writes, first ids "
            f"{won}); this commit (epoch {epoch}, "
            f"{len(ids) + len(staged)} writes"
            + (f", uncommitted ids {lost}" if lost else "")
            + ") lost: restore from the committed checkpoint instead of building on it"
        )

    def _check_parents(
        self,
        tx: Tx,
        job: str,
        checkpoint_id: int,
        base: int | None,
        parents: Mapping[int, Sequence[tuple[int, int, int]]],
    ) -> None:
        """Refuse writes made on top of a state their key group does not hold as of
        ``base``: each write's parent must be the key group's committed head (``0``: no
        committed write), or the write a compaction head stands for."""
        for op_id, written in parents.items():
            heads: dict[int, tuple[int, str, int | None]] = {}  # key group → its head
            if base is not None:
                # Each written key group's head as of the base, the last committed
                # checkpoint: from ``ckpt_head_chunks``.
                heads = self._heads_tx(tx, op_id, [g for _, g, _ in written], base)
            doubtful = [w for w in written if w[2] != heads.get(w[1], (0,))[0]]
            if not doubtful:
                continue
            wanted = sorted({p for _, g, p in doubtful if p and p != heads.get(g, (0,))[0]})
            compacted: dict[int, int | None] = {
                wid: entry.parent
                for wid, (pack, entry) in self._writes_by_id(tx, wanted).items()
                if pack.attempt == COMPACTION
            }
            for write_id, group, parent in doubtful:
                head = heads.get(group)
                if head is None:
                    if parent == 0:
                        continue
                    expected = "no state"
                else:
                    head_id, attempt, origin = head
                    if parent == head_id:
                        continue
                    root = origin if attempt == COMPACTION else head_id
                    if root is not None and compacted.get(parent, parent) == root:
                        continue  # built on what the (newer) compaction head stands for
                    expected = f"write {head_id}"
                name = tx.one("SELECT name FROM ckpt_operators WHERE id = ?", (op_id,))
                raise CheckpointConflictError(
                    f"cannot commit checkpoint {checkpoint_id} of job {job!r}: write "
                    f"{write_id} of key group {group} of operator "
                    f"{name[0] if name else op_id!r} was made on top of "
                    + (f"write {parent}" if parent else "no state")
                    + f", but as of checkpoint {base} the committed state of that key group is "
                    f"{expected} (its writer lost a commit to another driver and built on it)"
                )

    def fence(self, job: str) -> int:
        def work(tx: Tx) -> int:
            tx.execute(
                "INSERT INTO ckpt_jobs (name) VALUES (?) ON CONFLICT (name) DO NOTHING", (job,)
            )
            row = tx.one(
                "UPDATE ckpt_jobs SET epoch = epoch + 1 WHERE name = ? RETURNING epoch", (job,)
            )
            assert row is not None
            return int(row[0])

        return self._run(f"fencing job {job!r}", work)

    def read_mark(self, job: str, name: str) -> str | None:
        row = self._run(
            "reading a mark",
            lambda tx: tx.one(
                "SELECT m.value FROM ckpt_marks m JOIN ckpt_jobs j ON j.id = m.job "
                "WHERE j.name = ? AND m.name = ?",
                (job, name),
            ),
            write=False,
        )
        return None if row is None else str(row[0])

    def write_mark(self, job: str, name: str, value: str) -> None:
        def work(tx: Tx) -> None:
            tx.execute(
                "INSERT INTO ckpt_jobs (name) VALUES (?) ON CONFLICT (name) DO NOTHING", (job,)
            )
            job_id = self._job_id(tx, job)
            tx.execute(
                "INSERT INTO ckpt_marks (job, name, value) VALUES (?, ?, ?) "
                "ON CONFLICT (job, name) DO UPDATE SET value = excluded.value",
                (job_id, name, value),
            )

        self._run(f"writing mark {name!r} of job {job!r}", work)

    def epoch(self, job: str) -> int:
        row = self._run(
            "reading the writer epoch",
            lambda tx: tx.one("SELECT epoch FROM ckpt_jobs WHERE name = ?", (job,)),
            write=False,
        )
        return 0 if row is None else int(row[0])

    # -- reading ----------------------------------------------------------------------------

    def last_checkpoint(self, job: str) -> int | None:
        row = self._run(
            "reading the last checkpoint",
            lambda tx: tx.one("SELECT last_checkpoint FROM ckpt_jobs WHERE name = ?", (job,)),
            write=False,
        )
        return None if row is None or row[0] is None else int(row[0])

    def checkpoints(self, job: str) -> list[CheckpointInfo]:
        rows = self._run(
            "listing checkpoints",
            lambda tx: tx.all(
                "SELECT c.checkpoint, c.committed_at, c.writes, c.bytes, c.full_writes, c.base "
                "FROM ckpt_checkpoints c JOIN ckpt_jobs j ON j.id = c.job WHERE j.name = ? "
                "ORDER BY c.checkpoint",
                (job,),
            ),
            write=False,
        )
        return [CheckpointInfo(*row) for row in rows]

    def _chains_tx(
        self, tx: Tx, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, list[WriteInfo]]:
        op_id = self._operator_id(tx, job, operator)
        packs = self._packs(
            tx,
            "WHERE p.op = ? AND p.committed = 1 AND p.version <= ? ORDER BY p.version, p.id",
            (op_id, as_of),
        )
        # the path of each segment the catalog still knows
        paths = self._column_by_id(
            tx, "ckpt_segments", "path", {p.segment for p in packs if p.segment is not None}
        )
        chains: dict[int, list[WriteInfo]] = {}
        low, high = key_groups.start, key_groups.stop
        # in (version, id) order: each chain starts at its newest full write
        for pack in packs:
            path = None if pack.segment is None else paths.get(pack.segment)
            for e in pack.entries:
                if not low <= e.key_group < high:
                    continue
                info = WriteInfo(
                    pack.id + e.offset,
                    e.key_group,
                    pack.version,
                    e.full,
                    e.bytes,
                    e.rows,
                    path,
                    e.seg_offset,
                    e.seg_length,
                )
                if e.full:
                    chains[e.key_group] = [info]
                else:
                    chains.setdefault(e.key_group, []).append(info)
        return {group: chains[group] for group in sorted(chains)}

    def chains(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, list[WriteInfo]]:
        return self._run(
            "reading restore chains",
            lambda tx: self._chains_tx(tx, job, operator, key_groups, as_of),
            write=False,
        )

    def heads(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, tuple[int, int]]:
        """From ``ckpt_head_chunks`` (one query) where the newest committed write is not newer
        than ``as_of``; otherwise the key group's newest write as of ``as_of``, as the last
        write of :meth:`chains` is: the highest (version, id)."""

        def work(tx: Tx) -> dict[int, tuple[int, int]]:
            return self._heads_as_of(tx, self._operator_id(tx, job, operator), key_groups, as_of)

        return self._run("reading chain heads", work, write=False)

    def _heads_as_of(
        self, tx: Tx, op_id: int, key_groups: range, as_of: int
    ) -> dict[int, tuple[int, int]]:
        """:meth:`heads` in ``tx``."""
        heads: dict[int, tuple[int, int]] = {}
        older = []
        for group, record in sorted(self._read_heads(tx, op_id, key_groups).items()):
            if record.version <= as_of:
                heads[group] = (record.write, record.version)
            else:
                older.append(group)
        for group, (wid, version, _, _) in self._newest_as_of(tx, op_id, older, as_of).items():
            heads[group] = (wid, version)
        return heads

    def _blocks_tx(self, tx: Tx, writes: Sequence[WriteInfo], where: str = "") -> list[Block]:
        """Each write's block with the catalog's record of it, in order: one query per 500
        writes. A write stored in a segment file comes without its bytes (``data`` is
        ``None``: segment storage reads them). ``where`` names the job and operator in
        errors; a write missing from the catalog raises :class:`CorruptStateError`."""
        found: dict[int, tuple[int, int | None, Any]] = {
            wid: (entry.rows, entry.digest, None)
            for wid, (_, entry) in self._writes_by_id(tx, [w.write_id for w in writes]).items()
        }
        in_catalog = sorted(w.write_id for w in writes if w.segment is None and w.write_id in found)
        for chunk in _chunks(in_catalog):
            for wid, data in tx.all(
                f"SELECT write, data FROM ckpt_blocks WHERE write IN ({_marks(len(chunk))})",
                list(chunk),
            ):
                count, digest, _ = found[int(wid)]
                found[int(wid)] = (count, digest, data)
        blocks = []
        here = repr(self)
        for w in writes:
            record = found.get(w.write_id)
            if record is None:
                raise CorruptStateError(
                    f"{where}key group {w.key_group} checkpoint {w.version} (write "
                    f"{w.write_id}) in {here}: the write is missing from the catalog"
                )
            count, digest, data = record
            if w.segment is None:
                blocks.append(Block(w, None if data is None else bytes(data), digest, count, here))
            else:
                blocks.append(Block(w, None, digest, count, f"segment {w.segment!r}"))
        return blocks

    def _check_complete(
        self, tx: Tx, job: str, operator: str, chains: Mapping[int, Sequence[WriteInfo]], as_of: int
    ) -> None:
        """Raise :class:`CorruptStateError` when a checkpoint a chain spans lost a write: each
        retained checkpoint after the oldest one (whose writes retention may have replaced
        by a compaction) still holds as many committed writes as it committed."""
        if not chains:
            return
        start = min(writes[0].version for writes in chains.values())
        # Committed checkpoints do not change (retention removes writes only at or before
        # the oldest retained one, which is not checked): a range checked once is skipped.
        checked = self._complete.setdefault(job, [])
        if any(lo <= start and as_of <= hi for lo, hi in checked):
            return
        counts = tx.all(
            "SELECT c.checkpoint, c.writes FROM ckpt_checkpoints c JOIN ckpt_jobs j ON "
            "j.id = c.job WHERE j.name = ? AND c.checkpoint > ? AND c.checkpoint <= ? AND "
            "c.checkpoint > (SELECT MIN(m.checkpoint) FROM ckpt_checkpoints m WHERE m.job = c.job)",
            (job, start, as_of),
        )
        if not counts:
            return
        found: Counter[int] = Counter()
        for pack in self._packs(
            tx,
            "JOIN ckpt_operators o ON o.id = p.op JOIN ckpt_jobs j ON j.id = o.job "
            "WHERE j.name = ? AND p.committed = 1 AND p.attempt <> ? AND p.version > ? "
            "AND p.version <= ?",
            (job, COMPACTION, start, as_of),
        ):
            found[pack.version] += len(pack.entries)
        for checkpoint, expected in counts:
            held = int(found.get(checkpoint, 0))
            if held != int(expected):
                groups = sorted(chains)
                raise CorruptStateError(
                    f"job {job!r} operator {operator!r} key groups {groups[0]}..{groups[-1]} "
                    f"checkpoint {checkpoint} in {self!r}: the checkpoint committed {expected} "
                    f"writes but the catalog holds {held} (a write is missing: restore chains "
                    "would have a gap)"
                )
        checked.append((start, as_of))
        del checked[:-64]

    def read_blocks(self, writes: Sequence[WriteInfo], where: str = "") -> list[Block]:
        """Each write's block and the catalog's record of it, in order (see
        :meth:`_blocks_tx`), from one snapshot."""
        return self._run(
            "reading state", lambda tx: self._blocks_tx(tx, writes, where), write=False
        )

    def read(
        self, job: str, operator: str, writes: Sequence[WriteInfo]
    ) -> dict[str, dict[bytes, bytes]]:
        where = f"job {job!r} operator {operator!r} "
        return replay(self.read_blocks(writes, where), where, self.table_names, self.dictionary)

    def load_blocks(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, tuple[list[WriteInfo], list[Block]]]:
        """Chains of ``key_groups`` as of ``as_of`` and their blocks, from one snapshot of
        the database, checked for gaps (module docstring)."""

        def work(tx: Tx) -> dict[int, tuple[list[WriteInfo], list[Block]]]:
            chains = self._chains_tx(tx, job, operator, key_groups, as_of)
            self._check_complete(tx, job, operator, chains, as_of)
            everything = [w for writes in chains.values() for w in writes]
            blocks = iter(self._blocks_tx(tx, everything, f"job {job!r} operator {operator!r} "))
            return {
                key_group: (writes, [next(blocks) for _ in writes])
                for key_group, writes in chains.items()
            }

        return self._run("restoring state", work, write=False)

    def load(
        self, job: str, operator: str, key_groups: range, as_of: int
    ) -> dict[int, tuple[list[WriteInfo], dict[str, dict[bytes, bytes]]]]:
        where = f"job {job!r} operator {operator!r} "
        return {
            key_group: (writes, replay(blocks, where, self.table_names, self.dictionary))
            for key_group, (writes, blocks) in self.load_blocks(
                job, operator, key_groups, as_of
            ).items()
        }

    # -- maintenance ------------------------------------------------------------------------

    def retain(self, job: str, keep_last: int) -> RetentionStats:
        if keep_last < 1:
            raise ValueError(f"keep_last must be at least 1, not {keep_last}")

        def work(tx: Tx) -> RetentionStats:
            stats = RetentionStats()
            job_id = self._job_id(tx, job)
            if job_id is None:
                raise CheckpointError(f"job {job!r} does not exist")
            kept = [
                c
                for (c,) in tx.all(
                    "SELECT checkpoint FROM ckpt_checkpoints WHERE job = ? "
                    "ORDER BY checkpoint DESC LIMIT ?",
                    (job_id, keep_last),
                )
            ]
            stats.kept = sorted(kept)
            if not kept:
                return stats
            oldest, last = min(kept), max(kept)
            stats.checkpoints_dropped = tx.execute(
                "DELETE FROM ckpt_checkpoints WHERE job = ? AND checkpoint < ?",
                (job_id, oldest),
            ).rowcount
            # Per key group, the chain of the oldest retained checkpoint starts at its newest
            # full write at or before it; every write before that one, in (version, id)
            # order, is unreachable (a compacted write follows the write of its version).
            packs = self._packs(
                tx,
                "JOIN ckpt_operators o ON o.id = p.op WHERE o.job = ? AND p.version <= ? "
                "ORDER BY p.version, p.id",
                (job_id, last),
            )
            starts: dict[tuple[int, int], tuple[int, int]] = {}  # (op, group) → (version, id)
            for pack in packs:
                if pack.committed and pack.version <= oldest:
                    for e in pack.entries:
                        if e.full:
                            starts[(pack.op, e.key_group)] = (pack.version, pack.id + e.offset)
            doomed: dict[int, set[int]] = {}  # pack id → offsets of its unreachable writes
            pending: list[Pack] = []
            for pack in packs:
                if not pack.committed:
                    pending.append(pack)
                    continue
                for e in pack.entries:
                    start = starts.get((pack.op, e.key_group))
                    if start is not None and (pack.version, pack.id + e.offset) < start:
                        doomed.setdefault(pack.id, set()).add(e.offset)
            stats.writes_removed = sum(map(len, doomed.values()))
            stats.pending_removed = sum(len(p.entries) for p in pending)
            by_id = {pack.id: pack for pack in packs}
            gone: list[int] = []  # write ids whose blocks go
            dropped: list[int] = [p.id for p in pending]  # packs that go whole
            for pack in pending:
                gone.extend(pack.id + e.offset for e in pack.entries)
                if pack.segment is None:
                    stats.rows_removed += sum(e.rows for e in pack.entries)
            for pack_id, offsets in sorted(doomed.items()):
                pack = by_id[pack_id]
                gone.extend(pack_id + offset for offset in sorted(offsets))
                if pack.segment is None:
                    stats.rows_removed += sum(e.rows for e in pack.entries if e.offset in offsets)
                kept_entries = [e for e in pack.entries if e.offset not in offsets]
                if kept_entries:
                    tx.execute(
                        "UPDATE ckpt_packs SET entries = ? WHERE id = ?",
                        (encode_entries(kept_entries, pack.segment is not None), pack_id),
                    )
                else:
                    dropped.append(pack_id)
            for chunk in _chunks(sorted(gone)):
                tx.execute(
                    f"DELETE FROM ckpt_blocks WHERE write IN ({_marks(len(chunk))})", list(chunk)
                )
            for chunk in _chunks(sorted(dropped)):
                tx.execute(
                    f"DELETE FROM ckpt_packs WHERE id IN ({_marks(len(chunk))})", list(chunk)
                )
            return stats

        return self._run(f"retention of job {job!r}", work)

    def storage_bytes(self) -> int:
        """Bytes of the blocks stored in the database, all jobs."""
        row = self._run(
            "measuring storage",
            lambda tx: tx.one("SELECT COALESCE(SUM(LENGTH(data)), 0) FROM ckpt_blocks"),
            write=False,
        )
        assert row is not None
        return int(row[0])

    def write_summary(self, job: str) -> list[WriteSummary]:
        def work(tx: Tx) -> list[WriteSummary]:
            names = dict(
                tx.all(
                    "SELECT o.id, o.name FROM ckpt_operators o JOIN ckpt_jobs j "
                    "ON j.id = o.job WHERE j.name = ?",
                    (job,),
                )
            )
            groups: dict[tuple[int, str, bool, bool], list[int]] = {}
            for pack in self._packs(
                tx,
                "JOIN ckpt_operators o ON o.id = p.op JOIN ckpt_jobs j ON j.id = o.job "
                "WHERE j.name = ?",
                (job,),
            ):
                for e in pack.entries:
                    key = (pack.version, str(names[pack.op]), pack.committed, e.full)
                    total = groups.setdefault(key, [0, 0, 0])
                    total[0] += 1
                    total[1] += e.bytes
                    total[2] += e.rows
            return [
                WriteSummary(name, version, committed, full, n, nbytes, rows)
                for (version, name, committed, full), (n, nbytes, rows) in sorted(groups.items())
            ]

        return self._run("summarising writes", work, write=False)

    def segments_of(self, write_ids: Sequence[int]) -> set[str]:
        """Paths of the segment files that hold the blocks of ``write_ids``."""
        ids = sorted(set(write_ids))

        def work(tx: Tx) -> set[str]:
            found = self._writes_by_id(tx, ids)
            segments = sorted({p.segment for p, _ in found.values() if p.segment is not None})
            paths: set[str] = set()
            for chunk in _chunks(segments, 250):
                rows = tx.all(
                    f"SELECT path FROM ckpt_segments WHERE id IN ({_marks(len(chunk))})", chunk
                )
                paths.update(str(path) for (path,) in rows)
            return paths

        return self._run("finding the segments of writes", work, write=False)

    def writes_committed(self, write_ids: Sequence[int]) -> bool:
        """Whether every one of ``write_ids`` exists and is committed."""
        ids = sorted(set(write_ids))

        def work(tx: Tx) -> bool:
            found = self._writes_by_id(tx, ids)
            return len(found) == len(ids) and all(pack.committed for pack, _ in found.values())

        return self._run("checking writes", work, write=False)
