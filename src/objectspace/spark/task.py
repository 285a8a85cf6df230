"""The executor side: the task that runs the instances of one batch inside a Spark task.

The task gets one frozen :class:`~objectspace.engine.TaskPlan`, turns Arrow rows into
dicts, gets each instance (from the worker's cache, a snapshot file, or storage) and runs it
with :func:`~objectspace.engine.run_instance`, the loop :func:`objectspace.testing.simulate`
runs too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from objectspace.checkpoint import Instance, Operator, Receipt
from objectspace.collections import columns_from_rows, rows_from_columns, utc_micros
from objectspace.collector import gc_paused, keep_frozen, keeps_frozen
from objectspace.engine import (
    INSTANCE_COLUMN,
    KEY_GROUP_COLUMN,
    RECEIPT_COLUMN,
    KeyColumns,
    OrderedRows,
    Residency,
    TaskPlan,
    TaskStats,
    adopt,
    finish_task,
    group_columns,
    group_rows,
    heads_match,
    instance_identity,
    order_rows,
    route_rows,
    run_instance,
    takes_columns,
)
from objectspace.engine.residency import discard
from objectspace.errors import ObjectSpaceError
from objectspace.keygroups import KeyGroups
from objectspace.spark import cache
from objectspace.spark.helpers import as_table, ipc_bytes, run_split
from objectspace.spark.preflight import require_c_check
from objectspace.spark.receipts import pack_receipt
from objectspace.spark.routing import DUE_MARK, route_table

if TYPE_CHECKING:
    import pyarrow as pa

__all__: list[str] = []

logger = logging.getLogger(__name__)


class _InstanceTask:
    """The function ``applyInArrow`` runs once per instance: picklable, no Spark inside.

    ``plan`` says what to run (see :class:`~objectspace.engine.TaskPlan`);
    ``output_schema`` is the Arrow schema of the output (with the receipt column). The
    per-instance loop is :func:`~objectspace.engine.run_instance`; this class
    adds the worker's instance cache and snapshot files, and Arrow at its edges."""

    def __init__(
        self,
        plan: TaskPlan,
        output_schema: pa.Schema,
        due: frozenset[int] = frozenset(),
        inline_bytes: int = 0,
        *,
        hash_keys: bool = False,
        require_c: bool = False,
        processes: int = 1,
    ) -> None:
        self.plan = plan
        # How many processes run_partition runs the instances in (this worker and its
        # helpers: see objectspace.spark.helpers).
        self.processes = processes
        # Whether a task on the pure-Python collections fails (the driver runs on C).
        self.require_c = require_c
        self.output_schema = output_schema
        # Instances to run in run_partition even without rows (timers or TTL due).
        self.due = due
        # An instance's output of at most this many bytes (an Arrow IPC stream) travels in
        # its receipt row instead of as rows of the result (0: never).
        self.inline_bytes = inline_bytes
        # Whether run_partition computes each row's key group and instance (the rows come
        # without the columns), as the driver's expression would.
        self.hash_keys = hash_keys
        self.use_snapshots = (
            plan.use_cache
            and plan.use_snapshots
            and len(plan.snapshot_key) >= cache._SNAPSHOT_KEY_BYTES
        )

    def _cache_key(self, index: int) -> cache.CacheKey:
        plan = self.plan
        info = plan.info
        return (plan.owner, plan.storage.url, info.job, info.name, index, plan.parallelism)

    def _instance(self, index: int, stats: TaskStats) -> Instance:
        plan = self.plan
        instance = cache.WORKER.take(self._cache_key(index)) if plan.use_cache else None
        if instance is not None and not adopt(plan, instance):
            discard(instance)  # stale: freed now, not by a collection of the whole heap
            instance = None
        if instance is None and self.use_snapshots:
            instance = self._adopt_snapshot(plan.operator(), index)
            stats.snapshot = instance is not None
        if instance is None:
            instance = plan.restore(index)
        else:
            stats.cached = True
        return instance

    def _residency(self) -> Residency:
        """This worker's :class:`Residency` for the plan's memory budget."""
        budget = self.plan.memory_budget
        assert budget is not None
        worker = cache.WORKER
        if worker.residency is None or worker.residency.requested != budget:
            if worker.residency is not None:
                worker.residency.close()
            worker.residency = Residency(budget)
        return worker.residency

    def _snapshot_file(self, index: int) -> tuple[str, bytes] | None:
        """The snapshot file of instance ``index`` and the digest of its identity."""
        folder = cache.WORKER.snapshot_folder()
        if folder is None:
            return None
        plan = self.plan
        identity = instance_identity(plan, index, owner=True)
        return os.path.join(folder, identity.hex()[:40] + ".snapshot"), identity

    def _adopt_snapshot(self, operator: Operator, index: int) -> Instance | None:
        """The instance another worker saved, if it is exactly the state this batch runs on.

        Why adopting it is safe. The snapshot holds an instance right after its
        ``save(c)``: per loaded key group its space (the state restored or adopted as of
        the instance's previous base, plus the edits of batch ``c`` in frozen edit pages),
        the save's pending writes, and the "head" of every key group: the (write id,
        version) of the newest write its state includes (``None``: none). It is adopted
        only when (1) ``c`` is the base the driver planned, the checkpoint this batch
        runs on, and (2) for every key group it holds, the store's restore chain as of
        that base ends with the write the snapshot expects: the save's own write for the
        key groups it wrote (so that write is committed, at version ``c``), the head it
        had for the others. A key group's committed chain as of a checkpoint determines
        its state, and the snapshot's state of a key group is, by construction, the state
        of a chain ending with that write: restored from it, or written by the save. So
        the adopted spaces equal what a restore would give, key group by key group; a
        save whose writes were not committed (a failed or retried batch, a speculative
        attempt that lost, a replay), an offline compaction or retention that changed a
        chain, or another attempt that wrote a key group this one left alone, all fail
        (2), and the batch restores from storage instead. Write ids are unique in a store,
        and the version is compared too; the file is keyed by the Spark application (its
        SparkFiles folder, which Spark deletes at the end), the runner (a random token),
        the storage URL, job, operator, key groups and parallelism, so a store deleted and
        re-created at the same URL (write ids restart at 1) would have to repeat the
        same ids at the same versions for every key group, in the same runner, to be
        mistaken for the old one. A file that is missing, truncated, corrupt, not
        written under this runner's key (an HMAC covers it, checked before unpickling) or
        of another identity is a miss, never an error.
        """
        base = self.plan.base
        found = self._snapshot_file(index)
        if base is None or found is None:
            return None
        path, identity = found
        data = cache._read_snapshot(path, identity, base, self.plan.snapshot_key)
        if data is None:
            return None
        try:
            instance = Instance.from_snapshot(operator, data)
            saved = instance.pending_save
            if (
                instance.index != index
                or instance.parallelism != self.plan.parallelism
                or saved is None
                or saved.checkpoint_id != base
                or any(w.version != base for w in saved.writes)
            ):
                return None
            staged_ids = heads_match(self.plan, instance)
            if staged_ids is None:
                return None
        except Exception as exc:  # a snapshot that does not fit: restore instead
            logger.debug("instance snapshot %s not adopted: %r", path, exc)
            return None
        instance.on_saved(staged_ids)
        logger.debug("instance %s adopted from snapshot %s (checkpoint %s)", index, path, base)
        return instance

    def _write_snapshot(
        self, index: int, instance: Instance, stats: TaskStats, skip: bool = False
    ) -> None:
        """Leave the saved instance for the next worker (or, ``skip``, only remove the
        previous snapshot, which is stale now); never fails the task."""
        found = self._snapshot_file(index)
        if found is None:
            return
        path, identity = found
        try:
            if skip:
                os.unlink(path)
            else:
                stats.snapshot_bytes = cache._write_snapshot(
                    path,
                    identity,
                    self.plan.checkpoint_id,
                    instance.to_snapshot(),
                    self.plan.snapshot_key,
                )
        except FileNotFoundError:
            pass
        except Exception as exc:
            logger.debug("instance snapshot %s not written: %r", path, exc)
            with contextlib.suppress(OSError):
                os.unlink(path)  # an older snapshot need not stay in its place

    def __call__(self, group: tuple[Any, ...], table: pa.Table) -> pa.Table:
        """``applyInArrow``: all rows of one instance."""
        return self._result(int(group[0].as_py()), table.drop_columns([INSTANCE_COLUMN]))

    def run_partition(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``mapInArrow`` on a batch that Spark holds in one partition: every instance of
        the batch runs in this task, one after the other, with no shuffle before."""
        plan = self.plan
        by_instance: dict[int, Any]
        if self.hash_keys and len(plan.key_columns) == 1:
            # Each instance's rows as an Arrow table: the rows a helper runs are made dicts
            # there, not here.
            key_groups = KeyGroups(plan.info.max_key_groups)
            by_instance = route_table(
                batches, plan.key_columns[0], key_groups, plan.parallelism, self.due
            )
        else:
            rows: list[dict[str, Any]] = []
            for batch in batches:
                rows.extend(batch.to_pylist())
            if self.hash_keys:
                key_groups = KeyGroups(plan.info.max_key_groups)
                by_instance = route_rows(
                    rows, plan.key_columns, key_groups, plan.parallelism, self.due
                )
            else:
                by_instance = {index: [] for index in self.due}
                for row in rows:
                    by_instance.setdefault(row.pop(INSTANCE_COLUMN), []).append(row)
        if self.processes > 1 and any(index % self.processes for index in by_instance):
            results = run_split(
                self.processes,
                by_instance,
                self._pickled,
                self._result,
                cache.WORKER.snapshot_folder() if self.use_snapshots else None,
            )
            for _, table in results:
                yield from table.to_batches()
            return
        for index in sorted(by_instance):
            yield from self._result(index, by_instance[index]).to_batches()

    def _columns(self, table: pa.Table, marks: bool, stats: TaskStats) -> KeyColumns | None:
        """An instance's rows as :class:`~objectspace.engine.KeyColumns`, for a function
        that takes columns (``None``: it takes rows, or the table does not have what the
        columns need), sorted here by key group, key and ``order_by`` (Arrow's sort)."""
        import pyarrow as pa

        plan = self.plan
        needs = takes_columns(plan)
        if needs is None:
            return None
        assert plan.time is not None and plan.time.options.event_time is not None
        names = {KEY_GROUP_COLUMN, plan.key_columns[0], plan.time.options.event_time, *needs}
        if not names.union(plan.order_columns).issubset(table.column_names):
            return None  # the rows path names what is missing
        sorted_runs = _sorted_runs(table, plan, marks)
        if sorted_runs is None:
            return None  # columns Arrow does not sort or compare: the rows path
        table, runs = sorted_runs
        columns = {name: table.column(name).to_pylist() for name in names}
        full = table.drop_columns([KEY_GROUP_COLUMN])

        def rows_at(positions: list[int]) -> list[dict[str, Any]]:
            rows: list[dict[str, Any]] = full.take(pa.array(positions, pa.int64())).to_pylist()
            return rows

        return group_columns(plan, columns, needs, stats, runs, rows_at, KEY_GROUP_COLUMN)

    def _ordered_rows(self, table: pa.Table, marks: bool) -> OrderedRows | None:
        """An instance's rows per (key group, key) for a function that takes rows, what
        :func:`~objectspace.engine.group_rows` and then :func:`~objectspace.engine.order_rows`
        give, from the table sorted by Arrow (key group, key, ``order_by``): the rows of a
        key are one run of the sorted rows, and only a run whose first ``order_by`` column
        does not rise strictly (ties, nulls, NaN) is ordered by ``order_rows`` (``None``: one
        key column of a type whose Arrow order and equality are Python's, and an
        ``order_by``, are needed)."""
        import pyarrow as pa

        plan = self.plan
        if len(plan.key_columns) != 1 or not plan.order_columns:
            return None
        key_column = plan.key_columns[0]
        names = {KEY_GROUP_COLUMN, key_column, *plan.order_columns}
        if not names.issubset(table.column_names):
            return None
        kind = table.schema.field(key_column).type
        if not (
            pa.types.is_integer(kind)
            or pa.types.is_string(kind)
            or pa.types.is_large_string(kind)
            or pa.types.is_binary(kind)
            or pa.types.is_large_binary(kind)
            or pa.types.is_boolean(kind)
        ):
            return None  # (floats: -0.0 and 0.0 are one key spelt two ways)
        sorted_runs = _sorted_runs(table, plan, marks)
        if sorted_runs is None:
            return None  # columns Arrow does not sort or compare: group_rows sorts them
        table, (starts, unordered) = sorted_runs
        key_groups = table.column(KEY_GROUP_COLUMN).to_pylist()
        rows = _table_rows(table.drop_columns([KEY_GROUP_COLUMN]))
        groups = OrderedRows()
        for run, (start, stop) in enumerate(pairwise([*starts, len(rows)])):
            key_rows = rows[start:stop]
            if run in unordered:
                order_rows(key_rows, plan.order_columns)
            groups[(key_groups[start], key_rows[0][key_column])] = key_rows
        groups.time_range = _time_range(table, plan)
        return groups

    def _pickled(self) -> bytes:
        """This task as its helper processes get it (as Spark shipped it: cloudpickle)."""
        from pyspark import cloudpickle

        return bytes(cloudpickle.dumps(self))  # type: ignore[no-untyped-call]

    def _table(self, out: list[dict[str, Any]]) -> pa.Table:
        import pyarrow as pa

        schema = self.output_schema
        try:
            if not out:
                return schema.empty_table()
            # What Table.from_pylist does, its per-row passes in C, and the timestamp
            # columns (naive or UTC datetimes) handed to Arrow as microseconds.
            arrays = []
            for field, values in zip(
                schema, columns_from_rows(out, tuple(schema.names)), strict=True
            ):
                kind = field.type
                if pa.types.is_timestamp(kind) and kind.unit == "us":
                    micros = utc_micros(values)
                    if micros is not None:
                        arrays.append(pa.array(micros, pa.int64()).cast(kind))
                        continue
                arrays.append(pa.array(values, type=kind))
            return pa.Table.from_arrays(arrays, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise ObjectSpaceError(
                f"operator {self.plan.info.name!r}: output rows do not fit output_schema "
                f"{self.output_schema.remove(len(self.output_schema) - 1)}: {exc}"
            ) from exc

    def _result(self, index: int, rows: Any, helper: bool = False) -> pa.Table:
        """Run instance ``index`` over its rows (dicts, an Arrow table or IPC stream): the
        result's rows, the output then the receipt, or the receipt row alone, carrying the
        output as an Arrow IPC stream (``b""`` for none), when that stream is at most
        ``inline_bytes``. ``helper``: this process is a helper of the task's worker (see
        :mod:`objectspace.spark.helpers`)."""
        import pyarrow as pa

        out, receipt, stats = self._run(index, rows)
        stats.helper = helper
        table = self._table(out)
        if self.inline_bytes > 0:
            data = b""
            if table.num_rows:
                data = ipc_bytes(table.drop_columns([RECEIPT_COLUMN]))
            if len(data) <= self.inline_bytes:
                return self._table([{RECEIPT_COLUMN: pack_receipt(receipt, stats, data)}])
        return pa.concat_tables(
            [table, self._table([{RECEIPT_COLUMN: pack_receipt(receipt, stats)}])]
        )

    def run_instance(self, index: int, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run instance ``index`` over its rows as the shuffle delivers them (with their key
        group and instance columns); the output rows, then the receipt row."""
        for row in rows:
            del row[INSTANCE_COLUMN]
        out, receipt, stats = self._run(index, rows)
        out.append({RECEIPT_COLUMN: pack_receipt(receipt, stats)})
        return out

    def _run(self, index: int, rows: Any) -> tuple[list[dict[str, Any]], Receipt | None, TaskStats]:
        """Run instance ``index`` over its rows (dicts, an Arrow table or IPC stream): its
        output rows, receipt and stats."""
        require_c_check(self.require_c)
        if not keeps_frozen() and _in_spark_task():
            keep_frozen()  # a worker holds the state between tasks: out of its collections
        plan = self.plan
        started = time.perf_counter()
        stats = TaskStats(index=index)
        residency = None if plan.memory_budget is None else self._residency()
        if residency is not None:
            instance = residency.instance(plan, index, stats)
        else:
            instance = self._instance(index, stats)
        restore = time.perf_counter() - started
        cache_key = self._cache_key(index)
        worker = cache.WORKER
        stayed = worker.next_streak(cache_key, stats.cached and not stats.snapshot)

        marks = plan.time is not None and bool(plan.time.due) and not self.hash_keys
        groups: dict[tuple[int, Any], list[dict[str, Any]]] | KeyColumns | None = None
        # Grouping makes a list or dict per row or key and no cycles: without the
        # collections that would walk the whole state meanwhile.
        with gc_paused():
            if not isinstance(rows, list):
                table = as_table(rows)
                groups = self._columns(table, marks, stats)
                if groups is None:
                    groups = self._ordered_rows(table, marks)
                if groups is None:
                    rows = _table_rows(table)
            if groups is None:
                if marks:
                    # The driver's marker rows (none when the task routes the rows itself).
                    rows = [r for r in rows if r[KEY_GROUP_COLUMN] != DUE_MARK]
                groups = group_rows(rows, plan.key_columns, KEY_GROUP_COLUMN)
        out, receipt = run_instance(plan, instance, groups, stats, restore)
        if residency is not None:
            residency.keep(plan, index, instance, stats)
        elif plan.use_cache and not plan.replay:
            worker.keep(cache_key, instance, stayed)
            if self.use_snapshots:
                t0 = time.perf_counter()
                self._write_snapshot(index, instance, stats, stayed >= cache._SKIP_SNAPSHOT_AFTER)
                stats.seconds_snapshot = time.perf_counter() - t0
        finish_task(stats, started)
        return out, receipt, stats


def _table_rows(table: pa.Table) -> list[dict[str, Any]]:
    """``table.to_pylist()``: the same dicts, made from its columns' lists in one C pass
    (``to_pylist`` makes them with a Python comprehension per row)."""
    if table.num_columns == 0:
        rows: list[dict[str, Any]] = table.to_pylist()
        return rows
    return rows_from_columns(tuple(table.column_names), [c.to_pylist() for c in table.columns])


def _time_range(table: pa.Table, plan: TaskPlan) -> tuple[int, int] | None:
    """The smallest and largest event time of ``table``'s rows when its event-time column
    is a signed integer column without nulls (each row's event time an int), else ``None``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = None if plan.time is None else plan.time.options.event_time
    if column is None or column not in table.column_names or not table.num_rows:
        return None
    values = table.column(column)
    if not pa.types.is_signed_integer(values.type) or values.null_count:
        return None
    span = pc.min_max(values)
    return span["min"].as_py(), span["max"].as_py()


def _in_spark_task() -> bool:
    """Whether this process runs a Spark task now (a Python worker, or its helper)."""
    try:
        from pyspark import TaskContext
    except ImportError:  # (a process without pyspark runs no Spark task)
        return False
    return TaskContext.get() is not None


def _sorted_runs(
    table: pa.Table, plan: TaskPlan, marks: bool
) -> tuple[pa.Table, tuple[list[int], set[int]]] | None:
    """An instance's rows (``table``, without the driver's marker rows when ``marks``)
    sorted by key group, key and ``order_by`` (nulls last, Arrow's default), and their
    runs (:func:`_runs`); ``None`` for columns Arrow does not sort or compare."""
    import pyarrow as pa
    import pyarrow.compute as pc

    key_column = plan.key_columns[0]
    try:
        if marks:
            table = table.filter(pc.not_equal(table.column(KEY_GROUP_COLUMN), DUE_MARK))
        order = pc.sort_indices(
            table,
            sort_keys=[
                (KEY_GROUP_COLUMN, "ascending"),
                (key_column, "ascending"),
                *((c, "ascending") for c in plan.order_columns),
            ],
        )
        table = table.take(order)
        runs = _runs(
            table.column(KEY_GROUP_COLUMN),
            table.column(key_column),
            table.column(plan.order_columns[0]),
        )
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    return table, runs


def _runs(
    groups: pa.ChunkedArray, keys: pa.ChunkedArray, order: pa.ChunkedArray
) -> tuple[list[int], set[int]]:
    """Of rows sorted by key group, key and ``order_by``: the row number where each run of
    one (key group, key) starts, and the runs whose first ``order_by`` column does not
    rise strictly (equal values, nulls), as :func:`~objectspace.engine.group_columns`
    takes them."""
    import bisect

    import pyarrow.compute as pc

    n = len(groups)
    if n == 0:
        return [], set()

    def pairs(column: pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
        whole = column.combine_chunks()
        return whole.slice(1), whole.slice(0, n - 1)

    def changed(column: pa.ChunkedArray) -> pa.Array:
        after, before = pairs(column)
        differ = pc.not_equal(after, before)
        if column.null_count:  # null against null is one key; null against a value is not
            differ = pc.if_else(
                pc.is_null(differ), pc.not_equal(pc.is_null(after), pc.is_null(before)), differ
            )
        return differ

    change = pc.or_(changed(groups), changed(keys))
    starts = [0, *(i + 1 for i in pc.indices_nonzero(change).to_pylist())]
    after, before = pairs(order)
    rising = pc.fill_null(pc.greater(after, before), False)
    flat = pc.indices_nonzero(pc.and_(pc.invert(change), pc.invert(rising))).to_pylist()
    unordered = {bisect.bisect_right(starts, i + 1) - 1 for i in flat}
    return starts, unordered
