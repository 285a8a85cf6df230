"""The one-space, unversioned stores (a store keeps one object space, no versions).

:class:`Store` is the contract (``base``); :class:`MemoryStore` keeps the tables in memory and
:class:`SQLiteStore` in one SQLite file, with the block format and SQLite file checks of
versioned storage. Versioned checkpoints of many spaces are the rest of
:mod:`objectspace.storage`.
"""

from __future__ import annotations

from objectspace.storage.stores.base import Store
from objectspace.storage.stores.memory import MemoryStore
from objectspace.storage.stores.sqlite import SQLiteStore

__all__ = ["MemoryStore", "SQLiteStore", "Store"]
