"""The one block format of versioned storage: a key group's changes in one write, encoded
once, whatever backend stores the bytes (a row of ``ckpt_blocks`` in SQLite or PostgreSQL, a
range of a segment file).

A block is ``kind (u8) | xxh64 of the body (u64, little-endian) | body`` (``framing``); the
body is the payload, zstd-compressed against the built-in dictionary :data:`DICTIONARY` or
the operator's trained one (``compression``), or stored as is when compression does not
pay. The payload is columnar (a msgpack array of columns, ``columns``): the table folders
(``names``), how many tables each folder has, the tables' last path components (each once)
and each table's index into them, each table's row count, the deleted tables; per table how
its keys are stored (``None``: all as bytes), the keys stored as delta-encoded integers (a
table whose keys are all decimal integers: list indices), the lengths and bytes of the
other keys; per table the width of its values (``None``: none has one), the lengths
(``-1``: a delete) and bytes of the values of tables without one, and the values of the
tables of each width as byte planes (in a block of :data:`PLANE_BLOCK_ROWS` values or
more, each plane of the widest column is a zstd block of its own, in the same frame). A
full block of more than :data:`CHUNK_ROWS` rows is sorted chunks behind an index
(``encode``, ``decode``: :func:`lookup`).

Every block is verified on read (``replay``): its checksum, then the catalog's record of it
(its digest, the block's own checksum; its row count). A mismatch, or a block that is not
where the catalog says, raises :class:`~objectspace.CorruptStateError` naming the job,
operator, key group, checkpoint and where the block lives. Every kind and layout, and what
each version of the format changed, is listed in ``docs/formats.md``.
"""

from __future__ import annotations

from objectspace.storage.blocks.compression import (
    DICTIONARY,
    DICTIONARY_BYTES,
    PLANE_BLOCK_ROWS,
    SAMPLE_BYTES_TO_TRAIN,
    SAMPLES_TO_TRAIN,
    Dictionary,
    sample,
)
from objectspace.storage.blocks.decode import (
    DictionaryLookup,
    Tables,
    decode_block,
    dictionary_id,
    lookup,
)
from objectspace.storage.blocks.encode import CHUNK_ROWS, encode_block
from objectspace.storage.blocks.framing import LEGACY, block_digest, block_intact
from objectspace.storage.blocks.names import block_heads, path_component
from objectspace.storage.blocks.replay import Block, replay, replay_changes

__all__ = [
    "CHUNK_ROWS",
    "DICTIONARY",
    "DICTIONARY_BYTES",
    "LEGACY",
    "PLANE_BLOCK_ROWS",
    "SAMPLES_TO_TRAIN",
    "SAMPLE_BYTES_TO_TRAIN",
    "Block",
    "Dictionary",
    "DictionaryLookup",
    "Tables",
    "block_digest",
    "block_heads",
    "block_intact",
    "decode_block",
    "dictionary_id",
    "encode_block",
    "lookup",
    "path_component",
    "replay",
    "replay_changes",
    "sample",
]
