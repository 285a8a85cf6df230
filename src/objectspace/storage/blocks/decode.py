"""Decoding blocks: the payload (its checksum verified, then decompressed), its columns back
into rows, a whole block or only the chunks of a full block that a range of rows can be in.

Blocks of every earlier layout (``docs/formats.md``) are read: the first segment files'
blocks, table folders interned as ids in the catalog's ``ckpt_tables``, folders without
templates, floats with their marker bytes. A block that does not decode raises
:class:`~objectspace.CorruptStateError` naming ``where`` it lives.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import msgpack
import xxhash
import zstandard

from objectspace.errors import CorruptStateError
from objectspace.storage.blocks.columns import (
    _DELETE,
    _FIXED_POINT,
    _FLOAT_MARKER,
    _FLOAT_WIDTH,
    _from_fixed_point,
    _mixed_values,
    _slices,
    _unshuffle,
)
from objectspace.storage.blocks.compression import _decompressor
from objectspace.storage.blocks.framing import (
    _HEAD,
    _IDS_IN_KIND,
    _INDEX,
    _LEGACY_HEAD,
    _RAW,
    _TRAINED,
    _TRAINED_IN_KIND,
    _ZSTD,
    _checksum,
    _is_chunked,
    _is_legacy,
    _is_trained_in_kind,
    _read_dict_ref,
)
from objectspace.storage.blocks.names import _from_templates

__all__ = ["DictionaryLookup", "Tables", "decode_block", "dictionary_id", "lookup"]

Tables = dict[str, dict[bytes, bytes]]
_Rows = list[tuple[str, bytes, bytes | None]]

DictionaryLookup = Callable[[int], "bytes | None"]
"""The bytes of a trained dictionary by id (``None``: unknown), from the catalog."""


def _payload(block: bytes, where: str, dictionaries: DictionaryLookup | None = None) -> bytes:
    """The block's payload, checked against its checksum."""
    if _is_legacy(block):
        _, digest = _LEGACY_HEAD.unpack_from(block)
        body = block[_LEGACY_HEAD.size :]
        kind = _ZSTD
        legacy = True
    else:
        if len(block) < _HEAD.size:
            raise CorruptStateError(
                f"{where} is corrupt: the block is truncated ({len(block)} bytes)"
            )
        kind, digest = _HEAD.unpack_from(block)
        body = block[_HEAD.size :]
        legacy = False
    if (xxhash.xxh64_intdigest(body) if legacy else _checksum(kind, body)) != digest:
        raise CorruptStateError(f"{where} is corrupt: the block fails its checksum")
    try:
        if legacy:
            return bytes(zstandard.ZstdDecompressor().decompress(body))
        if kind == _ZSTD:
            return bytes(_decompressor().decompress(body))
        if kind == _RAW:
            return bytes(body)
        if kind == _TRAINED or _TRAINED_IN_KIND <= kind < _TRAINED_IN_KIND + _IDS_IN_KIND:
            if kind == _TRAINED:
                dict_id, start = _read_dict_ref(body)
            else:
                dict_id, start = kind - _TRAINED_IN_KIND, 0
            data = None if dictionaries is None else dictionaries(dict_id)
            if data is None:
                raise CorruptStateError(
                    f"{where}: the block was compressed with dictionary {dict_id}, which is not "
                    "in the catalog (ckpt_dictionaries)"
                )
            return bytes(_decompressor(data).decompress(body[start:]))
    except zstandard.ZstdError as exc:
        raise CorruptStateError(
            f"{where} is corrupt: the block does not decompress: {exc}"
        ) from exc
    raise CorruptStateError(f"{where} is corrupt: unknown block kind {kind:#x}")


@dataclass
class _Decoded:
    """A block's columns, ready to apply."""

    names: list[str]
    counts: list[int]
    truncated: list[int]
    keys: list[bytes]
    values: list[bytes | None]


def _legacy(columns: list[Any]) -> tuple[list[Any], list[bytes | None]]:
    """The columns of a legacy segment block in this format's order, and its values."""
    (heads, head_tables, tails, table_tails, counts, truncated, key_lens, keys, value_lens,
     values, floats) = columns  # fmt: skip
    return [heads, head_tables, tails, table_tails, counts, truncated, None, [], key_lens,
            keys, None, [], b"", []], _mixed_values(value_lens, values, _unshuffle(floats, 8))  # fmt: skip


def _table_values(
    widths: list[int] | None,
    counts: list[int],
    value_lens: list[int],
    data: bytes,
    planes: list[list[Any]],
) -> list[bytes | None]:
    """Each row's value (``None``: a delete), table by table: from the byte planes of the
    tables' width, or bytes with their lengths."""
    if widths is None:  # no table of fixed width
        if _DELETE not in value_lens:
            return _slices(data, value_lens)  # type: ignore[return-value]
        return _mixed_values(value_lens, data, b"")
    fixed: dict[int, list[bytes]] = {}
    for width, shuffled in planes:
        if width <= _FIXED_POINT:  # floats as fixed-point numbers
            count = sum(c for w, c in zip(widths, counts, strict=True) if w == _FLOAT_WIDTH)
            fixed[_FLOAT_WIDTH] = _from_fixed_point(shuffled, _FIXED_POINT - width, count)
            continue
        if width < 0:  # msgpack floats without their marker byte
            plain = _unshuffle(shuffled, -width - 1)
            fixed[-width] = [_FLOAT_MARKER + plain[i : i + 8] for i in range(0, len(plain), 8)]
            continue
        plain = _unshuffle(shuffled, width)
        fixed[width] = [plain[i : i + width] for i in range(0, len(plain), width)]
    taken = dict.fromkeys(fixed, 0)
    values: list[bytes | None] = []
    pos = lpos = 0
    for width, count in zip(widths, counts, strict=True):
        if width:
            start = taken[width]
            values.extend(fixed[width][start : start + count])
            taken[width] = start + count
        else:
            lens = value_lens[lpos : lpos + count]
            lpos += count
            if min(lens, default=0) < 0:  # a delete among them
                size = sum(n for n in lens if n > 0)
                values.extend(_mixed_values(lens, data[pos : pos + size], b""))
            else:  # puts only
                size = sum(lens)
                values.extend(_slices(data[pos : pos + size], lens))
            pos += size
    return values


def _decode(
    block: bytes,
    where: str,
    resolve: Callable[[Sequence[int]], Mapping[int, str]] | None,
    dictionaries: DictionaryLookup | None = None,
) -> _Decoded:
    payload = _payload(block, where, dictionaries)
    try:
        columns = msgpack.unpackb(payload, raw=False)
        legacy_values = None
        if len(columns) == 11:
            columns, legacy_values = _legacy(columns)
        (
            heads,
            head_tables,
            tails,
            table_tails,
            counts,
            truncated,
            key_modes,
            int_keys,
            key_lens,
            key_bytes,
            widths,
            value_lens,
            value_bytes,
            planes,
        ) = columns
        heads = _folders(heads, legacy_values is not None, resolve)
        table_heads = [h for h, n in zip(heads, head_tables, strict=True) for _ in range(n)]
        names = [
            f"{head}/{tails[t]}" if head else tails[t]
            for head, t in zip(table_heads, table_tails, strict=True)
        ]
        keys = _keys(key_modes, counts, int_keys, key_lens, key_bytes)
        if legacy_values is None:
            values = _table_values(widths, counts, value_lens, value_bytes, planes)
        else:
            values = legacy_values
        if sum(counts) != len(keys) or len(keys) != len(values):
            raise ValueError(f"{sum(counts)} rows counted, {len(keys)} keys, {len(values)} values")
        return _Decoded(names, counts, truncated, keys, values)
    except CorruptStateError as exc:
        raise CorruptStateError(f"{where}: {exc}") from exc
    except MemoryError:
        raise  # the process ran out of memory: nothing says the block is damaged
    except Exception as exc:
        raise CorruptStateError(f"{where} is corrupt: {exc}") from exc


def _folders(
    heads: list[Any], legacy: bool, resolve: Callable[[Sequence[int]], Mapping[int, str]] | None
) -> list[Any]:
    """The table folders of a block's first column: names, templates and the other names,
    or ids interned in the catalog (delta-encoded, unless in a ``legacy`` block)."""
    if heads and isinstance(heads[0], list):  # templated
        ((others, templated),) = heads
        return [*others, *_from_templates(templated)]
    if heads and isinstance(heads[0], int):
        if not legacy:
            heads = list(accumulate(heads))
        if resolve is None:
            raise CorruptStateError("its table folders are interned and no catalog was given")
        known = resolve(heads)
        missing = [h for h in heads if h not in known]
        if missing:
            raise CorruptStateError(
                f"table folder ids {missing[:5]} have no name in the catalog (ckpt_tables)"
            )
        return [known[h] for h in heads]
    return heads


def _keys(
    key_modes: list[int] | None,
    counts: list[int],
    int_keys: list[int],
    key_lens: list[int],
    key_bytes: bytes,
) -> list[bytes]:
    """Each row's key, table by table: from delta-encoded integers or lengths and bytes."""
    if key_modes is None:
        return _slices(key_bytes, key_lens)
    keys: list[bytes] = []
    ipos = kpos = bpos = 0
    for mode, count in zip(key_modes, counts, strict=True):
        if mode:
            deltas = int_keys[ipos : ipos + count]
            ipos += count
            keys.extend([b"%d" % k for k in accumulate(deltas)])
        else:
            lens = key_lens[kpos : kpos + count]
            kpos += count
            size = sum(lens)
            keys.extend(_slices(key_bytes[bpos : bpos + size], lens))
            bpos += size
    return keys


def _decode_all(
    block: bytes,
    where: str,
    resolve: Callable[[Sequence[int]], Mapping[int, str]] | None,
    dictionaries: DictionaryLookup | None,
) -> list[_Decoded]:
    """A block's decoded parts: one, or one per chunk of a chunked full block (whose
    checksum covers the whole block: every byte is verified)."""
    if _is_chunked(block):
        _, digest = _HEAD.unpack_from(block)
        if xxhash.xxh64_intdigest(block[_HEAD.size :]) != digest:
            raise CorruptStateError(f"{where} is corrupt: the block fails its checksum")
        return [_decode(c, where, resolve, dictionaries) for c in _chunks(block, where)[1]]
    return [_decode(block, where, resolve, dictionaries)]


def decode_block(
    block: bytes,
    where: str,
    resolve: Callable[[Sequence[int]], Mapping[int, str]] | None = None,
    dictionaries: DictionaryLookup | None = None,
) -> tuple[dict[str, bool], _Rows]:
    """A block's deleted tables and rows (``None`` value: a delete);
    :class:`CorruptStateError` naming ``where``. ``resolve`` maps interned table-folder ids
    to names (the catalog's ``table_names``)."""
    rows: _Rows = []
    truncated: dict[str, bool] = {}
    for decoded in _decode_all(block, where, resolve, dictionaries):
        try:
            values = decoded.values
            row = 0
            for name, count in zip(decoded.names, decoded.counts, strict=True):
                for _ in range(count):
                    rows.append((name, decoded.keys[row], values[row]))
                    row += 1
        except (IndexError, ValueError) as exc:
            raise CorruptStateError(f"{where} is corrupt: {exc}") from exc
        truncated.update({decoded.names[i]: True for i in decoded.truncated})
    return truncated, rows


def _chunks(block: bytes, where: str) -> tuple[list[tuple[str, bytes]], list[bytes]]:
    """A chunked block's index (each chunk's first table and key) and its chunks; the
    index is checked against its checksum (each chunk carries its own)."""
    body = block[_HEAD.size :]
    try:
        length, digest = _INDEX.unpack_from(body)
        packed = body[_INDEX.size : _INDEX.size + length]
        if xxhash.xxh64_intdigest(packed) != digest:
            raise ValueError("the chunk index fails its checksum")
        firsts, chunks = [], []
        pos = _INDEX.size + length
        for name, key, size in msgpack.unpackb(packed, raw=False):
            firsts.append((name, key))
            chunks.append(body[pos : pos + size])
            pos += size
        if pos != len(body):
            raise ValueError(f"the chunks end at {pos}, the block at {len(body)}")
    except (ValueError, TypeError, struct.error, msgpack.UnpackException) as exc:
        raise CorruptStateError(f"{where} is corrupt: {exc}") from exc
    return firsts, chunks


def lookup(
    block: bytes,
    where: str,
    start: tuple[str, bytes],
    stop: tuple[str, bytes],
    resolve: Callable[[Sequence[int]], Mapping[int, str]] | None = None,
    dictionaries: DictionaryLookup | None = None,
) -> Tables:
    """The rows ``(table, key)`` of a full block with ``start <= (table, key) < stop``,
    decoding only the chunks they can be in (a block that is not chunked is decoded whole).
    One key's objects are such ranges: their tables share a name prefix."""
    if _is_chunked(block):
        firsts, chunks = _chunks(block, where)
        at = max(bisect.bisect_right(firsts, start) - 1, 0)
        wanted = []
        while at < len(chunks) and firsts[at] < stop:
            wanted.append(chunks[at])
            at += 1
    else:
        wanted = [block]
    found: Tables = {}
    for chunk in wanted:
        decoded = _decode(chunk, where, resolve, dictionaries)
        row = 0
        for name, count in zip(decoded.names, decoded.counts, strict=True):
            for i in range(row, row + count):
                value = decoded.values[i]
                if value is not None and start <= (name, decoded.keys[i]) < stop:
                    found.setdefault(name, {})[decoded.keys[i]] = value
            row += count
    return found


def dictionary_id(block: bytes) -> int | None:
    """The id of the trained dictionary a block was compressed with, or ``None``."""
    if _is_chunked(block):
        return dictionary_id(_chunks(block, "a chunked block")[1][0])
    if len(block) > _HEAD.size and block[0] == _TRAINED and not _is_legacy(block):
        return _read_dict_ref(block[_HEAD.size :])[0]
    if _is_trained_in_kind(block) and not _is_legacy(block):
        return block[0] - _TRAINED_IN_KIND
    return None
