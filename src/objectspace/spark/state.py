"""Read an operator's checkpointed state as a Spark DataFrame, in parallel by key group.

Like Spark's ``statestore`` data source, for every objectspace storage::

    from objectspace.spark import read_state

    df = read_state(spark, "sqlite:///state.db", "clicks", "sessions", checkpoint=7)
    df.where("kind = 'List'").groupBy("object_id").count().show()

The DataFrame has the columns of ``objectspace export`` (see :mod:`objectspace.inspection`):
``key_group`` int, ``object_id`` string, ``kind`` string, ``slot`` string (nullable) and
``value`` string (nullable, JSON text). The driver only resolves the checkpoint (default:
the last committed one, fixed when ``read_state`` is called) and the operator's metadata;
executor tasks open the storage themselves (it pickles) and each restores its own slices
of key groups, at most :data:`~objectspace.inspection.SLICE_KEY_GROUPS` at a time. The
slices are the ids of a ``spark.range`` read with ``mapInArrow``, which a Spark Connect
session runs as well as a classic one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from objectspace.checkpoint import CompactionPolicy, Job, Operator, Storage
from objectspace.inspection import (
    find_operator,
    open_existing,
    parquet_schema,
    resolve_checkpoint,
    serializer_named,
    slices,
    state_rows,
)
from objectspace.serialization import Serializer
from objectspace.spark.session import default_parallelism
from objectspace.storage.contract import OperatorInfo

__all__ = ["read_state", "state_schema"]


def state_schema() -> Any:
    """The Spark schema of :func:`read_state`'s DataFrame."""
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    return StructType(
        [
            StructField("key_group", IntegerType(), False),
            StructField("object_id", StringType(), False),
            StructField("kind", StringType(), False),
            StructField("slot", StringType(), True),
            StructField("value", StringType(), True),
        ]
    )


# Rows per Arrow record batch a task yields.
_BATCH_ROWS = 4096


class _ReadSlices:
    """The function of ``mapInArrow``: restores the slices whose ids it is given (the
    ``id`` column of a ``spark.range``), yields their rows as Arrow record batches."""

    def __init__(
        self,
        storage: Storage,
        info: OperatorInfo,
        serializer: Serializer | None,
        checkpoint: int,
        count: int,
    ) -> None:
        self.storage = storage
        self.info = info
        self.serializer = serializer
        self.checkpoint = checkpoint
        self.count = count

    def __call__(self, batches: Iterable[Any]) -> Iterator[Any]:
        import pyarrow as pa

        indexes = [i for batch in batches for i in batch.column(0).to_pylist()]
        if not indexes:
            return
        schema = _arrow_schema()
        storage = self.storage
        op = Operator(Job(storage, self.info.job), self.info, CompactionPolicy(), self.serializer)
        try:
            rows: list[tuple[Any, ...]] = []
            for row in state_rows(op, self.checkpoint, indexes, self.count):
                rows.append(row)
                if len(rows) == _BATCH_ROWS:
                    yield _record_batch(pa, schema, rows)
                    rows = []
            if rows:
                yield _record_batch(pa, schema, rows)
        finally:
            storage.close()


def _arrow_schema() -> Any:
    return parquet_schema()  # the rows of an export


def _record_batch(pa: Any, schema: Any, rows: list[tuple[Any, ...]]) -> Any:
    columns = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )


def read_state(
    spark: Any,
    url: str,
    job: str,
    operator: str,
    checkpoint: int | None = None,
    *,
    num_partitions: int | None = None,
    serializer: str | Serializer | None = None,
) -> Any:
    """The state of ``operator`` of ``job`` as of ``checkpoint`` (default: the last) as a
    DataFrame with the columns of ``objectspace export``.

    ``num_partitions`` (default: Spark's default parallelism; under Spark Connect
    ``spark.default.parallelism`` or the partitions of a ``spark.range``) bounds the tasks;
    ``serializer`` (a :class:`~objectspace.Serializer` or ``"msgpack"``, ``"json"``,
    ``"pickle"``) is the one the state was written with. The storage must exist (it is
    never created), and the job, operator and checkpoint too: otherwise
    :class:`~objectspace.StorageError` or :class:`~objectspace.CheckpointError` on the
    driver, before any task runs.
    """
    codec = serializer_named(serializer) if isinstance(serializer, str) else serializer
    storage = open_existing(url)
    try:
        op = find_operator(storage, job, operator, codec)
        cp = resolve_checkpoint(op.job, checkpoint)
        info = op.info
    finally:
        storage.close()
    count = slices(info.max_key_groups)
    if num_partitions is None:
        num_partitions = default_parallelism(spark)
    if type(num_partitions) is not int or num_partitions < 1:
        raise ValueError(f"num_partitions must be an int >= 1, not {num_partitions!r}")
    parts = min(count, num_partitions)
    read = _ReadSlices(storage, info, codec, cp, count)
    # A plain lambda: PySpark inspects type hints of the function it is given.
    return spark.range(0, count, 1, parts).mapInArrow(lambda it: read(it), state_schema())
