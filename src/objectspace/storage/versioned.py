"""Deprecated: import from objectspace.storage.contract (or objectspace.storage)."""

from __future__ import annotations

import warnings

from objectspace.storage.contract import (
    Backend,
    CheckpointInfo,
    OperatorInfo,
    PendingPart,
    RetentionStats,
    WriteInfo,
    WriteSummary,
    materialize,
)

__all__ = [
    "Backend",
    "CheckpointInfo",
    "OperatorInfo",
    "PendingPart",
    "RetentionStats",
    "WriteInfo",
    "WriteSummary",
    "materialize",
]

warnings.warn(
    "objectspace.storage.versioned is deprecated: import from objectspace.storage.contract (or objectspace.storage).",
    DeprecationWarning,
    stacklevel=2,
)
