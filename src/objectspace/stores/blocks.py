"""The block format of :class:`~objectspace.SQLiteStore`: one commit's edits as one blob.

A block is ``u8 codec | u64 xxh64 of the compressed payload | compressed payload``; the codec
is zstd (``zstandard`` installed) or zlib. The payload is msgpack ``[table folders, tables
per folder, last components, each table's last component, each table's row count, deleted
tables, key lengths, keys, value lengths (-1 = delete, -2 = float), values, floats]``:
columns compress far better than rows, a table name is kept as its folder and last
component (each once per block), and 64-bit floats are stored as byte planes (as
Parquet's BYTE_STREAM_SPLIT does), where their exponents compress.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from typing import Any

import msgpack
import xxhash

from objectspace.errors import CorruptStateError
from objectspace.tables import DELETED, TableChanges

__all__ = ["Rows", "decode", "encode"]

try:  # zstd when available (the segments extra), else zlib from the standard library
    import zstandard as _zstd
except ImportError:  # pragma: no cover - depends on the environment
    _zstd = None  # type: ignore[assignment]

_ZLIB = 1
_ZSTD = 2
_HEADER = struct.Struct("<BQ")
_F64 = 0xCB  # msgpack's float 64 marker
_FLOAT = -2  # value length code: an 8-byte float from the float column
_DELETE = -1  # value length code: a delete

Rows = list[tuple[str, bytes, bytes | None]]


def _shuffle(data: bytes, width: int) -> bytes:
    return b"".join(data[i::width] for i in range(width))


def _unshuffle(data: bytes, width: int) -> bytes:
    n = len(data) // width
    out = bytearray(len(data))
    for i in range(width):
        out[i::width] = data[i * n : (i + 1) * n]
    return bytes(out)


def _compress(payload: bytes) -> tuple[int, bytes]:
    if _zstd is not None:
        return _ZSTD, _zstd.ZstdCompressor(level=3).compress(payload)
    return _ZLIB, zlib.compress(payload, 6)  # pragma: no cover - without zstandard


def _decompress(codec: int, data: bytes) -> bytes:
    if codec == _ZSTD:
        if _zstd is None:  # pragma: no cover - depends on the environment
            raise CorruptStateError(
                "it is zstd-compressed and zstandard is not installed "
                "(pip install 'objectspace[segments]')"
            )
        return bytes(_zstd.ZstdDecompressor().decompress(data))
    if codec == _ZLIB:
        return zlib.decompress(data)
    raise CorruptStateError(f"unknown codec {codec}")


def encode(changes: Mapping[str, TableChanges], full: bool) -> tuple[bytes, int]:
    """A commit's edits as one block; returns the block and its number of rows. A full
    block (a snapshot) leaves deletes out and sorts each table's keys."""
    by_head: dict[str, list[tuple[str, TableChanges]]] = {}
    for name, change in changes.items():
        head, _, tail = name.rpartition("/")
        by_head.setdefault(head, []).append((tail, change))
    tails: dict[str, int] = {}
    head_tables: list[int] = []
    table_tails: list[int] = []
    counts: list[int] = []
    truncated: list[int] = []
    key_lens: list[int] = []
    keys: list[bytes] = []
    value_lens: list[int] = []
    values: list[bytes] = []
    floats: list[bytes] = []
    index = 0
    for group in by_head.values():
        head_tables.append(len(group))
        for tail, change in group:
            table_tails.append(tails.setdefault(tail, len(tails)))
            if change.truncated and not full:
                truncated.append(index)
            index += 1
            count = 0
            items: Any = sorted(change.rows.items()) if full else change.rows.items()
            for key, value in items:
                if value is DELETED:
                    if full:
                        continue
                    value_lens.append(_DELETE)
                elif len(value) == 9 and value[0] == _F64:
                    value_lens.append(_FLOAT)
                    floats.append(value[1:])
                else:
                    value_lens.append(len(value))
                    values.append(value)
                key_lens.append(len(key))
                keys.append(key)
                count += 1
            counts.append(count)
    payload = msgpack.packb(
        [
            list(by_head),
            head_tables,
            list(tails),
            table_tails,
            counts,
            truncated,
            key_lens,
            b"".join(keys),
            value_lens,
            b"".join(values),
            _shuffle(b"".join(floats), 8),
        ],
        use_bin_type=True,
    )
    codec, compressed = _compress(payload)
    return _HEADER.pack(codec, xxhash.xxh64_intdigest(compressed)) + compressed, len(keys)


def decode(block: bytes, where: str) -> tuple[list[str], Rows]:
    """A block's deleted tables and its rows (value ``None``: a delete), in order.

    Raises :class:`CorruptStateError` naming ``where`` when the block is truncated, fails
    its checksum or does not decode.
    """
    if len(block) < _HEADER.size:
        raise CorruptStateError(f"{where} is truncated: a block of {len(block)} bytes")
    codec, digest = _HEADER.unpack_from(block)
    compressed = memoryview(block)[_HEADER.size :]
    if xxhash.xxh64_intdigest(compressed) != digest:
        raise CorruptStateError(f"{where} is corrupt: the block fails its checksum")
    try:
        (
            heads,
            head_tables,
            tails,
            table_tails,
            counts,
            truncated,
            key_lens,
            keys,
            value_lens,
            values,
            floats,
        ) = msgpack.unpackb(_decompress(codec, bytes(compressed)), raw=False)
        floats = _unshuffle(floats, 8)
        table_heads = [h for h, n in zip(heads, head_tables, strict=True) for _ in range(n)]
        names = [
            f"{head}/{tails[t]}" if head else tails[t]
            for head, t in zip(table_heads, table_tails, strict=True)
        ]
        rows: Rows = []
        append = rows.append
        kpos = vpos = fpos = row = 0
        marker = bytes((_F64,))
        for name, count in zip(names, counts, strict=True):
            for _ in range(count):
                klen = key_lens[row]
                vlen = value_lens[row]
                row += 1
                key = keys[kpos : kpos + klen]
                kpos += klen
                if vlen == _FLOAT:
                    append((name, key, marker + floats[fpos : fpos + 8]))
                    fpos += 8
                elif vlen == _DELETE:
                    append((name, key, None))
                else:
                    append((name, key, values[vpos : vpos + vlen]))
                    vpos += vlen
        if row != len(key_lens) or kpos != len(keys) or vpos != len(values):
            raise ValueError("its columns disagree on the number of rows")
        return [names[i] for i in truncated], rows
    except CorruptStateError as exc:
        raise CorruptStateError(f"{where} cannot be read: {exc}") from exc
    except Exception as exc:
        raise CorruptStateError(f"{where} is corrupt: {exc}") from exc
