"""The ``postgresql://`` checkpoint storage backend (needs ``pip install
'objectspace[postgresql]'``).
"""

from __future__ import annotations

from objectspace.storage.postgresql.backend import PostgresBackend

__all__ = ["PostgresBackend"]
