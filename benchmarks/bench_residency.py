"""State larger than memory on Spark: StatefulRunner with a memory budget vs transformWithStateInPandas.

One SparkSession at a time (``local[2]``, ``spark.executor.pyspark.memory=1g``,
``spark.sql.shuffle.partitions=4``, Python workers on the venv's interpreter), made by
:func:`objectspace.spark.local_session`. Two kinds of state:

* ``value``: ``--keys`` keys (default 10,000,000), each one float (``state.value("v")``);
* ``dict``:  ``--dict-keys`` keys (default 1,000,000), each a dict of 10 small ints
  (``state.dict("d")``).

For each, :class:`~objectspace.spark.StatefulRunner` (``parallelism=4``,
``max_key_groups=128``, ``sqlite:///`` storage in ``--storage`` or a temporary folder, its
``local_dir`` in a temporary folder, the default memory budget: a quarter of the 1g) runs:

1. load: the keys created in batches of at most ``--load-batch`` keys (default 500,000);
2. ``--batches`` (default 10) batches each touching 1% of the keys (``--touch N``: N keys), key
   ``(id * 1000000007 + batch * 2654435761) mod N`` for ``id`` in ``0 .. N/100`` (distinct
   keys within a batch, almost none shared between batches); each row adds 1.0 to its
   key's value, or 1 to one entry of its dict, and the key's new value (or the sum of its
   dict) is output and checked against a count kept on the driver (numpy);
3. restart: ``spark.stop()``, a new session with the same conf (new Python workers; the
   local stores stay on disk, unless ``--cold``: deleted, as on a new executor elsewhere),
   a new runner on the same storage, job, operator and local_dir, then ``--after-restart``
   (default 5) more 1% batches from checkpoint ``runner.job.last_checkpoint() + 1``.
   The runner puts a copy of each local store in the storage's file area every 10
   checkpoints (``local_copy_every``; ``--no-copies``: never), from which a cold restart
   takes the key groups its batches touch (a copy whole when they are most of it).
   ``--rescale P``: the runner after the restart runs at parallelism ``P`` (the copies of
   the old instances serve it alike).

Input rows are made by Spark (``spark.range`` + expressions): the driver holds none.

Per batch: the wall time of ``runner.process`` (which commits the checkpoint), the peak RSS
of any Python worker (the processes under the JVM whose command line names ``pyspark``,
the daemon excepted; ``/proc/<pid>/status`` VmRSS sampled every 0.1 s by a thread of the
driver, and VmHWM after resetting it through ``/proc/<pid>/clear_refs`` at the batch's
start, so a peak between samples counts), the objects loaded from the local stores, the
bytes read from storage, the resident objects and their estimated bytes
(``bytes_resident``), the Σ of the tasks' restore seconds, and the driver's RSS (the Python
driver process; the JVM's apart).

Side by side, the same workload through ``groupBy("k").transformWithStateInPandas`` (a
``ValueState`` or a ``MapState`` of 10 entries, RocksDB state store provider with
changelog checkpointing, output to the ``noop`` sink, outputMode ``update``): input as one
Parquet file per micro-batch (written by Spark before the query), read with
``maxFilesPerTrigger=1`` and ``trigger(availableNow=True)``; the restart is a second query
on the same checkpoint location in a new session. Per batch: Spark's
``triggerExecution`` duration and the peak sampled RSS of the Python workers during it.
Building millions of keys through it takes far too long (its Python side handles each key
in its own pandas DataFrame), so it runs with ``--tws-keys`` / ``--tws-dict-keys`` keys
(default at most 1,000,000 / 200,000), and StatefulRunner runs that size too, for a
comparison at equal size.

    .venv/bin/python -m benchmarks.bench_residency [--keys N] [--dict-keys M]
        [--load-batch B] [--dict-load-batch B] [--batches 10] [--after-restart 5] [--storage DIR]
        [--tws-keys N] [--tws-dict-keys M] [--skip-tws] [--skip-dict] [--json PATH]
        [--cold] [--no-copies] [--rescale P]

A smoke run: ``--keys 200000 --dict-keys 50000 --batches 3 --after-restart 2``. The
figures are printed as tables and written to a JSON file (``--json``, default
``bench_residency.json`` in the temporary directory); BENCHMARKS.md is not touched.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common import fmt_bytes, machine, print_table

PRIME = 1_000_000_007
STRIDE = 2_654_435_761
FRACTION = 100  # a 1% batch touches N // FRACTION keys
TOUCH: int | None = None  # (--touch: keys a batch after the load touches instead)
SLOTS = 10  # entries of each key's dict
OUTPUT_DDL = "k long, v double"
INPUT_DDL = "k LONG, slot INT, x DOUBLE, out INT"
PYSPARK_MEMORY = "1g"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
SESSION_CONF = {
    "spark.executor.pyspark.memory": PYSPARK_MEMORY,
    "spark.sql.streaming.numRecentProgressUpdates": "1000",
    PROVIDER_CONF: ROCKSDB,
    CHANGELOG_CONF: "true",
}
PAGE = os.sysconf("SC_PAGE_SIZE")


# -- the state functions ------------------------------------------------------------------


def value_fn(key: Any, rows: list[dict[str, Any]], state: Any) -> Iterator[dict[str, Any]]:
    """Case ``value``: one float per key; every row adds its ``x``; ``out`` rows emit."""
    v = state.value("v", 0.0)
    emit = False
    for r in rows:
        v.value = v.value + r["x"]
        emit = emit or bool(r["out"])
    if emit:
        yield {"k": key, "v": v.value}


def dict_fn(key: Any, rows: list[dict[str, Any]], state: Any) -> Iterator[dict[str, Any]]:
    """Case ``dict``: 10 int entries per key, set to 0 by a load row (``out`` 0); an update
    row adds 1 to entry ``slot`` and the key's sum of entries is emitted."""
    d = state.dict("d")
    emit = False
    for r in rows:
        if r["out"]:
            s = r["slot"]
            d[s] = d[s] + 1
            emit = True
        else:
            for i in range(SLOTS):
                d[i] = 0
    if emit:
        yield {"k": key, "v": float(sum(d.values()))}


def make_tws_processor(case: str) -> Any:
    """The same two functions as transformWithStateInPandas processors."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class ValueProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.v = handle.getValueState("v", "v double")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
            add = 0.0
            emit = False
            for pdf in rows:
                add += float(pdf["x"].sum())
                emit = emit or bool(pdf["out"].any())
            got = self.v.get()
            v = (float(got[0]) if got is not None else 0.0) + add
            self.v.update((v,))
            if emit:
                yield pd.DataFrame({"k": [int(key[0])], "v": [v]})

        def close(self) -> None:
            pass

    class DictProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.d = handle.getMapState("d", "i int", "c long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
            emit = False
            for pdf in rows:
                for slot, out in zip(pdf["slot"].tolist(), pdf["out"].tolist(), strict=True):
                    if out:
                        got = self.d.getValue((int(slot),))
                        self.d.updateValue((int(slot),), (int(got[0]) + 1,))
                        emit = True
                    else:
                        for i in range(SLOTS):
                            self.d.updateValue((i,), (0,))
            if emit:
                total = float(sum(int(c[0]) for c in self.d.values()))
                yield pd.DataFrame({"k": [int(key[0])], "v": [total]})

        def close(self) -> None:
            pass

    return ValueProcessor() if case == "value" else DictProcessor()


# -- input ----------------------------------------------------------------------------------


def load_df(spark: Any, start: int, end: int) -> Any:
    """Keys ``start .. end - 1``, one load row each (x = 1.0, out = 0)."""
    return spark.range(start, end).selectExpr(
        "id AS k", "CAST(0 AS INT) AS slot", "1.0D AS x", "CAST(0 AS INT) AS out"
    )


def touched(n: int, batch: int) -> tuple[int, int]:
    """How many keys a 1% batch touches, and its offset: key = (id * PRIME + offset) % n."""
    return min(n, TOUCH) if TOUCH else max(1, n // FRACTION), (batch * STRIDE) % n


def update_df(spark: Any, n: int, batch: int) -> Any:
    m, offset = touched(n, batch)
    return spark.range(m).selectExpr(
        f"pmod(id * {PRIME} + {offset}, {n}) AS k",
        f"CAST(pmod(id + {batch}, {SLOTS}) AS INT) AS slot",
        "1.0D AS x",
        "CAST(1 AS INT) AS out",
    )


class Expected:
    """What the 1% batches' outputs must sum to: a count of touches per key (numpy)."""

    def __init__(self, case: str, n: int) -> None:
        import numpy as np

        self.case = case
        self.n = n
        self.counts = np.zeros(n, dtype=np.uint16)

    def batch(self, batch: int) -> tuple[int, float]:
        import numpy as np

        m, offset = touched(self.n, batch)
        keys = (np.arange(m, dtype=np.int64) * PRIME + offset) % self.n
        self.counts[keys] += 1
        total = float(self.counts[keys].sum(dtype=np.int64))
        if self.case == "value":
            total += m  # each key held 1.0 after the load
        return m, total


# -- RSS of the processes -------------------------------------------------------------------


def _status(pid: int) -> tuple[int, int]:
    """VmRSS and VmHWM of ``pid`` in bytes (0, 0 when it is gone)."""
    rss = hwm = 0
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return rss, hwm


def _processes() -> dict[int, tuple[int, str]]:
    """Every process: pid -> (ppid, comm)."""
    out: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        out[int(entry)] = (ppid, comm)
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


class RssMonitor:
    """Samples, every ``interval`` seconds, the RSS of this driver, of the JVM it started
    and of the Python workers under the JVM (processes whose command line names
    ``pyspark``; the daemon, the JVM's direct child, is kept apart). Each sample of the
    workers' maximum goes into a time series, and into the open window (one batch):
    per worker its largest VmRSS sampled, and its VmHWM (reset at the window's start when
    ``hwm`` is asked for)."""

    def __init__(self, interval: float = 0.1, rescan: float = 0.5) -> None:
        self.interval = interval
        self.rescan = rescan
        self.me = os.getpid()
        self.lock = threading.Lock()
        self.workers: set[int] = set()
        self.daemons: set[int] = set()
        self.jvm: int | None = None
        self.seen_workers: set[int] = set()
        self.series: list[tuple[float, int, int, int]] = []  # time, max worker, driver, jvm
        self.window: dict[str, Any] | None = None
        self.driver_peak = 0
        self.jvm_peak = 0
        self.worker_peak = 0
        self.worker_limit = ""
        self._last_scan = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-monitor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _scan(self) -> None:
        procs = _processes()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _c) in procs.items():
            children.setdefault(ppid, []).append(pid)
        jvm = None
        for pid in children.get(self.me, []):
            if procs[pid][1] == "java":
                jvm = pid
        workers: set[int] = set()
        daemons: set[int] = set()
        if jvm is not None:
            todo = list(children.get(jvm, []))
            while todo:
                pid = todo.pop()
                todo.extend(children.get(pid, []))
                if "pyspark" not in _cmdline(pid):
                    continue
                (daemons if procs[pid][0] == jvm else workers).add(pid)
        with self.lock:
            self.jvm = jvm
            self.workers = workers
            self.daemons = daemons
            self.seen_workers |= workers
        self._last_scan = time.monotonic()

    def sample(self) -> None:
        if time.monotonic() - self._last_scan >= self.rescan:
            self._scan()
        with self.lock:
            workers = sorted(self.workers)
            jvm = self.jvm
        driver = _status(self.me)[0]
        jvm_rss = _status(jvm)[0] if jvm else 0
        top = 0
        per: dict[int, tuple[int, int]] = {}
        for pid in workers:
            rss, hwm = _status(pid)
            if rss:
                per[pid] = (rss, hwm)
                top = max(top, rss)
        now = time.time()
        with self.lock:
            self.series.append((now, top, driver, jvm_rss))
            self.driver_peak = max(self.driver_peak, driver)
            self.jvm_peak = max(self.jvm_peak, jvm_rss)
            self.worker_peak = max(self.worker_peak, top)
            w = self.window
            if w is not None:
                w["driver"] = max(w["driver"], driver)
                w["jvm"] = max(w["jvm"], jvm_rss)
                for pid, (rss, hwm) in per.items():
                    w["rss"][pid] = max(w["rss"].get(pid, 0), rss)
                    if w["hwm_ok"] and (pid in w["reset"] or pid not in w["before"]):
                        # reset at the window's start, or born in it: VmHWM is its peak
                        w["hwm"][pid] = max(w["hwm"].get(pid, 0), hwm)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as exc:  # a measurement must not kill the run
                print(f"[rss monitor: {exc!r}]", file=sys.stderr, flush=True)
            self._stop.wait(self.interval)

    def open_window(self, hwm: bool = True) -> None:
        self._scan()
        with self.lock:
            before = set(self.workers)
        reset: set[int] = set()
        if hwm:
            for pid in before:
                try:
                    with open(f"/proc/{pid}/clear_refs", "w") as f:
                        f.write("5")
                    reset.add(pid)
                except OSError:
                    pass
        with self.lock:
            self.window = {
                "driver": 0,
                "jvm": 0,
                "rss": {},
                "hwm": {},
                "before": before,
                "reset": reset,
                "hwm_ok": hwm,
            }
        self.sample()

    def close_window(self) -> dict[str, Any]:
        self.sample()
        with self.lock:
            w = self.window or {}
            self.window = None
        rss = w.get("rss", {})
        hwm = w.get("hwm", {})
        if rss:  # a worker sets its limit when it starts its first task: read it now
            self.worker_limit = _address_limit(max(rss))
        return {
            "worker_rss": max(rss.values(), default=0),
            "worker_hwm": max(hwm.values(), default=0),
            "workers": len(rss),
            "worker_pids": sorted(rss),
            "driver_rss": w.get("driver", 0),
            "jvm_rss": w.get("jvm", 0),
        }

    def between(self, t0: float, t1: float) -> tuple[int, int, int]:
        """The largest sampled worker, driver and JVM RSS in ``[t0, t1]`` (epoch seconds)."""
        with self.lock:
            picked = [s for s in self.series if t0 <= s[0] <= t1]
        return (
            max((s[1] for s in picked), default=0),
            max((s[2] for s in picked), default=0),
            max((s[3] for s in picked), default=0),
        )


def _address_limit(pid: int) -> str:
    """The 'Max address space' soft limit of ``pid`` (what spark.executor.pyspark.memory
    sets on a Python worker)."""
    try:
        with open(f"/proc/{pid}/limits", encoding="ascii") as f:
            for line in f:
                if line.startswith("Max address space"):
                    soft = line.split()[3]
                    return soft if soft == "unlimited" else fmt_bytes(int(soft))
    except (OSError, ValueError, IndexError):
        pass
    return "?"


def driver_hwm() -> int:
    return _status(os.getpid())[1]


# -- sessions -------------------------------------------------------------------------------


def new_session() -> Any:
    from objectspace.spark import local_session

    return local_session("local[2]", app_name="objectspace-bench-residency", **SESSION_CONF)


# -- StatefulRunner -------------------------------------------------------------------------


@dataclass
class RunnerBatch:
    phase: str
    checkpoint: int
    rows: int
    wall: float
    worker_rss: int
    worker_hwm: int
    workers: int
    driver_rss: int
    jvm_rss: int
    seconds_restore: float
    seconds_process: float
    seconds_save: float
    objects_loaded: int
    bytes_read: int
    rows_read: int
    objects_resident: int
    bytes_resident: int
    objects_evicted: int
    bytes_written: int
    check: str = ""
    copy_bytes_read: int = 0
    copy_bytes_written: int = 0


@dataclass
class RunnerRun:
    case: str
    keys: int
    batches: list[RunnerBatch] = field(default_factory=list)
    budget: int | None = None
    restart_seconds: float = 0.0
    load_seconds: float = 0.0
    worker_limit: str = ""
    storage_bytes: int = 0
    local_bytes: int = 0
    failed_wall: float = 0.0
    failed_worker_rss: int = 0
    error: str = ""
    notes: list[str] = field(default_factory=list)


def folder_bytes(root: str) -> int:
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(folder, name))
    return total


def load_batch(args: argparse.Namespace, case: str) -> int:
    """Keys per load batch of ``case``."""
    return int(args.dict_load_batch or args.load_batch) if case == "dict" else int(args.load_batch)


def make_runner(
    case: str, url: str, local_dir: str, copies: bool = True, parallelism: int = 4
) -> Any:
    from objectspace.spark import StatefulRunner

    return StatefulRunner(
        value_fn if case == "value" else dict_fn,
        key="k",
        order_by="slot",
        output_schema=OUTPUT_DDL,
        storage=url,
        job=f"residency-{case}",
        operator=case,
        max_key_groups=128,
        parallelism=parallelism,
        local_dir=local_dir,
        local_copy_every=10 if copies else None,
    )


def run_runner(
    case: str, n: int, args: argparse.Namespace, root: str, monitor: RssMonitor
) -> RunnerRun:
    """One case through StatefulRunner: load, 1% batches, restart, 1% batches."""
    from pyspark.sql import functions as F

    run = RunnerRun(case, n)
    folder = os.path.join(args.storage or root, f"runner-{case}-{n}")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    db = os.path.join(folder, "state.db")
    url = f"sqlite:///{db}"
    local_dir = os.path.join(root, f"local-{case}-{n}")
    expected = Expected(case, n)
    label = f"StatefulRunner {case} N={n:,}"
    spark = new_session()
    runner = make_runner(case, url, local_dir, not args.no_copies)
    cid = 0
    pids: dict[str, set[int]] = {"load": set(), "1%": set(), "restart": set()}

    def one(phase: str, df: Any, rows: int, want: tuple[int, float] | None) -> None:
        nonlocal cid
        monitor.open_window(hwm=True)
        t0 = time.perf_counter()
        try:
            out = runner.process(df, cid)
        except Exception:
            w = monitor.close_window()
            run.failed_wall = time.perf_counter() - t0
            run.failed_worker_rss = max(w["worker_rss"], w["worker_hwm"])
            run.budget = runner.memory_budget
            run.worker_limit = run.worker_limit or monitor.worker_limit
            raise
        wall = time.perf_counter() - t0
        w = monitor.close_window()
        run.budget = runner.memory_budget
        run.worker_limit = run.worker_limit or monitor.worker_limit
        b = runner.last_batch
        pids[phase] |= set(w["worker_pids"])
        check = ""
        if want is not None:
            got = out.agg(F.count("*").alias("n"), F.sum("v").alias("s")).collect()[0]
            ok = int(got["n"]) == want[0] and abs(float(got["s"] or 0.0) - want[1]) < 1e-6
            check = "ok" if ok else f"WRONG: {got['n']} rows, sum {got['s']} != {want}"
            if not ok:
                run.notes.append(f"checkpoint {cid}: output {check}")
        row = RunnerBatch(
            phase,
            cid,
            rows,
            wall,
            w["worker_rss"],
            w["worker_hwm"],
            w["workers"],
            w["driver_rss"],
            w["jvm_rss"],
            b.seconds_restore,
            b.seconds_process,
            b.seconds_save,
            b.objects_loaded,
            b.bytes_read,
            b.rows_read,
            b.objects_resident,
            b.bytes_resident,
            b.objects_evicted,
            b.bytes_written,
            check,
            b.copy_bytes_read,
            b.copy_bytes_written,
        )
        run.batches.append(row)
        print(
            f"  [{label}] {phase:7} ckpt {cid:3}: {rows:>9,} rows {wall:7.2f} s, "
            f"worker peak {fmt_bytes(max(row.worker_rss, row.worker_hwm))} "
            f"({row.workers} workers), loaded {row.objects_loaded:,}, read "
            f"{fmt_bytes(row.bytes_read)}, resident {row.objects_resident:,} "
            f"({fmt_bytes(row.bytes_resident)}), evicted {row.objects_evicted:,}, restore "
            f"{row.seconds_restore:.2f} s, copies read {fmt_bytes(row.copy_bytes_read)} "
            f"written {fmt_bytes(row.copy_bytes_written)}, load avg {os.getloadavg()[0]:.2f} "
            f"{check}",
            flush=True,
        )
        cid += 1

    phase = "load"
    try:
        t0 = time.perf_counter()
        step = load_batch(args, case)
        for start in range(0, n, step):
            end = min(n, start + step)
            one("load", load_df(spark, start, end), end - start, None)
        run.load_seconds = time.perf_counter() - t0
        phase = "1%"
        for b in range(args.batches):
            want = expected.batch(b)
            one("1%", update_df(spark, n, b), want[0], want)
        phase = "restart"
        runner.close()
        t0 = time.perf_counter()
        before = set(monitor.seen_workers)
        spark.stop()
        if args.cold:  # a new executor elsewhere: no local store
            shutil.rmtree(local_dir, ignore_errors=True)
        spark = new_session()
        runner = make_runner(case, url, local_dir, not args.no_copies, args.rescale or 4)
        last = runner.job.last_checkpoint()
        run.restart_seconds = time.perf_counter() - t0
        if last != cid - 1:
            run.notes.append(f"after the restart, last_checkpoint() = {last}, expected {cid - 1}")
        cid = (last or 0) + 1
        phase = "after restart"
        for b in range(args.batches, args.batches + args.after_restart):
            want = expected.batch(b)
            one("restart", update_df(spark, n, b), want[0], want)
        after = set(pids["restart"])
        run.notes.append(
            f"Python workers in the batches after the restart: {len(after)} processes, "
            f"{len(after & before)} of them from before the restart"
        )
    except Exception as exc:
        run.error = f"{phase} batch, checkpoint {cid}: {type(exc).__name__}: {exc}"
        print(f"  [{label}] FAILED in the {run.error[:4000]}", flush=True)
    finally:
        with contextlib.suppress(Exception):
            runner.close()
        spark.stop()
    run.storage_bytes = folder_bytes(folder)
    run.local_bytes = folder_bytes(local_dir)
    if not args.storage:
        shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(local_dir, ignore_errors=True)
    return run


# -- transformWithStateInPandas -------------------------------------------------------------


@dataclass
class TwsBatch:
    phase: str
    batch_id: int
    rows: int
    wall: float
    add_batch: float
    worker_rss: int
    driver_rss: int
    jvm_rss: int
    state_rows: int
    state_memory: int
    commit_ms: float


@dataclass
class TwsRun:
    case: str
    keys: int
    batches: list[TwsBatch] = field(default_factory=list)
    query_seconds: list[float] = field(default_factory=list)
    write_seconds: float = 0.0
    restart_seconds: float = 0.0
    state_bytes: int = 0
    changelog_files: int = 0
    error: str = ""
    notes: list[str] = field(default_factory=list)


def _write_file(df: Any, folder: str, index: int, scratch: str) -> None:
    """``df`` as one Parquet file ``folder/batch-<index>.parquet``, its mtime in order."""
    out = os.path.join(scratch, f"w{index}")
    df.coalesce(1).write.parquet(out)
    part = [p for p in os.listdir(out) if p.endswith(".parquet")]
    assert len(part) == 1, part
    path = os.path.join(folder, f"batch-{index:05d}.parquet")
    os.replace(os.path.join(out, part[0]), path)
    shutil.rmtree(out)
    stamp = 1_700_000_000 + 10 * index  # the file source orders files by modification time
    os.utime(path, (stamp, stamp))


def _parse_ts(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def run_tws(case: str, n: int, args: argparse.Namespace, root: str, monitor: RssMonitor) -> TwsRun:
    run = TwsRun(case, n)
    base = os.path.join(root, f"tws-{case}-{n}")
    shutil.rmtree(base, ignore_errors=True)
    inputs = os.path.join(base, "input")
    scratch = os.path.join(base, "scratch")
    checkpoint = os.path.join(base, "checkpoint")
    os.makedirs(inputs)
    os.makedirs(scratch)
    label = f"tWS {case} N={n:,}"
    spark = new_session()
    index = 0
    phases: list[str] = []
    phase = "writing input"
    try:
        t0 = time.perf_counter()
        step = load_batch(args, case)
        for start in range(0, n, step):
            end = min(n, start + step)
            _write_file(load_df(spark, start, end), inputs, index, scratch)
            phases.append("load")
            index += 1
        for b in range(args.batches):
            _write_file(update_df(spark, n, b), inputs, index, scratch)
            phases.append("1%")
            index += 1
        run.write_seconds = time.perf_counter() - t0
        phase = "first query"
        first = _tws_query(spark, case, inputs, checkpoint, run, monitor, phases, label)
        phase = "restart"
        t0 = time.perf_counter()
        spark.stop()
        spark = new_session()
        run.restart_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        for b in range(args.batches, args.batches + args.after_restart):
            _write_file(update_df(spark, n, b), inputs, index, scratch)
            phases.append("restart")
            index += 1
        run.write_seconds += time.perf_counter() - t0
        phase = "query after the restart"
        _tws_query(spark, case, inputs, checkpoint, run, monitor, phases, label, offset=first)
    except Exception as exc:
        run.error = f"{phase}: {type(exc).__name__}: {exc}"
        print(f"  [{label}] FAILED in {run.error[:4000]}", flush=True)
    finally:
        spark.stop()
    state = os.path.join(checkpoint, "state")
    run.state_bytes = folder_bytes(state)
    for _folder, _dirs, files in os.walk(state):
        run.changelog_files += sum(1 for f in files if f.endswith(".changelog"))
    if not run.changelog_files:
        run.notes.append("no changelog files: changelog checkpointing not in effect")
    shutil.rmtree(base, ignore_errors=True)
    return run


def _tws_query(
    spark: Any,
    case: str,
    inputs: str,
    checkpoint: str,
    run: TwsRun,
    monitor: RssMonitor,
    phases: list[str],
    label: str,
    offset: int = 0,
) -> int:
    """Run the query over the files not yet processed; return how many batches it ran."""
    stream = (
        spark.readStream.schema(INPUT_DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(inputs)
        .groupBy("k")
        .transformWithStateInPandas(make_tws_processor(case), OUTPUT_DDL, "Update", "None")
    )
    t0 = time.perf_counter()
    query = (
        stream.writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wall = time.perf_counter() - t0
    monitor.sample()
    run.query_seconds.append(wall)
    if query.exception() is not None:
        raise RuntimeError(f"query failed: {query.exception()}")
    ran = 0
    for p in query.recentProgress:
        if not p.numInputRows:
            continue
        d = p.durationMs or {}
        trigger = d.get("triggerExecution", 0) / 1e3
        start = _parse_ts(p.timestamp)
        worker, driver, jvm = monitor.between(start, start + trigger + 0.2)
        ops = p.stateOperators or []
        batch_id = int(p.batchId)
        phase = phases[batch_id] if batch_id < len(phases) else "?"
        row = TwsBatch(
            phase,
            batch_id,
            int(p.numInputRows),
            trigger,
            d.get("addBatch", 0) / 1e3,
            worker,
            driver,
            jvm,
            sum(int(o.numRowsTotal) for o in ops),
            sum(int(o.memoryUsedBytes) for o in ops),
            sum(float(o.commitTimeMs) for o in ops),
        )
        run.batches.append(row)
        ran += 1
        print(
            f"  [{label}] {row.phase:7} batch {batch_id:3}: {row.rows:>9,} rows "
            f"{row.wall:7.2f} s, worker peak {fmt_bytes(row.worker_rss)}, state rows "
            f"{row.state_rows:,}",
            flush=True,
        )
    print(f"  [{label}] query: {wall:.1f} s start to end, {ran} batches", flush=True)
    return offset + ran


# -- reporting ------------------------------------------------------------------------------


def _mb(n: int) -> str:
    return f"{n / 1e6:,.0f} MB" if n else "-"


def runner_table(run: RunnerRun) -> str:
    headers = [
        "phase",
        "ckpt",
        "rows",
        "wall",
        "peak RSS / worker",
        "workers",
        "objects loaded",
        "bytes read",
        "objects resident",
        "bytes_resident",
        "evicted",
        "Σ restore",
        "Σ process",
        "Σ save",
        "driver RSS",
        "JVM RSS",
        "output",
    ]
    rows = []
    for b in run.batches:
        rows.append(
            [
                b.phase,
                b.checkpoint,
                f"{b.rows:,}",
                f"{b.wall:.2f} s",
                _mb(max(b.worker_rss, b.worker_hwm)),
                b.workers,
                f"{b.objects_loaded:,}",
                fmt_bytes(b.bytes_read),
                f"{b.objects_resident:,}",
                fmt_bytes(b.bytes_resident),
                f"{b.objects_evicted:,}",
                f"{b.seconds_restore:.2f} s",
                f"{b.seconds_process:.2f} s",
                f"{b.seconds_save:.2f} s",
                _mb(b.driver_rss),
                _mb(b.jvm_rss),
                b.check or "-",
            ]
        )
    return print_table(headers, rows)


def tws_table(run: TwsRun) -> str:
    headers = [
        "phase",
        "batch",
        "rows",
        "wall (triggerExecution)",
        "addBatch",
        "peak RSS / worker (sampled)",
        "JVM RSS",
        "state rows",
        "state store memory",
        "commit",
    ]
    rows = [
        [
            b.phase,
            b.batch_id,
            f"{b.rows:,}",
            f"{b.wall:.2f} s",
            f"{b.add_batch:.2f} s",
            _mb(b.worker_rss),
            _mb(b.jvm_rss),
            f"{b.state_rows:,}",
            fmt_bytes(b.state_memory),
            f"{b.commit_ms / 1e3:.2f} s",
        ]
        for b in run.batches
    ]
    return print_table(headers, rows)


def _short(error: str) -> str:
    """An error's first line and its last 8 (a Python worker's traceback ends with its
    cause; the JSON keeps the whole text)."""
    lines = error.splitlines()
    return "\n".join(lines if len(lines) <= 10 else [lines[0], "  ...", *lines[-8:]])


def _stats(values: list[float]) -> str:
    if not values:
        return "-"
    s = sorted(values)
    return f"{s[len(s) // 2]:.2f} s (min {s[0]:.2f}, max {s[-1]:.2f})"


def summary_table(runners: list[RunnerRun], twss: list[TwsRun]) -> str:
    headers = [
        "what",
        "keys",
        "load (all batches)",
        "1% batch wall, median",
        "restart",
        "1st batch after restart",
        "later batches after restart, median",
        "peak RSS / worker",
        "state on disk",
    ]
    rows = []
    for r in runners:
        load = [b.wall for b in r.batches if b.phase == "load"]
        upd = [b.wall for b in r.batches if b.phase == "1%"]
        rst = [b.wall for b in r.batches if b.phase == "restart"]
        peak = max((max(b.worker_rss, b.worker_hwm) for b in r.batches), default=0)
        rows.append(
            [
                f"StatefulRunner, {r.case}" + (" (FAILED)" if r.error else ""),
                f"{r.keys:,}",
                f"{sum(load):.1f} s",
                _stats(upd),
                f"{r.restart_seconds:.1f} s" if r.restart_seconds else "-",
                f"{rst[0]:.2f} s" if rst else "-",
                _stats(rst[1:]),
                _mb(peak),
                f"{fmt_bytes(r.storage_bytes)} + local {fmt_bytes(r.local_bytes)}",
            ]
        )
    for t in twss:
        load = [b.wall for b in t.batches if b.phase == "load"]
        upd = [b.wall for b in t.batches if b.phase == "1%"]
        rst = [b.wall for b in t.batches if b.phase == "restart"]
        peak = max((b.worker_rss for b in t.batches), default=0)
        rows.append(
            [
                f"transformWithStateInPandas, {t.case}" + (" (FAILED)" if t.error else ""),
                f"{t.keys:,}",
                f"{sum(load):.1f} s",
                _stats(upd),
                f"{t.restart_seconds:.1f} s + query start "
                + (f"{t.query_seconds[1] - sum(rst):.1f} s" if len(t.query_seconds) > 1 else "-"),
                f"{rst[0]:.2f} s" if rst else "-",
                _stats(rst[1:]),
                _mb(peak),
                fmt_bytes(t.state_bytes),
            ]
        )
    return print_table(headers, rows)


# -- main -----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000_000, help="keys of the value case")
    parser.add_argument("--dict-keys", type=int, default=1_000_000, help="keys of the dict case")
    parser.add_argument("--load-batch", type=int, default=500_000, help="keys per load batch")
    parser.add_argument(
        "--dict-load-batch",
        type=int,
        help="keys per load batch of the dict case (default: --load-batch)",
    )
    parser.add_argument("--batches", type=int, default=10, help="1%% batches before the restart")
    parser.add_argument("--after-restart", type=int, default=5, help="1%% batches after it")
    parser.add_argument("--storage", help="folder of the sqlite:/// storage (kept)")
    parser.add_argument(
        "--tws-keys", type=int, help="keys of the side-by-side value case (default ≤ 1,000,000)"
    )
    parser.add_argument(
        "--tws-dict-keys", type=int, help="keys of the side-by-side dict case (default ≤ 200,000)"
    )
    parser.add_argument("--skip-tws", action="store_true", help="no transformWithStateInPandas")
    parser.add_argument(
        "--cold", action="store_true", help="delete the local stores at the restart"
    )
    parser.add_argument(
        "--no-copies", action="store_true", help="local_copy_every=None (no local store copies)"
    )
    parser.add_argument(
        "--rescale",
        type=int,
        metavar="P",
        help="run at parallelism P after the restart (the instances before it: 4)",
    )
    parser.add_argument(
        "--touch",
        type=int,
        metavar="N",
        help="keys each batch after the load touches (default: 1%% of the keys)",
    )
    parser.add_argument("--skip-dict", action="store_true", help="only the value case")
    parser.add_argument("--skip-value", action="store_true", help="only the dict case")
    parser.add_argument("--json", help="where to write the figures (default: temp dir)")
    parser.add_argument("--quick", action="store_true", help="the smoke sizes")
    parser.add_argument("--no-record", action="store_true", help="(nothing is recorded anyway)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    global TOUCH
    TOUCH = args.touch
    if args.quick:
        args.keys, args.dict_keys, args.batches, args.after_restart = 200_000, 50_000, 3, 2
    if args.load_batch < 1 or args.keys < FRACTION or args.dict_keys < FRACTION:
        sys.exit("--load-batch must be >= 1 and --keys, --dict-keys >= 100")
    tws_keys = args.tws_keys or min(args.keys, 1_000_000)
    tws_dict_keys = args.tws_dict_keys or min(args.dict_keys, 200_000)

    command = " ".join([".venv/bin/python -m benchmarks.bench_residency", *sys.argv[1:]])
    print(f"command: {command}")
    print(f"machine: {machine()}")
    print(f"load average at start (1/5/15 min): {os.getloadavg()}", flush=True)
    import objectspace

    print(f"objectspace imported from {os.path.dirname(objectspace.__file__)}", flush=True)
    started = time.perf_counter()
    if __name__ != "__main__":
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    cases: list[tuple[str, int, int]] = []
    if not args.skip_value:
        cases.append(("value", args.keys, tws_keys))
    if not args.skip_dict:
        cases.append(("dict", args.dict_keys, tws_dict_keys))

    monitor = RssMonitor()
    monitor.start()
    runners: list[RunnerRun] = []
    twss: list[TwsRun] = []
    root = tempfile.mkdtemp(prefix="osp-bench-residency-")
    try:
        for case, n, small in cases:
            print(f"\n== {case}: StatefulRunner, {n:,} keys", flush=True)
            runners.append(run_runner(case, n, args, root, monitor))
            if args.skip_tws:
                continue
            if small != n:
                print(f"\n== {case}: StatefulRunner, {small:,} keys (as tWS)", flush=True)
                runners.append(run_runner(case, small, args, root, monitor))
            print(f"\n== {case}: transformWithStateInPandas, {small:,} keys", flush=True)
            twss.append(run_tws(case, small, args, root, monitor))
    finally:
        monitor.stop()
        shutil.rmtree(root, ignore_errors=True)
    total = time.perf_counter() - started

    print("\n" + "=" * 100)
    print(f"command: {command}")
    print(
        "Session: local[2], spark.executor.pyspark.memory=1g, shuffle partitions 4; "
        "StatefulRunner parallelism 4"
        + (f" ({args.rescale} after the restart)" if args.rescale else "")
        + ", max_key_groups 128, sqlite:/// storage, default "
        "memory budget; 1% batches: N/100 distinct keys each."
        + (" Cold restart (local stores deleted)." if args.cold else "")
    )
    for r in runners:
        print(
            f"\n### StatefulRunner, {r.case}, {r.keys:,} keys (load batches of "
            f"{load_batch(args, r.case):,}; memory budget {fmt_bytes(r.budget or 0)} per worker as "
            f"requested; workers' address-space limit {r.worker_limit or '?'})\n"
        )
        runner_table(r)
        restart = f"{r.restart_seconds:.1f} s" if r.restart_seconds else "not reached"
        print(
            f"\nrestart (spark.stop, new session, new runner): {restart}; "
            f"storage at end {fmt_bytes(r.storage_bytes)}, local stores {fmt_bytes(r.local_bytes)}"
        )
        for note in r.notes:
            print(f"- {note}")
        if r.error:
            print(
                f"- **FAILED** after {r.failed_wall:.1f} s (worker peak RSS in that batch "
                f"{_mb(r.failed_worker_rss)}) in the {_short(r.error)}"
            )
    for t in twss:
        print(f"\n### transformWithStateInPandas (RocksDB, changelog), {t.case}, {t.keys:,} keys\n")
        tws_table(t)
        print(
            f"\nqueries start to end: {', '.join(f'{s:.1f} s' for s in t.query_seconds)}; "
            f"restart (spark.stop, new session): {t.restart_seconds:.1f} s; input files "
            f"written in {t.write_seconds:.1f} s; state files at end "
            f"{fmt_bytes(t.state_bytes)} ({t.changelog_files} changelog files)"
        )
        for note in t.notes:
            print(f"- {note}")
        if t.error:
            print(f"- **FAILED** in the {_short(t.error)}")
    print("\n### Summary\n")
    summary_table(runners, twss)
    peak = driver_hwm()
    print(
        f"\ndriver (Python) peak RSS: {fmt_bytes(peak)} (VmHWM; {fmt_bytes(monitor.driver_peak)} "
        f"sampled); JVM peak RSS sampled: {fmt_bytes(monitor.jvm_peak)}; Python worker peak "
        f"RSS sampled over the whole run: {fmt_bytes(monitor.worker_peak)}; Python workers "
        f"seen: {len(monitor.seen_workers)}"
    )
    if not args.skip_tws and (tws_keys != args.keys or tws_dict_keys != args.dict_keys):
        print(
            f"transformWithStateInPandas ran with {tws_keys:,} value keys and "
            f"{tws_dict_keys:,} dict keys (not {args.keys:,} / {args.dict_keys:,}): building "
            "millions of keys through it is impractically slow; StatefulRunner ran those "
            "sizes too for the comparison."
        )
    print(f"\nbench_residency done in {total:.0f} s")
    print(f"load average at end (1/5/15 min): {os.getloadavg()}")
    path = args.json or os.path.join(tempfile.gettempdir(), "bench_residency.json")
    data = {
        "command": command,
        "machine": machine(),
        "seconds": total,
        "driver_peak_rss": peak,
        "jvm_peak_rss": monitor.jvm_peak,
        "runner": [dataclasses.asdict(r) for r in runners],
        "tws": [dataclasses.asdict(t) for t in twss],
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    print(f"[figures written to {path}]")


if __name__ == "__main__":
    main()
