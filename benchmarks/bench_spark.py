"""The seed's Buffer workload on Spark Structured Streaming: StatefulRunner vs Spark's state.

One process, one SparkSession (``local[2]``, ``spark.sql.shuffle.partitions=4``, made by
:func:`objectspace.spark.local_session`), the same streaming job run side by side:

* ``floor``: a ``foreachBatch`` that only collects each batch's rows and pickles them (the
  floor that Spark's micro-batch scheduling sets; it computes nothing).
* ``sqlite``: :class:`~objectspace.spark.StatefulRunner` with ``sqlite:///`` storage, in
  ``foreachBatch(runner.foreach_batch(sink))``.
* ``segments``: the same with ``file://`` segment files and a SQLite catalog; each segment
  file is synced to the disk (file and folder) before the catalog records it.
* ``segments0``: the same with ``fsync=0``: segment files not synced, as Spark's own offset
  and commit logs and state files on a local checkpoint location are not (what that sync
  costs; the goals judge ``segments``).
* ``apiws``: ``groupBy("k").applyInPandasWithState`` (Update mode, no timeout) with the
  buffer kept in the state as a JSON string (an ``array<double>`` state field fails in
  pyspark 4.3's Python worker), default HDFS-backed state store.
* ``tws``: ``groupBy("k").transformWithStateInPandas`` with a ``StatefulProcessor`` keeping
  the buffer in a ``ListState`` and its length in a ``ValueState``, on the RocksDB state
  store provider with changelog checkpointing (session confs set for that query only).

Workload ``buffer`` (the seed's): 60 micro-batches, each with 2 float events for each of
1,000 keys; per key a buffer of 100 values, emitted as ``{k, n, s}`` (count and sum) when
full, then cleared: 1,000 output rows. Workload ``throughput``: 10,000 keys, 10 events per
key per batch, 20 batches: 20,000 output rows (``floor``, ``sqlite``, ``apiws``, ``tws``).

Input: one JSON-lines file per micro-batch in a temporary folder, with increasing
modification times (Spark's file source orders files by mtime), read with
``maxFilesPerTrigger=1`` and ``trigger(availableNow=True)``. Every variant writes its output
rows to the same ``foreachBatch`` sink (collect; count rows, sum ``n`` and ``s``), checked
against a plain Python run of the buffer.

Wall time: from ``writeStream...start()`` to ``awaitTermination()`` returning. State bytes:
for StatefulRunner the sum of ``bytes_written`` of every checkpoint (``runner.history``);
for Spark the total size of the files under ``<checkpointLocation>/state`` right after the
query ended, with ``spark.sql.streaming.minBatchesToRetain=1000`` so maintenance deletes
nothing (``.crc`` checksum files included; split by kind in the notes). CPU: CPU seconds
of the process tree (driver, JVM, Python workers) during the variant, from ``/proc``.

    .venv/bin/python -m benchmarks.bench_spark [--quick] [--no-record] [--only NAME ...]

``--only`` takes variant names (floor, sqlite, segments, segments0, apiws, tws) and/or workload names
(buffer, throughput). ``--quick`` shrinks the workloads (buffer: 200 keys x 10 batches;
throughput: 2,000 keys x 5 batches; buffers of 20 so that they fill) and does not record.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlencode

from benchmarks.common import (
    fmt_bytes,
    parse_args,
    print_table,
    record,
    sqlite_settle,
    sqlite_size,
    status,
    temp_dir,
)
from benchmarks.diskbytes import volume

VARIANTS = ("floor", "sqlite", "segments", "segments0", "apiws", "tws")
WORKLOADS = ("buffer", "throughput")
LABELS = {
    "floor": "floor: foreachBatch collect + pickle",
    "sqlite": "StatefulRunner, sqlite:///",
    "segments": "StatefulRunner, file:// segments",
    "segments0": "StatefulRunner, file:// segments, fsync=0",
    "apiws": "applyInPandasWithState (HDFS store)",
    "tws": "transformWithStateInPandas (RocksDB)",
}
THROUGHPUT_VARIANTS = ("floor", "sqlite", "segments", "segments0", "apiws", "tws")
VOLUME_MB = 1024  # each variant's checkpoint volume (a sparse file)

INPUT_DDL = "k LONG, ts LONG, v DOUBLE"
OUTPUT_DDL = "k long, n long, s double"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
RETAIN_CONF = "spark.sql.streaming.minBatchesToRetain"
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"

# Measured in the issue on this kind of machine (for the notes).
ISSUE_FIGURES = "applyInPandasWithState ≈ 40 MB, transformWithStateInPandas ≈ 5.4 MB"


_R = TypeVar("_R")


@dataclass
class Workload:
    name: str
    keys: int
    events_per_key: int
    batches: int
    capacity: int
    variants: tuple[str, ...]
    folder: str = ""
    input_rows: int = 0
    input_bytes: int = 0
    expected_rows: int = 0
    expected_n: int = 0
    expected_s: float = 0.0

    def describe(self) -> str:
        return (
            f"{self.batches} micro-batches x {self.keys:,} keys x {self.events_per_key} "
            f"events per key per batch ({self.input_rows:,} rows, "
            f"{fmt_bytes(self.input_bytes)} of JSON), buffer of {self.capacity}: "
            f"{self.expected_rows:,} output rows expected"
        )


@dataclass
class Result:
    variant: str
    wall: float
    batches: int
    output_rows: int
    sum_n: int
    sum_s: float
    state_bytes: int | None = None
    state_kinds: dict[str, int] = field(default_factory=dict)
    disk_bytes: int | None = None
    volume_bytes: int | None = None
    volume_files: int | None = None
    volume_method: str = ""
    sink_seconds: float = 0.0
    fb_seconds: float = 0.0
    add_batch: float = 0.0
    trigger: float = 0.0
    state_commit: float = 0.0
    state_updates: float = 0.0
    state_rows_total: int = 0
    split: dict[str, float] = field(default_factory=dict)
    cpu: float | None = None
    load: tuple[float, float] = (0.0, 0.0)
    notes: list[str] = field(default_factory=list)
    ok: bool = True


# -- input --------------------------------------------------------------------------------


def write_input(work: Workload, folder: str, seed: int = 20260101) -> None:
    """One JSON-lines file per micro-batch, mtimes increasing; the reference run alongside."""
    os.makedirs(folder)
    rng = random.Random(seed)
    buffers: dict[int, list[float]] = {k: [] for k in range(work.keys)}
    cap = work.capacity
    rows = out_rows = sum_n = 0
    sum_s = 0.0
    size = 0
    for b in range(work.batches):
        lines: list[str] = []
        for i in range(work.events_per_key):
            ts = b * work.events_per_key + i
            for k in range(work.keys):
                v = rng.random()
                lines.append(f'{{"k":{k},"ts":{ts},"v":{v!r}}}\n')
                buf = buffers[k]
                buf.append(v)
                if len(buf) == cap:
                    out_rows += 1
                    sum_n += cap
                    sum_s += sum(buf)
                    buf.clear()
        rng.shuffle(lines)  # a batch is not in ts order: every variant sorts by ts
        path = os.path.join(folder, f"batch-{b:05d}.json")
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            fh.writelines(lines)
        os.replace(path + ".tmp", path)
        stamp = 1_700_000_000 + 10 * b  # the file source orders files by modification time
        os.utime(path, (stamp, stamp))
        rows += len(lines)
        size += os.path.getsize(path)
    work.folder = folder
    work.input_rows = rows
    work.input_bytes = size
    work.expected_rows = out_rows
    work.expected_n = sum_n
    work.expected_s = sum_s


# -- the job, four ways ---------------------------------------------------------------------


def make_buffer_fn(capacity: int) -> Callable[[Any, list[dict[str, Any]], Any], Iterator[Any]]:
    """The issue's ``buffer100`` (a list per key, emitted and cleared when full)."""

    def buffer_fn(key: Any, rows: list[dict[str, Any]], state: Any) -> Iterator[dict[str, Any]]:
        buf = state.list("buf")
        for r in rows:
            buf.append(r["v"])
            if len(buf) == capacity:
                yield {"k": key, "n": len(buf), "s": sum(buf)}
                buf.clear()

    return buffer_fn


def make_apiws_fn(capacity: int) -> Callable[[Any, Iterator[Any], Any], Iterator[Any]]:
    """applyInPandasWithState: the buffer is the key's state, a JSON list in a string."""

    def apiws_fn(key: Any, pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        buf: list[float] = json.loads(state.get[0]) if state.exists else []
        frames = list(pdfs)
        pdf = frames[0] if len(frames) == 1 else pd.concat(frames)
        k = int(key[0])
        out: list[tuple[int, int, float]] = []
        for v in pdf.sort_values("ts")["v"].tolist():
            buf.append(v)
            if len(buf) == capacity:
                out.append((k, len(buf), sum(buf)))
                buf = []
        state.update((json.dumps(buf),))
        if out:
            yield pd.DataFrame(out, columns=["k", "n", "s"])

    return apiws_fn


def make_tws_processor(capacity: int) -> Any:
    """transformWithStateInPandas: the buffer in a ListState, its length in a ValueState
    (so a batch reads one value per key and appends, and reads the list only when full)."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class BufferProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.buf = handle.getListState("buf", "v double")
            self.count = handle.getValueState("n", "n long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
            frames = list(rows)
            pdf = frames[0] if len(frames) == 1 else pd.concat(frames)
            got = self.count.get()
            n = int(got[0]) if got is not None else 0
            k = int(key[0])
            out: list[tuple[int, int, float]] = []
            pending: list[float] = []
            for v in pdf.sort_values("ts")["v"].tolist():
                pending.append(v)
                n += 1
                if n == capacity:
                    items = [float(r[0]) for r in self.buf.get()] if n > len(pending) else []
                    items.extend(pending)
                    out.append((k, len(items), sum(items)))
                    self.buf.clear()
                    pending = []
                    n = 0
            if pending:
                self.buf.appendList([(v,) for v in pending])
            self.count.update((n,))
            if out:
                yield pd.DataFrame(out, columns=["k", "n", "s"])

        def close(self) -> None:
            pass

    return BufferProcessor()


class CollectSink:
    """The output sink every variant shares: collect the batch's rows, count and sum them."""

    def __init__(self) -> None:
        self.rows = 0
        self.sum_n = 0
        self.sum_s = 0.0
        self.calls = 0
        self.seconds = 0.0

    def __call__(self, df: Any, batch_id: int) -> None:
        t0 = time.perf_counter()
        rows = df.collect()
        self.calls += 1
        self.rows += len(rows)
        self.sum_n += sum(int(r["n"]) for r in rows)
        self.sum_s += sum(float(r["s"]) for r in rows)
        self.seconds += time.perf_counter() - t0


class FloorSink:
    """foreachBatch that only collects each batch's rows and pickles them."""

    def __init__(self) -> None:
        self.calls = 0
        self.rows = 0
        self.pickled = 0
        self.seconds = 0.0

    def __call__(self, df: Any, batch_id: int) -> None:
        t0 = time.perf_counter()
        rows = df.collect()
        self.pickled += len(pickle.dumps([tuple(r) for r in rows], protocol=5))
        self.rows += len(rows)
        self.calls += 1
        self.seconds += time.perf_counter() - t0


# -- measuring ------------------------------------------------------------------------------


def tree_bytes(root: str) -> tuple[int, dict[str, int]]:
    """Total size of the files under ``root``, and by kind."""
    total = 0
    kinds: dict[str, int] = {}
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                size = os.path.getsize(os.path.join(folder, name))
            except OSError:
                continue
            total += size
            if name.endswith(".crc"):
                kind = "crc"
            elif name.endswith(".delta"):
                kind = "delta"
            elif name.endswith(".snapshot"):
                kind = "snapshot"
            elif name.endswith(".changelog"):
                kind = "changelog"
            elif name.endswith(".zip"):
                kind = "zip"
            elif name.endswith(".sst"):
                kind = "sst"
            else:
                kind = "other"
            kinds[kind] = kinds.get(kind, 0) + size
    return total, kinds


def tree_cpu_seconds() -> tuple[float, frozenset[int]] | None:
    """CPU seconds used so far by this process and its descendants (the JVM, the Python
    daemon and its workers), from /proc: utime + stime of every live process of the tree
    plus cutime + cstime (its children that ended), and the pids of the tree. Linux only;
    ``None`` elsewhere."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        stats: dict[int, tuple[int, list[str]]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                    text = fh.read()
            except OSError:
                continue
            fields = text[text.rindex(")") + 2 :].split()
            stats[int(entry)] = (int(fields[1]), fields)  # (ppid, fields from state on)
    except (OSError, ValueError):
        return None
    children: dict[int, list[int]] = {}
    for pid, (ppid, _f) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total = 0
    seen: set[int] = set()
    todo = [os.getpid()]
    while todo:
        pid = todo.pop()
        if pid in stats:
            seen.add(pid)
            f = stats[pid][1]
            total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
        todo.extend(children.get(pid, []))
    return total / tick, frozenset(seen)


def fold_progress(result: Any, query: Any) -> None:
    """Sum the query's progress reports: addBatch, triggerExecution, state store times."""
    batches = 0
    for p in query.recentProgress:
        d = p.durationMs or {}
        if p.numInputRows or d.get("addBatch"):
            batches += 1
        result.add_batch += d.get("addBatch", 0) / 1e3
        if hasattr(result, "trigger"):
            result.trigger += d.get("triggerExecution", 0) / 1e3
        for so in p.stateOperators or []:
            result.state_commit += so.commitTimeMs / 1e3
            result.state_updates += so.allUpdatesTimeMs / 1e3
            if hasattr(result, "state_rows_total"):
                result.state_rows_total = so.numRowsTotal
    result.batches = batches


class SparkBench:
    """What every Spark benchmark's runner shares: a session, a scratch root, running a
    query to its end, temporary confs, and reading Spark's own state files."""

    def __init__(self, spark: Any, root: str) -> None:
        self.spark = spark
        self.root = root

    def _run(self, writer: Any, checkpoint: str) -> tuple[float, Any]:
        t0 = time.perf_counter()
        query = writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
        query.awaitTermination()
        wall = time.perf_counter() - t0
        if query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        return wall, query

    def _with_confs(self, confs: dict[str, str], fn: Callable[[], _R]) -> _R:
        conf = self.spark.conf
        saved = {name: conf.get(name, None) for name in confs}
        for name, value in confs.items():
            conf.set(name, value)
        try:
            return fn()
        finally:
            for name, old in saved.items():
                if old is None:
                    conf.unset(name)
                else:
                    conf.set(name, old)

    def _spark_state(self, res: Any, checkpoint: str) -> None:
        """Spark's state files under ``checkpoint``: their bytes and kinds, on ``res``."""
        total, kinds = tree_bytes(os.path.join(checkpoint, "state"))
        res.state_bytes = total
        if hasattr(res, "state_kinds"):
            res.state_kinds = kinds
        res.notes.append(
            "state files: "
            + ", ".join(
                f"{k} {fmt_bytes(v)}" for k, v in sorted(kinds.items(), key=lambda x: -x[1])
            )
        )


class Bench(SparkBench):
    def stream(self, work: Workload) -> Any:
        return (
            self.spark.readStream.schema(INPUT_DDL)
            .option("maxFilesPerTrigger", 1)
            .json(work.folder)
        )

    def run(self, variant: str, work: Workload) -> Result:
        """One variant with its whole checkpoint location (objectspace's storage and Spark's
        offset and commit logs and state store) on its own loop-mounted volume."""
        with volume(size_mb=VOLUME_MB, label=f"{work.name}-{variant}") as vol:
            res = self._run_in(variant, work, os.path.join(vol.path, f"{work.name}-{variant}"))
        res.volume_bytes = vol.written
        res.volume_files = vol.files_at_end
        res.volume_method = vol.method
        return res

    def _run_in(self, variant: str, work: Workload, folder: str) -> Result:
        os.makedirs(folder)
        checkpoint = os.path.join(folder, "checkpoint")
        load0 = os.getloadavg()[0]
        cpu0 = tree_cpu_seconds()
        if variant == "floor":
            res = self.floor(work, checkpoint)
        elif variant in ("sqlite", "segments", "segments0"):
            res = self.runner(variant, work, folder, checkpoint)
        elif variant == "apiws":
            res = self.apiws(work, checkpoint)
        elif variant == "tws":
            res = self.tws(work, checkpoint)
        else:
            raise ValueError(variant)
        cpu1 = tree_cpu_seconds()
        # A process of the tree that exits during the run takes its CPU time out of the sum
        # (or, reaped by a parent, adds its whole life to it): no figure then.
        if cpu0 is not None and cpu1 is not None and cpu0[1] <= cpu1[1]:
            res.cpu = cpu1[0] - cpu0[0]
        res.load = (load0, os.getloadavg()[0])
        return res

    def floor(self, work: Workload, checkpoint: str) -> Result:
        sink = FloorSink()
        wall, query = self._run(self.stream(work).writeStream.foreachBatch(sink), checkpoint)
        res = Result("floor", wall, sink.calls, 0, 0, 0.0, sink_seconds=sink.seconds)
        res.fb_seconds = sink.seconds
        fold_progress(res, query)
        res.notes.append(
            f"collected {sink.rows:,} input rows, pickled {fmt_bytes(sink.pickled)} in total"
        )
        return res

    def runner(self, variant: str, work: Workload, folder: str, checkpoint: str) -> Result:
        from objectspace.spark import StatefulRunner

        if variant == "sqlite":
            db = os.path.join(folder, "state.db")
            url = f"sqlite:///{db}"
        else:
            seg = os.path.join(folder, "seg")
            db = os.path.join(folder, "cat.db")
            options = {"catalog": f"sqlite:///{db}"}
            if variant == "segments0":
                options["fsync"] = "0"
            url = f"file://{seg}?" + urlencode(options)
        runner = StatefulRunner(
            make_buffer_fn(work.capacity),
            key="k",
            order_by="ts",
            output_schema=OUTPUT_DDL,
            storage=url,
            job=f"bench-{work.name}",
            operator=f"buffer{work.capacity}",
            max_key_groups=128,
            parallelism=4,
        )
        sink = CollectSink()
        inner = runner.foreach_batch(sink)
        fb = [0.0]

        def timed(df: Any, batch_id: int) -> None:
            t0 = time.perf_counter()
            inner(df, batch_id)
            fb[0] += time.perf_counter() - t0

        try:
            wall, query = self._run(self.stream(work).writeStream.foreachBatch(timed), checkpoint)
        finally:
            runner.close()
        # The Python workers keep their connections open: copy the WAL back into the
        # database now, so that the bytes written to the volume include that copy.
        sqlite_settle(db)
        res = Result(variant, wall, sink.calls, sink.rows, sink.sum_n, sink.sum_s)
        res.sink_seconds = sink.seconds
        res.fb_seconds = fb[0]
        fold_progress(res, query)
        hist = runner.history
        res.state_bytes = sum(b.bytes_written for b in hist)
        rows_written = sum(b.rows_written for b in hist)
        tasks = [t for b in hist for t in b.tasks]
        cores = 2
        # Per batch: the Spark job's wall time minus the Python tasks' share of it (4 tasks
        # on 2 cores) ≈ scheduling, shuffle, Arrow conversion, worker I/O.
        overhead = sum(
            max(
                0.0,
                b.seconds_tasks
                - max(
                    max((t.seconds_total for t in b.tasks), default=0.0),
                    sum(t.seconds_total for t in b.tasks) / cores,
                ),
            )
            for b in hist
        )
        res.split = {
            "process": sum(b.seconds_total for b in hist),
            "tasks_job": sum(b.seconds_tasks for b in hist),
            "py_tasks": sum(t.seconds_total for t in tasks),
            "restore": sum(t.seconds_restore for t in tasks),
            "py_process": sum(t.seconds_process for t in tasks),
            "save": sum(t.seconds_save for t in tasks),
            "spark_overhead": overhead,
            "commit": sum(b.seconds_commit for b in hist),
            "driver_other": sum(b.seconds_total - b.seconds_tasks - b.seconds_commit for b in hist),
            "cached": sum(b.cached_instances for b in hist),
            "snapshots": sum(b.snapshot_instances for b in hist),
            "instances": sum(b.instances for b in hist),
            "rows_written": rows_written,
            "batches": len(hist),
            "committed": sum(b.committed for b in hist),
        }
        if variant == "sqlite":
            res.disk_bytes = sqlite_size(db)
            res.notes.append(f"SQLite file at end {fmt_bytes(res.disk_bytes)}")
        else:
            seg_bytes, _ = tree_bytes(os.path.join(folder, "seg"))
            res.disk_bytes = seg_bytes
            res.notes.append(
                f"segment files at end {fmt_bytes(seg_bytes)} (catalog {fmt_bytes(sqlite_size(db))})"
            )
        res.notes.append(f"{rows_written:,} state rows written")
        written = [t.snapshot_bytes for t in tasks if t.snapshot_bytes]
        if written:
            res.notes.append(
                f"instance snapshots: {len(written)} written, {fmt_bytes(sum(written) // len(written))}"
                f" each on average, Σ {fmt_s(sum(t.seconds_snapshot for t in tasks))} to write; "
                f"restore time includes reading and checking the snapshots adopted"
            )
        return res

    def apiws(self, work: Workload, checkpoint: str) -> Result:
        from pyspark.sql.streaming.state import GroupStateTimeout

        def go() -> Result:
            sink = CollectSink()
            out = (
                self.stream(work)
                .groupBy("k")
                .applyInPandasWithState(
                    make_apiws_fn(work.capacity),
                    OUTPUT_DDL,
                    "buf string",
                    "Update",
                    GroupStateTimeout.NoTimeout,
                )
            )
            wall, query = self._run(
                out.writeStream.outputMode("update").foreachBatch(sink), checkpoint
            )
            res = Result("apiws", wall, sink.calls, sink.rows, sink.sum_n, sink.sum_s)
            res.sink_seconds = res.fb_seconds = sink.seconds
            fold_progress(res, query)
            self._spark_state(res, checkpoint)
            return res

        return self._with_confs({RETAIN_CONF: "1000"}, go)

    def tws(self, work: Workload, checkpoint: str) -> Result:
        def go() -> Result:
            sink = CollectSink()
            out = (
                self.stream(work)
                .groupBy("k")
                .transformWithStateInPandas(
                    make_tws_processor(work.capacity), OUTPUT_DDL, "Update", "None"
                )
            )
            wall, query = self._run(
                out.writeStream.outputMode("update").foreachBatch(sink), checkpoint
            )
            res = Result("tws", wall, sink.calls, sink.rows, sink.sum_n, sink.sum_s)
            res.sink_seconds = res.fb_seconds = sink.seconds
            fold_progress(res, query)
            self._spark_state(res, checkpoint)
            kinds = res.state_kinds
            if not kinds.get("changelog"):
                res.notes.append("**no changelog files: changelog checkpointing not in effect**")
            return res

        return self._with_confs(
            {RETAIN_CONF: "1000", PROVIDER_CONF: ROCKSDB, CHANGELOG_CONF: "true"}, go
        )


# -- reporting ------------------------------------------------------------------------------


def check(res: Result, work: Workload) -> None:
    if res.variant == "floor":
        return
    ok = (
        res.output_rows == work.expected_rows
        and res.sum_n == work.expected_n
        and abs(res.sum_s - work.expected_s) <= 1e-6 * max(1.0, abs(work.expected_s))
    )
    if res.batches != work.batches:
        res.notes.append(f"{res.batches} batches with data (expected {work.batches})")
    if not ok:
        res.ok = False
        res.notes.append(
            f"**WRONG OUTPUT**: {res.output_rows} rows, n={res.sum_n}, s={res.sum_s:.6f}; "
            f"expected {work.expected_rows} rows, n={work.expected_n}, s={work.expected_s:.6f}"
        )


def fmt_s(seconds: float) -> str:
    return f"{seconds:,.1f} s" if seconds >= 10 else f"{seconds:.2f} s"


def results_table(results: Sequence[Result], work: Workload) -> str:
    headers = [
        "variant",
        "wall",
        "batches",
        "wall per batch",
        "CPU (driver + JVM + workers)",
        "load avg before / after",
        "output rows",
        "output correct",
        "written to the checkpoint volume",
        "files on the volume at end",
        "state bytes written (logical)",
        "state on disk at end",
        "Σ addBatch",
        "Σ state store update / commit (over partitions)",
    ]
    rows = []
    for r in results:
        state = fmt_bytes(r.state_bytes) if r.state_bytes is not None else "-"
        if r.variant in ("sqlite", "segments", "segments0"):
            disk = fmt_bytes(r.disk_bytes or 0)
        elif r.state_bytes is not None:
            disk = state
        else:
            disk = "-"
        store = (
            f"{fmt_s(r.state_updates)} / {fmt_s(r.state_commit)}"
            if r.variant in ("apiws", "tws")
            else "-"
        )
        rows.append(
            [
                LABELS[r.variant],
                fmt_s(r.wall),
                r.batches,
                fmt_s(r.wall / max(1, r.batches)),
                fmt_s(r.cpu) if r.cpu is not None else "-",
                f"{r.load[0]:.1f} / {r.load[1]:.1f}",
                f"{r.output_rows:,}" if r.variant != "floor" else "-",
                ("yes" if r.ok else "**NO**") if r.variant != "floor" else "-",
                fmt_bytes(r.volume_bytes) if r.volume_bytes is not None else "-",
                fmt_bytes(r.volume_files) if r.volume_files is not None else "-",
                state,
                disk,
                fmt_s(r.add_batch),
                store,
            ]
        )
    return print_table(headers, rows)


def split_table(results: Sequence[Result]) -> str | None:
    runners = [r for r in results if r.split]
    if not runners:
        return None
    headers = [
        "variant",
        "wall",
        "outside foreachBatch (Spark micro-batch: listing, offset/commit logs, planning)",
        "runner.process",
        "tasks job (Spark job: scheduling, shuffle, Arrow, Python tasks)",
        "≈ Spark/Arrow overhead in the job",
        "Python tasks Σ (restore / process / save)",
        "commit",
        "driver other",
        "sink",
        "instances cached (adopted from another worker's snapshot)",
    ]
    rows = []
    for r in runners:
        s = r.split
        rows.append(
            [
                LABELS[r.variant],
                fmt_s(r.wall),
                fmt_s(max(0.0, r.wall - r.fb_seconds)),
                fmt_s(s["process"]),
                fmt_s(s["tasks_job"]),
                fmt_s(s["spark_overhead"]),
                f"{fmt_s(s['py_tasks'])} ({fmt_s(s['restore'])} / "
                f"{fmt_s(s['py_process'])} / {fmt_s(s['save'])})",
                fmt_s(s["commit"]),
                fmt_s(s["driver_other"]),
                fmt_s(r.sink_seconds),
                f"{int(s['cached'])}/{int(s['instances'])} "
                f"({int(s.get('snapshots', 0))} from snapshots)",
            ]
        )
    return print_table(headers, rows)


def floors(buffer_res: dict[str, Result], thr_res: dict[str, Result]) -> str:
    """What any store must write to the checkpoint volume, beside the goal: Spark's own
    offset/commit logs (the ``floor`` variant's bytes there) plus the state's logical bytes
    once, and once more for a store that writes each page twice (SQLite's WAL)."""
    rows = []
    for name, res_of in (("buffer", buffer_res), ("throughput", thr_res)):
        floor, tws, mine = res_of.get("floor"), res_of.get("tws"), res_of.get("sqlite")
        if floor is None or tws is None or mine is None:
            continue
        if floor.volume_bytes is None or tws.volume_bytes is None or mine.state_bytes is None:
            continue
        once = floor.volume_bytes + mine.state_bytes
        rows.append(
            [
                name,
                fmt_bytes(floor.volume_bytes),
                fmt_bytes(mine.state_bytes),
                fmt_bytes(once),
                fmt_bytes(once + mine.state_bytes),
                fmt_bytes(tws.volume_bytes // 2),
            ]
        )
    if not rows:
        return ""
    return print_table(
        [
            "workload",
            "Spark's own logs (floor variant)",
            "state, logical bytes",
            "logs + state written once",
            "logs + state written twice (WAL)",
            "goal: 1/2 of transformWithStateInPandas",
        ],
        rows,
    )


def verdicts(buffer_res: dict[str, Result], thr_res: dict[str, Result]) -> tuple[str, bool]:
    rows: list[list[str]] = []
    all_met = True
    spark_bytes = [buffer_res[v].state_bytes for v in ("apiws", "tws") if v in buffer_res]
    spark_bytes_known = [b for b in spark_bytes if b is not None]
    for v in ("sqlite", "segments"):
        if v in buffer_res and spark_bytes_known:
            mine = buffer_res[v].state_bytes or 0
            best = min(spark_bytes_known)
            met = mine < best
            all_met &= met
            rows.append(
                [
                    f"buffer: state bytes, {LABELS[v]}",
                    "< every Spark variant",
                    f"{fmt_bytes(mine)} vs {fmt_bytes(best)} (smallest Spark)",
                    status(met),
                ]
            )
    for work_name, res_of in (("buffer", buffer_res), ("throughput", thr_res)):
        tws = res_of.get("tws")
        if tws is None or tws.volume_bytes is None:
            continue
        for v in ("sqlite", "segments"):
            mine_r = res_of.get(v)
            if mine_r is None or mine_r.volume_bytes is None:
                continue
            met = mine_r.volume_bytes <= 0.5 * tws.volume_bytes
            all_met &= met
            rows.append(
                [
                    f"{work_name}: written to the checkpoint volume, {LABELS[v]}",
                    "<= 1/2 of transformWithStateInPandas",
                    f"{fmt_bytes(mine_r.volume_bytes)} vs {fmt_bytes(tws.volume_bytes)} "
                    f"({mine_r.volume_bytes / max(1, tws.volume_bytes):.2f}x)",
                    status(met),
                ]
            )
    if "tws" in buffer_res:
        for v in ("sqlite", "segments"):
            if v in buffer_res:
                mine_w, theirs = buffer_res[v].wall, buffer_res["tws"].wall
                met = mine_w <= 0.4 * theirs
                all_met &= met
                rows.append(
                    [
                        f"buffer: wall, {LABELS[v]}",
                        "<= 0.4x transformWithStateInPandas",
                        f"{fmt_s(mine_w)} vs {fmt_s(theirs)} ({mine_w / theirs:.2f}x)",
                        status(met),
                    ]
                )
    for v in ("sqlite", "segments"):
        if "apiws" not in thr_res or v not in thr_res:
            continue
        mine_w, theirs = thr_res[v].wall, thr_res["apiws"].wall
        met = mine_w <= 0.3 * theirs
        all_met &= met
        rows.append(
            [
                f"throughput: wall, {LABELS[v]}",
                "<= 0.3x applyInPandasWithState",
                f"{fmt_s(mine_w)} vs {fmt_s(theirs)} ({mine_w / theirs:.2f}x)",
                status(met),
            ]
        )
    for res in (*buffer_res.values(), *thr_res.values()):
        all_met &= res.ok
    if not rows:
        return "", all_met
    return print_table(["goal", "target", "measured", "verdict"], rows), all_met


# -- main -----------------------------------------------------------------------------------


def workloads(quick: bool) -> list[Workload]:
    if quick:
        return [
            Workload("buffer", 200, 2, 10, 20, VARIANTS),
            Workload("throughput", 2_000, 10, 5, 20, THROUGHPUT_VARIANTS),
        ]
    return [
        Workload("buffer", 1_000, 2, 60, 100, VARIANTS),
        Workload("throughput", 10_000, 10, 20, 100, THROUGHPUT_VARIANTS),
    ]


def warm_up(bench: Bench, root: str) -> float:
    """Each kind of query once on a tiny input first (2 batches), so JVM start-up, code
    generation, state store and RocksDB loading, the Python workers and their imports are
    not charged to whichever variant runs first."""
    work = Workload("warmup", 20, 2, 2, 4, ())
    write_input(work, os.path.join(root, "warmup-input"))
    t0 = time.perf_counter()
    for variant in ("floor", "sqlite", "apiws", "tws"):
        bench.run(variant, work)
    return time.perf_counter() - t0


def ship_by_value(module: str = __name__) -> None:
    """Spark's Python workers must unpickle our functions even when a benchmark module is
    imported as ``benchmarks.<name>`` (not ``__main__``): pickle it by value."""
    if module != "__main__":
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[module])  # type: ignore[no-untyped-call]


def main(argv: Sequence[str] | None = None) -> None:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--only", nargs="+", default=[], metavar="NAME")
    known, rest = pre.parse_known_args(sys.argv[1:] if argv is None else argv)
    args = parse_args(__doc__.splitlines()[0] if __doc__ else "bench_spark", rest)
    only = set(known.only)
    unknown = only - set(VARIANTS) - set(WORKLOADS)
    if unknown:
        sys.exit(f"unknown --only name(s) {sorted(unknown)}; choose from {VARIANTS + WORKLOADS}")
    pick_variants = only & set(VARIANTS) or set(VARIANTS)
    pick_workloads = only & set(WORKLOADS) or set(WORKLOADS)
    do_record = args.record and not only

    ship_by_value()
    # pandas' FutureWarnings from pyspark's own worker code would flood the output.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    from objectspace.spark import local_session

    started = time.perf_counter()
    spark = local_session(
        "local[2]",
        app_name="objectspace-bench-spark",
        spark__sql__streaming__numRecentProgressUpdates="1000",
    )
    print(
        f"SparkSession {spark.version} local[2], shuffle partitions "
        f"{spark.conf.get('spark.sql.shuffle.partitions')} "
        f"(started in {time.perf_counter() - started:.1f} s)",
        flush=True,
    )
    sections: list[str] = []
    buffer_res: dict[str, Result] = {}
    thr_res: dict[str, Result] = {}
    with temp_dir("osp-bench-spark-") as root:
        bench = Bench(spark, root)
        print(f"warm-up: {warm_up(bench, root):.1f} s", flush=True)
        for work in workloads(args.quick):
            if work.name not in pick_workloads:
                continue
            names = [v for v in work.variants if v in pick_variants]
            if not names:
                continue
            write_input(work, os.path.join(root, f"input-{work.name}"))
            print(f"\n== {work.name}: {work.describe()}", flush=True)
            results: list[Result] = []
            for variant in names:
                print(f"-- {LABELS[variant]} ...", flush=True)
                res = bench.run(variant, work)
                check(res, work)
                results.append(res)
                print(
                    f"   wall {fmt_s(res.wall)}, {res.batches} batches, "
                    f"{res.output_rows:,} output rows, state "
                    f"{fmt_bytes(res.state_bytes) if res.state_bytes is not None else '-'}, "
                    f"{fmt_bytes(res.volume_bytes or 0)} written to the checkpoint volume "
                    f"({res.volume_method}), {fmt_bytes(res.volume_files or 0)} of files there "
                    "at the end" + "".join(f"\n   {n}" for n in res.notes),
                    flush=True,
                )
                shutil.rmtree(os.path.join(root, f"{work.name}-{variant}"), ignore_errors=True)
            target = buffer_res if work.name == "buffer" else thr_res
            target.update({r.variant: r for r in results})
            title = "Buffer workload (the seed's)" if work.name == "buffer" else "Throughput run"
            print()
            table = results_table(results, work)
            print()
            split = split_table(results)
            notes = [f"- {LABELS[r.variant]}: " + "; ".join(r.notes) for r in results if r.notes]
            part = [f"### {title}\n", work.describe() + ".\n", table]
            if split:
                part += [
                    "\nWhere StatefulRunner's time goes (sums over the batches; Python task "
                    "times are summed over 4 tasks sharing 2 cores):\n",
                    split,
                ]
            if notes:
                part += ["", *notes]
            sections.append("\n".join(part))
        print()
        verdict_table, all_met = verdicts(buffer_res, thr_res)
        floor_table = floors(buffer_res, thr_res)
    spark.stop()
    total = time.perf_counter() - started
    print(f"\nbench_spark done in {total:.0f} s{'' if all_met else ' (goals missed)'}")

    if do_record:
        intro = (
            "The seed's Buffer workload as a Structured Streaming query, side by side in one "
            "process and one SparkSession (`local[2]`, `spark.sql.shuffle.partitions=4`, "
            "Python workers on the venv's interpreter). Input: one JSON-lines file per "
            "micro-batch (rows shuffled within the file, increasing mtimes), "
            "`maxFilesPerTrigger=1`, `trigger(availableNow=True)`; a warm-up query runs "
            "first. Every variant feeds its output to the same `foreachBatch` sink (collect, "
            "count, sum), checked against a plain Python run. Wall: `start()` to "
            "`awaitTermination()`. State bytes: StatefulRunner = sum of `bytes_written` over "
            "its checkpoints (`runner.history`), 128 key groups, parallelism 4. On "
            "`file://` segments each segment file is synced to the disk (file and folder) "
            "before the catalog records it, so that a power failure cannot leave a "
            "committed checkpoint whose blocks never reached the disk; the `fsync=0` "
            "variant skips that sync, as Spark does for its own files on a local "
            "checkpoint location (the goals judge the default). "
            "Written to the checkpoint volume: each variant's checkpoint location "
            "(objectspace's storage and Spark's offset/commit logs and state store) on its "
            "own fresh ext4 loop volume, bytes written to that block device "
            "(`/sys/block/loopN/stat` field 7 x 512) between the query's start and its end, "
            "`sync` on both sides (`benchmarks/diskbytes.py`); files on the volume at end: "
            "their total size. State bytes for Spark = all files under `<checkpointLocation>/state` right after the query ended, with "
            "`spark.sql.streaming.minBatchesToRetain=1000` so that nothing was deleted "
            "(deltas/changelogs, snapshots written by the maintenance thread, `.crc` files, "
            "schema/metadata files). applyInPandasWithState keeps the buffer as a JSON "
            "string (HDFS-backed store); transformWithStateInPandas keeps it in a ListState "
            "plus its length in a ValueState, on RocksDB with changelog checkpointing "
            "(provider confs set with `spark.conf.set` for that query only). Σ addBatch: "
            "Spark's progress reports (the foreachBatch or the stateful plan + sink). "
            "CPU: CPU seconds of the whole process tree (driver, JVM, Python workers) during "
            "the variant, from /proc, less sensitive than wall time to other load on a "
            "shared machine; the load average before and after each variant is shown; `-` "
            "when a process of the tree exited during the variant (transformWithStateInPandas "
            "stops its Python workers), which makes the sum meaningless. "
            f"Figures measured in the issue: {ISSUE_FIGURES}; throughput "
            "applyInPandasWithState 221 s, transformWithStateInPandas 548 s; floor 39 s."
        )
        parts = [intro, *sections, "### Goals\n", verdict_table]
        if floor_table:
            parts += [
                "What any state store writes to the checkpoint volume at least, beside the "
                "goal: Spark's own offset and commit logs (measured by the floor variant) "
                "plus the state's logical bytes once (StatefulRunner's, the smallest), and "
                "twice for a store that writes each page to a log first (SQLite's WAL):",
                floor_table,
            ]
        body = "\n\n".join(parts)
        record(
            "spark",
            body,
            title="Spark Structured Streaming: StatefulRunner vs Spark's state stores",
            command=".venv/bin/python -m benchmarks.bench_spark",
        )
    elif args.record and only:
        print("(--only: not recorded)")


if __name__ == "__main__":
    main()
