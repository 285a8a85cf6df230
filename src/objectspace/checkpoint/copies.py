"""Copies of instances' local stores, kept in storage's file area for cold restores.

An executor that has no local store for an instance (a new machine, a wiped disk, a
restart elsewhere, a rescale) would rebuild every key group a batch touches from its whole
chain of blocks. As Spark's and Flink's RocksDB state stores upload their files with
checkpoints, an instance puts a copy of its local store in the storage's file area
(:meth:`~objectspace.storage.contract.Backend.file_area`) every few checkpoints. A store
that lacks key groups a batch touches takes them from the newest copy made at or before
the save after the checkpoint the batch runs on that holds them (:class:`Source`, at any
parallelism), and brings each from the copy's head to the committed one with the
differential writes after it (:meth:`~objectspace.checkpoint.Instance`, "catch up"); a key
group compacted since, or in no copy, is rebuilt from storage as before.

A copy is the store's SQLite file (its log checkpointed into it and read whole under a
read transaction, or a backup where another connection holds the log: consistent, the last
save's pending edits too, applied only if that save was committed), compressed with zstd
in frames of :data:`FRAME_PAGES` pages each, followed by an index: which frames hold each key group's
rows (the ``rows`` table's leaf pages, found with SQLite's ``dbstat`` table) and which
hold the rest (the schema, the b-trees' interior pages, the small tables; the
``pending_rows`` table is mapped by key group as ``rows`` is). An empty store
that wants most of its own copy takes the whole file (decompressed frame by frame, then
opened as the store: no row rewritten); otherwise only the frames of the skeleton and of
the wanted key groups are read, into a file of the copy's size whose other pages are
zeros, from which SQLite reads those key groups' rows (``LocalStore.import_groups``). So a
cold batch touching k keys reads the pages of at most k key groups, not the whole state.

Named ``<store>.<checkpoint, 12 digits>.<index offset>.<first 32 hex digits of the
SHA-256 of the index>.copy`` (``<store>``: ``<operator>-<parallelism>-<index>``). The
index (MessagePack, from its offset to the end) is checked against the name's digest and
each frame against its own before anything is decompressed; a store file read from a copy
is checked as any local store (its identity or schema; each row's CRC on read). A copy
that fails is skipped for an older copy holding those key groups, or storage.

When a copy is put, the operator's copies that are not among the :data:`KEEP` newest
holding some key group are deleted (a store's older copies; after a rescale, those at
the old parallelism once the new instances' copies hold their key groups twice), as are
copies of the earlier whole-file format (``<store>.<checkpoint>.<digest>.db.zst``).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import pathlib
import re
import sqlite3
import struct
import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import msgpack
import zstandard

from objectspace.checkpoint.local import LocalStore
from objectspace.errors import StorageError
from objectspace.storage.areas import FileArea

__all__ = ["FRAME_PAGES", "KEEP", "WHOLE_SHARE", "Source", "upload"]

KEEP = 2
"""Copies kept for each key group (the newest holding it)."""

FRAME_PAGES = 4
"""Pages of the store file compressed together (the unit a reader fetches)."""

WHOLE_SHARE = 0.5
"""An empty store takes its own copy whole when the frames it needs are at least this
share of the copy's."""

_FORMAT = 1
_DIGEST = 8  # bytes of a frame's SHA-256 kept
_READ_MAX = 8 << 20  # bytes of frames asked for at once (adjacent frames: one range)
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


class _Index(NamedTuple):
    page_size: int
    pages: int
    frames: list[tuple[int, int, bytes]]  # offset, length, first bytes of its SHA-256
    skeleton: set[int]  # frames every partial read needs
    groups: dict[int, set[int]]  # key group -> the frames of its rows


def _copies(area: FileArea, operator: str) -> list[_Copy]:
    """The copies of ``operator``'s stores in ``area``, newest first."""
    found = []
    for name in area.names():
        match = _NAME.match(name)
        if match and match["operator"] == operator:
            parallelism, number = int(match["parallelism"]), int(match["index"])
            store = f"{operator}-{parallelism}-{number}"
            found.append(
                _Copy(
                    name,
                    store,
                    parallelism,
                    number,
                    int(match["checkpoint"]),
                    int(match["at"]),
                    match["digest"],
                )
            )
    return sorted(found, key=lambda c: c.checkpoint, reverse=True)


# -- putting a copy ------------------------------------------------------------------------


def upload(local: LocalStore, area: FileArea, store: str, checkpoint_id: int) -> int:
    """Put a copy of ``local`` (named ``store``, holding the save of ``checkpoint_id``) in
    ``area``, delete the operator's copies no longer kept (see the module docstring), and
    record the checkpoint in the store (:meth:`LocalStore.copied_at`); the bytes put."""
    previous = local.copied_at()
    local.set_copied_at(checkpoint_id)  # before the copy is read: it says it is the last
    try:
        size = _put(local, area, store, checkpoint_id)
    except BaseException:
        local.set_copied_at(previous)
        raise
    with contextlib.suppress(StorageError):  # (then at a later copy put)
        _prune(area, store.split("-")[0])
    return size


def _put(local: LocalStore, area: FileArea, store: str, checkpoint_id: int) -> int:
    with tempfile.TemporaryDirectory(prefix=".copy-", dir=os.path.dirname(local.path)) as tmp:
        packed = os.path.join(tmp, "copy")
        lengths: list[int] = []
        digests: list[bytes] = []
        compressor = zstandard.ZstdCompressor(level=1)
        with (
            local.frozen(tmp) as raw,
            ThreadPoolExecutor(1) as pool,
            open(raw, "rb") as source,
            open(packed, "wb") as out,
        ):
            mapped = pool.submit(_map, raw)  # beside the compression (SQLite frees the GIL)
            with contextlib.closing(sqlite3.connect(_read_only(raw), uri=True)) as db:
                page_size = db.execute("PRAGMA page_size").fetchone()[0]
                pages = db.execute("PRAGMA page_count").fetchone()[0]
            frame_bytes = page_size * FRAME_PAGES
            size = pages * page_size  # (the file may run past its last page)
            for start in range(0, size, frame_bytes):
                data = compressor.compress(source.read(min(frame_bytes, size - start)))
                lengths.append(len(data))
                digests.append(hashlib.sha256(data).digest()[:_DIGEST])
                out.write(data)
            at = out.tell()
            _, _, skeleton, groups = mapped.result()  # (of the same file: frozen meanwhile)
            index = msgpack.packb(
                [
                    _FORMAT,
                    page_size,
                    pages,
                    FRAME_PAGES,
                    struct.pack(f"<{len(lengths)}I", *lengths),
                    b"".join(digests),
                    _runs(_frames_of(skeleton)),
                    [[g, _runs(_frames_of(p))] for g, p in sorted(groups.items())],
                ],
                use_bin_type=True,
            )
            out.write(index)
        name = f"{store}.{checkpoint_id:012d}.{at}.{hashlib.sha256(index).hexdigest()[:32]}.copy"
        return area.put(name, packed)


def _frames_of(pages: Iterable[int]) -> set[int]:
    return {(p - 1) // FRAME_PAGES for p in pages}


_BY_GROUP = ("rows", "pending_rows")  # WITHOUT ROWID b-trees keyed by key group first


def _map(path: str) -> tuple[int, int, set[int], dict[int, set[int]]]:
    """The page size and count of the store file ``path``, the pages a reader of any key
    group needs (the schema, the small tables, the interior pages of the tables keyed by
    key group and their overflow pages), and the pages of each key group it holds: in
    each of those tables, the leaves holding its rows and their overflow pages, with the
    leaf before and the leaf after them (where a range scan may start and stops). Without
    SQLite's ``dbstat`` table every page is a skeleton page (readers then read the copy
    whole)."""
    with contextlib.closing(sqlite3.connect(_read_only(path), uri=True)) as db:
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        held = [g for (g,) in db.execute("SELECT g FROM groups UNION SELECT g FROM pending")]
        try:
            stat = _pages(db)
        except sqlite3.OperationalError:  # every page a skeleton page: read whole
            return page_size, pages, set(range(1, pages + 1)), {g: set() for g in held}
        counts = {
            table: dict(db.execute(f"SELECT g, count(*) FROM {table} GROUP BY g"))
            for table in _BY_GROUP
        }
    skeleton = {1} | {p for name, _, p, _, _ in stat if name not in _BY_GROUP}
    groups: dict[int, set[int]] = {g: set() for g in sorted({*held, *counts["rows"]})}
    for table in _BY_GROUP:
        tree = {path: (p, kind, n) for name, path, p, kind, n in stat if name == table}
        overflow: dict[int, set[int]] = {}  # a leaf's page -> the overflow pages of its cells
        for path, (p, kind, _) in tree.items():
            owner = tree.get(path.split("+")[0]) if kind == "overflow" else None
            if owner is not None and owner[1] == "leaf":
                overflow.setdefault(owner[0], set()).add(p)
            elif kind != "leaf":
                skeleton.add(p)
        leaves = list(_leaves({k: v for k, v in tree.items() if v[1] != "overflow"}))
        first = at = 0
        for g in sorted({*groups, *counts[table]}):  # rows in key order, against the leaves'
            stop = first + counts[table].get(g, 0)
            while at < len(leaves) and leaves[at][1] <= first:
                at += 1
            end = max(at - 1, 0)
            found: set[int] = set()
            while end < len(leaves) and (end < at or leaves[end][0] < stop):
                found.add(leaves[end][2])
                end += 1
            if end < len(leaves):
                found.add(leaves[end][2])
            groups.setdefault(g, set()).update(found, *(overflow.get(p, ()) for p in found))
            first = stop
    return page_size, pages, skeleton, groups


def _read_only(path: str) -> str:
    """The URI that opens the SQLite file ``path`` read-only."""
    return f"{pathlib.Path(path).as_uri()}?mode=ro"


def _pages(db: sqlite3.Connection) -> list[tuple[str, str, int, str, int]]:
    """``(table, path, page, type, cells)`` of every page (SQLite's ``dbstat``; raises
    ``sqlite3.OperationalError`` where the library has no such table)."""
    return db.execute("SELECT name, path, pageno, pagetype, ncell FROM dbstat").fetchall()


def _leaves(tree: dict[str, tuple[int, str, int]]) -> Iterator[tuple[int, int, int]]:
    """``(first row, stop, page)`` of each leaf page of an index b-tree (``dbstat``'s
    ``path -> (page, type, cells)``), in key order: an in-order walk, where an interior
    page's cells lie between its children."""
    at = 0
    stack: list[tuple[str, int]] = [("/", 0)] if "/" in tree else []
    while stack:
        path, child = stack.pop()
        page, kind, cells = tree[path]
        if kind == "leaf":
            yield at, at + cells, page
            at += cells
            continue
        if 0 < child <= cells:
            at += 1  # the cell between children child - 1 and child
        below = f"{path}{child:03x}/"
        if below in tree:
            stack.append((path, child + 1))
            stack.append((below, 0))


def _runs(numbers: Iterable[int]) -> list[list[int]]:
    """Sorted ``numbers`` as ``[first, count]`` runs."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and runs[-1][0] + runs[-1][1] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    return runs


def _prune(area: FileArea, operator: str) -> None:
    """Delete ``operator``'s copies that are not among the :data:`KEEP` newest holding some
    key group (one whose index cannot be read holds none), and its copies of the earlier
    whole-file format."""
    kept: set[str] = set()
    holders: dict[int, int] = {}
    copies = _copies(area, operator)
    for copy in copies:
        index, _ = _index(area, copy)
        for g in () if index is None else index.groups:
            if holders.get(g, 0) < KEEP:
                holders[g] = holders.get(g, 0) + 1
                kept.add(copy.name)
    old = [n for n in area.names() if (m := _OLD.match(n)) and m["operator"] == operator]
    area.delete([*(c.name for c in copies if c.name not in kept), *old])


# -- reading a copy ------------------------------------------------------------------------


def _index(area: FileArea, copy: _Copy) -> tuple[_Index | None, int]:
    """The index of ``copy`` (``None``: the copy is gone or its index fails its digest or
    its shape) and the bytes read for it."""
    found = area.read(copy.name, [(copy.at, None)])
    if found is None:
        return None, 0
    raw = found[0]
    if hashlib.sha256(raw).hexdigest()[:32] != copy.digest:
        return None, len(raw)
    try:
        version, page_size, pages, frame_pages, lengths, digests, skeleton, groups = (
            msgpack.unpackb(raw, strict_map_key=True)
        )
        sizes = struct.unpack(f"<{len(lengths) // 4}I", lengths)
        offsets = itertools.accumulate(sizes, initial=0)
        index = _Index(
            int(page_size),
            int(pages),
            [
                (offset, size, digests[i * _DIGEST : (i + 1) * _DIGEST])
                for i, (offset, size) in enumerate(zip(offsets, sizes, strict=False))
            ],
            _unrun(skeleton),
            {int(g): _unrun(runs) for g, runs in groups},
        )
    except (ValueError, TypeError, struct.error, msgpack.UnpackException):
        return None, len(raw)
    if (
        version != _FORMAT
        or frame_pages != FRAME_PAGES
        or index.page_size <= 0
        or len(digests) != len(sizes) * _DIGEST
        or sum(sizes) != copy.at
    ):
        return None, len(raw)
    return index, len(raw)


def _unrun(runs: list[list[int]]) -> set[int]:
    return {n for first, count in runs for n in range(int(first), int(first) + int(count))}


def _write_frames(
    area: FileArea, copy: _Copy, index: _Index, wanted: set[int], target: str
) -> tuple[int, bool]:
    """Write frames ``wanted`` of ``copy`` decompressed at their places in the file
    ``target`` (made of the copy's size if missing: pages not written read as zeros): the
    bytes read, and whether every frame was (not when one is missing, fails its digest
    or does not decompress). Runs of adjacent frames are one range each, the ranges of up
    to ``_READ_MAX`` bytes asked for in one call (concurrently where the area can)."""
    frame_bytes = index.page_size * FRAME_PAGES
    runs: list[list[int]] = []  # adjacent frames, read as one range of up to _READ_MAX
    for i in sorted(wanted):
        if i >= len(index.frames):
            return 0, False
        start = index.frames[runs[-1][0]][0] if runs else 0
        end = index.frames[i][0] + index.frames[i][1]
        if runs and runs[-1][-1] == i - 1 and end - start <= _READ_MAX:
            runs[-1].append(i)
        else:
            runs.append([i])
    batches: list[list[list[int]]] = []  # runs asked for in one call, up to _READ_MAX bytes
    size = _READ_MAX
    for run in runs:
        length = sum(index.frames[i][1] for i in run)
        if size + length > _READ_MAX:
            batches.append([])
            size = 0
        batches[-1].append(run)
        size += length
    read = 0
    decompressor = zstandard.ZstdDecompressor()
    fresh = not os.path.exists(target)
    with open(target, "wb" if fresh else "r+b") as out:
        if fresh:
            out.truncate(index.pages * index.page_size)
        for batch in batches:
            ranges = [
                (index.frames[r[0]][0], index.frames[r[-1]][0] + index.frames[r[-1]][1])
                for r in batch
            ]
            try:
                got = area.read(copy.name, ranges)
            except StorageError:
                return read, False
            if got is None:
                return read, False
            for run, (start, _), data in zip(batch, ranges, got, strict=True):
                read += len(data)
                for i in run:
                    offset, length, digest = index.frames[i]
                    frame = data[offset - start : offset - start + length]
                    if len(frame) != length or hashlib.sha256(frame).digest()[:_DIGEST] != digest:
                        return read, False
                    try:
                        plain = decompressor.decompress(frame, max_output_size=frame_bytes)
                    except zstandard.ZstdError:
                        return read, False
                    out.seek(i * frame_bytes)
                    out.write(plain)
    return read, True


class Source:
    """Where the key groups a local store lacks come from: the copies of its operator's
    stores in ``area`` (see the module docstring). ``store`` names the local store
    (``<operator>-<parallelism>-<index>``); ``range_of(index, parallelism)`` gives an
    instance's key groups, so only the copies of instances that held some of the wanted
    ones are read (a copy named for a parallelism the key space cannot have is skipped).
    :attr:`bytes_read` counts what it read from ``area``."""

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
        self._indexes: dict[str, _Index | None] = {}
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._parts: dict[str, tuple[str, set[int]]] = {}  # copy -> its file here, frames in it

    def take_read(self) -> int:
        """The bytes read since the last call."""
        read, self.bytes_read = self.bytes_read, 0
        return read

    def __call__(self, key_groups: list[int], at_most: int) -> int:
        """Put into the local store each of ``key_groups`` (which it holds nothing of) that
        a copy made at or before checkpoint ``at_most`` holds, from the newest such copy
        that reads soundly; how many key groups were put."""
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
            index = self._index(copy)
            taking = wanted & set(() if index is None else index.groups)
            if index is None or not taking:
                continue
            if self._take(copy, index, taking):
                wanted -= taking
                put += len(taking)
                if copy.store == self.store and self.local.copied_at() is None:
                    self.local.set_copied_at(copy.checkpoint)
        return put

    def _index(self, copy: _Copy) -> _Index | None:
        if copy.name not in self._indexes:
            index, read = _index(self.area, copy)
            self._indexes[copy.name] = index
            self.bytes_read += read
        return self._indexes[copy.name]

    def _may_hold(self, copy: _Copy, wanted: set[int]) -> bool:
        try:
            held = self.range_of(copy.number, copy.parallelism)
        except (ValueError, IndexError):
            return False  # (a name no run could put)
        return any(g in held for g in wanted)

    def _take(self, copy: _Copy, index: _Index, groups: set[int]) -> bool:
        """Put ``groups`` of ``copy`` into the local store: the whole file, as the store
        itself, when it is the store's own copy, the store holds nothing and they need most
        of its frames; else the frames they need, their rows imported. Whether it could.
        The frames read of a copy are kept (in a file of the process's) for the next key
        groups taken from it: no frame is read twice."""
        frames = set(index.skeleton)
        for g in groups:
            frames |= index.groups[g]
        whole = copy.store == self.store and (
            len(frames) >= WHOLE_SHARE * len(index.frames) and self.local.holds() == 0
        )
        if whole:
            frames = set(range(len(index.frames)))
        if self._folder is None:
            folder = os.path.dirname(self.local.path)
            self._folder = tempfile.TemporaryDirectory(prefix=".copies-", dir=folder)
        part, present = self._parts.setdefault(
            copy.name, (os.path.join(self._folder.name, copy.name + ".db"), set())
        )
        read, sound = _write_frames(self.area, copy, index, frames - present, part)
        self.bytes_read += read
        present |= frames
        try:
            if sound and whole:
                del self._parts[copy.name]  # (moved: the store's file now)
                return self.local.adopt(part)
            if sound:
                self.local.import_groups(part, _ranges(groups))
                return True
        except sqlite3.DatabaseError:
            pass
        self._parts.pop(copy.name, None)  # damaged or gone: never read from again here
        with contextlib.suppress(FileNotFoundError):
            os.unlink(part)
        self._listed = None  # (the next call lists the copies again)
        return False


def _ranges(groups: Iterable[int]) -> list[range]:
    return [range(first, first + count) for first, count in _runs(groups)]
