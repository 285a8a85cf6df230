"""Storage of object spaces: the table contract and its backends."""

from __future__ import annotations

from objectspace.storage.base import (
    DELETED,
    CheckpointKind,
    DictReader,
    StateReader,
    StateWriter,
    Store,
    TableChanges,
    WriterStatus,
    WriteStats,
)
from objectspace.storage.memory import MemoryStore
from objectspace.storage.sqlite import SQLiteStore
from objectspace.storage.urls import redact_text, redact_url

__all__ = [
    "DELETED",
    "CheckpointKind",
    "DictReader",
    "MemoryStore",
    "SQLiteStore",
    "StateReader",
    "StateWriter",
    "Store",
    "TableChanges",
    "WriteStats",
    "WriterStatus",
    "redact_text",
    "redact_url",
]
