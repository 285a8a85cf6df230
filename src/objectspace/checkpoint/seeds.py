"""Local stores built from other instances' stores, after a rescale.

A local store caches the key groups of one instance at one parallelism (its file name and
identity say which). After a rescale the instances own other key-group ranges, so no
store fits: without this module each new instance would rebuild every key group it
touches from its whole chain in storage (or from the copies in storage,
:class:`objectspace.checkpoint.copies.Source`). Instead a new store is built from the
stores the old parallelism left on this machine (:func:`reuse`, before they are
deleted), of the old instances that share its key groups, each giving the rows, recorded
heads and pending saves of those key groups as they are (:func:`build`). What a built
store holds is checked as any local store's is: each key group's head against the write
its chain ends with (caught up with the writes made since, or rebuilt), each row's CRC on
read.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from collections.abc import Sequence

from objectspace.checkpoint.local import LocalStore, try_lock, unlock

__all__ = ["build", "build_at", "reuse", "shared"]


def build(target: str, identity: bytes, sources: Sequence[tuple[str, range]]) -> int:
    """Write a new store file ``target`` of ``identity`` holding, of each ``(path,
    key_groups)`` of ``sources`` (store files of the same operator's instances at another
    parallelism), the key groups in ``key_groups``. A source SQLite cannot read, or of
    another schema, is left out (its key groups are rebuilt from storage). Returns how
    many key groups the new store holds."""
    store = LocalStore(target, identity, None)
    try:
        for source, key_groups in sources:
            with contextlib.suppress(sqlite3.DatabaseError):
                store.import_groups(source, [key_groups])
        return store.holds()
    finally:
        store.close()


def build_at(path: str, identity: bytes, sources: Sequence[tuple[str, range]]) -> int:
    """:func:`build` into ``path`` unless a file is there (another process made one): built
    in a temporary folder beside it, then linked there whole. Returns how many key groups
    it holds (0: nothing put)."""
    with tempfile.TemporaryDirectory(prefix=".copy-", dir=os.path.dirname(path)) as tmp:
        part = os.path.join(tmp, "store.db")
        held = build(part, identity, sources)
        if not held:
            return 0
        try:
            os.link(part, path)  # (never over a file another process made)
        except FileExistsError:
            return 0
        return held


def shared(a: range, b: range) -> range:
    """The key groups two contiguous ranges have in common (empty: none)."""
    return range(max(a.start, b.start), min(a.stop, b.stop))


def reuse(stores: Sequence[tuple[str, range]], targets: Sequence[tuple[str, bytes, range]]) -> int:
    """Build each of ``targets`` (path, identity, key groups) that holds no state from the
    store files ``stores`` (path, key groups) that no process holds: the same operator's
    stores at another parallelism, left on this machine by a run before a rescale (each
    target from the stores that share its key groups). A store in use is left out, as is
    a target another process holds. Returns how many targets were built."""
    held: list[tuple[str, range]] = []
    fds: list[int] = []
    try:
        for path, key_groups in stores:
            try:
                fd = os.open(path + ".lock", os.O_RDWR)
            except OSError:
                continue
            if not try_lock(fd):
                os.close(fd)
                continue
            fds.append(fd)
            held.append((path, key_groups))
        built = 0
        for path, identity, key_groups in targets:
            shares = [(source, shared(r, key_groups)) for source, r in held]
            shares = [(source, common) for source, common in shares if common]
            if shares and _seeded(path, identity, shares):
                built += 1
        return built
    finally:
        for fd in fds:
            unlock(fd)
            os.close(fd)


def _seeded(path: str, identity: bytes, shares: list[tuple[str, range]]) -> bool:
    """Build the store ``path`` from ``shares`` unless it holds state or another process
    holds it; whether it was built."""
    built = False

    def seed(target: str) -> None:
        nonlocal built
        built = build_at(target, identity, shares) > 0

    store = LocalStore.open(path, identity, seed)
    if store is not None:
        store.close()
    return built
