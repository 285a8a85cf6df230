"""The one block format of versioned storage: a key group's changes in one write, encoded
once, whatever backend stores the bytes (a row of ``ckpt_blocks`` in SQLite or PostgreSQL, a
range of a segment file).

A block is ``kind (u8) | xxh64 of the body (u64, little-endian) | body``; the body is the
payload, zstd-compressed (kind ``0x22``, with the built-in dictionary :data:`DICTIONARY`) or
stored as is when compression does not pay (kind ``0x21``). The payload is columnar
(msgpack arrays, one per column): the table folders (interned ids, or names), how many tables
each folder has, the tables' last path components (each once) and each table's index into
them, each table's row count, the deleted tables, key lengths and keys, value lengths (``-1``:
a delete, ``-2``: a float) and values, and the 64-bit floats as byte planes (as Parquet's
BYTE_STREAM_SPLIT does), where their exponents compress. Keys that are all decimal integers
(list indices, int dict keys) are stored as delta-encoded integers instead of bytes.

Blocks written by segment storage before this format (``u32 length | u64 xxh64 | zstd``,
:data:`LEGACY`) are still read.

Every block is verified on read: its checksum, then the catalog's record of it (its digest,
the block's own checksum; its row count). A mismatch, or a block that is not where the
catalog says, raises :class:`~objectspace.CorruptStateError` naming the job, operator, key
group, checkpoint and where the block lives.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any
from urllib.parse import quote

import msgpack

from objectspace.errors import CorruptStateError
from objectspace.storage.contract import WriteInfo
from objectspace.tables import DELETED, TableChanges

try:
    import xxhash
    import zstandard
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("checkpoint storage needs xxhash and zstandard") from exc

__all__ = [
    "DICTIONARY",
    "LEGACY",
    "Block",
    "Tables",
    "block_digest",
    "block_heads",
    "decode_block",
    "encode_block",
    "path_component",
    "replay",
]

Tables = dict[str, dict[bytes, bytes]]
_Rows = list[tuple[str, bytes, bytes | None]]

_HEAD = struct.Struct("<BQ")
_LEGACY_HEAD = struct.Struct("<IQ")
_ZSTD = 0x22
_RAW = 0x21
LEGACY = "u32 length | u64 xxh64 | zstd(msgpack columns)"
"""The block layout segment storage wrote before this format (still read)."""

_F64 = 0xCB  # msgpack's float 64 marker
_FLOAT = -2  # value length code: an 8-byte float from the float column
_DELETE = -1  # value length code: a delete
_FLOAT_MARKER = bytes((_F64,))

# The built-in zstd dictionary: strings every block of an object space repeats (the tables'
# last components, msgpack headers of stored values). Small blocks compress against it
# instead of against nothing; changing it changes the format (a new kind byte).
DICTIONARY = (
    b"itemsmetadatalengthstateindexitemheadtailnextprevkeysvaluessizeorder"
    b"\x81\xa4kind\xa4List\x81\xa4kind\xa4Dict\x81\xa4kind\xa5Value\x81\xa4kind\xa3Set"
    b"\x81\xa4kind\xa5Queue\x81\xa4kind\xa5Stack\x81\xa4kind\xaaSortedDict"
    b"\xcb?\xe0\xcb?\xd0\xcb?\xc0\xcb@\x00\xcb@\x10"
)

_local = threading.local()


def _compressor(level: int) -> Any:
    cache = getattr(_local, "compressors", None)
    if cache is None:
        cache = _local.compressors = {}
    compressor = cache.get(level)
    if compressor is None:
        compressor = cache[level] = zstandard.ZstdCompressor(
            level=level,
            dict_data=_dictionary(),
            write_checksum=False,
            write_dict_id=False,
        )
    return compressor


def _decompressor() -> Any:
    decompressor = getattr(_local, "decompressor", None)
    if decompressor is None:
        decompressor = _local.decompressor = zstandard.ZstdDecompressor(dict_data=_dictionary())
    return decompressor


_DICT: Any = None


def _dictionary() -> Any:
    global _DICT
    if _DICT is None:
        _DICT = zstandard.ZstdCompressionDict(DICTIONARY, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    return _DICT


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


def path_component(name: str) -> str:
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


def _signed(digest: int) -> int:
    return digest - (1 << 64) if digest >= 1 << 63 else digest


def _int_keys(keys: Sequence[bytes]) -> list[int] | None:
    """``keys`` as delta-encoded integers when each is a canonical decimal integer (no sign,
    no leading zero), else ``None``."""
    out: list[int] = []
    previous = 0
    for key in keys:
        if not key.isdigit() or (key[0] == 48 and len(key) > 1) or len(key) > 18:
            return None
        value = int(key)
        out.append(value - previous)
        previous = value
    return out


def encode_block(
    changes: Mapping[str, TableChanges],
    full: bool,
    level: int = 3,
    head_ids: Mapping[str, int] | None = None,
) -> tuple[bytes, int]:
    """One key group's edits as a block; returns the block and its number of rows (row
    edits and deleted tables). A full block holds no deletes (it starts from nothing)."""
    by_head: dict[str, list[tuple[str, TableChanges]]] = {}
    for name, change in changes.items():
        head, tail = _split(name)
        by_head.setdefault(head, []).append((tail, change))
    tails: dict[str, int] = {}
    head_tables: list[int] = []
    table_tails: list[int] = []
    counts: list[int] = []
    truncated: list[int] = []
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
                keys.append(key)
                count += 1
            counts.append(count)
    heads: list[Any] = list(by_head)
    if head_ids is not None:
        heads = [head_ids[h] for h in heads]
    int_keys = _int_keys(keys)
    key_column: Any
    if int_keys is not None:
        key_column = int_keys
        key_lens: Any = None
    else:
        key_column = b"".join(keys)
        key_lens = [len(k) for k in keys]
    if all(v == _FLOAT for v in value_lens):
        value_lens_column: Any = None  # every value is a float
    else:
        value_lens_column = value_lens
    payload = msgpack.packb(
        [
            heads,
            head_tables,
            list(tails),
            table_tails,
            counts,
            truncated,
            key_lens,
            key_column,
            value_lens_column,
            b"".join(values),
            _shuffle(b"".join(floats), 8),
        ],
        use_bin_type=True,
    )
    compressed = _compressor(level).compress(payload)
    if len(compressed) < len(payload):
        kind, body = _ZSTD, compressed
    else:
        kind, body = _RAW, payload
    return _HEAD.pack(kind, xxhash.xxh64_intdigest(body)) + body, len(keys) + len(truncated)


def block_digest(block: bytes) -> int:
    """The checksum a block carries (a signed 64-bit integer: it fits a BIGINT), which the
    catalog records as the write's digest."""
    if _is_legacy(block):
        return _signed(_LEGACY_HEAD.unpack_from(block)[1])
    return _signed(_HEAD.unpack_from(block)[1])


def _is_legacy(block: bytes) -> bool:
    return (
        len(block) >= _LEGACY_HEAD.size
        and _LEGACY_HEAD.unpack_from(block)[0] == len(block) - _LEGACY_HEAD.size
    )


def _payload(block: bytes, where: str) -> bytes:
    """The block's payload, checked against its checksum."""
    if _is_legacy(block):
        _, digest = _LEGACY_HEAD.unpack_from(block)
        body = block[_LEGACY_HEAD.size :]
        kind = _ZSTD
        legacy = True
    else:
        if len(block) < _HEAD.size:
            raise CorruptStateError(f"{where}: the block is truncated ({len(block)} bytes)")
        kind, digest = _HEAD.unpack_from(block)
        body = block[_HEAD.size :]
        legacy = False
    if xxhash.xxh64_intdigest(body) != digest:
        raise CorruptStateError(f"{where}: the block fails its checksum (corrupt or truncated)")
    try:
        if legacy:
            return bytes(zstandard.ZstdDecompressor().decompress(body))
        if kind == _ZSTD:
            return bytes(_decompressor().decompress(body))
        if kind == _RAW:
            return bytes(body)
    except zstandard.ZstdError as exc:
        raise CorruptStateError(f"{where}: the block does not decompress: {exc}") from exc
    raise CorruptStateError(f"{where}: unknown block kind {kind:#x}")


@dataclass
class _Decoded:
    """A block's columns, ready to apply."""

    names: list[str]
    counts: list[int]
    truncated: list[int]
    keys: list[bytes]
    value_lens: list[int] | None
    values: bytes
    floats: bytes


def _decode(
    block: bytes, where: str, resolve: Callable[[Sequence[int]], Mapping[int, str]] | None
) -> _Decoded:
    payload = _payload(block, where)
    try:
        (
            heads,
            head_tables,
            tails,
            table_tails,
            counts,
            truncated,
            key_lens,
            key_column,
            value_lens,
            values,
            floats,
        ) = msgpack.unpackb(payload, raw=False)
        if heads and isinstance(heads[0], int):
            if resolve is None:
                raise CorruptStateError("its table folders are interned and no catalog was given")
            known = resolve(heads)
            missing = [h for h in heads if h not in known]
            if missing:
                raise CorruptStateError(
                    f"table folder ids {missing[:5]} have no name in the catalog (ckpt_tables)"
                )
            heads = [known[h] for h in heads]
        table_heads = [h for h, n in zip(heads, head_tables, strict=True) for _ in range(n)]
        names = [
            f"{head}/{tails[t]}" if head else tails[t]
            for head, t in zip(table_heads, table_tails, strict=True)
        ]
        if key_lens is None:
            keys = [str(k).encode() for k in accumulate(key_column)]
        else:
            ends = list(accumulate(key_lens))
            starts = [0, *ends[:-1]] if ends else []
            keys = [key_column[a:b] for a, b in zip(starts, ends, strict=True)]
        if sum(counts) != len(keys):
            raise ValueError(f"{sum(counts)} rows counted, {len(keys)} keys stored")
        return _Decoded(names, counts, truncated, keys, value_lens, values, _unshuffle(floats, 8))
    except CorruptStateError as exc:
        raise CorruptStateError(f"{where}: {exc}") from exc
    except Exception as exc:
        raise CorruptStateError(f"{where}: the block is corrupt: {exc}") from exc


def _values(decoded: _Decoded) -> list[bytes | None]:
    """Each row's value (``None``: a delete)."""
    floats = decoded.floats
    if decoded.value_lens is None:
        return [_FLOAT_MARKER + floats[i : i + 8] for i in range(0, len(floats), 8)]
    out: list[bytes | None] = []
    values = decoded.values
    vpos = fpos = 0
    for vlen in decoded.value_lens:
        if vlen == _FLOAT:
            out.append(_FLOAT_MARKER + floats[fpos : fpos + 8])
            fpos += 8
        elif vlen == _DELETE:
            out.append(None)
        else:
            out.append(values[vpos : vpos + vlen])
            vpos += vlen
    return out


def decode_block(
    block: bytes,
    where: str,
    resolve: Callable[[Sequence[int]], Mapping[int, str]] | None = None,
) -> tuple[dict[str, bool], _Rows]:
    """A block's deleted tables and rows (``None`` value: a delete);
    :class:`CorruptStateError` naming ``where``. ``resolve`` maps interned table-folder ids
    to names (the catalog's ``table_names``)."""
    decoded = _decode(block, where, resolve)
    try:
        values = _values(decoded)
        rows: _Rows = []
        row = 0
        for name, count in zip(decoded.names, decoded.counts, strict=True):
            for _ in range(count):
                rows.append((name, decoded.keys[row], values[row]))
                row += 1
    except (IndexError, ValueError) as exc:
        raise CorruptStateError(f"{where}: the block is corrupt: {exc}") from exc
    return {decoded.names[i]: True for i in decoded.truncated}, rows


def _apply(tables: Tables, decoded: _Decoded) -> int:
    """Apply a decoded block to ``tables``; returns its number of rows."""
    for i in decoded.truncated:
        tables.pop(decoded.names[i], None)
    values = _values(decoded)
    if len(values) != len(decoded.keys):
        raise ValueError(f"{len(decoded.keys)} keys but {len(values)} values")
    keys = decoded.keys
    row = 0
    for name, count in zip(decoded.names, decoded.counts, strict=True):
        if not count:
            continue
        end = row + count
        table_values = values[row:end]
        table = tables.get(name)
        if table is None:
            table = tables[name] = {}
        if None in table_values:
            for key, value in zip(keys[row:end], table_values, strict=True):
                if value is None:
                    table.pop(key, None)
                else:
                    table[key] = value
        else:
            table.update(zip(keys[row:end], table_values, strict=True))  # type: ignore[arg-type]
        row = end
    return len(keys) + len(decoded.truncated)


@dataclass(frozen=True)
class Block:
    """A write's block as read from where it lives, with the catalog's record of it."""

    write: WriteInfo
    data: bytes | None  # None: not found where the catalog says it is
    digest: int | None  # the catalog's digest (None: written before digests, unchecked)
    rows: int  # the catalog's row count
    where: str  # where the block lives, for errors


def replay(
    blocks: Iterable[Block],
    where: str,
    resolve: Callable[[Sequence[int]], Mapping[int, str]] | None = None,
) -> Tables:
    """The tables of one key group after applying ``blocks`` (its chain) in order, each
    verified: present, its checksum, the catalog's digest and row count. ``where`` names
    the job and operator in errors."""
    tables: Tables = {}
    for block in blocks:
        w = block.write
        what = (
            f"{where}key group {w.key_group} checkpoint {w.version} (write {w.write_id}) "
            f"in {block.where}"
        )
        if block.data is None:
            raise CorruptStateError(f"{what}: the block is missing")
        if block.digest is not None and block_digest(block.data) != block.digest:
            raise CorruptStateError(
                f"{what}: the block is not the one the catalog recorded (digest mismatch: "
                "rows missing or added)"
            )
        decoded = _decode(block.data, what, resolve)
        try:
            rows = _apply(tables, decoded)
        except (IndexError, ValueError) as exc:
            raise CorruptStateError(f"{what}: the block is corrupt: {exc}") from exc
        if rows != block.rows:
            raise CorruptStateError(
                f"{what}: the write has {block.rows} rows but its block holds {rows} "
                "(rows missing or added)"
            )
    return {name: rows for name, rows in tables.items() if rows}
