"""The ``sqlite:///path`` and ``memory://name`` checkpoint storage backend.

This module path used to hold the one-space :class:`~objectspace.SQLiteStore`; its names
still resolve here, with a ``DeprecationWarning``: import them from :mod:`objectspace.stores`
and :mod:`objectspace.storage.sql.sqlite_files`.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from objectspace.storage.sqlite.backend import SQLiteBackend

__all__ = ["SQLiteBackend"]

_MOVED = {
    "SQLiteStore": "objectspace.stores.sqlite",
    "ROW_OVERHEAD": "objectspace.stores.sqlite",
    "check_sqlite_file": "objectspace.storage.sql.sqlite_files",
    "connect_sqlite": "objectspace.storage.sql.sqlite_files",
    "PAGE_SIZE": "objectspace.storage.sql.sqlite_files",
}


def __getattr__(name: str) -> Any:
    """The names of the old ``objectspace.storage.sqlite`` module, with a ``DeprecationWarning``."""
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"objectspace.storage.sqlite.{name} moved: import it from {home}",
        DeprecationWarning,
        stacklevel=2,
    )
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
