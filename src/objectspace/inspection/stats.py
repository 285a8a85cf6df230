"""The batch statistics a :class:`~objectspace.spark.StatefulRunner` commits with each
checkpoint, and :func:`read_stats`, which reads them back from anywhere the storage is
reachable.

A runner records each committed batch's :class:`~objectspace.engine.BatchStats` as state
of the one-key-group operator ``<operator>#stats`` of its job, saved with the batch and
committed in the checkpoint's own catalog transaction (so a batch's record exists exactly
when its checkpoint does, and a replay records nothing twice). Its space holds one
persisted dict, ``batches``: checkpoint id -> the batch's fields (those that differ from
their defaults; the per-task ``tasks`` are not kept), the runner's last ``history``
batches. Reading them needs no Spark: the client of a Spark Connect session, where the
runner runs in the server's Python process, reads the stats of every batch it ran, and so
does ``objectspace stats URL JOB``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from objectspace.checkpoint import Job, Storage
from objectspace.engine import BatchStats
from objectspace.errors import CheckpointError, CorruptStateError
from objectspace.inspection.probe import find_job, find_operator, open_existing, redact

__all__ = [
    "STATS_OBJECT",
    "STATS_OPERATOR_SUFFIX",
    "batch_stats",
    "decode_stats",
    "encode_stats",
    "read_stats",
    "stats_row",
]

STATS_OPERATOR_SUFFIX = "#stats"
"""The batch statistics of operator ``op`` are the state of operator ``op#stats``."""
STATS_OBJECT = "batches"
"""The persisted dict of ``op#stats`` holding checkpoint id -> recorded fields."""

_FIELDS = {f.name: f for f in dataclasses.fields(BatchStats) if f.name != "tasks"}


def encode_stats(batch: BatchStats) -> dict[str, Any]:
    """The record of ``batch``: its fields that differ from their defaults (the checkpoint
    id and parallelism always), without the per-task stats. Plain ints, floats, bools and
    ``None``, which every serializer stores."""
    record: dict[str, Any] = {}
    for name, f in _FIELDS.items():
        value = getattr(batch, name)
        if f.default is dataclasses.MISSING or value != f.default:
            record[name] = value
    return record


def decode_stats(checkpoint_id: object, record: object) -> BatchStats:
    """The :class:`BatchStats` of a record :func:`encode_stats` wrote;
    :class:`CorruptStateError` naming the checkpoint for anything else."""
    if not isinstance(record, dict) or not all(isinstance(k, str) for k in record):
        raise CorruptStateError(
            f"the stats recorded for checkpoint {checkpoint_id!r} are not a map of fields: "
            f"{type(record).__name__}"
        )
    unknown = sorted(set(record) - set(_FIELDS))
    if unknown:
        # written by a newer version: keep what this one knows
        record = {k: v for k, v in record.items() if k in _FIELDS}
    for name, value in record.items():
        default = _FIELDS[name].default
        expected: tuple[type, ...]
        if name in ("watermark", "late_watermark", "batch_time"):
            expected = (int, type(None))
        elif isinstance(default, bool):
            expected = (bool,)
        elif isinstance(default, float):
            expected = (float, int)
        else:
            expected = (int,)
        if not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
            raise CorruptStateError(
                f"the stats recorded for checkpoint {checkpoint_id!r} have field {name}="
                f"{value!r}, not {' or '.join(t.__name__ for t in expected)}"
            )
    if record.get("checkpoint_id") != checkpoint_id or "parallelism" not in record:
        raise CorruptStateError(
            f"the stats recorded for checkpoint {checkpoint_id!r} name checkpoint "
            f"{record.get('checkpoint_id')!r} or lack the parallelism"
        )
    return BatchStats(**record)


def stats_row(batch: BatchStats) -> dict[str, Any]:
    """``batch`` as plain data (its fields, without the per-task stats): the rows of
    ``objectspace stats --json``."""
    return {name: getattr(batch, name) for name in _FIELDS}


def _stats_operator(storage: Storage, job: str, operator: str | None) -> tuple[Job, str | None]:
    """The job and the operator whose statistics to read (``None``: none recorded)."""
    found = find_job(storage, job)
    if operator is not None:
        find_operator(storage, job, operator)  # the operator itself missing: say so
        return found, operator
    names = sorted(
        o.name.removesuffix(STATS_OPERATOR_SUFFIX)
        for o in found.operators()
        if o.name.endswith(STATS_OPERATOR_SUFFIX)
    )
    if len(names) > 1:
        raise CheckpointError(
            f"job {job!r} in {redact(storage.url)} records the stats of operators {names}: name one"
        )
    return found, names[0] if names else None


def _read(
    storage: Storage, job: str, operator: str | None, last: int | None
) -> tuple[str | None, list[BatchStats]]:
    if last is not None and (type(last) is not int or last < 0):
        raise ValueError(f"last is a number of batches >= 0 or None, not {last!r}")
    found, operator = _stats_operator(storage, job, operator)
    if operator is None:
        return None, []
    name = operator + STATS_OPERATOR_SUFFIX
    checkpoint = found.last_checkpoint()
    if checkpoint is None or storage.backend.operator_info(job, name) is None:
        return operator, []
    instance = find_operator(storage, job, name).instance(0, 1, checkpoint=checkpoint)
    space = instance.space(0)
    if STATS_OBJECT not in space:
        return operator, []
    recorded = space.get_dict(STATS_OBJECT)
    ids = sorted(recorded)
    if last is not None:
        ids = ids[-last:] if last else []
    return operator, [decode_stats(i, recorded[i]) for i in ids]


def read_stats(
    storage: str | Storage, job: str, *, operator: str | None = None, last: int | None = None
) -> list[BatchStats]:
    """The :class:`~objectspace.engine.BatchStats` of the batches that ``job`` committed,
    oldest first, as the runner recorded them with each checkpoint (see the module
    docstring): the runner's last ``history`` batches (default 100), ``last`` of them when
    given. The checkpoint's commit writes the record, so ``seconds_commit`` is 0 and
    ``seconds_total`` ends where the commit began; ``tasks`` is empty.

    ``storage`` is a URL (opened only if it exists: nothing is ever created) or an open
    :class:`~objectspace.Storage`. ``operator`` is needed only when the job runs more
    than one recording operator. A job, operator or storage that does not exist raises
    :class:`~objectspace.CheckpointError` or :class:`~objectspace.StorageError` naming
    what there is; a job that committed no batch with statistics yet gives ``[]``.
    """
    opened = open_existing(storage) if isinstance(storage, str) else storage
    try:
        return _read(opened, job, operator, last)[1]
    finally:
        if opened is not storage:
            opened.close()


def batch_stats(
    storage: Storage, job: str, operator: str | None = None, last: int | None = None
) -> dict[str, Any]:
    """:func:`read_stats` as plain data, the ``--json`` of ``objectspace stats``::

        {"storage": "<URL, secrets masked>", "job": "clicks", "operator": "sessions" | null,
         "batches": [{"checkpoint_id": 7, "parallelism": 4, "keys": 1000, ...}, ...]}

    one row per recorded batch (:func:`stats_row`: every :class:`BatchStats` field but
    ``tasks``), oldest first; ``operator`` is ``null`` when the job recorded none.
    """
    name, batches = _read(storage, job, operator, last)
    return {
        "storage": redact(storage.url),
        "job": job,
        "operator": name,
        "batches": [stats_row(b) for b in batches],
    }
