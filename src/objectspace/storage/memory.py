"""Deprecated: import MemoryStore from objectspace.stores."""

from __future__ import annotations

import warnings

from objectspace.stores.memory import MemoryStore

__all__ = ["MemoryStore"]

warnings.warn(
    "objectspace.storage.memory is deprecated: import MemoryStore from objectspace.stores.",
    DeprecationWarning,
    stacklevel=2,
)
