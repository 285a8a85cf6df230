"""The executor side: the task that runs the instances of one batch inside a Spark task."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from objectspace.checkpoint import (
    CompactionPolicy,
    Instance,
    Operator,
    Receipt,
    Storage,
)
from objectspace.errors import ObjectSpaceError, ReservedColumnError
from objectspace.operators.state import KeyState
from objectspace.storage.contract import OperatorInfo

if TYPE_CHECKING:
    import pyarrow as pa
from objectspace.spark import cache
from objectspace.spark._common import _INSTANCE, _KG, _RECEIPT, StatefulFunction
from objectspace.spark.stats import TaskStats, _pack_receipt

__all__: list[str] = []

logger = logging.getLogger(__name__)


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
        use_snapshots: bool = False,
        owner: str = "",
        snapshot_key: bytes = b"",
    ) -> None:
        """``owner`` names the runner and application the snapshots belong to;
        ``snapshot_key`` (at least 32 random bytes, the runner's secret) authenticates them:
        without one, no snapshot is written or read."""
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
        self.snapshot_key = bytes(snapshot_key)
        self.use_snapshots = (
            use_cache and use_snapshots and len(self.snapshot_key) >= cache._SNAPSHOT_KEY_BYTES
        )
        self.owner = owner

    def _cache_key(self, index: int) -> tuple[str, str, str, str, int, int]:
        info = self.info
        return (self.owner, self.storage.url, info.job, info.name, index, self.parallelism)

    def _instance(self, index: int, stats: TaskStats) -> Instance:
        storage = self.storage
        instance = cache._CACHE.pop(self._cache_key(index), None) if self.use_cache else None
        if instance is not None:
            saved = instance.pending_save
            if saved is not None and saved[0] == self.base:
                # The driver plans this batch on top of the checkpoint this instance saved:
                # adopt the save if its own writes are the committed ones (then its receipt
                # was the one committed for this index, so no other attempt wrote the key
                # groups it left alone). A save without writes proves nothing: check that
                # no key group it holds changed in the store.
                ids = [w.write_id for w in saved[1]]
                if storage.backend.writes_committed(ids) if ids else self._heads_match(instance):
                    instance.on_saved()
            if instance.base != self.base or instance.pending_save is not None:
                instance = None
        operator = Operator(storage.job(self.info.job), self.info, self.compaction, None)
        if instance is None and self.use_snapshots:
            instance = self._adopt_snapshot(operator, index)
            stats.snapshot = instance is not None
        if instance is None:
            instance = operator.instance(
                index, self.parallelism, checkpoint=-1 if self.base is None else self.base
            )
        else:
            stats.cached = True
        return instance

    def _snapshot_file(self, index: int) -> tuple[str, bytes] | None:
        """The snapshot file of instance ``index`` and the digest of its identity."""
        folder = cache._snapshot_folder()
        if folder is None:
            return None
        info = self.info
        identity = hashlib.sha256(
            repr(
                (
                    self.owner,
                    self.storage.url,
                    info.job,
                    info.name,
                    info.max_key_groups,
                    index,
                    self.parallelism,
                )
            ).encode("utf-8")
        ).digest()
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
        base = self.base
        found = self._snapshot_file(index)
        if base is None or found is None:
            return None
        path, identity = found
        data = cache._read_snapshot(path, identity, base, self.snapshot_key)
        if data is None:
            return None
        try:
            instance = Instance.from_snapshot(operator, data)
            saved = instance.pending_save
            if (
                instance.index != index
                or instance.parallelism != self.parallelism
                or saved is None
                or saved[0] != base
                or any(w.version != base for w in saved[1])
            ):
                return None
            if not self._heads_match(instance):
                return None
        except Exception as exc:  # a snapshot that does not fit: restore instead
            logger.debug("instance snapshot %s not adopted: %r", path, exc)
            return None
        instance.on_saved()
        logger.debug("instance %s adopted from snapshot %s (checkpoint %s)", index, path, base)
        return instance

    def _heads_match(self, instance: Instance) -> bool:
        """Whether, for every key group ``instance`` holds, the store's restore chain as of
        the planned base ends with the write its state ends with once its last save is
        acknowledged (:meth:`Instance.heads`)."""
        heads = instance.heads()
        if heads.keys() != instance.loaded().keys() or self.base is None:
            return False
        if not heads:
            return True
        info = self.info
        chains = self.storage.backend.chains(
            info.job, info.name, range(min(heads), max(heads) + 1), self.base
        )
        for key_group, head in heads.items():
            chain = chains.get(key_group)
            if (None if not chain else (chain[-1].write_id, chain[-1].version)) != head:
                return False
        return True

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
                    path, identity, self.checkpoint_id, instance.to_snapshot(), self.snapshot_key
                )
        except FileNotFoundError:
            pass
        except Exception as exc:
            logger.debug("instance snapshot %s not written: %r", path, exc)
            with contextlib.suppress(OSError):
                os.unlink(path)  # an older snapshot need not stay in its place

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
        restore = time.perf_counter() - started
        cache_key = self._cache_key(index)
        stayed = cache._STAYED.pop(cache_key, 0) + 1 if stats.cached and not stats.snapshot else 0
        rows_read = instance.rows_read
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
        restore += time.perf_counter() - t0
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
                if _RECEIPT in row:
                    raise ReservedColumnError(
                        f"operator {self.info.name!r}: output row of key {key!r} has the "
                        f"column {_RECEIPT!r}, which objectspace reserves for its receipts "
                        "(drop it from the rows the function yields)"
                    )
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
        stats.rows_read = instance.rows_read - rows_read
        t0 = time.perf_counter()
        receipt: Receipt | None = None
        if not self.replay:
            receipt = instance.save(self.checkpoint_id)
        stats.seconds_save = time.perf_counter() - t0
        if self.use_cache and not self.replay:
            cache._CACHE[cache_key] = instance
            cache._STAYED[cache_key] = stayed
            if self.use_snapshots:
                t0 = time.perf_counter()
                self._write_snapshot(index, instance, stats, stayed >= cache._SKIP_SNAPSHOT_AFTER)
                stats.seconds_snapshot = time.perf_counter() - t0
        stats.seconds_total = time.perf_counter() - started
        stats.seconds_process = (
            stats.seconds_total - stats.seconds_save - stats.seconds_snapshot - restore
        )
        out.append({_RECEIPT: _pack_receipt(receipt, stats)})
        return out
