"""A block's frame: ``kind (u8) | xxh64 of the body (u64, little-endian) | body``.

The kind byte says what the body is (:data:`_RAW`, :data:`_ZSTD`, :data:`_TRAINED`, a
trained dictionary's id in the kind itself from :data:`_TRAINED_IN_KIND`, or
:data:`_CHUNKED`); the checksum lets a reader verify every byte before it decodes one, and
the catalog records it as the write's digest. Blocks of the older segment layout
(:data:`LEGACY`) are told apart by their first field, which is their own length. The kinds
and layouts are listed in ``docs/formats.md``.
"""

from __future__ import annotations

import struct

try:
    import xxhash
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("checkpoint storage needs xxhash and zstandard") from exc

__all__ = ["LEGACY", "block_digest", "block_intact"]

_HEAD = struct.Struct("<BQ")
_LEGACY_HEAD = struct.Struct("<IQ")
_ZSTD = 0x22
_RAW = 0x21
_TRAINED = 0x23  # zstd with a trained dictionary, whose u32 id follows the header
# zstd with trained dictionary ``kind - _TRAINED_IN_KIND`` (ids below 64: the common case),
# which the kind byte names (a byte less per block than _TRAINED)
_TRAINED_IN_KIND = 0x40
_IDS_IN_KIND = 64
_DICT_ID = struct.Struct("<I")
LEGACY = "u32 length | u64 xxh64 | zstd(msgpack columns)"
"""The block layout of the first segment files (still read; ``docs/formats.md``)."""

_CHUNKED = 0x24  # a full block as sorted chunks with an index
_INDEX = struct.Struct("<IQ")  # the index's length and xxh64


def _checksum(kind: int, body: bytes) -> int:
    """A block's xxh64: of its body, seeded with the kind byte where that names the trained
    dictionary (so the checksum verifies the dictionary's id, as it does where the id is
    part of the body)."""
    if _TRAINED_IN_KIND <= kind < _TRAINED_IN_KIND + _IDS_IN_KIND:
        return int(xxhash.xxh64_intdigest(body, seed=kind))
    return int(xxhash.xxh64_intdigest(body))


def _sealed(kind: int, body: bytes) -> bytes:
    """``body`` framed as a block of ``kind``: its header, then the body."""
    return _HEAD.pack(kind, _checksum(kind, body)) + body


def _is_trained_in_kind(block: bytes) -> bool:
    return len(block) > _HEAD.size and 0 <= block[0] - _TRAINED_IN_KIND < _IDS_IN_KIND


def _is_chunked(block: bytes) -> bool:
    return len(block) > _HEAD.size and block[0] == _CHUNKED and not _is_legacy(block)


def _dict_ref(dict_id: int) -> bytes:
    """A dictionary id as it precedes the frame: one byte below 255, else 255 and a u32."""
    return bytes((dict_id,)) if dict_id < 255 else b"\xff" + _DICT_ID.pack(dict_id)


def _read_dict_ref(body: bytes) -> tuple[int, int]:
    """The dictionary id at the start of ``body`` and the frame's offset."""
    if body[0] < 255:
        return body[0], 1
    return int(_DICT_ID.unpack_from(body, 1)[0]), 1 + _DICT_ID.size


def _signed(digest: int) -> int:
    return digest - (1 << 64) if digest >= 1 << 63 else digest


def block_digest(block: bytes) -> int:
    """The checksum a block carries (a signed 64-bit integer: it fits a BIGINT), which the
    catalog records as the write's digest."""
    if _is_legacy(block):
        return _signed(_LEGACY_HEAD.unpack_from(block)[1])
    return _signed(_HEAD.unpack_from(block)[1])


def block_intact(block: bytes) -> bool:
    """Whether ``block`` matches the checksum it carries (every byte read, nothing decoded)."""
    if _is_legacy(block):
        _, digest = _LEGACY_HEAD.unpack_from(block)
        return bool(int(xxhash.xxh64_intdigest(block[_LEGACY_HEAD.size :])) == digest)
    if len(block) < _HEAD.size:
        return False
    kind, digest = _HEAD.unpack_from(block)
    return bool(_checksum(kind, block[_HEAD.size :]) == digest)


def _is_legacy(block: bytes) -> bool:
    return (
        len(block) >= _LEGACY_HEAD.size
        and _LEGACY_HEAD.unpack_from(block)[0] == len(block) - _LEGACY_HEAD.size
    )
