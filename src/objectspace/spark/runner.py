"""The driver side: :class:`StatefulRunner` plans a batch, runs its tasks and commits the
checkpoint.
"""

from __future__ import annotations

import logging
import secrets
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from objectspace.checkpoint import CompactionPolicy, Storage, open_storage
from objectspace.engine import (
    INLINE_STATE_BYTES,
    INSTANCE_COLUMN,
    RECEIPT_COLUMN,
    TICK_COLUMN,
    TIME_OPERATOR_SUFFIX,
    BatchDriver,
    BatchStats,
    StatefulFunction,
    TaskStats,
    TimeOptions,
    check_input_columns,
    check_output_columns,
    check_parallelism,
    check_retain,
    column_names,
    parse_bytes,
)
from objectspace.errors import CheckpointError
from objectspace.inspection.stats import STATS_OPERATOR_SUFFIX, read_stats
from objectspace.keygroups import check_max_key_groups
from objectspace.spark.cache import _SNAPSHOT_KEY_BYTES
from objectspace.spark.metrics import RecordingJob, batch_line, preview_stats
from objectspace.spark.preflight import check_storage, resolve_require_c
from objectspace.spark.receipts import I64, MAX_RECEIPT_BYTES, unpack_receipt
from objectspace.spark.routing import due_marker_rows, hashes_alike, quote, with_routing
from objectspace.spark.session import (
    application_id,
    default_parallelism,
    executor_cores,
    is_connect,
    job_description,
)
from objectspace.spark.task import _InstanceTask
from objectspace.storage.urls import redact_url

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

__all__ = ["StatefulRunner"]


logger = logging.getLogger(__name__)

# The largest inline_output_bytes: a task's share travels in one receipt row, which the
# driver decodes up to MAX_RECEIPT_BYTES.
_MAX_INLINE_BYTES = MAX_RECEIPT_BYTES // 2
# The largest inline_state_bytes: with a task's share of the output, its blocks fit in one
# receipt row.
_MAX_INLINE_STATE_BYTES = MAX_RECEIPT_BYTES // 4
# The most processes a one-partition task runs its instances in (task_processes).
_MAX_PROCESSES = 64


def _bytes_option(name: str, value: object, most: int) -> int:
    """``value`` if it is a number of bytes in 0..``most``, else :class:`ValueError`."""
    if type(value) is not int or not 0 <= value <= most:
        raise ValueError(f"{name} is a number of bytes in 0..{most}, not {value!r}")
    return value


class StatefulRunner:
    """Runs a keyed stateful function over Spark DataFrames with checkpointed object spaces.

    ``fn(key, rows, state)`` gets one key's rows of a batch (dicts, in ``order_by`` order)
    and a :class:`~objectspace.keyed.KeyState`, and yields output rows (dicts; the key
    columns are filled in when missing). ``key`` and ``order_by`` name one column or several
    (a multi-column key is a tuple). ``output_schema`` is a DDL string or a ``StructType``.
    ``retain`` keeps that many checkpoints after each commit (``None``: never drop any).
    A runner takes its job over when it is created (:meth:`~objectspace.Job.fence`): a runner
    created earlier on the same job can no longer commit
    (:class:`~objectspace.CheckpointConflictError`).

    ``cache_instances`` (default on) lets each Python worker keep the instances it ran and
    reuse one when it runs the next batch on top of the checkpoint that instance saved,
    instead of restoring it from storage. ``snapshot_instances`` (default on, effective only
    with ``cache_instances``) also writes each saved instance to a snapshot file in a
    private local folder (under the Spark application's SparkFiles directory, removed when
    the application ends), from which whichever Python worker of the machine runs that
    instance next adopts it; a snapshot is adopted only when it is exactly the committed
    state the batch runs on, checked against the store. It costs a pickle and a file write
    per instance and batch, except where a worker ran the instance from its own memory two
    batches in a row (Spark keeps giving it that instance: it skips the snapshot). Turn it
    off when the state is large and workers keep their instances anyway, or when the local
    disk is scarce.

    Time (see the README's "Time" section): ``time_mode`` (``None``, ``"event"`` or
    ``"processing"``), ``event_time`` (a timestamp or long epoch-ms column, required for
    event time), ``watermark_delay`` (a str like ``"10 seconds"`` or a timedelta),
    ``late_rows`` (``"drop"``, counted in ``BatchStats.rows_late``, or ``"keep"``) and
    ``on_timer(key, when, state)``, the handler of the timers ``state.timers`` registers
    (default: the function's own handler, :class:`~objectspace.keyed.TimerHandler`).

    ``inline_output_bytes`` (default 16 MiB) lets a batch's output come back to the driver
    with the tasks' receipts when it is small: a task whose output, as an Arrow IPC stream,
    is at most this many bytes divided by the batch's parallelism sends it with its receipt,
    and when every task did, :meth:`process` returns the output as a local DataFrame, which
    the sink reads without another Spark job over the cached rows. A larger output stays in
    the cached DataFrame as before; 0 keeps every output there. After a batch whose output
    all came back this way, the next batch's result is not cached (one Spark call less per
    batch): should one of its tasks' output be larger after all, using that output runs the
    batch's tasks again (the same rows, nothing committed twice), and the following batches
    are cached again.

    ``inline_state_bytes`` (default 16 MiB) lets the tasks send the state they saved to the
    driver with their receipts: a task whose save encodes to at most this many bytes divided
    by the batch's parallelism stores nothing itself, and the driver stores every such
    task's blocks in the checkpoint's commit transaction (segment storage: in one segment
    file per batch, written just before it). One transaction per micro-batch instead of one
    per task plus the commit writes fewer pages and files (BENCHMARKS.md, "What a durable
    commit costs at the disk"), and an attempt that is never committed leaves nothing
    behind. A larger save stores its pending writes itself, as every save does with 0.

    ``memory_budget`` (bytes, or a size like ``"512 MiB"``): state larger than memory.
    Each Python worker keeps at most about this many bytes of state as Python objects,
    for all the instances it runs (an estimate, per worker: ``spark.executor.pyspark.memory``
    bounds a worker too). Every instance then keeps its key groups' committed state in a
    local store on the executor's disk (``local_dir``, default the first of
    ``SPARK_LOCAL_DIRS`` or the temporary directory, in a private folder), loads a key's
    objects from it when the key is used, drops the least recently used ones beyond the
    budget after each batch, and a worker that gets an instance another worker (or a
    process before a restart) ran continues from the local store, reading from storage
    only what the local store does not hold as committed; instance snapshots are not
    written. Default: a quarter of ``spark.executor.pyspark.memory`` when that is set (the
    rest is the worker's own: its libraries, a batch's rows, a save's encoded edits), else no
    budget (every key a worker's instances touched stays in memory).

    ``local_copy_every`` (with a memory budget): every how many checkpoints an instance
    puts a copy of its local store in the storage's file area (``sqlite:///path``: the
    folder ``path.files``; segment storage: ``files/`` under its root; PostgreSQL keeps
    none), so that a process with no local file for it (a new executor, another machine,
    a wiped disk) starts from the copy and reads from storage only the writes made since,
    not every key group whole (:mod:`objectspace.checkpoint.copies`); ``None``: never.

    ``require_c``: whether a task that finds the pure-Python collections on its executor
    (objectspace shipped as a zip, a failed build) fails with
    :class:`~objectspace.spark.preflight.DeploymentError` naming the cause instead of
    running slower; default: when the driver itself runs on the C extension. When a query's
    first batch runs on a cluster (any master but ``local``), the runner checks that every
    executor reaches its storage (:func:`~objectspace.spark.preflight.check_storage`: one
    small Spark job; ``memory://`` and local folders the executors do not see are refused
    before anything runs). See docs/deploy.md.

    ``task_processes``: a batch Spark holds in one partition (small micro-batches, one
    file per trigger) runs in one task; that task runs its instances in this many
    processes, its Python worker and helper processes the worker keeps, instance ``i`` in
    process ``i % task_processes`` (:mod:`objectspace.spark.helpers`), so that the
    executor's other cores work too, as they would on a shuffle. Default: the executor's
    cores (``spark.executor.cores``, or ``N`` of ``local[N]``; 1 on a cluster that does not
    say, with ``spark.python.worker.reuse`` off, or with a memory budget, which bounds
    each process), at most the parallelism; 1 runs every instance in the worker.

    ``history`` holds the :class:`~objectspace.spark.BatchStats` of the last ``history``
    batches (default 100; ``None``: every batch, which grows without bound in a long-running
    query), oldest first; ``last_batch`` is the latest. Both live in the process that runs
    the batches: the driver, or under Spark Connect the server's Python process that runs
    the query's ``foreachBatch`` function (the client's runner is a copy that runs
    nothing). Each committed batch's statistics are also committed with its checkpoint
    (operator ``<operator>#stats`` of the job, the last ``history`` batches; 0: none), so
    that :meth:`read_stats`, :func:`objectspace.read_stats`, ``objectspace stats`` and
    :class:`~objectspace.spark.metrics.StateMetrics` read them from anywhere.

    Every Spark job a batch starts is described as ``objectspace job=<job>
    operator=<operator> checkpoint=<id> instances=<parallelism>`` (the Spark UI's job
    description), and each batch logs one ``key=value`` line through the ``objectspace``
    logger (``objectspace.spark.metrics.batch_line``).

    Spark Connect (``SparkSession.builder.remote(...)``) runs every path:
    :meth:`process` (without ``parallelism``, the default parallelism comes from the
    session's configuration or a small Spark job, once per session) and
    :meth:`foreach_batch`, whose function runs in the server's Python process.
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
        snapshot_instances: bool = True,
        history: int | None = 100,
        on_timer: Callable[..., Any] | None = None,
        time_mode: str | None = None,
        event_time: str | None = None,
        watermark_delay: Any = None,
        late_rows: str = "drop",
        inline_output_bytes: int = 16 * 1024 * 1024,
        inline_state_bytes: int = INLINE_STATE_BYTES,
        memory_budget: int | str | None = None,
        local_dir: str | None = None,
        local_copy_every: int | None = 10,
        require_c: bool | None = None,
        task_processes: int | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable (key, rows, state), not {type(fn).__name__}")
        self.time_options = TimeOptions.of(
            time_mode, event_time, watermark_delay, late_rows, on_timer
        )
        self.key_columns = column_names(key, "key")
        self.order_columns = column_names(order_by, "order_by")
        self.output_schema_ddl = output_schema
        self.storage = open_storage(storage) if isinstance(storage, str) else storage
        check_max_key_groups(max_key_groups)
        if parallelism is not None:
            check_parallelism(parallelism, max_key_groups)
        check_retain(retain)
        if self.storage.url.startswith("memory://"):
            raise ValueError(
                "memory:// storage lives in one process, and Spark runs tasks in other "
                "processes: use sqlite:///, postgresql:// or segment files"
            )
        if history is not None and (type(history) is not int or history < 0):
            raise ValueError(f"history is a number of batches >= 0 or None, not {history!r}")
        self.job = RecordingJob(self.storage, job, keep=history)
        others = [
            o.name
            for o in self.job.operators()
            if o.name
            not in (operator, operator + TIME_OPERATOR_SUFFIX, operator + STATS_OPERATOR_SUFFIX)
        ]
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
        # This runner is the job's driver from now on: a runner started earlier on the same
        # job (a query started twice, a zombie driver) can no longer commit.
        self.epoch = self.job.fence()
        self.parallelism = parallelism
        self.compaction = compaction or CompactionPolicy()
        self.retain = retain
        self.memory_budget = None if memory_budget is None else parse_bytes(memory_budget)
        self._driver = BatchDriver(
            self.operator,
            fn,
            key_columns=self.key_columns,
            order_columns=self.order_columns,
            compaction=self.compaction,
            retain=retain,
            time=self.time_options,
            memory_budget=self.memory_budget,
            local_dir=local_dir,
            copy_every=local_copy_every,
        )
        self._budget_known = memory_budget is not None
        self.require_c = resolve_require_c(require_c)
        if task_processes is not None and (
            type(task_processes) is not int or not 1 <= task_processes <= _MAX_PROCESSES
        ):
            raise ValueError(
                f"task_processes is a number of processes in 1..{_MAX_PROCESSES} or None "
                f"(the executor's cores), not {task_processes!r}"
            )
        self.task_processes = task_processes
        # The application whose executors were found to reach the storage (checked once).
        self._storage_checked_for: str | None = None
        self.cache_instances = cache_instances
        self.snapshot_instances = snapshot_instances
        # Names this runner's snapshots, so another runner (say, after the store was deleted
        # and re-created at the same URL) never adopts them.
        self._token = uuid.uuid4().hex
        # Authenticates this runner's snapshot files; travels to the tasks in the task
        # object only, so a file planted in the snapshot folder is never unpickled.
        self._snapshot_key = secrets.token_bytes(_SNAPSHOT_KEY_BYTES)
        self.last_batch: BatchStats | None = None
        self.history: deque[BatchStats] = deque(maxlen=history)
        self.inline_output_bytes = _bytes_option(
            "inline_output_bytes", inline_output_bytes, _MAX_INLINE_BYTES
        )
        self.inline_state_bytes = _bytes_option(
            "inline_state_bytes", inline_state_bytes, _MAX_INLINE_STATE_BYTES
        )
        self._persisted: DataFrame | None = None
        self._parsed_schemas: tuple[StructType, pa.Schema] | None = None
        # Whether the last batch left output rows in its result (see process).
        self._rows_left = True
        # The empty output DataFrame, by SparkSession (see _local_output).
        self._empty_outputs: dict[int, tuple[Any, DataFrame]] = {}
        # An executor's cores, as asked of a session: (session, cores).
        self._cores: tuple[Any, int] | None = None
        # A Connect session's default parallelism: (session id, parallelism).
        self._connect_parallelism: tuple[str, int] | None = None

    @property
    def fn(self) -> StatefulFunction:
        """The function the next batches run (assignable: a new one applies from the next
        batch on, on the same state)."""
        return self._driver.fn

    @fn.setter
    def fn(self, fn: StatefulFunction) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable (key, rows, state), not {type(fn).__name__}")
        self._driver.fn = fn

    def __repr__(self) -> str:
        return (
            f"StatefulRunner({self.job.name!r}/{self.operator.name!r}, "
            f"storage={redact_url(self.storage.url)!r}, max_key_groups={self.operator.max_key_groups})"
        )

    def _schemas(self, spark: Any) -> tuple[StructType, pa.Schema]:
        # Parsing a DDL string is a JVM round trip: once per runner.
        if self._parsed_schemas is None:
            self._parsed_schemas = self._parse_schemas()
        return self._parsed_schemas

    def _parse_schemas(self) -> tuple[StructType, pa.Schema]:
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
        check_output_columns(struct.names, "output_schema", self.operator.name)
        full = StructType([*struct.fields, StructField(RECEIPT_COLUMN, BinaryType(), True)])
        # Timestamp columns are UTC instants: the task's rows carry aware datetimes (naive
        # ones are taken as UTC), which Arrow stores as microseconds since the epoch.
        return full, to_arrow_schema(full, timezone="UTC")

    def process(
        self, df: DataFrame, checkpoint_id: int, *, parallelism: int | None = None
    ) -> DataFrame:
        """Run one batch as checkpoint ``checkpoint_id`` and return its output DataFrame.

        The checkpoint is committed before this returns; the output is cached so that
        using it does not run the batch again.
        """
        from pyspark.storagelevel import StorageLevel

        started = time.perf_counter()
        if (
            not isinstance(checkpoint_id, int)
            or isinstance(checkpoint_id, bool)
            or not 0 <= checkpoint_id < I64
        ):
            raise ValueError(
                f"checkpoint_id must be an int in 0..{I64 - 1} (a signed 64-bit id), "
                f"not {checkpoint_id!r}"
            )
        max_kg = self.operator.max_key_groups
        if parallelism is not None:
            check_parallelism(parallelism, max_kg)
        spark = df.sparkSession
        if TICK_COLUMN in df.columns:  # with_ticks: its rows only make the batch run
            df = df.where(f"{quote(TICK_COLUMN)} IS NULL").drop(TICK_COLUMN)
        if parallelism is not None:
            p = parallelism
        elif self.parallelism is not None:
            p = check_parallelism(self.parallelism, max_kg)
        else:
            p = min(self._default_parallelism(spark), max_kg)
        check_input_columns(df.columns, self.key_columns, self.order_columns, self.operator.name)
        event_time = self.time_options.event_time
        if event_time is not None and event_time not in df.columns:
            raise ValueError(
                f"input of {self.operator.name!r} lacks the event_time column {event_time!r}; "
                f"it has {df.columns}"
            )
        struct, arrow_schema = self._schemas(spark)
        application = application_id(spark)
        if self._storage_checked_for != application:
            check_storage(spark, self.storage.url)
            self._storage_checked_for = application
        if not self._budget_known:
            self._driver.memory_budget = self.memory_budget = default_budget(spark)
            self._budget_known = True
        plan = self._driver.begin(
            checkpoint_id,
            p,
            stage_bytes=self.inline_state_bytes // p,
            output_columns=struct.names,
            use_cache=self.cache_instances,
            use_snapshots=self.snapshot_instances,
            owner=f"{application}/{self._token}",
            snapshot_key=self._snapshot_key,
        )
        partitions = self._partitions(df)
        # An input in one partition runs in one task, which computes each row's key group
        # itself (key_group_hash is Spark's xxhash64 bit for bit) when the key columns are
        # of types both hash alike: no projection to analyse and run in the JVM.
        hash_in_task = partitions <= 1 and all(
            hashes_alike(df.schema[name].dataType) for name in self.key_columns
        )
        routed = df if hash_in_task else with_routing(df, self.key_columns, max_kg, p)
        due_instances = plan.due_instances()
        if due_instances and partitions != 1:
            # Instances with timers or TTL'd entries due run even without rows: one marker
            # row each, which the task drops. (An input in one partition needs none: its
            # one task runs the due instances.)
            routed = due_marker_rows(spark, routed, sorted(due_instances))
        task = _InstanceTask(
            plan,
            arrow_schema,
            due_instances if partitions == 1 else frozenset(),
            self.inline_output_bytes // p,
            hash_keys=hash_in_task,
            require_c=self.require_c,
            processes=self._processes(spark, p) if partitions <= 1 else 1,
        )
        if self._persisted is not None:
            self._persisted.unpersist()
            self._persisted = None
        # A plain lambda: PySpark inspects type hints of the function it is given.
        if partitions <= 1:
            # Small micro-batches often arrive in one partition: run every instance in that
            # task instead of shuffling the rows to one task per instance (the due
            # instances run in it too; an input with no partition gets one from the
            # marker rows). One Python worker then runs every batch and keeps the
            # instances in its memory.
            if partitions == 0 and due_instances:
                routed = routed.coalesce(1)
            result = routed.mapInArrow(lambda it: task.run_partition(it), struct)
        else:
            result = routed.groupBy(INSTANCE_COLUMN).applyInArrow(lambda g, t: task(g, t), struct)
        # Cache the result so that using the output does not run the tasks again, unless
        # the previous batch's output all came back with the receipts (then this one's
        # very likely does too, and caching costs a Spark call a batch). Should a task's
        # output exceed its share after all, using it runs the batch's tasks again: the
        # same rows from the same committed base, nothing committed twice (their writes
        # are never committed, and retention drops them); the next batch caches again.
        # With fewer than two checkpoints retained that base may be gone: always cache.
        cache_result = (
            self._rows_left
            or self.inline_output_bytes == 0
            or (self.retain is not None and self.retain < 2)
        )
        if cache_result:
            result = result.persist(StorageLevel.MEMORY_AND_DISK)
            self._persisted = result
        tasks_started = time.perf_counter()
        # Only the receipt rows (their other columns are null): one DataFrame call less
        # than selecting the column first, each being a JVM round trip and an analysis.
        receipts = result.where(f"{quote(RECEIPT_COLUMN)} IS NOT NULL")
        with job_description(spark, self._description(checkpoint_id, p)):
            packed = [r[-1] for r in receipts.collect()]
        tasks_seconds = time.perf_counter() - tasks_started
        reports: list[tuple[Any, TaskStats]] = []
        inline: list[bytes] = []
        rows_left = False  # whether a task left its output as rows of the result
        for blob in packed:
            receipt, stats, output = unpack_receipt(blob)
            reports.append((receipt, stats))
            if output is None:
                rows_left = True
            elif output:
                inline.append(output)
        if not plan.replay:
            preview = preview_stats(plan, reports, tasks_seconds, started)
            self.job.record(self.operator.name, preview, plan.base)
        batch = self._driver.finish(plan, reports, seconds_tasks=tasks_seconds)
        self.last_batch = batch
        self.history.append(batch)
        if logger.isEnabledFor(logging.INFO):
            logger.info("%s", batch_line(self.job.name, self.operator.name, batch))
        local = self._local_output(spark, struct, arrow_schema, inline)
        self._rows_left = rows_left
        if not rows_left:
            # Every task's output came with its receipt: the cached rows hold receipts only.
            if cache_result:
                result.unpersist()
                self._persisted = None
            return local
        if not cache_result:
            logger.info(
                "checkpoint %s: a task's output exceeded its share of inline_output_bytes "
                "(%s); using the output runs the batch's tasks again, and the next batches "
                "cache their output",
                checkpoint_id,
                self.inline_output_bytes // p,
            )
        rows = result.where(f"{quote(RECEIPT_COLUMN)} IS NULL").drop(RECEIPT_COLUMN)
        return rows.unionByName(local) if inline else rows

    def _local_output(
        self, spark: Any, struct: StructType, arrow_schema: pa.Schema, inline: list[bytes]
    ) -> DataFrame:
        """The outputs the tasks sent with their receipts (Arrow IPC streams), as a local
        DataFrame of the output schema."""
        import pyarrow as pa
        from pyspark.sql.types import StructType

        user = StructType(struct.fields[:-1])
        schema = arrow_schema.remove(len(arrow_schema) - 1)
        tables = []
        for data in inline:
            try:
                table = pa.ipc.open_stream(data).read_all()
            except (pa.ArrowInvalid, OSError) as exc:
                raise CheckpointError(
                    f"a task returned output that is not an Arrow stream: {exc}"
                ) from exc
            if not table.schema.equals(schema):
                raise CheckpointError(
                    f"a task returned output of schema {table.schema}, not {schema}"
                )
            tables.append(table)
        if not tables:
            # An empty local DataFrame of the schema, built once per session and reused:
            # building one is a JVM round trip.
            cached = self._empty_outputs.get(id(spark))
            if cached is not None and cached[0] is spark:
                return cached[1]
        table = pa.concat_tables(tables) if tables else schema.empty_table()
        try:
            local: DataFrame = spark.createDataFrame(table, schema=user)
        except Exception:  # a type Spark's Arrow conversion lacks: build it from rows
            local = spark.createDataFrame(table.to_pylist(), schema=user)
        if not tables:
            self._empty_outputs = {id(spark): (spark, local)}
        return local

    def _description(self, checkpoint_id: int, parallelism: int) -> str:
        """The description of the Spark jobs of a batch (the Spark UI shows it)."""
        return (
            f"objectspace job={self.job.name} operator={self.operator.name} "
            f"checkpoint={checkpoint_id} instances={parallelism}"
        )

    def _processes(self, spark: Any, parallelism: int) -> int:
        """How many processes a task of a batch in one partition runs its instances in."""
        wanted = self.task_processes
        if wanted is None:
            if self.memory_budget is not None:
                return 1  # a budget bounds each worker: helpers would multiply it
            known = self._cores
            if known is None or known[0] is not spark:
                known = self._cores = (spark, executor_cores(spark))
            wanted = known[1]
        return max(1, min(wanted, parallelism))

    def _default_parallelism(self, spark: Any) -> int:
        """Spark's default parallelism; under Spark Connect asked once per session."""
        if not is_connect(spark):
            return default_parallelism(spark)
        session = str(getattr(spark, "session_id", id(spark)))
        known = self._connect_parallelism
        if known is None or known[0] != session:
            known = self._connect_parallelism = (session, default_parallelism(spark))
        return known[1]

    def read_stats(self, last: int | None = None) -> list[BatchStats]:
        """The statistics of the batches this runner's job committed, as recorded with
        their checkpoints (see :func:`objectspace.read_stats`): from any process, the
        client of a Spark Connect session too, where :attr:`last_batch` and
        :attr:`history` stay empty."""
        return read_stats(self.storage, self.job.name, operator=self.operator.name, last=last)

    @staticmethod
    def _partitions(df: DataFrame) -> int:
        """How many partitions ``df`` has (2 when that cannot be known: the shuffle,
        always under Spark Connect, which plans on the server)."""
        if is_connect(df.sparkSession):
            return 2
        try:
            # The planned RDD's partitions, without wrapping it as a Python RDD (df.rdd).
            return int(df._jdf.queryExecution().toRdd().getNumPartitions())
        except Exception:  # e.g. a DataFrame that cannot become an RDD: take the shuffle
            return 2

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


def default_budget(spark: Any) -> int | None:
    """A quarter of ``spark.executor.pyspark.memory`` (the limit of each Python worker's memory)
    when the session sets it, else ``None`` (no budget)."""
    try:
        value = spark.conf.get("spark.executor.pyspark.memory", None)
    except Exception:  # a session that cannot say: no budget
        return None
    if not value:
        return None
    text = str(value).strip().lower()
    if text.isdigit():  # Spark reads a bare number as MiB
        text += "m"
    try:
        return parse_bytes(text, "spark.executor.pyspark.memory") // 4
    except ValueError:
        return None
