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

Restoring every instance at every batch would dominate small micro-batches, so a Python
worker keeps the instances it ran (``_CACHE``), and after each save writes a snapshot of
the instance to a local file that the other Python workers of the machine read: Spark hands
tasks to idle workers in turn, so the worker that runs an instance next is often not the one
that ran it last. A cached instance or a snapshot is adopted only when it is exactly the
committed state the batch runs on (see :meth:`_InstanceTask._adopt_snapshot`); anything else
is restored from storage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import hmac
import logging
import os
import pickle
import secrets
import stat
import tempfile
import time
import uuid
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
from objectspace.errors import CheckpointError, ObjectSpaceError, ReservedColumnError
from objectspace.keygroups import check_max_key_groups, spark_instance_expr
from objectspace.operators.state import KeyState
from objectspace.spark_state import read_state
from objectspace.storage.urls import redact_url
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
RESERVED_COLUMNS = (_KG, _INSTANCE, _RECEIPT)
"""Column names the runner adds to a batch: an input, an output row or an output_schema
that uses one is refused with :class:`~objectspace.errors.ReservedColumnError`."""

# Instances kept by a Python worker between batches:
# (owner, url, job, operator, index, p) → Instance, the owner naming the application and runner.
_CACHE: dict[tuple[str, str, str, str, int, int], Instance] = {}

# Snapshot files: this header, the digest of the instance's identity (application, runner,
# storage, job, operator, max_key_groups, index, parallelism), an HMAC-SHA256 of everything
# else keyed with the runner's secret, the checkpoint the instance saved (8 bytes), then the
# pickled Instance.to_snapshot(). One file per identity, replaced atomically. The key is made
# on the driver and reaches the tasks only inside the task object, never on disk: a file
# whose MAC does not verify is never unpickled.
_SNAPSHOT_MAGIC = b"objectspace instance snapshot 3\n"
_DIGEST = 32
_SNAPSHOT_KEY_BYTES = 32
# A worker that ran an instance from its own memory this many batches in a row expects to run
# it again and writes no snapshot (the workers do not take turns).
_SKIP_SNAPSHOT_AFTER = 2
# Per cached instance: how many batches in a row this worker ran it from its memory.
_STAYED: dict[tuple[str, str, str, str, int, int], int] = {}
# Where snapshot files go when not in a Spark worker (None: a private temporary folder).
_SNAPSHOT_ROOT: str | None = None


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
    """What one instance's task did in one batch.

    ``cached``: the instance was not restored from storage but adopted from this worker's
    memory or (``snapshot``) from a snapshot file another worker wrote. ``seconds_restore``
    covers getting the instance (adopting, or restoring its key groups);
    ``seconds_snapshot`` writing its snapshot after the save (``snapshot_bytes``).
    """

    index: int = 0
    keys: int = 0
    rows_in: int = 0
    rows_out: int = 0
    rows_read: int = 0
    cached: bool = False
    snapshot: bool = False
    snapshot_bytes: int = 0
    seconds_restore: float = 0.0
    seconds_process: float = 0.0
    seconds_save: float = 0.0
    seconds_snapshot: float = 0.0
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
    snapshot_instances: int = 0
    seconds_total: float = 0.0
    seconds_commit: float = 0.0
    seconds_tasks: float = 0.0
    seconds_restore: float = 0.0
    seconds_process: float = 0.0
    seconds_save: float = 0.0
    seconds_snapshot: float = 0.0
    tasks: list[TaskStats] = field(default_factory=list)


def _columns(value: str | Sequence[str], what: str) -> tuple[str, ...]:
    cols = (value,) if isinstance(value, str) else tuple(value)
    if not cols or not all(isinstance(c, str) and c for c in cols):
        raise ValueError(
            f"{what} must be a column name or a non-empty list of names, not {value!r}"
        )
    return cols


def _check_parallelism(parallelism: object, max_key_groups: int) -> int:
    if type(parallelism) is not int or not 1 <= parallelism <= max_key_groups:
        raise ValueError(
            f"parallelism must be an int in 1..{max_key_groups} (max_key_groups), "
            f"not {parallelism!r}"
        )
    return parallelism


def _quote(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"


# -- instance snapshots shared by the Python workers of a machine ---------------------------


def _private_folder(path: str) -> bool:
    """Create ``path`` (mode 0700) if missing; whether it is a directory, not a link, owned
    by this user and closed to everyone else (the files in it are unpickled)."""
    getuid = getattr(os, "getuid", None)
    if getuid is None:
        return False
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == getuid() and not st.st_mode & 0o077


def _snapshot_folder() -> str | None:
    """The folder of snapshot files, or ``None`` when no private one can be had.

    In a Spark worker: under the application's SparkFiles directory, which the workers of an
    executor share and Spark deletes when the application ends. Elsewhere (a task run
    directly): ``_SNAPSHOT_ROOT`` or a private folder in the temporary directory.
    """
    root = _SNAPSHOT_ROOT
    if root is None:
        try:
            from pyspark import SparkFiles

            if SparkFiles._is_running_on_worker:
                root = SparkFiles._root_directory
        except Exception:  # no pyspark, or an internal that moved: use the fallback
            root = None
    if root:
        path = os.path.join(root, "objectspace-instances")
    else:
        getuid = getattr(os, "getuid", None)
        if getuid is None:
            return None
        path = os.path.join(tempfile.gettempdir(), f"objectspace-instances-{getuid()}")
    return path if _private_folder(path) else None


def _snapshot_mac(key: bytes, identity: bytes, body: bytes | memoryview) -> bytes:
    mac = hmac.new(key, _SNAPSHOT_MAGIC, hashlib.sha256)
    mac.update(identity)
    mac.update(body)
    return mac.digest()


def _write_snapshot(path: str, identity: bytes, checkpoint_id: int, data: Any, key: bytes) -> int:
    """Pickle ``data``, the instance that saved ``checkpoint_id``, into ``path`` atomically
    (a temporary file, then ``os.replace``), authenticated with ``key``; returns the file's
    size."""
    if len(key) < _SNAPSHOT_KEY_BYTES:
        raise ValueError("an instance snapshot needs a key of at least 32 bytes")
    body = checkpoint_id.to_bytes(8, "big", signed=True) + pickle.dumps(
        data, pickle.HIGHEST_PROTOCOL
    )
    digest = _snapshot_mac(key, identity, body)
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".snapshot", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_SNAPSHOT_MAGIC + identity + digest)
            f.write(body)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return len(_SNAPSHOT_MAGIC) + 2 * _DIGEST + len(body)


def _read_snapshot(
    path: str, identity: bytes, checkpoint_id: int, key: bytes
) -> dict[str, Any] | None:
    """The data :func:`_write_snapshot` wrote with ``key`` for ``identity`` and
    ``checkpoint_id``, or ``None`` when the file is missing, unreadable, of another identity
    or checkpoint, truncated, corrupt or not written with ``key``. Only a file whose
    HMAC verifies is unpickled."""
    if len(key) < _SNAPSHOT_KEY_BYTES:
        return None
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    head = len(_SNAPSHOT_MAGIC)
    start = head + 2 * _DIGEST
    if (
        len(blob) <= start + 8
        or blob[:head] != _SNAPSHOT_MAGIC
        or blob[head : head + _DIGEST] != identity
        or blob[start : start + 8] != checkpoint_id.to_bytes(8, "big", signed=True)
    ):
        return None
    body = memoryview(blob)[start:]
    if not hmac.compare_digest(_snapshot_mac(key, identity, body), blob[head + _DIGEST : start]):
        logger.warning(
            "instance snapshot %s does not verify (not written by this runner, or "
            "damaged): ignored, the instance is restored from storage",
            path,
        )
        return None
    payload = body[8:]
    # Unpickling creates thousands of objects: without the cyclic collector running over
    # them meanwhile it takes about half the time (none of them is garbage yet).
    collecting = gc.isenabled()
    gc.disable()
    try:
        data = pickle.loads(payload)
    except Exception:
        return None
    finally:
        if collecting:
            gc.enable()
    return data if isinstance(data, dict) else None


# -- receipts: how a task's receipt and stats reach the driver --------------------------------

_RECEIPT_VERSION = 1
_RECEIPT_INTS = ("index", "parallelism", "checkpoint_id", "bytes_written", "rows_written")
_I64 = 1 << 63


def _pack_receipt(receipt: Receipt | None, stats: TaskStats) -> bytes:
    """The receipt row's bytes: msgpack of plain fields only (never a pickle: the driver
    decodes them, and a row's bytes must not be able to run code there)."""
    import msgpack

    packed_receipt = None
    if receipt is not None:
        packed_receipt = dataclasses.asdict(receipt)
        packed_receipt["writes"] = [list(w) for w in receipt.writes]
    return bytes(
        msgpack.packb(
            {"v": _RECEIPT_VERSION, "receipt": packed_receipt, "stats": dataclasses.asdict(stats)},
            use_bin_type=True,
        )
    )


def _is_int(value: object) -> bool:
    return type(value) is int and -_I64 <= value < _I64


def _unpack_receipt(blob: object) -> tuple[Receipt | None, TaskStats]:
    """Decode and check what :func:`_pack_receipt` wrote; :class:`CheckpointError` for
    anything else (no field of another type, no field missing or extra)."""
    import msgpack

    def bad(why: str) -> CheckpointError:
        return CheckpointError(f"a task returned a malformed receipt row ({why})")

    if not isinstance(blob, bytes | bytearray) or len(blob) > 1 << 24:
        raise bad(f"{type(blob).__name__} of {len(blob) if isinstance(blob, bytes) else '?'}")
    try:
        data = msgpack.unpackb(
            bytes(blob), raw=False, strict_map_key=True, use_list=True, max_ext_len=0
        )
    except Exception as exc:
        raise bad(f"not msgpack: {type(exc).__name__}") from exc
    if not isinstance(data, dict) or set(data) != {"v", "receipt", "stats"}:
        raise bad("not a receipt map")
    if data["v"] != _RECEIPT_VERSION:
        raise bad(f"version {data['v']!r}")
    raw_stats = data["stats"]
    fields = {f.name: f for f in dataclasses.fields(TaskStats)}
    if not isinstance(raw_stats, dict) or set(raw_stats) != set(fields):
        raise bad("stats fields")
    for name, value in raw_stats.items():
        default: object = fields[name].default
        kind: type = type(default)
        ok = (
            type(value) is bool
            if kind is bool
            else _is_int(value)
            if kind is int
            else type(value) in (float, int) and not isinstance(value, bool)
        )
        if not ok:
            raise bad(f"stats field {name}={value!r}")
    stats = TaskStats(**raw_stats)
    raw = data["receipt"]
    if raw is None:
        return None, stats
    names = {f.name for f in dataclasses.fields(Receipt)}
    if not isinstance(raw, dict) or set(raw) != names:
        raise bad("receipt fields")
    if not all(isinstance(raw[n], str) for n in ("job", "operator", "attempt")):
        raise bad("receipt names")
    if not all(_is_int(raw[n]) for n in _RECEIPT_INTS):
        raise bad("receipt numbers")
    if raw["base"] is not None and not _is_int(raw["base"]):
        raise bad(f"receipt base {raw['base']!r}")
    writes = raw["writes"]
    if not isinstance(writes, list) or not all(
        isinstance(w, list) and len(w) == 2 and _is_int(w[0]) and _is_int(w[1]) for w in writes
    ):
        raise bad("receipt writes")
    raw["writes"] = tuple((w[0], w[1]) for w in writes)
    return Receipt(**raw), stats


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
            use_cache and use_snapshots and len(self.snapshot_key) >= _SNAPSHOT_KEY_BYTES
        )
        self.owner = owner

    def _cache_key(self, index: int) -> tuple[str, str, str, str, int, int]:
        info = self.info
        return (self.owner, self.storage.url, info.job, info.name, index, self.parallelism)

    def _instance(self, index: int, stats: TaskStats) -> Instance:
        storage = self.storage
        instance = _CACHE.pop(self._cache_key(index), None) if self.use_cache else None
        if instance is not None:
            saved = instance._saved
            if saved is not None and saved[0] == self.base:
                # The driver plans this batch on top of the checkpoint this instance saved:
                # adopt the save if its own writes are the committed ones (then its receipt
                # was the one committed for this index, so no other attempt wrote the key
                # groups it left alone). A save without writes proves nothing: check that
                # no key group it holds changed in the store.
                ids = [w.write_id for w in saved[1]]
                if storage.backend.writes_committed(ids) if ids else self._heads_match(instance):
                    instance.on_saved()
            if instance.base != self.base or instance._saved is not None:
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
        folder = _snapshot_folder()
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
        data = _read_snapshot(path, identity, base, self.snapshot_key)
        if data is None:
            return None
        try:
            instance = Instance.from_snapshot(operator, data)
            saved = instance._saved
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
        return instance

    def _heads_match(self, instance: Instance) -> bool:
        """Whether, for every key group ``instance`` holds, the store's restore chain as of
        the planned base ends with the write its state ends with once its last save is
        acknowledged (:meth:`Instance.heads`)."""
        heads = instance.heads()
        if heads.keys() != instance._spaces.keys() or self.base is None:
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
                stats.snapshot_bytes = _write_snapshot(
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
        stayed = _STAYED.pop(cache_key, 0) + 1 if stats.cached and not stats.snapshot else 0
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
            _CACHE[cache_key] = instance
            _STAYED[cache_key] = stayed
            if self.use_snapshots:
                t0 = time.perf_counter()
                self._write_snapshot(index, instance, stats, stayed >= _SKIP_SNAPSHOT_AFTER)
                stats.seconds_snapshot = time.perf_counter() - t0
        stats.seconds_total = time.perf_counter() - started
        stats.seconds_process = (
            stats.seconds_total - stats.seconds_save - stats.seconds_snapshot - restore
        )
        out.append({_RECEIPT: _pack_receipt(receipt, stats)})
        return out


class StatefulRunner:
    """Runs a keyed stateful function over Spark DataFrames with checkpointed object spaces.

    ``fn(key, rows, state)`` gets one key's rows of a batch (dicts, in ``order_by`` order)
    and a :class:`~objectspace.operators.KeyState`, and yields output rows (dicts; the key
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
    ) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable (key, rows, state), not {type(fn).__name__}")
        self.fn = fn
        self.key_columns = _columns(key, "key")
        self.order_columns = _columns(order_by, "order_by")
        self.output_schema_ddl = output_schema
        self.storage = open_storage(storage) if isinstance(storage, str) else storage
        check_max_key_groups(max_key_groups)
        if parallelism is not None:
            _check_parallelism(parallelism, max_key_groups)
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
        # This runner is the job's driver from now on: a runner started earlier on the same
        # job (a query started twice, a zombie driver) can no longer commit.
        self.epoch = self.job.fence()
        self.parallelism = parallelism
        self.compaction = compaction or CompactionPolicy()
        self.retain = retain
        self.cache_instances = cache_instances
        self.snapshot_instances = snapshot_instances
        # Names this runner's snapshots, so another runner (say, after the store was deleted
        # and re-created at the same URL) never adopts them.
        self._token = uuid.uuid4().hex
        # Authenticates this runner's snapshot files; travels to the tasks in the task
        # object only, so a file planted in the snapshot folder is never unpickled.
        self._snapshot_key = secrets.token_bytes(_SNAPSHOT_KEY_BYTES)
        self.last_batch: BatchStats | None = None
        self.history: list[BatchStats] = []
        self._persisted: DataFrame | None = None

    def __repr__(self) -> str:
        return (
            f"StatefulRunner({self.job.name!r}/{self.operator.name!r}, "
            f"storage={redact_url(self.storage.url)!r}, max_key_groups={self.operator.max_key_groups})"
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
        reserved = [c for c in struct.names if c in RESERVED_COLUMNS]
        if reserved:
            raise ReservedColumnError(
                f"output_schema of operator {self.operator.name!r} uses the column "
                f"{reserved[0]!r}, which objectspace reserves (reserved: "
                f"{', '.join(RESERVED_COLUMNS)})"
            )
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
            or not 0 <= checkpoint_id < _I64
        ):
            raise ValueError(
                f"checkpoint_id must be an int in 0..{_I64 - 1} (a signed 64-bit id), "
                f"not {checkpoint_id!r}"
            )
        if parallelism is not None:
            _check_parallelism(parallelism, self.operator.max_key_groups)
        spark = df.sparkSession
        max_kg = self.operator.max_key_groups
        if parallelism is not None:
            p = _check_parallelism(parallelism, max_kg)
        elif self.parallelism is not None:
            p = _check_parallelism(self.parallelism, max_kg)
        else:
            p = min(max(1, int(spark.sparkContext.defaultParallelism)), max_kg)
        reserved = [c for c in df.columns if c in RESERVED_COLUMNS]
        if reserved:
            raise ReservedColumnError(
                f"input of operator {self.operator.name!r} has the column {reserved[0]!r}, "
                f"which objectspace reserves (reserved: {', '.join(RESERVED_COLUMNS)}): "
                "drop or rename it before the batch"
            )
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
            self.snapshot_instances,
            f"{self._application(spark)}/{self._token}",
            self._snapshot_key,
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
            receipt, stats = _unpack_receipt(blob)
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
            batch.snapshot_instances += stats.snapshot
            batch.seconds_restore += stats.seconds_restore
            batch.seconds_process += stats.seconds_process
            batch.seconds_save += stats.seconds_save
            batch.seconds_snapshot += stats.seconds_snapshot
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
    def _application(spark: Any) -> str:
        try:
            return str(spark.sparkContext.applicationId)
        except Exception:  # no SparkContext here: the runner token still names the owner
            return ""

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
