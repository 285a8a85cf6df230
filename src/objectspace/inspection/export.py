"""Restoring key groups a slice at a time, as entry rows and as Parquet (``export``)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from objectspace.checkpoint import Operator
from objectspace.errors import StorageError
from objectspace.inspection.probe import resolve_checkpoint
from objectspace.inspection.values import SLICE_KEY_GROUPS, Progress, entries
from objectspace.space import ObjectSpace

__all__ = ["export_parquet", "parquet_schema", "slices", "state_rows"]


# -- restoring slices of key groups -------------------------------------------------------------


def slices(max_key_groups: int) -> int:
    """How many slices (instances) of at most :data:`SLICE_KEY_GROUPS` key groups cover
    ``max_key_groups``."""
    return max(1, min(max_key_groups, -(-max_key_groups // SLICE_KEY_GROUPS)))


def _slice_spaces(
    op: Operator, checkpoint: int, index: int, count: int
) -> Iterator[tuple[int, ObjectSpace]]:
    """The key groups of slice ``index`` of ``count`` that hold state, restored."""
    key_groups = op.key_groups.range_of(index, count)
    backend = op.job.backend
    if not any(backend.chains(op.job.name, op.name, key_groups, checkpoint).values()):
        return  # nothing stored: skip opening an instance
    instance = op.instance(index, count, checkpoint=checkpoint)
    instance.load_all()  # the whole slice in one read
    for key_group, space in sorted(instance.loaded().items()):
        if len(space):
            yield key_group, space


def state_rows(
    op: Operator, checkpoint: int, indexes: Sequence[int], count: int
) -> Iterator[tuple[int, str, str, str | None, str | None]]:
    """Exported rows (module docstring) of slices ``indexes`` of ``count``, in order."""
    for index in indexes:
        for key_group, space in _slice_spaces(op, checkpoint, index, count):
            for object_id in sorted(space):
                obj = space.get(object_id)
                for slot, value in entries(obj):
                    yield key_group, object_id, obj.kind, slot, value


def parquet_schema() -> Any:
    """The Arrow schema of exported rows."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("key_group", pa.int32(), nullable=False),
            pa.field("object_id", pa.string(), nullable=False),
            pa.field("kind", pa.string(), nullable=False),
            pa.field("slot", pa.string()),
            pa.field("value", pa.string()),
        ]
    )


def export_parquet(
    op: Operator,
    path: str | os.PathLike[str],
    checkpoint: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Write every entry of the operator's state as of ``checkpoint`` to a Parquet file.

    The file appears whole or not at all: it is written under a temporary name in the same
    folder and renamed when complete.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    cp = resolve_checkpoint(op.job, checkpoint)
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise StorageError(f"cannot write {str(target)!r}: folder {str(folder)!r} does not exist")
    if target.is_dir():
        raise StorageError(f"cannot write {str(target)!r}: it is a folder")
    schema = parquet_schema()
    count = slices(op.max_key_groups)
    total = objects = 0
    key_groups: set[int] = set()
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            for index in range(count):
                columns: list[list[Any]] = [[], [], [], [], []]
                last_object: tuple[int, str] | None = None
                for row in state_rows(op, cp, [index], count):
                    for column, value in zip(columns, row, strict=True):
                        column.append(value)
                    if (row[0], row[1]) != last_object:
                        last_object = (row[0], row[1])
                        objects += 1
                        key_groups.add(row[0])
                if columns[0]:
                    writer.write_table(pa.Table.from_arrays(columns, schema=schema))
                    total += len(columns[0])
                if progress is not None:
                    progress(index + 1, count)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return {
        "path": str(target),
        "checkpoint": cp,
        "rows": total,
        "objects": objects,
        "key_groups": len(key_groups),
    }
