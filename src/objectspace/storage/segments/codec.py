"""The block format of segment files: encode and decode one key group's changes.

Block format: ``u32 length | u64 xxh64 of the compressed payload | zstd(payload)``, where
the payload is msgpack ``[table folders, tables per folder, last components, each table's
last component, each table's row count, deleted tables, key lengths, keys, value lengths (-1 =
delete, -2 = float), values, floats]``: columns compress far better than rows, and 64-bit
floats are stored as byte planes (as Parquet's BYTE_STREAM_SPLIT does), where their
exponents compress. The file starts with ``OSSEG1\\n`` and ends with a msgpack index of its blocks, the
index's offset (u64) and ``OSEND1``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import msgpack

from objectspace.errors import CorruptStateError
from objectspace.tables import DELETED, TableChanges

__all__ = ["END_MAGIC", "MAGIC", "block_heads", "decode_block", "encode_block"]


try:
    import xxhash
    import zstandard
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "segment storage needs fsspec and zstandard: pip install 'objectspace[segments]'"
    ) from exc


MAGIC = b"OSSEG1\n"
END_MAGIC = b"OSEND1"
_BLOCK_HEADER = struct.Struct("<IQ")
_FOOTER = struct.Struct("<Q")

_Rows = list[tuple[str, bytes, bytes | None]]


_F64 = 0xCB  # msgpack's float 64 marker
_FLOAT = -2  # value length code: an 8-byte float from the float column
_DELETE = -1  # value length code: a delete


def _shuffle(data: bytes, width: int) -> bytes:
    """Byte planes of fixed-width items: byte 0 of every item, then byte 1, ...
    Exponent and high mantissa bytes of floats line up, and zstd compresses them."""
    return b"".join(data[i::width] for i in range(width))


def _unshuffle(data: bytes, width: int) -> bytes:
    n = len(data) // width
    out = bytearray(len(data))
    for i in range(width):
        out[i::width] = data[i * n : (i + 1) * n]
    return bytes(out)


def _component(name: str) -> str:
    """A user name as one path component: percent-encoded, dots too (no ``..``); a long
    one is cut and made unique by a hash of the whole name (file systems cap a component
    at 255 bytes)."""
    encoded = quote(name, safe="").replace(".", "%2E")
    if len(encoded) > 96:
        encoded = f"{encoded[:80]}-{xxhash.xxh64_hexdigest(name.encode('utf-8'))}"
    return encoded


def _split(name: str) -> tuple[str, str]:
    head, _, tail = name.rpartition("/")
    return head, tail


def block_heads(changes: Mapping[str, TableChanges]) -> list[str]:
    """The table folders of a block, which the catalog interns."""
    return list(dict.fromkeys(_split(name)[0] for name in changes))


def encode_block(
    changes: Mapping[str, TableChanges],
    full: bool,
    level: int = 3,
    head_ids: Mapping[str, int] | None = None,
) -> tuple[bytes, int]:
    """One key group's edits as a block; returns the block and its number of rows.

    A table name is stored as (its folder, its last component), each kept once per block;
    rows are grouped by table, so a table costs its row count, not an index per row. Values
    that are msgpack 64-bit floats go to a column of their 8 payload bytes, stored as byte
    planes; other values to a column of bytes with their lengths.
    """
    by_head: dict[str, list[tuple[str, TableChanges]]] = {}
    for name, change in changes.items():
        head, tail = _split(name)
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
            for key, value in change.rows.items():
                if value is DELETED:
                    if full:
                        continue
                    value_lens.append(_DELETE)
                elif len(value) == 9 and value[0] == _F64:  # type: ignore[arg-type,index]
                    value_lens.append(_FLOAT)
                    floats.append(value[1:])  # type: ignore[index]
                else:
                    value_lens.append(len(value))  # type: ignore[arg-type]
                    values.append(value)  # type: ignore[arg-type]
                key_lens.append(len(key))
                keys.append(key)
                count += 1
            counts.append(count)
    heads: list[Any] = list(by_head)
    if head_ids is not None:
        heads = [head_ids[h] for h in heads]
    payload = msgpack.packb(
        [
            heads,
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
    compressed = zstandard.ZstdCompressor(level=level).compress(payload)
    header = _BLOCK_HEADER.pack(len(compressed), xxhash.xxh64_intdigest(compressed))
    return header + compressed, len(keys) + len(truncated)


def decode_block(
    block: bytes,
    where: str,
    resolve: Callable[[Sequence[int]], Mapping[int, str]] | None = None,
) -> tuple[dict[str, bool], _Rows]:
    """A block's deleted tables and rows; :class:`CorruptStateError` naming ``where``.

    ``resolve`` maps interned table-folder ids to names (the catalog's ``table_names``).
    """
    if len(block) < _BLOCK_HEADER.size:
        raise CorruptStateError(f"segment {where} is truncated: a block of {len(block)} bytes")
    length, digest = _BLOCK_HEADER.unpack_from(block)
    compressed = block[_BLOCK_HEADER.size :]
    if len(compressed) != length:
        raise CorruptStateError(
            f"segment {where} is truncated: block holds {len(compressed)} of {length} bytes"
        )
    if xxhash.xxh64_intdigest(compressed) != digest:
        raise CorruptStateError(f"segment {where} is corrupt: block checksum mismatch")
    try:
        payload = zstandard.ZstdDecompressor().decompress(compressed)
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
        ) = msgpack.unpackb(payload, raw=False)
        floats = _unshuffle(floats, 8)
        if heads and isinstance(heads[0], int):
            if resolve is None:
                raise CorruptStateError("its table folders are interned and no catalog was given")
            known = resolve(heads)
            missing = [h for h in heads if h not in known]
            if missing:
                raise CorruptStateError(f"table folder ids {missing[:5]} are not in the catalog")
            heads = [known[h] for h in heads]
        table_heads = [h for h, n in zip(heads, head_tables, strict=True) for _ in range(n)]
        names = [
            f"{head}/{tails[t]}" if head else tails[t]
            for head, t in zip(table_heads, table_tails, strict=True)
        ]
    except Exception as exc:
        raise CorruptStateError(f"segment {where} is corrupt: {exc}") from exc
    rows: _Rows = []
    kpos = vpos = fpos = row = 0
    marker = bytes((_F64,))
    try:
        for name, count in zip(names, counts, strict=True):
            for _ in range(count):
                klen = key_lens[row]
                vlen = value_lens[row]
                row += 1
                key = keys[kpos : kpos + klen]
                kpos += klen
                if vlen == _DELETE:
                    rows.append((name, key, None))
                elif vlen == _FLOAT:
                    rows.append((name, key, marker + floats[fpos : fpos + 8]))
                    fpos += 8
                else:
                    rows.append((name, key, values[vpos : vpos + vlen]))
                    vpos += vlen
    except (IndexError, ValueError) as exc:
        raise CorruptStateError(f"segment {where} is corrupt: {exc}") from exc
    return {names[i]: True for i in truncated}, rows
