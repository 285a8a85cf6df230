"""Segment-file checkpoint storage on any fsspec filesystem, with a SQL catalog.

``format`` is the file format; ``backend`` the :class:`SegmentBackend` (writing and reading
segment files), ``files`` how a local file is written and synced, ``gc`` the two-phase
garbage collection of segment files, ``delegate`` the catalog operations passed on as they
are, ``reads`` how a restore reads blocks (coalesced ranged reads, fetched in parallel).
Needs ``pip install 'objectspace[segments]'``.
"""

from __future__ import annotations

from objectspace.storage.segments.backend import SegmentBackend
from objectspace.storage.segments.format import END_MAGIC, MAGIC, MAGIC_V1
from objectspace.storage.segments.gc import GCStats
from objectspace.storage.segments.reads import ReadPolicy

__all__ = ["END_MAGIC", "MAGIC", "MAGIC_V1", "GCStats", "ReadPolicy", "SegmentBackend"]
