"""Deprecated: import PostgresBackend from objectspace.storage.postgresql."""

from __future__ import annotations

import warnings

from objectspace.storage.postgresql.backend import PostgresBackend

__all__ = ["PostgresBackend"]

warnings.warn(
    "objectspace.storage.postgres_backend is deprecated: import PostgresBackend from objectspace.storage.postgresql.",
    DeprecationWarning,
    stacklevel=2,
)
