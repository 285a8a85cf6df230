"""Copies of instances' local stores, kept in storage's file area for cold restores.

An executor that has no local store for an instance (a new machine, a wiped disk, a
restart elsewhere, a rescale) would rebuild every key group a batch touches from its whole
chain of blocks. As Spark's and Flink's RocksDB state stores upload their files with
checkpoints, an instance puts a copy of its local store in the storage's file area
(:meth:`~objectspace.storage.contract.Backend.file_area`) every few checkpoints. A copy is
cut in *pieces* of consecutive key groups (about :data:`PIECE_BYTES` of rows each, one key
group at least), each readable alone: a store that lacks a key group a batch touches takes
it from the newest copy made at or before the save after the checkpoint the batch runs on
that holds it (:class:`Source`, whatever the parallelism of the instance that put it),
reading that piece only, and brings it from the copy's head to the committed one with the
differential writes after it (:meth:`~objectspace.checkpoint.Instance`, "catch up"); a key
group compacted since, or in no copy, is rebuilt from storage as before. So a cold batch
touching k keys reads the pieces of at most k key groups, not the instance's whole state.

A copy is one file, ``<store>.<checkpoint, 12 digits>.<index offset>.<sha-256 of the
index, 32 hex digits>.copy`` (``<store>``: ``<operator>-<parallelism>-<index>``, the
local store's name). The pieces come first, each a store file holding its key groups'
rows, recorded heads and pending saves (a pending save is applied only if it was
committed), compressed with zstd; the index follows them to the end of the file, a
MessagePack array ``[1, [[first key group, stop, offset, length, sha-256 of the piece's
bytes (16 bytes)], ...]]``. A reader checks the index against the digest in the name
and each piece against its digest before it decompresses anything, then opens the piece
as any local store (its schema is checked; each row carries a CRC): a copy or a piece
that fails is skipped for an older copy that holds those key groups, or storage.

When a copy is put, the copies of the operator that are not among the :data:`KEEP`
newest holding any key group are deleted (the store's older ones, and after a rescale
those at the old parallelism once the new instances' copies hold their key groups twice).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import sqlite3
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import msgpack
import zstandard

from objectspace.checkpoint.local import LocalStore
from objectspace.errors import StorageError
from objectspace.storage.areas import FileArea

__all__ = ["KEEP", "PIECE_BYTES", "Source", "upload"]

KEEP = 2
"""Copies kept for each key group (the newest holding it)."""

PIECE_BYTES = 64 << 10
"""The bytes a piece holds, about, as the stores record them (the key groups' restore
chains and pending writes; one key group at least)."""

_READ_GAP = 1 << 20  # pieces this close are read at once ...
_READ_MAX = 16 << 20  # ... up to this many bytes a read
_FORMAT = 1
_NAME = re.compile(
    r"^(?P<operator>[0-9a-f]+)-(?P<parallelism>\d+)-(?P<index>\d+)\.(?P<checkpoint>\d{12})"
    r"\.(?P<at>\d{1,15})\.(?P<digest>[0-9a-f]{32})\.copy$"
)
_OLD = re.compile(r"^(?P<operator>[0-9a-f]+)-\d+-\d+\.\d{12}\.[0-9a-f]{32}\.db\.zst$")


class _Copy(NamedTuple):
    name: str
    store: str  # <operator>-<parallelism>-<index>
    parallelism: int
    number: int  # the instance's index
    checkpoint: int
    at: int  # where the index starts
    digest: str


class _Piece(NamedTuple):
    key_groups: range
    offset: int
    length: int
    digest: bytes


def _copies(area: FileArea, operator: str) -> list[_Copy]:
    """The copies of ``operator``'s stores in ``area``, newest first."""
    found = []
    for name in area.names():
        match = _NAME.match(name)
        if match and match["operator"] == operator:
            parallelism, index = int(match["parallelism"]), int(match["index"])
            store = f"{operator}-{parallelism}-{index}"
            found.append(
                _Copy(
                    name,
                    store,
                    parallelism,
                    index,
                    int(match["checkpoint"]),
                    int(match["at"]),
                    match["digest"],
                )
            )
    return sorted(found, key=lambda c: c.checkpoint, reverse=True)


def upload(local: LocalStore, area: FileArea, store: str, checkpoint_id: int) -> int:
    """Put a copy of ``local`` (named ``store``, holding the save of ``checkpoint_id``) in
    ``area``, delete the operator's copies no longer kept (see the module docstring), and
    record the checkpoint in the store (:meth:`LocalStore.copied_at`); the bytes put."""
    previous = local.copied_at()
    local.set_copied_at(checkpoint_id)  # (as the copy's pieces do not say)
    try:
        size = _put(local, area, store, checkpoint_id)
    except BaseException:
        local.set_copied_at(previous)
        raise
    with contextlib.suppress(StorageError):  # (then deleted at a later copy put)
        _prune(area, store.split("-")[0])
    return size


def _put(local: LocalStore, area: FileArea, store: str, checkpoint_id: int) -> int:
    with tempfile.TemporaryDirectory(prefix=".copy-", dir=os.path.dirname(local.path)) as tmp:
        packed = os.path.join(tmp, "copy")
        pieces: list[list[Any]] = []
        with open(packed, "wb") as out:
            for key_groups in _plan(local.sizes()):
                part = os.path.join(tmp, "piece.db")
                local.export_groups(part, key_groups)
                offset = out.tell()
                with open(part, "rb") as source:
                    zstandard.ZstdCompressor(level=1).copy_stream(source, out)
                os.unlink(part)
                out.flush()
                length = out.tell() - offset
                pieces.append(
                    [key_groups.start, key_groups.stop, offset, length, _digest(packed, offset)]
                )
            at = out.tell()
            index = msgpack.packb([_FORMAT, pieces], use_bin_type=True)
            out.write(index)
        name = f"{store}.{checkpoint_id:012d}.{at}.{hashlib.sha256(index).hexdigest()[:32]}.copy"
        return area.put(name, packed)


def _digest(path: str, offset: int) -> bytes:
    """The first 16 bytes of the sha-256 of the file ``path`` from ``offset`` on."""
    found = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(offset)
        while chunk := f.read(1 << 20):
            found.update(chunk)
    return found.digest()[:16]


def _plan(sizes: dict[int, int]) -> list[range]:
    """Consecutive held key groups in pieces of about :data:`PIECE_BYTES` of rows."""
    pieces: list[range] = []
    total = 0
    for g, size in sizes.items():
        last = pieces[-1] if pieces else None
        if last is not None and last.stop == g and total + size <= PIECE_BYTES:
            pieces[-1] = range(last.start, g + 1)
            total += size
        else:
            pieces.append(range(g, g + 1))
            total = size
    return pieces


def _prune(area: FileArea, operator: str) -> None:
    """Delete ``operator``'s copies that are not among the :data:`KEEP` newest holding any
    key group (one whose index cannot be read holds none), and its copies of the format
    before pieces."""
    kept: set[str] = set()
    holders: dict[int, int] = {}
    copies = _copies(area, operator)
    for copy in copies:
        for piece in _index(area, copy)[0] or ():
            for g in piece.key_groups:
                if holders.get(g, 0) < KEEP:
                    holders[g] = holders.get(g, 0) + 1
                    kept.add(copy.name)
    old = [n for n in area.names() if (m := _OLD.match(n)) and m["operator"] == operator]
    area.delete([*(c.name for c in copies if c.name not in kept), *old])


def _index(area: FileArea, copy: _Copy) -> tuple[list[_Piece] | None, int]:
    """The pieces of ``copy`` (``None``: it is gone or its index fails its digest) and the
    bytes read for them."""
    found = area.read(copy.name, [(copy.at, None)])
    if found is None:
        return None, 0
    return _parse(found[0], copy.digest), len(found[0])


def _parse(raw: bytes, digest: str) -> list[_Piece] | None:
    if hashlib.sha256(raw).hexdigest()[:32] != digest:
        return None
    try:
        version, entries = msgpack.unpackb(raw, use_list=True, strict_map_key=True)
        if version != _FORMAT:
            return None
        pieces = [_Piece(range(a, b), o, n, bytes(d)) for a, b, o, n, d in entries]
    except (ValueError, TypeError, msgpack.UnpackException):
        return None
    if not all(
        0 <= p.key_groups.start < p.key_groups.stop and p.offset >= 0 and p.length > 0
        for p in pieces
    ):
        return None
    return pieces


class Source:
    """Where the key groups a local store lacks come from: the pieces of the copies of its
    operator's stores in ``area`` (see the module docstring). ``store`` names the local
    store (``<operator>-<parallelism>-<index>``); ``range_of(index, parallelism)`` gives
    the key groups of an instance, so only the copies of instances that held some of the
    wanted ones are looked at (a copy named for a parallelism the key space cannot have
    is skipped). :attr:`bytes_read` counts what it read from ``area``."""

    def __init__(
        self,
        area: FileArea,
        store: str,
        local: LocalStore,
        range_of: Callable[[int, int], range],
    ) -> None:
        self.area = area
        self.store = store
        self.local = local
        self.range_of = range_of
        self.bytes_read = 0
        self._listed: list[_Copy] | None = None
        self._indexes: dict[str, list[_Piece] | None] = {}

    def take_read(self) -> int:
        """The bytes read since the last call."""
        read, self.bytes_read = self.bytes_read, 0
        return read

    def __call__(self, key_groups: list[int], at_most: int) -> int:
        """Put into the local store each of ``key_groups`` (which it holds nothing of) that
        a copy made at or before checkpoint ``at_most`` holds, from the newest such copy
        whose piece is sound; how many key groups were put."""
        wanted = set(key_groups)
        put = 0
        if self._listed is None:
            self._listed = _copies(self.area, self.store.split("-")[0])
            # The store's own copies first among those of a checkpoint.
            self._listed.sort(key=lambda c: (-c.checkpoint, c.store != self.store))
        for copy in self._listed:
            if not wanted:
                break
            if copy.checkpoint > at_most or not self._may_hold(copy, wanted):
                continue
            if copy.name not in self._indexes:
                pieces, read = _index(self.area, copy)
                self._indexes[copy.name] = pieces
                self.bytes_read += read
            pieces = self._indexes[copy.name]
            if pieces is None:
                continue
            taken = [p for p in pieces if wanted.intersection(p.key_groups)]
            for piece, data in self._read(copy, taken):
                groups = sorted(wanted.intersection(piece.key_groups))
                if data is not None and self._import(data, groups):
                    wanted.difference_update(groups)
                    put += len(groups)
                    if copy.store == self.store and self.local.copied_at() is None:
                        self.local.set_copied_at(copy.checkpoint)
        return put

    def _may_hold(self, copy: _Copy, wanted: set[int]) -> bool:
        try:
            held = self.range_of(copy.number, copy.parallelism)
        except (ValueError, IndexError):
            return False  # (a name no run could put)
        return any(g in held for g in wanted)

    def _read(self, copy: _Copy, pieces: Sequence[_Piece]) -> Iterator[tuple[_Piece, bytes | None]]:
        """Each of ``pieces`` (in file order) with its bytes, ``None`` where they fail
        their digest or cannot be read; near pieces are read at once (up to
        ``_READ_MAX`` bytes in memory)."""
        reads: list[list[_Piece]] = []
        for piece in sorted(pieces, key=lambda p: p.offset):
            last = reads[-1] if reads else None
            if (
                last is not None
                and piece.offset - (last[-1].offset + last[-1].length) <= _READ_GAP
                and piece.offset + piece.length - last[0].offset <= _READ_MAX
            ):
                last.append(piece)
            else:
                reads.append([piece])
        for members in reads:
            start, stop = members[0].offset, members[-1].offset + members[-1].length
            try:
                got = self.area.read(copy.name, [(start, stop)])
            except StorageError:
                got = None
            if got is None:
                self._listed = None  # (gone: the next call lists the copies again)
            data = b"" if got is None else got[0]
            self.bytes_read += len(data)
            for piece in members:
                raw = data[piece.offset - start : piece.offset - start + piece.length]
                sound = (
                    len(raw) == piece.length and hashlib.sha256(raw).digest()[:16] == piece.digest
                )
                yield piece, raw if sound else None

    def _import(self, data: bytes, key_groups: list[int]) -> bool:
        """Put ``key_groups`` of the piece ``data`` (compressed) into the local store;
        whether it could (a piece that does not decompress, or is not a store of this
        schema, puts nothing)."""
        folder = os.path.dirname(self.local.path)
        with tempfile.TemporaryDirectory(prefix=".piece-", dir=folder) as tmp:
            part = os.path.join(tmp, "piece.db")
            try:
                with open(part, "wb") as f:
                    zstandard.ZstdDecompressor().copy_stream(io.BytesIO(data), f)
                self.local.import_groups(part, _plan(dict.fromkeys(key_groups, 0)))  # (runs)
            except (zstandard.ZstdError, sqlite3.DatabaseError):
                return False
        return True
