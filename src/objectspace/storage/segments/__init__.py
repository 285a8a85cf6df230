"""Segment-file checkpoint storage on any fsspec filesystem, with a SQL catalog.

``codec`` is the block and file format; ``backend`` the :class:`SegmentBackend` (writing,
reading and two-phase garbage collection of segment files). Needs
``pip install 'objectspace[segments]'``.
"""

from __future__ import annotations

from objectspace.storage.segments.backend import GCStats, SegmentBackend
from objectspace.storage.segments.codec import (
    END_MAGIC,
    MAGIC,
    MAGIC_V1,
    block_heads,
    decode_block,
    encode_block,
)

__all__ = [
    "END_MAGIC",
    "MAGIC",
    "MAGIC_V1",
    "GCStats",
    "SegmentBackend",
    "block_heads",
    "decode_block",
    "encode_block",
]
