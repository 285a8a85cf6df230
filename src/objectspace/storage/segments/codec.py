"""The segment file format: ``OSSEG1\\n``, the blocks (:mod:`objectspace.storage.blocks`,
the one block format of every backend) one after the other, a msgpack index of the blocks'
lengths (files of earlier versions: their (offset, length) pairs), the index's offset (u64)
and ``OSEND1``. Readers use the catalog's offsets; the index describes a file on its own.

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
