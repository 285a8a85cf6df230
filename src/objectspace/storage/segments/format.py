"""The segment file format: ``OSSEG2\n`` and then the blocks (:mod:`objectspace.storage.blocks`,
the one block format of every backend) one after the other, nothing else. Readers use the
catalog's offsets and lengths, and each block carries its checksum (which the catalog
records too).

Files of version 1 (``OSSEG1\n``, :data:`MAGIC_V1`) end with an index of the blocks, its
offset (:data:`FOOTER`) and :data:`END_MAGIC`, which no reader needs (the catalog has the
offsets); both versions are read alike. ``docs/formats.md`` lists the versions.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

__all__ = ["END_MAGIC", "FOOTER", "MAGIC", "MAGIC_V1", "segment_file"]

MAGIC = b"OSSEG2\n"
"""The start of a segment file this version writes."""
MAGIC_V1 = b"OSSEG1\n"
"""The start of a segment file of version 1 (still read)."""
END_MAGIC = b"OSEND1"
"""The end of a segment file of version 1."""
FOOTER = struct.Struct("<Q")
"""The index's offset in a file of version 1, before :data:`END_MAGIC`."""


def segment_file(blocks: Sequence[bytes]) -> tuple[bytes, list[tuple[int, int]]]:
    """The bytes of a segment file holding ``blocks``, and each block's (offset, length)."""
    offsets = []
    offset = len(MAGIC)
    for block in blocks:
        offsets.append((offset, len(block)))
        offset += len(block)
    return b"".join((MAGIC, *blocks)), offsets
