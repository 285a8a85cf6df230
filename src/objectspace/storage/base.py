"""Deprecated: import from objectspace.tables (the table contract) and objectspace.stores (Store)."""

from __future__ import annotations

import warnings

from objectspace.stores.base import Store
from objectspace.tables import (
    DELETED,
    CheckpointKind,
    Deleted,
    DictReader,
    StateReader,
    StateWriter,
    TableChanges,
    WriterStatus,
    WriteStats,
    apply_changes,
)

__all__ = [
    "DELETED",
    "CheckpointKind",
    "Deleted",
    "DictReader",
    "StateReader",
    "StateWriter",
    "Store",
    "TableChanges",
    "WriteStats",
    "WriterStatus",
    "apply_changes",
]

warnings.warn(
    "objectspace.storage.base is deprecated: import from objectspace.tables (the table contract) and objectspace.stores (Store).",
    DeprecationWarning,
    stacklevel=2,
)
