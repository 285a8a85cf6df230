"""The SQL library shared by the SQLite and PostgreSQL backends and by segment storage's catalog.

Not a backend itself: :class:`SQLBackend` (``base``, composed of the roles in ``tx``,
``jobs``, ``dictionaries``, ``packing``, ``heads``, ``migrations``, ``segments``, ``commit``,
``load`` and ``retention``) is the catalog and block store both SQL dialects subclass,
``schema`` their DDL, ``packs`` the layout of a pack's entries and of packed heads,
``catalog`` the :class:`SegmentCatalog` interface segment storage uses, and
``sqlite_files`` how every SQLite file is checked and opened.
"""

from __future__ import annotations

from objectspace.storage.sql.base import SQLBackend
from objectspace.storage.sql.catalog import SegmentCatalog, SegmentEntry
from objectspace.storage.sql.migrations import SCHEMA_VERSION
from objectspace.storage.sql.tx import Tx
from objectspace.tables import ROW_OVERHEAD

__all__ = [
    "ROW_OVERHEAD",
    "SCHEMA_VERSION",
    "SQLBackend",
    "SegmentCatalog",
    "SegmentEntry",
    "Tx",
]
