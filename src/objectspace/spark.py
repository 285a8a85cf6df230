"""Keyed stateful processing on Spark, with object-space state and exactly-once checkpoints.

:class:`StatefulRunner` runs a function ``fn(key, rows, state)`` (or an operator of
:mod:`objectspace.operators`) over a DataFrame, batch by batch::

    runner = StatefulRunner(buffer100, key="k", order_by="ts",
                            output_schema="k long, n long, s double",
                            storage="sqlite:///state.db", job="demo", operator="buffer100",
                            max_key_groups=128, parallelism=4)
    out = runner.process(batch_df, checkpoint_id=7)
    query = stream.writeStream.foreachBatch(runner.foreach_batch(sink)).start()

How a batch runs:

1. On the driver: check the input, open the operator (its ``max_key_groups`` is fixed),
   and decide the base checkpoint, the last one committed before this batch.
2. Key groups and instances are computed in the JVM (``pmod(xxhash64(key), G)`` and the
   contiguous range formula), so rows are routed without a Python pass; then
   ``groupBy(instance).applyInArrow`` runs each instance inside a Spark task. The instance
   restores (or keeps cached in the Python worker) its key groups as of the base, feeds
   each key its rows in ``order_by`` order, and saves the changes as pending checkpoint N.
   Its receipt travels back as one extra row.
3. Only when every task succeeded does the driver commit N with the receipts, in one
   catalog transaction. A replayed batch id (query restart, retried batch) restores as of
   the checkpoint before N, yields the same output, and commits nothing twice. Task
   retries and speculative attempts leave pending writes that are never committed.

``parallelism`` may change between batches and across restarts: each instance restores
exactly the key groups of its new range. ``max_key_groups`` may not.
"""

from __future__ import annotations

import logging
import pickle
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from objectspace.checkpoint import (
    CompactionPolicy,
    Instance,
    Operator,
    Receipt,
    Storage,
    open_storage,
)
from objectspace.errors import CheckpointError, ObjectSpaceError
from objectspace.keygroups import KeyGroups, spark_instance_expr
from objectspace.operators.state import KeyState
from objectspace.spark_state import read_state
from objectspace.storage.versioned import OperatorInfo

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

__all__ = ["BatchStats", "StatefulRunner", "TaskStats", "local_session", "read_state"]

logger = logging.getLogger(__name__)

StatefulFunction = Callable[[Any, list[dict[str, Any]], KeyState], Iterable[Mapping[str, Any]]]

_KG = "__os_kg"
_INSTANCE = "__os_instance"
_RECEIPT = "__os_receipt"

# Instances kept by a Python worker between batches: (url, job, operator, index, p) → Instance.
_CACHE: dict[tuple[str, str, str, int, int], Instance] = {}


def local_session(master: str = "local[2]", app_name: str = "objectspace", **conf: str) -> Any:
    """A SparkSession for local runs and tests, whose Python workers use this interpreter
    (so they import the same objectspace), with small shuffles and no UI."""
    import os
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.pyspark.python", sys.executable)
    )
    for name, value in conf.items():
        builder = builder.config(name.replace("__", "."), value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


@dataclass
class TaskStats:
    """What one instance's task did in one batch."""

    index: int = 0
    keys: int = 0
    rows_in: int = 0
    rows_out: int = 0
    rows_read: int = 0
    cached: bool = False
    seconds_restore: float = 0.0
    seconds_process: float = 0.0
    seconds_save: float = 0.0
    seconds_total: float = 0.0


@dataclass
class BatchStats:
    """What one batch did, summed over its tasks."""

    checkpoint_id: int
    parallelism: int
    replay: bool = False
    committed: bool = False
    instances: int = 0
    keys: int = 0
    rows_in: int = 0
    rows_out: int = 0
    bytes_written: int = 0
    rows_written: int = 0
    rows_read: int = 0
    cached_instances: int = 0
    seconds_total: float = 0.0
    seconds_commit: float = 0.0
    seconds_tasks: float = 0.0
    seconds_restore: float = 0.0
    seconds_process: float = 0.0
    seconds_save: float = 0.0
    tasks: list[TaskStats] = field(default_factory=list)


def _columns(value: str | Sequence[str], what: str) -> tuple[str, ...]:
    cols = (value,) if isinstance(value, str) else tuple(value)
    if not cols or not all(isinstance(c, str) and c for c in cols):
        raise ValueError(
            f"{what} must be a column name or a non-empty list of names, not {value!r}"
        )
    return cols


def _quote(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"


class _InstanceTask:
    """The function ``applyInArrow`` runs once per instance: picklable, no Spark inside."""

    def __init__(
        self,
        storage: Storage,
        info: OperatorInfo,
        compaction: CompactionPolicy,
        fn: StatefulFunction,
        checkpoint_id: int,
        base: int | None,
        parallelism: int,
        replay: bool,
        key_columns: tuple[str, ...],
        order_columns: tuple[str, ...],
        output_schema: pa.Schema,
        use_cache: bool,
    ) -> None:
        self.storage = storage
        self.info = info
        self.compaction = compaction
        self.fn = fn
        self.checkpoint_id = checkpoint_id
        self.base = base
        self.parallelism = parallelism
        self.replay = replay
        self.key_columns = key_columns
        self.order_columns = order_columns
        self.output_schema = output_schema
        self.use_cache = use_cache

    def _instance(self, index: int, stats: TaskStats) -> Instance:
        storage = self.storage
        cache_key = (storage.url, self.info.job, self.info.name, index, self.parallelism)
        instance = _CACHE.pop(cache_key, None) if self.use_cache else None
        if instance is not None:
            saved = instance._saved
            if saved is not None and saved[0] == self.base:
                # The driver plans this batch on top of the checkpoint this instance saved:
                # adopt the save if its own writes are the committed ones.
                ids = [w.write_id for w in saved[1]]
                if not ids or storage.backend.writes_committed(ids):
                    instance.on_saved()
            if instance.base != self.base or instance._saved is not None:
                instance = None
        if instance is None:
            operator = Operator(storage.job(self.info.job), self.info, self.compaction, None)
            instance = operator.instance(
                index, self.parallelism, checkpoint=-1 if self.base is None else self.base
            )
        else:
            stats.cached = True
        return instance

    def __call__(self, group: tuple[Any, ...], table: pa.Table) -> pa.Table:
        """``applyInArrow``: all rows of one instance."""
        return self._table(self.run_instance(int(group[0].as_py()), table.to_pylist()))

    def run_partition(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``mapInArrow`` on a batch that Spark holds in one partition: every instance of
        the batch runs in this task, one after the other, with no shuffle before."""
        rows: list[dict[str, Any]] = []
        for batch in batches:
            rows.extend(batch.to_pylist())
        by_instance: dict[int, list[dict[str, Any]]] = {}
        for row in rows:
            by_instance.setdefault(row[_INSTANCE], []).append(row)
        for index in sorted(by_instance):
            yield from self._table(self.run_instance(index, by_instance[index])).to_batches()

    def _table(self, out: list[dict[str, Any]]) -> pa.Table:
        import pyarrow as pa

        try:
            return pa.Table.from_pylist(out, schema=self.output_schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise ObjectSpaceError(
                f"operator {self.info.name!r}: output rows do not fit output_schema "
                f"{self.output_schema.remove(len(self.output_schema) - 1)}: {exc}"
            ) from exc

    def _order(self, rows: list[dict[str, Any]]) -> None:
        """Sort one key's rows by order_by; ties (rare) by the whole row, so every attempt
        of a task sees one order whatever order Spark delivered the rows in."""
        order = self.order_columns

        def by_order(r: dict[str, Any]) -> tuple[Any, ...]:
            return tuple((r[c] is None, r[c]) for c in order)

        keys = [by_order(r) for r in rows]
        if len(set(keys)) == len(keys):
            rows.sort(key=by_order)
        else:
            rows.sort(key=lambda r: (by_order(r), repr(sorted(r.items()))))

    def run_instance(self, index: int, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run instance ``index`` over its rows; the output rows, then the receipt row."""
        started = time.perf_counter()
        stats = TaskStats(index=index)
        instance = self._instance(index, stats)
        stats.rows_in = len(rows)
        key_columns = self.key_columns
        single = len(key_columns) == 1
        first = key_columns[0]
        groups: dict[tuple[int, Any], list[dict[str, Any]]] = {}
        for row in rows:
            del row[_INSTANCE]
            key_group = row.pop(_KG)
            key = row[first] if single else tuple(row[c] for c in key_columns)
            bucket = groups.get((key_group, key))
            if bucket is None:
                bucket = groups[(key_group, key)] = []
            bucket.append(row)
        stats.keys = len(groups)
        t0 = time.perf_counter()
        instance.preload({key_group for key_group, _ in groups})
        restore = time.perf_counter() - t0
        names = set(self.output_schema.names)
        out: list[dict[str, Any]] = []
        for (key_group, key), key_rows in sorted(
            groups.items(), key=lambda kv: (kv[0][0], repr(kv[0][1]))
        ):
            if len(key_rows) > 1:
                self._order(key_rows)
            t0 = time.perf_counter()
            space = instance.space(key_group)
            restore += time.perf_counter() - t0
            for produced in self.fn(key, key_rows, KeyState.for_key(space, key)):
                row = dict(produced)
                if single:
                    row.setdefault(first, key)
                else:
                    for column, part in zip(key_columns, key, strict=True):
                        row.setdefault(column, part)
                if not names.issuperset(row):
                    extra = sorted(row.keys() - names)
                    raise ObjectSpaceError(
                        f"operator {self.info.name!r}: output row {row!r} of key {key!r} has "
                        f"fields {extra} that output_schema does not declare "
                        f"({', '.join(self.output_schema.names[:-1])})"
                    )
                out.append(row)
        stats.rows_out = len(out)
        stats.seconds_restore = restore
        stats.rows_read = instance.rows_read
        t0 = time.perf_counter()
        receipt: Receipt | None = None
        if not self.replay:
            receipt = instance.save(self.checkpoint_id)
        stats.seconds_save = time.perf_counter() - t0
        if self.use_cache and not self.replay:
            _CACHE[(self.storage.url, self.info.job, self.info.name, index, self.parallelism)] = (
                instance
            )
        stats.seconds_total = time.perf_counter() - started
        stats.seconds_process = stats.seconds_total - stats.seconds_save - restore
        out.append({_RECEIPT: pickle.dumps((receipt, stats))})
        return out


class StatefulRunner:
    """Runs a keyed stateful function over Spark DataFrames with checkpointed object spaces.

    ``fn(key, rows, state)`` gets one key's rows of a batch (dicts, in ``order_by`` order)
    and a :class:`~objectspace.operators.KeyState`, and yields output rows (dicts; the key
    columns are filled in when missing). ``key`` and ``order_by`` name one column or several
    (a multi-column key is a tuple). ``output_schema`` is a DDL string or a ``StructType``.
    ``retain`` keeps that many checkpoints after each commit (``None``: never drop any).
    """

    def __init__(
        self,
        fn: StatefulFunction,
        *,
        key: str | Sequence[str],
        order_by: str | Sequence[str],
        output_schema: str | StructType,
        storage: str | Storage,
        job: str,
        operator: str,
        max_key_groups: int = 128,
        parallelism: int | None = None,
        schema_version: int | None = None,
        compaction: CompactionPolicy | None = None,
        retain: int | None = 2,
        cache_instances: bool = True,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable (key, rows, state), not {type(fn).__name__}")
        self.fn = fn
        self.key_columns = _columns(key, "key")
        self.order_columns = _columns(order_by, "order_by")
        self.output_schema_ddl = output_schema
        self.storage = open_storage(storage) if isinstance(storage, str) else storage
        KeyGroups(max_key_groups)
        if parallelism is not None and not 1 <= parallelism <= max_key_groups:
            raise ValueError(
                f"parallelism must be in 1..{max_key_groups} (max_key_groups), not {parallelism}"
            )
        if retain is not None and retain < 2:
            raise ValueError(
                f"retain must keep at least 2 checkpoints (replays need the one "
                f"before the last), not {retain}"
            )
        if self.storage.url.startswith("memory://"):
            raise ValueError(
                "memory:// storage lives in one process, and Spark runs tasks in other "
                "processes: use sqlite:///, postgresql:// or segment files"
            )
        self.job = self.storage.job(job)
        others = [o.name for o in self.job.operators() if o.name != operator]
        if others:
            raise ValueError(
                f"cannot run operator {operator!r} in job {job!r}, which already has "
                f"operator(s) {others}: a StatefulRunner commits its job's checkpoints, so "
                "give each runner its own job, or combine operators in one runner with "
                "objectspace.operators.chain"
            )
        self.operator = self.job.operator(
            operator, max_key_groups, schema_version=schema_version, compaction=compaction
        )
        self.parallelism = parallelism
        self.compaction = compaction or CompactionPolicy()
        self.retain = retain
        self.cache_instances = cache_instances
        self.last_batch: BatchStats | None = None
        self.history: list[BatchStats] = []
        self._persisted: DataFrame | None = None

    def __repr__(self) -> str:
        return (
            f"StatefulRunner({self.job.name!r}/{self.operator.name!r}, "
            f"storage={self.storage.url!r}, max_key_groups={self.operator.max_key_groups})"
        )

    def _schemas(self, spark: Any) -> tuple[StructType, pa.Schema]:
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.types import BinaryType, StructField, StructType

        ddl = self.output_schema_ddl
        if isinstance(ddl, StructType):
            struct = ddl
        else:
            try:
                parsed = StructType.fromDDL(ddl)
            except Exception as exc:
                raise ValueError(f"output_schema {ddl!r} is not a valid DDL schema: {exc}") from exc
            if not isinstance(parsed, StructType):
                raise ValueError(f"output_schema {ddl!r} must describe a struct of columns")
            struct = parsed
        if _RECEIPT in struct.names:
            raise ValueError(f"output_schema may not use the reserved column name {_RECEIPT}")
        full = StructType([*struct.fields, StructField(_RECEIPT, BinaryType(), True)])
        return full, to_arrow_schema(full)

    def _plan_base(self, checkpoint_id: int) -> tuple[int | None, bool]:
        """The checkpoint this batch runs on top of, and whether it is a replay."""
        infos = {c.checkpoint_id: c for c in self.job.checkpoint_info()}
        last = self.job.last_checkpoint()
        if last is None or checkpoint_id > last:
            return last, False
        info = infos.get(checkpoint_id)
        if info is None:
            raise CheckpointError(
                f"cannot run checkpoint {checkpoint_id} of job {self.job.name!r}: checkpoint "
                f"{last} is already committed and {checkpoint_id} is not a retained one"
            )
        if info.base is not None and info.base not in infos:
            raise CheckpointError(
                f"cannot replay checkpoint {checkpoint_id} of job {self.job.name!r}: it was "
                f"made on top of checkpoint {info.base}, which is no longer retained"
            )
        return info.base, True

    def process(
        self, df: DataFrame, checkpoint_id: int, *, parallelism: int | None = None
    ) -> DataFrame:
        """Run one batch as checkpoint ``checkpoint_id`` and return its output DataFrame.

        The checkpoint is committed before this returns; the output is cached so that
        using it does not run the batch again.
        """
        from pyspark.sql import functions as F
        from pyspark.sql import types as T
        from pyspark.storagelevel import StorageLevel

        started = time.perf_counter()
        if (
            not isinstance(checkpoint_id, int)
            or isinstance(checkpoint_id, bool)
            or checkpoint_id < 0
        ):
            raise ValueError(f"checkpoint_id must be an int >= 0, not {checkpoint_id!r}")
        spark = df.sparkSession
        max_kg = self.operator.max_key_groups
        p = parallelism or self.parallelism or spark.sparkContext.defaultParallelism
        p = min(max(1, int(p)), max_kg)
        missing = [c for c in (*self.key_columns, *self.order_columns) if c not in df.columns]
        if missing:
            raise ValueError(
                f"input of {self.operator.name!r} lacks column(s) {missing}; it has {df.columns}"
            )
        struct, arrow_schema = self._schemas(spark)
        base, replay = self._plan_base(checkpoint_id)

        # Integer keys hash as 8-byte longs, exactly as objectspace.key_group_hash does.
        key_exprs = []
        for name in self.key_columns:
            dtype = df.schema[name].dataType
            cast = isinstance(dtype, T.ByteType | T.ShortType | T.IntegerType | T.LongType)
            key_exprs.append(f"CAST({_quote(name)} AS BIGINT)" if cast else _quote(name))
        routed = df.withColumn(
            _KG, F.expr(f"pmod(xxhash64({', '.join(key_exprs)}), {max_kg})").cast("int")
        ).withColumn(_INSTANCE, F.expr(spark_instance_expr(_KG, max_kg, p)).cast("int"))
        task = _InstanceTask(
            self.storage,
            self.operator.info,
            self.compaction,
            self.fn,
            checkpoint_id,
            base,
            p,
            replay,
            self.key_columns,
            self.order_columns,
            arrow_schema,
            self.cache_instances,
        )
        if self._persisted is not None:
            self._persisted.unpersist()
        # A plain lambda: PySpark inspects type hints of the function it is given.
        if self._single_partition(df):
            # Small micro-batches often arrive in one partition: run every instance in that
            # task instead of shuffling the rows to one task per instance.
            result = routed.mapInArrow(lambda it: task.run_partition(it), struct)
        else:
            result = routed.groupBy(_INSTANCE).applyInArrow(lambda g, t: task(g, t), struct)
        result = result.persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted = result
        tasks_started = time.perf_counter()
        packed = [
            r[0] for r in result.where(F.col(_RECEIPT).isNotNull()).select(_RECEIPT).collect()
        ]
        tasks_seconds = time.perf_counter() - tasks_started
        receipts: list[Receipt] = []
        batch = BatchStats(checkpoint_id=checkpoint_id, parallelism=p, replay=replay)
        for blob in packed:
            receipt, stats = pickle.loads(blob)
            if receipt is not None:
                receipts.append(receipt)
                batch.bytes_written += receipt.bytes_written
                batch.rows_written += receipt.rows_written
            batch.tasks.append(stats)
        commit_started = time.perf_counter()
        if not replay:
            batch.committed = self.job.commit(checkpoint_id, receipts)
            if self.retain is not None:
                self.job.retain(self.retain)
        batch.seconds_commit = time.perf_counter() - commit_started
        batch.seconds_tasks = tasks_seconds
        batch.instances = len(batch.tasks)
        for stats in batch.tasks:
            batch.keys += stats.keys
            batch.rows_in += stats.rows_in
            batch.rows_out += stats.rows_out
            batch.rows_read += stats.rows_read
            batch.cached_instances += stats.cached
            batch.seconds_restore += stats.seconds_restore
            batch.seconds_process += stats.seconds_process
            batch.seconds_save += stats.seconds_save
        batch.seconds_total = time.perf_counter() - started
        self.last_batch = batch
        self.history.append(batch)
        logger.info(
            "checkpoint %s: %s keys, %s bytes written, %.2f s",
            checkpoint_id,
            batch.keys,
            batch.bytes_written,
            batch.seconds_total,
        )
        return result.where(F.col(_RECEIPT).isNull()).drop(_RECEIPT)

    @staticmethod
    def _single_partition(df: DataFrame) -> bool:
        try:
            return int(df.rdd.getNumPartitions()) <= 1
        except Exception:  # e.g. a DataFrame that cannot become an RDD: take the shuffle
            return False

    def foreach_batch(
        self, sink: Callable[[DataFrame, int], None] | None = None
    ) -> Callable[[DataFrame, int], None]:
        """A ``foreachBatch`` function: process the micro-batch as checkpoint ``batch_id``
        (Spark's batch ids are consecutive and replayed after a restart), then hand the
        output to ``sink(out_df, batch_id)``."""

        def run(batch_df: DataFrame, batch_id: int) -> None:
            out = self.process(batch_df, int(batch_id))
            if sink is not None:
                sink(out, int(batch_id))

        return run

    def close(self) -> None:
        """Drop the cached output of the last batch."""
        if self._persisted is not None:
            self._persisted.unpersist()
            self._persisted = None
