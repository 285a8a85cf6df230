"""Packs: the catalog's record of writes, one row per operator, version and attempt.

The catalog keeps no row per write (``docs/formats.md``). The writes one transaction stores
for one operator at one version (an instance's save, or a commit's staged writes, or one
compaction) share a row of ``ckpt_packs``: the fields they have in common (operator,
version, attempt, committed or not, when, which segment file) once, and each write's own
fields (key group, full or not, bytes, rows, place in the segment, digest, parent) packed
in ``entries``. A checkpoint then adds one row per operator to the catalog, a few pages,
where rows per write would cost a row, an index entry and their pages each.

Write ids stay what the rest of the storage knows: a pack's id is its first write's id, and
entry ``i`` is write ``id + offset_i``. New packs are numbered in steps of :data:`SPAN`
(more than any operator's key groups), so a pack's writes never meet another pack's ids; the
writes of older stores become packs of one write that keep their ids. Retention drops a
pack's unreachable writes by rewriting its entries (their offsets, hence their ids, stay).

``entries`` is msgpack: ``[FORMAT, offsets, key groups, fulls, bytes, rows, gaps,
lengths, digests, parents]``, columns over the pack's writes:

* ``offsets``, ``key groups``: each less the one before (the first less 0);
* ``fulls``: ``False`` (none full), ``True`` (all) or one byte per write;
* ``gaps``: where each block starts in the segment, less where the one before ended
  (blocks follow each other: zeros); ``None`` when the blocks are not in a segment;
* ``lengths``: each block's length in the segment less its ``bytes`` (zeros);
* ``digests``: signed 64-bit, ``None`` for a write stored before digests existed;
* ``parents``: each less the one before (``None`` stays ``None``; ``0`` is "no state").

followed by the xxh64 of those bytes (8 bytes, little-endian): a changed byte fails the
check on read (:class:`~objectspace.CorruptStateError`), where a flipped bit of a delta
would otherwise move every write after it to another key group.

The heads (per key group, its newest committed write) are packed the same way, per
operator and chunk of :data:`HEAD_CHUNK` key groups in a row of ``ckpt_head_chunks``: a
commit rewrites the chunks of the key groups it wrote, a page or two for 128 key groups,
where a row per key group would take several. ``heads`` is msgpack ``[FORMAT, key groups, writes,
versions, compactions, parents]``, the same delta columns (``compactions`` as ``fulls``),
and its xxh64.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgpack
import xxhash

from objectspace.errors import CorruptStateError

__all__ = [
    "FORMAT",
    "HEAD_CHUNK",
    "SPAN",
    "Entry",
    "Head",
    "Pack",
    "decode_entries",
    "decode_heads",
    "encode_entries",
    "encode_heads",
]

FORMAT = 1
"""The layout of ``entries`` (this module's docstring)."""

SPAN = 1 << 16
"""Ids a new pack reserves: its id is a multiple of this, its writes ``id .. id + n - 1``
(``n`` is at most the operator's key groups, :data:`objectspace.keygroups.MAX_KEY_GROUPS`)."""


HEAD_CHUNK = 64
"""Key groups per row of ``ckpt_head_chunks`` (key group ``g`` is in chunk ``g // 64``)."""


class Head(NamedTuple):
    """A key group's head: its newest committed write in (version, id) order."""

    write: int
    version: int
    compaction: bool  # the head is a compaction; ``parent`` is the write it stands for
    parent: int | None


class Entry(NamedTuple):
    """One write of a pack: its own fields."""

    offset: int  # the write's id less the pack's
    key_group: int
    full: bool
    bytes: int
    rows: int
    seg_offset: int  # where its block starts in the pack's segment (0: not in a segment)
    seg_length: int
    digest: int | None
    parent: int | None


@dataclass(frozen=True, slots=True)
class Pack:
    """A row of ``ckpt_packs`` with its entries decoded."""

    id: int
    op: int
    version: int
    committed: bool
    attempt: str
    created: float
    segment: int | None
    entries: tuple[Entry, ...]

    def write_id(self, entry: Entry) -> int:
        return self.id + entry.offset


_DIGEST = struct.Struct("<Q")


def _sealed(columns: list[Any]) -> bytes:
    """``columns`` as msgpack followed by their xxh64."""
    payload: bytes = msgpack.packb(columns, use_bin_type=True)
    return payload + _DIGEST.pack(xxhash.xxh64_intdigest(payload))


def _unsealed(data: bytes, where: str, what: str) -> Any:
    """The columns :func:`_sealed` made, checked; :class:`CorruptStateError` naming
    ``where`` when their bytes fail the checksum."""
    data = bytes(data)
    payload, digest = data[: -_DIGEST.size], data[-_DIGEST.size :]
    if len(digest) != _DIGEST.size or _DIGEST.unpack(digest)[0] != xxhash.xxh64_intdigest(payload):
        raise CorruptStateError(f"{where}: the catalog's {what} fail their checksum")
    try:
        return msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as exc:
        raise CorruptStateError(f"{where}: the catalog's {what} do not decode: {exc}") from exc


def _deltas(numbers: Sequence[int]) -> list[int]:
    return [b - a for a, b in zip([0, *numbers], numbers, strict=False)]


def _sums(deltas: Sequence[int]) -> list[int]:
    out = []
    total = 0
    for d in deltas:
        total += d
        out.append(total)
    return out


def _flags(flags: Sequence[bool]) -> bool | bytes:
    if not any(flags):
        return False
    if all(flags):
        return True
    return bytes(flags)


def _read_flags(flags: Any, n: int) -> list[bool]:
    if flags is True or flags is False:
        return [flags] * n
    return [bool(b) for b in flags]


def _optional_deltas(numbers: Sequence[int | None]) -> list[int | None]:
    out: list[int | None] = []
    previous = 0
    for n in numbers:
        if n is None:
            out.append(None)
        else:
            out.append(n - previous)
            previous = n
    return out


def _optional_sums(deltas: Sequence[int | None]) -> list[int | None]:
    out: list[int | None] = []
    previous = 0
    for d in deltas:
        if d is None:
            out.append(None)
        else:
            previous += d
            out.append(previous)
    return out


def encode_heads(heads: dict[int, Head]) -> bytes:
    """The heads of one chunk (key group → head) as a row's ``heads`` column."""
    groups = sorted(heads)
    records = [heads[g] for g in groups]
    return _sealed(
        [
            FORMAT,
            _deltas(groups),
            _deltas([h.write for h in records]),
            _deltas([h.version for h in records]),
            _flags([h.compaction for h in records]),
            _optional_deltas([h.parent for h in records]),
        ]
    )


def decode_heads(data: bytes, where: str) -> dict[int, Head]:
    """The heads of a ``heads`` column; :class:`CorruptStateError` naming ``where``."""
    columns = _unsealed(data, where, "heads")
    try:
        version, groups, writes, versions, compactions, parents = columns
        if version != FORMAT:
            raise ValueError(f"heads format {version!r}, not {FORMAT}")
        key_groups = _sums(groups)
        records = zip(
            _sums(writes),
            _sums(versions),
            _read_flags(compactions, len(key_groups)),
            _optional_sums(parents),
            strict=True,
        )
        return {g: Head(*record) for g, record in zip(key_groups, records, strict=True)}
    except Exception as exc:
        raise CorruptStateError(f"{where}: the catalog's heads do not decode: {exc}") from exc


def encode_entries(entries: Sequence[Entry], in_segment: bool) -> bytes:
    """``entries`` as a pack's ``entries`` column (module docstring)."""
    gaps = None
    if in_segment:
        gaps = []
        end = 0
        for e in entries:
            gaps.append(e.seg_offset - end)
            end = e.seg_offset + e.seg_length
    return _sealed(
        [
            FORMAT,
            _deltas([e.offset for e in entries]),
            _deltas([e.key_group for e in entries]),
            _flags([e.full for e in entries]),
            [e.bytes for e in entries],
            [e.rows for e in entries],
            gaps,
            [e.seg_length - e.bytes for e in entries] if in_segment else None,
            [e.digest for e in entries],
            _optional_deltas([e.parent for e in entries]),
        ]
    )


def decode_entries(data: bytes, where: str) -> tuple[Entry, ...]:
    """The entries of a pack's ``entries`` column; :class:`CorruptStateError` naming
    ``where`` (the pack) when they do not decode."""
    columns = _unsealed(data, where, "records of its writes")
    try:
        version, offsets, groups, fulls, sizes, rows, gaps, lengths, digests, parents = columns
        if version != FORMAT:
            raise ValueError(f"entries format {version!r}, not {FORMAT}")
        n = len(offsets)
        flags = _read_flags(fulls, n)
        ids = _sums(offsets)
        key_groups = _sums(groups)
        if gaps is None:
            starts = [0] * n
            seg_lengths = [0] * n
        else:
            starts = []
            seg_lengths = []
            end = 0
            for gap, size, extra in zip(gaps, sizes, lengths, strict=True):
                start = end + gap
                starts.append(start)
                seg_lengths.append(size + extra)
                end = start + size + extra
        parent_ids = _optional_sums(parents)
        columns_n = {
            len(x) for x in (ids, key_groups, flags, sizes, rows, starts, digests, parent_ids)
        }
        if columns_n != {n}:
            raise ValueError("columns of different lengths")
        return tuple(
            Entry(*fields)
            for fields in zip(
                ids,
                key_groups,
                flags,
                sizes,
                rows,
                starts,
                seg_lengths,
                digests,
                parent_ids,
                strict=True,
            )
        )
    except CorruptStateError:
        raise
    except Exception as exc:
        raise CorruptStateError(
            f"{where}: the catalog's record of its writes does not decode: {exc}"
        ) from exc
