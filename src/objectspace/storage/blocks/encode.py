"""Encoding a key group's edits as one block: the tables in the order they are written,
their rows as columns, the columns as one msgpack payload, compressed and framed; a large
full block as sorted chunks behind an index (:func:`~objectspace.storage.blocks.lookup`
decodes only the chunks a range of rows can be in).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack
import xxhash

from objectspace.collections import grouped_tables, row_columns, table_heads
from objectspace.storage.blocks.columns import _deltas, _plane_group
from objectspace.storage.blocks.compression import Dictionary, _compress
from objectspace.storage.blocks.framing import (
    _CHUNKED,
    _IDS_IN_KIND,
    _INDEX,
    _RAW,
    _TRAINED,
    _TRAINED_IN_KIND,
    _ZSTD,
    _dict_ref,
    _sealed,
)
from objectspace.storage.blocks.names import _name_templates
from objectspace.tables import DELETED, TableChanges

__all__ = ["CHUNK_ROWS", "encode_block"]


def encode_block(
    changes: Mapping[str, TableChanges],
    full: bool,
    level: int = 3,
    head_ids: Mapping[str, int] | None = None,
    dictionary: Dictionary | None = None,
    payloads: list[bytes] | None = None,
    *,
    compact: bool = False,
) -> tuple[bytes, int]:
    """One key group's edits as a block; returns the block and its number of rows. A full
    block of more than :data:`CHUNK_ROWS` rows is chunked (see :func:`lookup`).
    ``compact``: the forms only checkpoint storage's readers read (``docs/formats.md``;
    versioned storage writes them, :class:`~objectspace.SQLiteStore` files do not):
    folders whose names differ by one decimal number (a key's objects with integer keys:
    ``state/item/17/buf``) as a template and the numbers, delta-encoded as varints (see
    :func:`_name_templates`), and msgpack floats without the plane of their marker bytes."""
    if full and sum(len(c.rows) for c in changes.values()) > CHUNK_ROWS:
        return _encode_chunked(changes, level, head_ids, dictionary, compact)
    return _encode_plain(changes, full, level, head_ids, dictionary, payloads, compact)


CHUNK_ROWS = 2048
"""Full blocks of more rows are written as sorted chunks of at most this many rows."""


def _encode_chunked(
    changes: Mapping[str, TableChanges],
    level: int,
    head_ids: Mapping[str, int] | None,
    dictionary: Dictionary | None,
    compact: bool = False,
) -> tuple[bytes, int]:
    """A full block as an SSTable does it: rows sorted by (table, key), cut into chunks of
    :data:`CHUNK_ROWS` rows, each a plain block of its own (compressed and checksummed),
    behind an index of each chunk's first (table, key) and length, so that :func:`lookup`
    decodes only the chunks a range of rows can be in."""
    chunks: list[bytes] = []
    index: list[list[Any]] = []
    current: dict[str, TableChanges] = {}
    count = total = 0
    first: list[Any] = []
    for name in sorted(changes):
        rows = changes[name].rows
        for key in sorted(rows):
            value = rows[key]
            if value is DELETED:
                continue
            if not first:
                first = [name, key]
            table = current.get(name)
            if table is None:
                table = current[name] = TableChanges()
            table.rows[key] = value
            count += 1
            total += 1
            if count >= CHUNK_ROWS:
                block, _ = _encode_plain(
                    current, True, level, head_ids, dictionary, compact=compact
                )
                index.append([*first, len(block)])
                chunks.append(block)
                current, count, first = {}, 0, []
    if current:
        block, _ = _encode_plain(current, True, level, head_ids, dictionary, compact=compact)
        index.append([*first, len(block)])
        chunks.append(block)
    packed = msgpack.packb(index, use_bin_type=True)
    body = _INDEX.pack(len(packed), xxhash.xxh64_intdigest(packed)) + packed + b"".join(chunks)
    return _sealed(_CHUNKED, body), total


def _encode_plain(
    changes: Mapping[str, TableChanges],
    full: bool,
    level: int = 3,
    head_ids: Mapping[str, int] | None = None,
    dictionary: Dictionary | None = None,
    payloads: list[bytes] | None = None,
    compact: bool = False,
) -> tuple[bytes, int]:
    """One key group's edits as a block;
    returns the block and its number of rows (row
       edits and deleted tables). A full block holds no deletes (it starts from nothing).
       ``dictionary``: the operator's trained dictionary, if it has one; ``payloads``
       collects the uncompressed payload of a differential block (samples to train one on).

       Keys are stored per table as delta-encoded integers (when all are decimal integers) or
       as bytes with their lengths. Values are stored as byte planes when they all have one
       width (floats, fixed-width records), else with their lengths (``-1``: a delete; ``-2``:
       a msgpack float, whose 8 bytes go to a column of byte planes). A table with no
       row and no truncation changes nothing on replay and is left out.
    """
    tables = _ordered_tables(_without_empty(changes), full, head_ids, compact)
    columns = _Columns(*row_columns(tables.table_rows, full, DELETED))
    payload, groups = _packed(tables, columns, head_ids, compact)
    if payloads is not None and not full:
        payloads.append(payload)
    fixed = columns.fixed
    count = len(fixed[max(fixed)]) if fixed else 0
    plane_bytes = len(groups[-1][1]) if groups else 0  # of the widest group (the last)
    block = _framed(payload, level, dictionary, full, count, plane_bytes)
    return block, columns.rows + len(tables.truncated)


def _without_empty(changes: Mapping[str, TableChanges]) -> Mapping[str, TableChanges]:
    """``changes`` without the tables that change nothing (no row, no truncation)."""
    empty = [name for name, c in changes.items() if not c.rows and not c.truncated]
    if empty:
        changes = dict(changes)
        for name in empty:
            del changes[name]
    return changes


@dataclass(slots=True)
class _Tables:
    """A block's tables in the order it stores them: their folders (names, or ids to
    delta-encode, or templates), how many tables each folder has, the tables' last
    components (each once, by first use) and each table's index into them, the deleted
    tables' indices and each table's rows."""

    heads: list[Any]
    head_tables: list[int]
    tails: dict[str, int]
    table_tails: list[int]
    truncated: list[int]
    table_rows: list[dict[bytes, Any]]
    named: tuple[list[int], list[str], list[list[Any]]] | None = None


def _ordered_tables(
    changes: Mapping[str, TableChanges],
    full: bool,
    head_ids: Mapping[str, int] | None,
    compact: bool,
) -> _Tables:
    """The tables of ``changes`` grouped by folder: folders in id order when they are
    interned (``head_ids``: their ids delta-encode), else with ``compact`` templated
    folders by number (:func:`_name_templates`), else as they come; each folder's tables
    as they come. Two C passes (or their pure-Python twins): the names' folders
    (:func:`~objectspace.collections.table_heads`), then the tables placed by folder
    (:func:`~objectspace.collections.grouped_tables`)."""
    heads, table_head, table_tail = table_heads(list(changes))
    order: list[int] | None = None
    named: tuple[list[int], list[str], list[list[Any]]] | None = None
    if head_ids is not None:  # interned folders in id order: their ids delta-encode
        order = sorted(range(len(heads)), key=list(map(head_ids.__getitem__, heads)).__getitem__)
    elif compact:
        named = _name_templates(heads)
        if named is not None:
            order = named[0]
    head_tables, tails, table_tails, truncated, table_rows = grouped_tables(
        list(changes.values()), table_head, table_tail, order, full
    )
    if order is not None:
        heads = list(map(heads.__getitem__, order))
    return _Tables(heads, head_tables, tails, table_tails, truncated, table_rows, named)


@dataclass(slots=True)
class _Columns:
    """The rows of a block's tables as columns: per table its row count, how its keys are
    stored (1: as integers) and the width of its values (0: none); the integer keys
    (delta-encoded per table), the other keys' lengths and bytes, the values by width
    (tables whose values have one width), the other values' lengths (``-1``: a delete)
    and bytes; and the number of rows."""

    counts: list[int] = field(default_factory=list)
    key_modes: list[int] = field(default_factory=list)
    int_keys: list[int] = field(default_factory=list)
    key_lens: list[int] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    widths: list[int] = field(default_factory=list)
    fixed: dict[int, list[bytes]] = field(default_factory=dict)  # width → values
    value_lens: list[int] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    rows: int = 0


def _packed(
    tables: _Tables, columns: _Columns, head_ids: Mapping[str, int] | None, compact: bool
) -> tuple[bytes, list[list[Any]]]:
    """The payload: the msgpack array of the block's columns; and its planes column (the
    groups of fixed-width values, by width: the widest last)."""
    heads = tables.heads
    named = tables.named
    if head_ids is not None:
        heads = _deltas([head_ids[h] for h in heads])
    elif named is not None:
        heads = [[named[1], named[2]]]
    fixed = columns.fixed
    groups = [_plane_group(w, fixed[w], compact) for w in sorted(fixed)]
    payload = msgpack.packb(
        [
            heads,
            tables.head_tables,
            list(tables.tails),
            tables.table_tails,
            columns.counts,
            tables.truncated,
            columns.key_modes if any(columns.key_modes) else None,
            columns.int_keys,
            columns.key_lens,
            b"".join(columns.keys),
            columns.widths if any(columns.widths) else None,
            columns.value_lens,
            b"".join(columns.values),
            groups,
        ],
        use_bin_type=True,
    )
    return payload, groups


def _framed(
    payload: bytes,
    level: int,
    dictionary: Dictionary | None,
    full: bool,
    count: int,
    plane_bytes: int,
) -> bytes:
    """The block of ``payload``: compressed (see :func:`_compress`), or as is when that does
    not pay; its kind names the trained dictionary it was compressed with."""
    compressed = _compress(payload, level, dictionary, full, count, plane_bytes)
    if len(compressed) >= len(payload):
        kind, body = _RAW, payload
    elif dictionary is None:
        kind, body = _ZSTD, compressed
    else:
        if dictionary.id < _IDS_IN_KIND:
            kind, body = _TRAINED_IN_KIND + dictionary.id, compressed
        else:
            kind, body = _TRAINED, _dict_ref(dictionary.id) + compressed
    return _sealed(kind, body)
