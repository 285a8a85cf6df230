"""Two-phase garbage collection of segment files.

A reader that planned a restore before a reference disappeared can still finish: files that
no write references are *stamped* with the time; a later pass deletes files stamped longer
ago than a grace period. A referenced file is never deleted; an unreferenced one is deleted
after at most two passes. Deleting moves the catalog row to a trash table, deletes the file,
then empties the trash row: a pass that dies in between leaves the row, and the next pass
deletes the file. A path the backend will not delete (outside the storage root) is refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from objectspace.storage.sql.catalog import SegmentCatalog

__all__ = ["GCStats", "collect"]


@dataclass
class GCStats:
    """What one garbage-collection pass did (or, dry run, would do)."""

    stamped: int = 0
    deleted: list[str] = field(default_factory=list)
    bytes_deleted: int = 0
    referenced: int = 0
    dry_run: bool = False
    refused: list[str] = field(default_factory=list)  # catalog paths outside the root


def collect(
    catalog: SegmentCatalog,
    fs: Any,
    deletable: Callable[[str], str | None],
    grace_seconds: float,
    dry_run: bool,
    when: float,
) -> GCStats:
    """One pass over ``catalog``'s segments at time ``when``: stamp newly unreferenced
    segments, then delete (on ``fs``) those stamped more than ``grace_seconds`` ago, and the
    files of segments an interrupted pass forgot without deleting. ``dry_run`` changes
    nothing. ``deletable`` gives the filesystem path to delete for a catalog path, or
    ``None`` where the path must not be deleted (listed in ``refused``)."""
    stats = GCStats(dry_run=dry_run)
    known = catalog.segments()
    sizes = {p: b for p, b, _ in known}
    trash = catalog.trashed_segments()
    sizes.update(trash)
    if dry_run:
        referenced = catalog.referenced_segments()
        fresh = [p for p, _, s in known if s is None and p not in referenced]
        stats.stamped = len(fresh)
        doomed = catalog.collectable_segments(grace_seconds, when)
        if grace_seconds <= 0:  # a real pass would stamp and delete these at once
            doomed = sorted({*doomed, *fresh})
        for path in sorted({*doomed, *(p for p, _ in trash)}):
            full = deletable(path)
            if full is None:
                stats.refused.append(path)
            else:
                stats.deleted.append(full)
                stats.bytes_deleted += sizes.get(path, 0)
    else:
        stats.stamped = catalog.stamp_unreferenced(when)
        for path, _ in trash:  # forgotten by a pass that died before deleting
            _delete(catalog, fs, deletable, path, sizes, stats)
        collectable = []
        for path in catalog.collectable_segments(grace_seconds, when):
            if deletable(path) is None:
                stats.refused.append(path)
            else:
                collectable.append(path)
        # Forget first: if a reference appeared meanwhile, the file stays; and a writer
        # still holding a reservation can no longer register it.
        for path in catalog.forget_segments(collectable):
            _step(catalog, "gc:forgotten")
            _delete(catalog, fs, deletable, path, sizes, stats)
    stats.referenced = len(catalog.referenced_segments())
    return stats


def _step(catalog: SegmentCatalog, step: str) -> None:
    hook = catalog.fault_hook
    if hook is not None:
        hook(step)


def _delete(
    catalog: SegmentCatalog,
    fs: Any,
    deletable: Callable[[str], str | None],
    path: str,
    sizes: Mapping[str, int],
    stats: GCStats,
) -> None:
    """Delete a forgotten segment's file (and the temporary twin that earlier versions
    wrote it under first), then its trash row."""
    full = deletable(path)
    if full is None:
        stats.refused.append(path)
        return
    for name in (full, full + ".tmp"):
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(name)
    catalog.segment_deleted(path)
    stats.deleted.append(full)
    stats.bytes_deleted += sizes.get(path, 0)
