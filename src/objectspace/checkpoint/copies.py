"""Copies of instances' local stores, kept in storage's file area for cold restores.

An executor that has no local store for an instance (a new machine, a wiped disk, a
restart elsewhere) would rebuild every key group a batch touches from its whole chain of
blocks: a 1% batch reads the whole state. As Spark's and Flink's RocksDB state stores
upload their files with checkpoints, an instance puts a copy of its local store in the
storage's file area (:meth:`~objectspace.storage.contract.Backend.file_area`) every few
checkpoints; a process that opens the instance without a local file starts from the
newest copy, and brings each key group it touches from the copy's head to the committed
one by reading only the differential writes after it
(:meth:`~objectspace.checkpoint.Instance`, "catch up"); a key group compacted since, or
absent from the copy, is rebuilt from storage as before.

A copy is the store's SQLite file (a consistent backup, so the last save's pending edits
too, which are applied only if that save was committed), compressed with zstd, named
``<store>.<checkpoint, 12 digits>.<sha-256 of the bytes, 32 hex digits>.db.zst``. A reader
verifies the digest before it decompresses anything, and then opens the file as any local
store (its identity and schema are checked; each row carries a CRC): a copy that fails is
skipped for the next older one. The newest :data:`KEEP` copies of a store are kept.

After a rescale no instance has a copy of its own: a process that opens one without a
local file builds it from the copies of the instances at the old parallelism whose key
groups overlap its own, each giving the key groups they share
(:func:`download_rescaled`), and catches those up as it would its own copy's. Once every
instance at the new parallelism has put a copy, the next copy put deletes the operator's
copies at any other.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable

import zstandard

from objectspace.checkpoint import seeds
from objectspace.checkpoint.local import LocalStore
from objectspace.errors import StorageError
from objectspace.storage.areas import FileArea

__all__ = ["KEEP", "download", "download_rescaled", "upload"]

KEEP = 2
"""Copies kept per store (the newest ones)."""

_CHUNK = 1 << 20
_NAME = re.compile(
    r"^(?P<operator>[0-9a-f]+)-(?P<parallelism>\d+)-(?P<index>\d+)"
    r"\.(?P<checkpoint>\d{12})\.(?P<digest>[0-9a-f]{32})\.db\.zst$"
)


def _copies(area: FileArea) -> list[tuple[str, int, str, str]]:
    """``(store, checkpoint, digest, name)`` of every copy in ``area``, newest first; a store
    is named ``<operator>-<parallelism>-<index>``."""
    found = []
    for name in area.names():
        match = _NAME.match(name)
        if match:
            store = f"{match['operator']}-{match['parallelism']}-{match['index']}"
            found.append((store, int(match["checkpoint"]), match["digest"], name))
    return sorted(found, key=lambda c: c[1], reverse=True)


def upload(local: LocalStore, area: FileArea, store: str, checkpoint_id: int) -> int:
    """Put a copy of ``local`` (named ``store``, holding the save of ``checkpoint_id``) in
    ``area``, delete the copies beyond the newest :data:`KEEP`, and record the checkpoint
    in the store (:meth:`LocalStore.copied_at`); the bytes put."""
    folder = os.path.dirname(local.path)
    previous = local.copied_at()
    local.set_copied_at(checkpoint_id)  # before the backup: the copy says it is the last
    try:
        size = _put(local, area, store, checkpoint_id, folder)
    except BaseException:
        local.set_copied_at(previous)
        raise
    # One listing: this store's copies beyond the newest KEEP, and the operator's copies
    # at other parallelisms (left by runs before a rescale) once every instance at this
    # parallelism has a copy (until then they seed those that have none).
    operator, parallelism, _ = store.split("-")
    found = _copies(area)
    mine = [name for other, _, _, name in found if other == store]
    stale: list[str] = []
    if {other for other, _, _, _ in found} >= {
        f"{operator}-{parallelism}-{index}" for index in range(int(parallelism))
    }:
        stale = [
            name
            for other, _, _, name in found
            if other.startswith(operator + "-") and other.split("-")[1] != parallelism
        ]
    area.delete([*mine[KEEP:], *stale])
    return size


def _put(local: LocalStore, area: FileArea, store: str, checkpoint_id: int, folder: str) -> int:
    with tempfile.TemporaryDirectory(prefix=".copy-", dir=folder) as tmp:
        raw = os.path.join(tmp, "store.db")
        packed = os.path.join(tmp, "store.db.zst")
        local.backup(raw)
        digest = hashlib.sha256()
        with open(raw, "rb") as source, open(packed, "wb") as target:
            writer = zstandard.ZstdCompressor(level=1).stream_writer(target, closefd=False)
            with writer:
                while chunk := source.read(_CHUNK):
                    writer.write(chunk)
        with open(packed, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
        name = f"{store}.{checkpoint_id:012d}.{digest.hexdigest()[:32]}.db.zst"
        return area.put(name, packed)


def download(area: FileArea, store: str, at_most: int, path: str) -> tuple[int, bool]:
    """Write the newest copy of ``store`` made at or before checkpoint ``at_most`` whose
    bytes match their digest to ``path`` (unless a file is there); the bytes read from
    ``area``, and whether a copy was written."""
    read = 0
    folder = os.path.dirname(path)
    for other, checkpoint_id, digest, name in _copies(area):
        if other != store or checkpoint_id > at_most:
            continue
        with tempfile.TemporaryDirectory(prefix=".copy-", dir=folder) as tmp:
            size, part = _fetch(area, name, digest, tmp)
            read += size
            if part is None:
                continue  # damaged: an older copy, or none
            try:
                os.link(part, path)  # (never over a file another process made)
            except FileExistsError:
                return read, False
            return read, True
    return read, False


def download_rescaled(
    area: FileArea,
    store: str,
    key_groups: range,
    at_most: int,
    path: str,
    identity: bytes,
    range_of: Callable[[int, int], range],
) -> tuple[int, int]:
    """Seed ``path`` (unless a file is there) for ``store``, an instance of its operator at
    a parallelism that has no copy yet (the job was rescaled), from the copies of the
    instances at the parallelism of the newest copies made at or before ``at_most``: each
    one whose key groups (``range_of(index, parallelism)``) overlap ``key_groups`` gives
    those it shares (:func:`~objectspace.checkpoint.seeds.build_at`); a damaged copy gives
    way to an older one of its store, and the key groups no copy gives are rebuilt from storage as before.
    Returns the bytes read from ``area`` and how many key groups the seed holds."""
    operator, parallelism, _ = store.split("-")
    others = [
        copy
        for copy in _copies(area)
        if copy[1] <= at_most
        and copy[0].startswith(operator + "-")
        and copy[0].split("-")[1] != parallelism
        and _ranges(range_of, int(copy[0].split("-")[1]))  # (a name no run could put: skipped)
    ]
    if not others:
        return 0, 0
    old = int(others[0][0].split("-")[1])  # the parallelism of the newest copy
    read = 0
    folder = os.path.dirname(path)
    with tempfile.TemporaryDirectory(prefix=".copy-", dir=folder) as tmp:
        sources: list[tuple[str, range]] = []
        for index in range(old):
            common = seeds.shared(range_of(index, old), key_groups)
            if not common:
                continue
            name_of = f"{operator}-{old}-{index}"
            for other, _, digest, name in others:
                if other != name_of:
                    continue
                size, part = _fetch(area, name, digest, os.path.join(tmp, str(index)))
                read += size
                if part is not None:
                    sources.append((part, common))
                    break
        held = seeds.build_at(path, identity, sources) if sources else 0
    return read, held


def _ranges(range_of: Callable[[int, int], range], parallelism: int) -> bool:
    """Whether ``parallelism`` is one the key space allows (``range_of`` takes it)."""
    try:
        range_of(0, parallelism)
    except (ValueError, IndexError):
        return False
    return True


def _fetch(area: FileArea, name: str, digest: str, folder: str) -> tuple[int, str | None]:
    """Get the copy ``name`` into ``folder`` (made if missing) and decompress it there: the
    bytes read from ``area`` and the decompressed file, or ``None`` when the copy is gone,
    cannot be read, or its bytes do not match ``digest``."""
    os.makedirs(folder, exist_ok=True)
    packed = os.path.join(folder, "store.db.zst")
    try:
        size = area.get(name, packed)
    except StorageError:
        return 0, None
    if size is None:
        return 0, None
    found = hashlib.sha256()
    with open(packed, "rb") as f:
        while chunk := f.read(_CHUNK):
            found.update(chunk)
    if found.hexdigest()[:32] != digest:
        return size, None
    part = os.path.join(folder, "store.db")
    try:
        with open(packed, "rb") as source, open(part, "wb") as target:
            zstandard.ZstdDecompressor().copy_stream(source, target)
    except zstandard.ZstdError:
        return size, None
    finally:
        os.unlink(packed)
    return size, part
