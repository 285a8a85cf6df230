"""An in-memory store: tables of bytes in dictionaries. For tests and small jobs."""

from __future__ import annotations

import threading

from objectspace.storage.stores.base import Store
from objectspace.tables import (
    DELETED,
    CheckpointKind,
    DictReader,
    StateReader,
    StateWriter,
    WriteStats,
    apply_changes,
)

__all__ = ["MemoryStore"]


class MemoryStore(Store):
    """Keeps ``{table: {key: value}}`` in memory; a commit applies under a lock.

    ``bytes_written`` counts key and value bytes of every put, and a table's name when the
    commit creates it (the store keeps each name once).
    """

    def __init__(self) -> None:
        self._tables: dict[str, dict[bytes, bytes]] = {}
        self._lock = threading.Lock()

    def writer(self, kind: CheckpointKind = CheckpointKind.DIFFERENTIAL) -> StateWriter:
        return _MemoryWriter(self, kind)

    def reader(self) -> StateReader:
        with self._lock:
            snapshot = {name: dict(rows) for name, rows in self._tables.items()}
        return DictReader(snapshot)

    def dump(self) -> dict[str, dict[bytes, bytes]]:
        with self._lock:
            return {name: dict(rows) for name, rows in self._tables.items()}


class _MemoryWriter(StateWriter):
    def __init__(self, store: MemoryStore, kind: CheckpointKind) -> None:
        super().__init__(kind)
        self._store = store

    def _apply(self) -> WriteStats:
        stats = self.count()
        store = self._store
        with store._lock:
            existing = set() if self.kind is CheckpointKind.FULL else set(store._tables)
            written = 0
            for name, change in self.changes.items():
                puts = 0
                for key, value in change.rows.items():
                    if value is not DELETED:
                        written += len(key) + len(value)  # type: ignore[arg-type]
                        puts += 1
                if puts and (change.truncated or name not in existing):
                    written += len(name.encode("utf-8"))
            apply_changes(store._tables, self.changes, self.kind)
        stats.bytes_written = written
        return stats
