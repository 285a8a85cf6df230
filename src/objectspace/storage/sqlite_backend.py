"""Deprecated: import SQLiteBackend from objectspace.storage.sqlite."""

from __future__ import annotations

import warnings

from objectspace.storage.sqlite.backend import SQLiteBackend

__all__ = ["SQLiteBackend"]

warnings.warn(
    "objectspace.storage.sqlite_backend is deprecated: import SQLiteBackend from objectspace.storage.sqlite.",
    DeprecationWarning,
    stacklevel=2,
)
