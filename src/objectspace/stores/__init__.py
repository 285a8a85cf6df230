"""Layer 2: the one-space, unversioned stores (a store keeps one object space, no versions).

:class:`Store` is the contract (``base``); :class:`MemoryStore` keeps the tables in memory and
:class:`SQLiteStore` in one SQLite file. Versioned checkpoints of many spaces are in
:mod:`objectspace.storage`.
"""

from __future__ import annotations

from objectspace.stores.base import Store
from objectspace.stores.memory import MemoryStore
from objectspace.stores.sqlite import SQLiteStore

__all__ = ["MemoryStore", "SQLiteStore", "Store"]
