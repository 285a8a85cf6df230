"""The segment file format: ``OSSEG2\n`` and the blocks (:mod:`objectspace.storage.blocks`,
the one block format of every backend) one after the other. Readers use the catalog's
offsets and lengths, and each block carries its checksum (which the catalog records too).

Files of version 1 (``OSSEG1\n``, :data:`MAGIC_V1`) end with a msgpack index of the blocks'
lengths (files of earlier versions: their (offset, length) pairs), the index's offset (u64)
and ``OSEND1``; nothing read that tail, which cost 2-3 bytes a block: version 2 drops it.
Both are read alike.

The block codec moved to :mod:`objectspace.storage.blocks`; its names still resolve here.
"""

from __future__ import annotations

import struct

from objectspace.storage.blocks import block_heads, decode_block, encode_block

__all__ = [
    "END_MAGIC",
    "FOOTER",
    "MAGIC",
    "MAGIC_V1",
    "block_heads",
    "decode_block",
    "encode_block",
]

MAGIC = b"OSSEG2\n"
"""The start of a segment file this version writes."""
MAGIC_V1 = b"OSSEG1\n"
"""The start of a segment file of version 1 (still read)."""
END_MAGIC = b"OSEND1"
"""The end of a segment file of version 1."""
FOOTER = struct.Struct("<Q")
"""The index's offset in a file of version 1, before :data:`END_MAGIC`."""
