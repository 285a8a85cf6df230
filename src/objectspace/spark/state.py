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
of key groups, at most :data:`~objectspace.inspection.SLICE_KEY_GROUPS` at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from objectspace.checkpoint import CompactionPolicy, Job, Operator, Storage
from objectspace.inspection import (
    find_operator,
    open_existing,
    resolve_checkpoint,
    serializer_named,
    slices,
    state_rows,
)
from objectspace.serialization import Serializer
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


class _ReadSlices:
    """The function of ``mapPartitions``: restores the slices it is given, yields rows."""

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

    def __call__(self, indexes: Iterable[int]) -> Iterator[tuple[Any, ...]]:
        storage = self.storage
        op = Operator(Job(storage, self.info.job), self.info, CompactionPolicy(), self.serializer)
        try:
            yield from state_rows(op, self.checkpoint, list(indexes), self.count)
        finally:
            storage.close()


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

    ``num_partitions`` (default: Spark's default parallelism) bounds the tasks;
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
        num_partitions = int(spark.sparkContext.defaultParallelism)
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, not {num_partitions}")
    parts = min(count, num_partitions)
    rdd = spark.sparkContext.parallelize(range(count), parts).mapPartitions(
        _ReadSlices(storage, info, codec, cp, count)
    )
    return spark.createDataFrame(rdd, state_schema())
