"""Maintenance as plain data: garbage collection, compaction and retention (``gc``,
``compact``, ``retain``).
"""

from __future__ import annotations

from typing import Any

from objectspace.checkpoint import CompactionPolicy, Operator, Storage
from objectspace.inspection.probe import find_job, redact
from objectspace.inspection.values import Progress

__all__ = ["collect_garbage", "compact_job", "retain_job"]


# -- maintenance ----------------------------------------------------------------------------------


def collect_garbage(
    storage: Storage, grace_seconds: float, *, dry_run: bool = False
) -> dict[str, Any]:
    """One garbage-collection pass of a segment storage (``gc``).

    Files no write references are stamped; those stamped more than ``grace_seconds`` ago
    are deleted (``dry_run``: only reported). A referenced file is never deleted. SQL
    storages keep state in their database: there are no files to collect.
    """
    from objectspace.storage.segments import SegmentBackend

    backend = storage.backend
    data: dict[str, Any] = {
        "storage": redact(storage.url),
        "segments": isinstance(backend, SegmentBackend),
        "dry_run": dry_run,
        "grace_seconds": grace_seconds,
        "stamped": 0,
        "deleted": [],
        "bytes_deleted": 0,
        "referenced": 0,
        "refused": [],
    }
    if isinstance(backend, SegmentBackend):
        stats = backend.gc(grace_seconds, dry_run=dry_run)
        data.update(
            stamped=stats.stamped,
            deleted=list(stats.deleted),
            bytes_deleted=stats.bytes_deleted,
            referenced=stats.referenced,
            refused=list(stats.refused),
        )
    return data


def compact_job(
    storage: Storage,
    job: str,
    *,
    verify: bool = True,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Rewrite every key group with a differential chain as one full write (``compact``).

    With ``verify`` (the default), every chain to rewrite is read first, so a corrupt or
    missing segment stops the command before anything is written.
    """
    found = find_job(storage, job)
    last = found.last_checkpoint()
    infos = found.operators()
    operators: list[dict[str, Any]] = []
    if last is not None and verify:
        backend = found.backend
        todo: list[tuple[str, int]] = []
        for info in infos:
            chains = backend.chains(job, info.name, range(info.max_key_groups), last)
            todo.extend((info.name, g) for g, writes in sorted(chains.items()) if len(writes) > 1)
        for done, (name, key_group) in enumerate(todo, 1):
            backend.load(job, name, range(key_group, key_group + 1), last)
            if progress is not None:
                progress(done, len(todo) + len(infos))
        offset = len(todo)
    else:
        offset = 0
    for done, info in enumerate(infos, 1):
        stats = Operator(found, info, CompactionPolicy(), None).compact()
        operators.append(
            {
                "operator": info.name,
                "key_groups": stats.key_groups,
                "bytes_read": stats.bytes_read,
                "bytes_written": stats.bytes_written,
            }
        )
        if progress is not None:
            progress(offset + done, offset + len(infos))
    return {
        "job": job,
        "as_of": last,
        "key_groups": sum(o["key_groups"] for o in operators),
        "bytes_read": sum(o["bytes_read"] for o in operators),
        "bytes_written": sum(o["bytes_written"] for o in operators),
        "operators": operators,
    }


def retain_job(storage: Storage, job: str, keep_last: int) -> dict[str, Any]:
    """Drop checkpoints before the last ``keep_last`` and what only they needed (``retain``)."""
    from objectspace.storage.segments import SegmentBackend

    if keep_last < 1:
        raise ValueError(f"--keep-last must be at least 1, not {keep_last}")
    found = find_job(storage, job)
    stats = found.retain(keep_last)
    return {
        "job": job,
        "keep_last": keep_last,
        "kept": list(stats.kept),
        "checkpoints_dropped": stats.checkpoints_dropped,
        "writes_removed": stats.writes_removed,
        "pending_removed": stats.pending_removed,
        "rows_removed": stats.rows_removed,
        "segments": isinstance(storage.backend, SegmentBackend),
    }
