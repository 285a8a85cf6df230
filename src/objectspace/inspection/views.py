"""What ``inspect`` and ``show`` return: storage, checkpoints, operators and objects as plain data."""

from __future__ import annotations

from typing import Any

from objectspace.checkpoint import Job, Operator, Storage
from objectspace.collections import (
    PersistedDict,
    PersistedObject,
    PersistedSortedDict,
    PersistedValue,
)
from objectspace.errors import CheckpointError
from objectspace.inspection.probe import find_job, find_operator, redact, resolve_checkpoint
from objectspace.inspection.values import DEFAULT_LIMIT, _pairs, format_time, to_json
from objectspace.keyed import key_prefix
from objectspace.keygroups import Key

__all__ = ["inspect_storage", "show_objects"]


# -- inspect ----------------------------------------------------------------------------------


def _checkpoint_rows(job: Job) -> list[dict[str, Any]]:
    infos = job.checkpoint_info()
    committed_versions = {c.checkpoint_id for c in infos}
    rows: list[dict[str, Any]] = [
        {
            "checkpoint": c.checkpoint_id,
            "status": "complete",
            "committed_at": format_time(c.committed_at),
            "writes": c.writes,
            "full_writes": c.full_writes,
            "differential_writes": c.writes - c.full_writes,
            "bytes": c.bytes,
        }
        for c in infos
    ]
    pending: dict[int, dict[str, Any]] = {}
    has_committed: set[int] = set()
    for s in job.backend.write_summary(job.name):
        if s.committed:
            has_committed.add(s.version)
            continue
        row = pending.setdefault(
            s.version,
            {
                "checkpoint": s.version,
                "status": "pending",
                "committed_at": None,
                "writes": 0,
                "full_writes": 0,
                "differential_writes": 0,
                "bytes": 0,
            },
        )
        row["writes"] += s.writes
        row["full_writes" if s.full else "differential_writes"] += s.writes
        row["bytes"] += s.bytes
    rows.extend(
        row
        for version, row in sorted(pending.items())
        if version not in has_committed and version not in committed_versions
    )
    return rows


def _operator_data(job: Job, info: Any, last: int | None) -> dict[str, Any]:
    key_groups: list[dict[str, Any]] = []
    if last is not None:
        chains = job.backend.chains(job.name, info.name, range(info.max_key_groups), last)
        for key_group, writes in sorted(chains.items()):
            if not writes:
                continue
            key_groups.append(
                {
                    "key_group": key_group,
                    "writes": len(writes),
                    "full_version": writes[0].version if writes[0].full else None,
                    "rows": sum(w.rows for w in writes),
                    "bytes": sum(w.bytes for w in writes),
                }
            )
    return {
        "operator": info.name,
        "max_key_groups": info.max_key_groups,
        "parallelism": info.parallelism,
        "schema_version": info.schema_version,
        "state": {
            "as_of": last,
            "key_groups": len(key_groups),
            "writes": sum(k["writes"] for k in key_groups),
            "rows": sum(k["rows"] for k in key_groups),
            "bytes": sum(k["bytes"] for k in key_groups),
        },
        "key_groups": key_groups,
    }


def inspect_storage(
    storage: Storage, job: str | None = None, operator: str | None = None
) -> dict[str, Any]:
    """Jobs, checkpoints, operators and state sizes (the ``inspect`` JSON)."""
    if operator is not None and job is None:
        raise ValueError("--operator needs --job")
    names = [find_job(storage, job).name] if job is not None else storage.jobs()
    jobs = []
    for name in names:
        found = storage.job(name)
        last = found.last_checkpoint()
        infos = found.operators()
        if operator is not None:
            infos = [i for i in infos if i.name == operator]
            if not infos:
                find_operator(storage, name, operator)  # raises, naming the operators
        jobs.append(
            {
                "job": name,
                "last_checkpoint": last,
                "checkpoints": _checkpoint_rows(found),
                "operators": [_operator_data(found, info, last) for info in infos],
            }
        )
    return {"storage": redact(storage.url), "jobs": jobs}


# -- show ---------------------------------------------------------------------------------------


def _contents(obj: PersistedObject, limit: int) -> dict[str, Any]:
    """An object's contents as JSON: a Value's value, else length, first items and the rest."""
    if isinstance(obj, PersistedValue):
        return {"length": None, "value": to_json(obj.value)}
    pairs = _pairs(obj)
    mapping = isinstance(obj, PersistedDict | PersistedSortedDict)
    shown = pairs[:limit]
    items = (
        [[to_json(k), to_json(v)] for k, v in shown] if mapping else [to_json(v) for _, v in shown]
    )
    return {"length": len(pairs), "items": items, "more": len(pairs) - len(shown)}


def _view(object_id: str, obj: PersistedObject, limit: int) -> dict[str, Any]:
    return {"id": object_id, "kind": obj.kind, **_contents(obj, limit)}


def show_objects(
    op: Operator,
    *,
    key: Key | None = None,
    key_group: int | None = None,
    checkpoint: int | None = None,
    limit: int = DEFAULT_LIMIT,
    has_key: bool = False,
) -> dict[str, Any]:
    """The objects of a key (``has_key``) or of a key group as of a checkpoint (``show``)."""
    cp = resolve_checkpoint(op.job, checkpoint)
    if has_key:
        key_group = op.key_groups.key_group(key)
    if key_group is None:
        raise ValueError("give a key or a key group")
    if not 0 <= key_group < op.max_key_groups:
        raise CheckpointError(
            f"key group {key_group} is outside 0..{op.max_key_groups - 1} of operator {op.name!r}"
        )
    space = op.instance(0, 1, checkpoint=cp).space(key_group)
    prefix = key_prefix(key) if has_key else ""
    objects = [
        _view(object_id, space.get(object_id), limit)
        for object_id in sorted(space)
        if object_id.startswith(prefix)
    ]
    data: dict[str, Any] = {
        "job": op.job.name,
        "operator": op.name,
        "checkpoint": cp,
        "key_group": key_group,
        "objects": objects,
    }
    if has_key:
        data["key"] = to_json(key)
    return data
