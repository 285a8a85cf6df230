"""The table contract between object spaces and the stores that persist them.

An object space saves itself as *puts* and *deletes* of ``bytes`` keys in named tables,
plus whole-table deletes (so clearing a collection or deleting an object costs a constant
number of writes, never one delete per element). A :class:`StateWriter` buffers those edits
and applies them in :meth:`StateWriter.commit`, all or nothing; a :class:`StateReader` reads a
consistent snapshot back.

Within one writer, edits are normalised per table: a table delete drops every edit of the
table made before it, and a later put or delete of a key replaces the earlier one. When a
store applies the edits it therefore deletes the table first, then applies the row edits.
A :attr:`CheckpointKind.FULL` writer replaces the whole content of the store.
"""

from __future__ import annotations

import enum
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from objectspace.errors import StorageError

__all__ = [
    "DELETED",
    "ROW_OVERHEAD",
    "CheckpointKind",
    "Deleted",
    "DictReader",
    "StateReader",
    "StateWriter",
    "TableChanges",
    "WriteStats",
    "WriterSource",
    "WriterStatus",
]

ROW_OVERHEAD = 8
"""Bytes :class:`~objectspace.storage.stores.sqlite.SQLiteStore` counts in ``bytes_written`` per row
written, on top of the row's key and value: its logical bytes, what a store keeping one
database row per entry would write (two 4-byte references: the row's table and a checksum).
It stores each commit as one compressed block, so what reaches the disk is measured apart
(``benchmarks/diskbytes.py``). The versioned backends count the bytes of the blocks they
store, and the in-memory store counts no overhead.
"""


class CheckpointKind(enum.Enum):
    """Whether a checkpoint replaces the stored state (FULL) or edits it (DIFFERENTIAL)."""

    FULL = "full"
    DIFFERENTIAL = "differential"


class Deleted:
    """The type of :data:`DELETED`, the marker of a deleted row in a writer's buffer."""

    _instance: Deleted | None = None

    def __new__(cls) -> Deleted:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "DELETED"

    def __reduce__(self) -> str:
        return "DELETED"


DELETED: Final = Deleted()

_EMPTY: Mapping[bytes, bytes] = {}


@dataclass
class WriteStats:
    """What one commit persisted.

    ``bytes_written`` counts what the store wrote for the commit: keys, values, and whatever
    it stores with each row (table references, versions, framing) as the store reports it.
    """

    bytes_written: int = 0
    items_written: int = 0
    items_deleted: int = 0
    tables_deleted: int = 0
    seconds: float = 0.0

    def __iadd__(self, other: WriteStats) -> WriteStats:
        self.bytes_written += other.bytes_written
        self.items_written += other.items_written
        self.items_deleted += other.items_deleted
        self.tables_deleted += other.tables_deleted
        self.seconds += other.seconds
        return self


@dataclass(slots=True)
class TableChanges:
    """The normalised edits of one table: an optional table delete, then row edits."""

    truncated: bool = False
    rows: dict[bytes, bytes | Deleted] = field(default_factory=dict)


class WriterStatus(enum.Enum):
    """Lifecycle of a writer: OPEN → COMMITTED, or OPEN → FAILED / ROLLED_BACK."""

    OPEN = "open"
    COMMITTED = "committed"
    FAILED = "failed"
    ROLLED_BACK = "rolled back"


class StateWriter(ABC):
    """Buffers table edits and applies them atomically in :meth:`commit`.

    Subclasses implement :meth:`_apply`, which persists :attr:`changes` in one transaction
    and returns the bytes written. Any exception from it marks the writer FAILED, leaves the
    store as it was, and propagates. A writer is used once.
    """

    def __init__(self, kind: CheckpointKind) -> None:
        if not isinstance(kind, CheckpointKind):
            raise TypeError(f"kind must be a CheckpointKind, not {kind!r}")
        self.kind = kind
        self.changes: dict[str, TableChanges] = {}
        self.status = WriterStatus.OPEN
        self.stats = WriteStats()

    def _table(self, table: str) -> TableChanges:
        if self.status is not WriterStatus.OPEN:
            self._check_open()
        changes = self.changes.get(table)
        if changes is None:
            changes = self.changes[table] = TableChanges()
        return changes

    def put(self, table: str, key: bytes, value: bytes) -> None:
        """Set ``key`` of ``table`` to ``value``. Cost: O(1)."""
        self._table(table).rows[key] = value

    def put_many(self, table: str, rows: Iterable[tuple[bytes, bytes]]) -> None:
        """Set several keys of one table. Cost: O(len(rows))."""
        self._table(table).rows.update(rows)

    def delete(self, table: str, key: bytes) -> None:
        """Delete ``key`` of ``table`` (a no-op if it is not stored). Cost: O(1)."""
        self._table(table).rows[key] = DELETED

    def delete_table(self, table: str) -> None:
        """Delete every row of ``table``, including rows put earlier in this writer. O(1)."""
        changes = self._table(table)
        changes.truncated = True
        changes.rows.clear()

    def merge(self, changes: Mapping[str, TableChanges]) -> None:
        """Apply already-normalised edits, as if each table's were made in order. O(rows).

        The writer may keep the given :class:`TableChanges` objects: the caller hands them
        over and must not change them afterwards.
        """
        if not self.changes:
            self._check_open()
            self.changes = dict(changes)
            return
        for name, change in changes.items():
            table = self._table(name)
            if change.truncated:
                table.truncated = True
                table.rows.clear()
            table.rows.update(change.rows)

    def _check_open(self) -> None:
        if self.status is not WriterStatus.OPEN:
            raise StorageError(f"this writer is {self.status.value}; open a new writer")

    def commit(self) -> WriteStats:
        """Apply every buffered edit atomically and return what was written."""
        self._check_open()
        started = time.perf_counter()
        try:
            stats = self._apply()
        except BaseException:
            self.status = WriterStatus.FAILED
            raise
        stats.seconds = time.perf_counter() - started
        self.stats = stats
        self.status = WriterStatus.COMMITTED
        return stats

    def rollback(self) -> None:
        """Discard the buffered edits; the store is left as it was."""
        if self.status is WriterStatus.OPEN:
            self.status = WriterStatus.ROLLED_BACK
        self.changes = {}

    def count(self) -> WriteStats:
        """Items and table deletes buffered so far (bytes are known only to the store)."""
        stats = WriteStats()
        for changes in self.changes.values():
            stats.tables_deleted += changes.truncated
            for value in changes.rows.values():
                if value is DELETED:
                    stats.items_deleted += 1
                else:
                    stats.items_written += 1
        return stats

    @abstractmethod
    def _apply(self) -> WriteStats:
        """Persist :attr:`changes` in one transaction; return the stats with bytes written."""


class StateReader(ABC):
    """A consistent, read-only view of a store's tables."""

    @abstractmethod
    def tables(self) -> list[str]:
        """Names of the non-empty tables."""

    @abstractmethod
    def items(self, table: str) -> Iterator[tuple[bytes, bytes]]:
        """Rows of ``table`` in no particular order (none for a missing table)."""

    def table(self, table: str) -> Mapping[bytes, bytes]:
        """Every row of ``table`` as a mapping (empty for a missing table); read-only."""
        return dict(self.items(table))

    def keys(self, table: str) -> Iterator[bytes]:
        """Keys of ``table``."""
        return (key for key, _ in self.items(table))

    def get(self, table: str, key: bytes) -> bytes | None:
        """The value of ``key`` in ``table``, or ``None`` when it is not stored."""
        for k, v in self.items(table):
            if k == key:
                return v
        return None

    def dump(self) -> dict[str, dict[bytes, bytes]]:
        """Every table as ``{table: {key: value}}``."""
        return {table: dict(self.items(table)) for table in self.tables()}


class WriterSource(Protocol):
    """Anything that hands out writers, such as a :class:`~objectspace.Store`: what
    :meth:`~objectspace.ObjectSpace.checkpoint` writes to."""

    def writer(self, kind: CheckpointKind = CheckpointKind.DIFFERENTIAL) -> StateWriter:
        """A new writer; FULL replaces the destination's content when it commits."""
        ...


class DictReader(StateReader):
    """A reader over ``{table: {key: value}}`` held in memory."""

    def __init__(self, tables: dict[str, dict[bytes, bytes]]) -> None:
        self._tables = tables

    def tables(self) -> list[str]:
        return list(self._tables)

    def items(self, table: str) -> Iterator[tuple[bytes, bytes]]:
        return iter(self._tables.get(table, {}).items())

    def table(self, table: str) -> Mapping[bytes, bytes]:
        return self._tables.get(table, _EMPTY)

    def keys(self, table: str) -> Iterator[bytes]:
        return iter(self._tables.get(table, _EMPTY))

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._tables.get(table, _EMPTY).get(key)

    def dump(self) -> dict[str, dict[bytes, bytes]]:
        return {name: dict(rows) for name, rows in self._tables.items()}


def apply_changes(
    tables: dict[str, dict[bytes, bytes]],
    changes: Mapping[str, TableChanges],
    kind: CheckpointKind,
) -> None:
    """Apply normalised edits to an in-memory ``{table: {key: value}}`` mapping."""
    if kind is CheckpointKind.FULL:
        tables.clear()
    for name, change in changes.items():
        if change.truncated:
            tables.pop(name, None)
        rows = tables.get(name)
        for key, value in change.rows.items():
            if value is DELETED:
                if rows is not None:
                    rows.pop(key, None)
            else:
                if rows is None:
                    rows = tables[name] = {}
                rows[key] = value  # type: ignore[assignment]
        if rows is not None and not rows:
            del tables[name]
