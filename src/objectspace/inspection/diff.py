"""What ``diff`` returns: the objects and slots that changed between two checkpoints."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any

from objectspace.checkpoint import Operator
from objectspace.collections import (
    PersistedObject,
    PersistedSet,
    PersistedSortedSet,
    PersistedValue,
)
from objectspace.inspection.export import slices
from objectspace.inspection.probe import resolve_checkpoint
from objectspace.inspection.values import (
    _SEQUENCE_KINDS,
    DEFAULT_LIMIT,
    MAX_MATCHED,
    Progress,
    _pairs,
    _sort_pairs,
    json_text,
    to_json,
)
from objectspace.inspection.views import _contents
from objectspace.serialization import MsgpackSerializer

__all__ = ["diff_checkpoints"]


# -- diff ---------------------------------------------------------------------------------------


def _slot_changes(old: PersistedObject, new: PersistedObject) -> list[dict[str, Any]]:
    """The changed slots of two objects of one (collection) kind."""
    if old.kind in _SEQUENCE_KINDS:
        a = [v for _, v in _pairs(old)]
        b = [v for _, v in _pairs(new)]
        return _sequence_changes(a, b)
    # Keys match by their stored (canonical) encoding, as the collections do: 1, 1.0 and
    # True are one key, whichever spelling each checkpoint holds.
    stored_key = _stored_key(new)
    before = {stored_key(k): (k, v) for k, v in _pairs(old)}
    after = {stored_key(k): (k, v) for k, v in _pairs(new)}
    is_set = isinstance(old, PersistedSet | PersistedSortedSet)
    changes: list[tuple[Any, dict[str, Any]]] = []
    for text, (k, v) in before.items():
        if text not in after:
            entry = {"slot": to_json(k), "change": "removed"}
            if not is_set:
                entry["old"] = to_json(v)
            changes.append((k, entry))
    for text, (k, v) in after.items():
        if text not in before:
            entry = {"slot": to_json(k), "change": "added"}
            if not is_set:
                entry["new"] = to_json(v)
            changes.append((k, entry))
        elif not is_set and json_text(before[text][1]) != json_text(v):
            changes.append(
                (
                    k,
                    {
                        "slot": to_json(k),
                        "change": "changed",
                        "old": to_json(before[text][1]),
                        "new": to_json(v),
                    },
                )
            )
    return [entry for _, entry in _sort_pairs(changes)]


def _stored_key(obj: PersistedObject) -> Callable[[Any], bytes]:
    """The row key a dict key or set element of ``obj`` is stored under."""
    space = obj.space
    encode_key = (space.serializer if space is not None else MsgpackSerializer()).encode_key
    return lambda key: encode_key(key)[0]


def _sequence_changes(a: list[Any], b: list[Any]) -> list[dict[str, Any]]:
    ta = [json_text(v) for v in a]
    tb = [json_text(v) for v in b]
    out: list[dict[str, Any]] = []
    opcodes: Sequence[tuple[str, int, int, int, int]]
    if len(ta) + len(tb) > MAX_MATCHED:
        n = min(len(ta), len(tb))
        opcodes = [
            ("replace", 0, n, 0, n),
            ("delete", n, len(ta), n, n),
            ("insert", n, n, n, len(tb)),
        ]
    else:
        opcodes = difflib.SequenceMatcher(None, ta, tb, autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            continue
        paired = min(i2 - i1, j2 - j1) if tag == "replace" else 0
        for k in range(paired):
            i, j = i1 + k, j1 + k
            if ta[i] == tb[j]:
                continue
            entry: dict[str, Any] = {"slot": j, "change": "changed"}
            if i != j:
                entry["old_slot"] = i
            entry["old"] = to_json(a[i])
            entry["new"] = to_json(b[j])
            out.append(entry)
        out.extend(
            {"slot": i, "change": "removed", "old": to_json(a[i])} for i in range(i1 + paired, i2)
        )
        out.extend(
            {"slot": j, "change": "added", "new": to_json(b[j])} for j in range(j1 + paired, j2)
        )
    return out


def _object_diff(
    key_group: int,
    object_id: str,
    old: PersistedObject | None,
    new: PersistedObject | None,
    limit: int,
) -> dict[str, Any] | None:
    head: dict[str, Any] = {"key_group": key_group, "id": object_id}
    if old is None:
        assert new is not None
        return {**head, "change": "added", "kind": new.kind, **_contents(new, limit)}
    if new is None:
        return {**head, "change": "removed", "kind": old.kind, **_contents(old, limit)}
    if old.kind != new.kind:
        return {**head, "change": "replaced", "kind": new.kind, "old_kind": old.kind}
    if isinstance(old, PersistedValue) and isinstance(new, PersistedValue):
        if json_text(old.value) == json_text(new.value):
            return None
        return {
            **head,
            "change": "changed",
            "kind": new.kind,
            "old": to_json(old.value),
            "new": to_json(new.value),
        }
    slots = _slot_changes(old, new)
    if not slots:
        return None
    return {
        **head,
        "change": "changed",
        "kind": new.kind,
        "old_length": len(_pairs(old)),
        "new_length": len(_pairs(new)),
        "slots": slots[:limit],
        "more": max(0, len(slots) - limit),
    }


def diff_checkpoints(
    op: Operator,
    old: int,
    new: int,
    *,
    limit: int = DEFAULT_LIMIT,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """What changed in the operator's state from checkpoint ``old`` to ``new`` (``diff``).

    Key groups whose restore chains are the same at both checkpoints are not read.
    """
    resolve_checkpoint(op.job, old)
    resolve_checkpoint(op.job, new)
    backend = op.job.backend
    count = slices(op.max_key_groups)
    objects: list[dict[str, Any]] = []
    changed_groups = 0
    for index in range(count):
        key_groups = op.key_groups.range_of(index, count)
        chains_old = backend.chains(op.job.name, op.name, key_groups, old)
        chains_new = backend.chains(op.job.name, op.name, key_groups, new)
        differing = [
            g
            for g in key_groups
            if [w.write_id for w in chains_old.get(g, [])]
            != [w.write_id for w in chains_new.get(g, [])]
        ]
        if differing:
            before = op.instance(index, count, checkpoint=old)
            after = op.instance(index, count, checkpoint=new)
            for key_group in differing:
                a, b = before.space(key_group), after.space(key_group)
                found = False
                for object_id in sorted(set(a) | set(b)):
                    entry = _object_diff(
                        key_group,
                        object_id,
                        a.get(object_id) if object_id in a else None,
                        b.get(object_id) if object_id in b else None,
                        limit,
                    )
                    if entry is not None:
                        objects.append(entry)
                        found = True
                changed_groups += found
        if progress is not None:
            progress(index + 1, count)
    summary = {change: 0 for change in ("added", "removed", "changed", "replaced")}
    for entry in objects:
        summary[entry["change"]] += 1
    return {
        "job": op.job.name,
        "operator": op.name,
        "from": old,
        "to": new,
        "summary": {**summary, "key_groups_changed": changed_groups},
        "objects": objects,
    }
