"""The ``sqlite:///path`` and ``memory://name`` checkpoint storage backend."""

from __future__ import annotations

from objectspace.storage.sqlite.backend import SQLiteBackend

__all__ = ["SQLiteBackend"]
