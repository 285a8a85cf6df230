"""Key-group routing of a batch's rows in Python: each row's key group (Spark's
``pmod(xxhash64(key), max_key_groups)``, bit for bit) and the instance that owns it.

:func:`objectspace.engine.simulate` routes every batch here; a Spark task routes here the
rows of an input that arrives in one partition (otherwise the JVM computes the same
columns, see :mod:`objectspace.spark.routing`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from objectspace.engine.columns import KEY_GROUP_COLUMN
from objectspace.keygroups import KeyGroups, key_group_hash

__all__ = ["route_rows"]


def route_rows(
    rows: Iterable[dict[str, Any]],
    key_columns: Sequence[str],
    key_groups: KeyGroups,
    parallelism: int,
    instances: Iterable[int] = (),
) -> dict[int, list[dict[str, Any]]]:
    """``rows`` by the instance that owns their key at ``parallelism``, each row given its
    key group in :data:`~objectspace.engine.columns.KEY_GROUP_COLUMN`; ``instances`` are
    present even without rows (the instances with something due). O(rows): an int or str
    key is hashed once per batch (a key's rows come together)."""
    max_kg = key_groups.max_key_groups
    owner = [key_groups.instance_of(g, parallelism) for g in range(max_kg)]
    by_instance: dict[int, list[dict[str, Any]]] = {index: [] for index in instances}
    if len(key_columns) == 1:
        (column,) = key_columns
        # Only int and str keys are remembered: Python-equal values of two types (1, True)
        # hash apart.
        seen: dict[int | str, int] = {}
        for row in rows:
            value = row[column]
            if type(value) is int or type(value) is str:
                kg = seen.get(value)
                if kg is None:
                    kg = seen[value] = key_group_hash(value) % max_kg
            else:
                kg = key_group_hash(value) % max_kg
            row[KEY_GROUP_COLUMN] = kg
            index = owner[kg]
            bucket = by_instance.get(index)
            if bucket is None:
                by_instance[index] = [row]
            else:
                bucket.append(row)
    else:
        for row in rows:
            kg = row[KEY_GROUP_COLUMN] = key_group_hash(tuple(row[c] for c in key_columns)) % max_kg
            by_instance.setdefault(owner[kg], []).append(row)
    return by_instance
