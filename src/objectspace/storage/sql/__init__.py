"""The SQL library shared by the SQLite and PostgreSQL backends and by segment storage's catalog.

Not a backend itself: :class:`SQLBackend` (``base``) is the catalog and block store both SQL
dialects subclass, ``schema`` their DDL, ``catalog`` the :class:`SegmentCatalog` interface
segment storage uses, and ``sqlite_files`` how every SQLite file is checked and opened.
"""

from __future__ import annotations

from objectspace.storage.sql.base import ROW_OVERHEAD, SCHEMA_VERSION, SQLBackend, Tx
from objectspace.storage.sql.catalog import SegmentCatalog, SegmentEntry

__all__ = [
    "ROW_OVERHEAD",
    "SCHEMA_VERSION",
    "SQLBackend",
    "SegmentCatalog",
    "SegmentEntry",
    "Tx",
]
