"""The segment file format: ``OSSEG1\\n``, the blocks (:mod:`objectspace.storage.blocks`,
the one block format of every backend), a msgpack index of the blocks' (offset, length), the
index's offset (u64) and ``OSEND1``.

The block codec moved to :mod:`objectspace.storage.blocks`; its names still resolve here.
"""

from __future__ import annotations

import struct

from objectspace.storage.blocks import block_heads, decode_block, encode_block

__all__ = ["END_MAGIC", "FOOTER", "MAGIC", "block_heads", "decode_block", "encode_block"]

MAGIC = b"OSSEG1\n"
END_MAGIC = b"OSEND1"
FOOTER = struct.Struct("<Q")
"""The index's offset, before :data:`END_MAGIC`."""
