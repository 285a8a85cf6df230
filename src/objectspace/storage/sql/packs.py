"""Packs: the catalog's record of writes, one row per operator, version and attempt.

Since schema version 7 the catalog keeps no row per write. The writes one transaction stores
for one operator at one version (an instance's save, or a commit's staged writes, or one
compaction) share a row of ``ckpt_packs``: the fields they have in common (operator,
version, attempt, committed or not, when, which segment file) once, and each write's own
fields (key group, full or not, bytes, rows, place in the segment, digest, parent) packed
in ``entries``. A checkpoint of 128 key groups then adds one row of about 2.5 kB to the
catalog, a few pages, where rows per write cost a row, an index entry and their pages
each.

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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgpack

from objectspace.errors import CorruptStateError

__all__ = ["FORMAT", "SPAN", "Entry", "Pack", "decode_entries", "encode_entries"]

FORMAT = 1
"""The layout of ``entries`` (this module's docstring)."""

SPAN = 1 << 16
"""Ids a new pack reserves: its id is a multiple of this, its writes ``id .. id + n - 1``
(``n`` is at most the operator's key groups, :data:`objectspace.keygroups.MAX_KEY_GROUPS`)."""


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


def _deltas(numbers: Sequence[int]) -> list[int]:
    return [b - a for a, b in zip([0, *numbers], numbers, strict=False)]


def _sums(deltas: Sequence[int]) -> list[int]:
    out = []
    total = 0
    for d in deltas:
        total += d
        out.append(total)
    return out


def encode_entries(entries: Sequence[Entry], in_segment: bool) -> bytes:
    """``entries`` as a pack's ``entries`` column (module docstring)."""
    fulls: bool | bytes
    flags = [e.full for e in entries]
    if not any(flags):
        fulls = False
    elif all(flags):
        fulls = True
    else:
        fulls = bytes(flags)
    gaps = None
    if in_segment:
        gaps = []
        end = 0
        for e in entries:
            gaps.append(e.seg_offset - end)
            end = e.seg_offset + e.seg_length
    parents: list[int | None] = []
    previous = 0
    for e in entries:
        if e.parent is None:
            parents.append(None)
        else:
            parents.append(e.parent - previous)
            previous = e.parent
    packed: bytes = msgpack.packb(
        [
            FORMAT,
            _deltas([e.offset for e in entries]),
            _deltas([e.key_group for e in entries]),
            fulls,
            [e.bytes for e in entries],
            [e.rows for e in entries],
            gaps,
            [e.seg_length - e.bytes for e in entries] if in_segment else None,
            [e.digest for e in entries],
            parents,
        ],
        use_bin_type=True,
    )
    return packed


def decode_entries(data: bytes, where: str) -> tuple[Entry, ...]:
    """The entries of a pack's ``entries`` column; :class:`CorruptStateError` naming
    ``where`` (the pack) when they do not decode."""
    try:
        columns: Any = msgpack.unpackb(bytes(data), raw=False, strict_map_key=False)
        version, offsets, groups, fulls, sizes, rows, gaps, lengths, digests, parents = columns
        if version != FORMAT:
            raise ValueError(f"entries format {version!r}, not {FORMAT}")
        n = len(offsets)
        if fulls is True or fulls is False:
            flags = [fulls] * n
        else:
            flags = [bool(b) for b in fulls]
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
        parent_ids: list[int | None] = []
        previous = 0
        for delta in parents:
            if delta is None:
                parent_ids.append(None)
            else:
                previous += delta
                parent_ids.append(previous)
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
