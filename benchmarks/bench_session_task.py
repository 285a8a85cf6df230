"""The Python task of ``bench_sessions`` without Spark: CPU time of the one task per batch.

``bench_sessions`` gives each micro-batch to Spark in one partition, so one Python task
runs every instance of the batch (``_InstanceTask.run_partition``) with the instances kept
in the worker's memory across batches. This runs that same task code over the same
workload, driver steps included (time plan, commit), without a JVM, and reports the
process CPU time of the tasks alone (``time.process_time``, summed over the batches), as
the median of ``--repeat`` runs, with the tasks' own restore / process / save split::

    .venv/bin/python -m benchmarks.bench_session_task [--users N] [--batches N]
        [--repeat N] [--storage sqlite|segments|memory] [--profile FILE] [--function] [--gc]

It checks the sessions it emits against ``bench_sessions``' plain Python reference.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import secrets
import statistics
import tempfile
import time
from typing import Any
from urllib.parse import urlencode

from benchmarks.bench_sessions import GAP_MS, UserSessions, Workload, write_input


def _read_batches(folder: str) -> list[Any]:
    import pyarrow as pa
    import pyarrow.json as pj

    schema = pa.schema([("user", pa.int64()), ("tsm", pa.int64()), ("v", pa.float64())])
    out = []
    for name in sorted(os.listdir(folder)):
        table = pj.read_json(
            os.path.join(folder, name), parse_options=pj.ParseOptions(explicit_schema=schema)
        )
        out.append(table.to_batches())
    return out


def _output_schema() -> Any:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema(
        [
            ("user", pa.int64()),
            ("start", ts),
            ("end", ts),
            ("count", pa.int64()),
            ("sum", pa.float64()),
            ("__os_receipt", pa.binary()),
        ]
    )


class CollectorTimes:
    """The cyclic collector's collections while :attr:`active` (``gc.callbacks``): per
    generation, how many and their seconds (``--gc``: inside the tasks only)."""

    def __init__(self) -> None:
        self.active = False
        self.counts = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if not self.active:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            generation = info["generation"]
            self.counts[generation] += 1
            self.seconds[generation] += time.perf_counter() - self._started

    def line(self) -> str:
        parts = [
            f"{name} {n} x {s:.2f} s"
            for name, n, s in zip(
                ("young", "middle", "full"), self.counts, self.seconds, strict=True
            )
        ]
        return f"collector in the tasks {sum(self.seconds):.2f} s ({', '.join(parts)})"


def run_once(
    batches: list[Any],
    url: str,
    profile: cProfile.Profile | None,
    function: bool = False,
    processes: int = 1,
    collector: CollectorTimes | None = None,
) -> dict[str, Any]:
    """One run of every batch; the CPU seconds of the tasks and what they emitted."""
    import pyarrow as pa
    from pyspark import TaskContext

    from objectspace import operators as ops
    from objectspace.checkpoint import open_storage
    from objectspace.collector import keep_frozen
    from objectspace.engine import INLINE_STATE_BYTES, BatchDriver, TimeOptions
    from objectspace.spark import cache
    from objectspace.spark.helpers import HELPERS
    from objectspace.spark.receipts import unpack_receipt
    from objectspace.spark.task import _InstanceTask

    cache.WORKER.clear()
    # The tasks run as in a Spark worker: in a task context, which the task and its helpers
    # see (the worker's collector policy, objectspace.collector.keep_frozen, follows it).
    TaskContext._getOrCreate()
    storage = open_storage(url)
    job = storage.job("bench-sessions")
    operator = job.operator("sessions", 128)
    job.fence()
    options = TimeOptions.of("event", "tsm", "0 seconds", "drop", None)
    fn: Any = (
        UserSessions()
        if function
        else ops.session_window("2 minutes", value="v", aggs=("count", "sum"))
    )
    schema = _output_schema()
    driver = BatchDriver(
        operator,
        fn,
        key_columns=("user",),
        order_columns=("tsm",),
        output_columns=tuple(schema.names),
        retain=2,
        time=options,
    )
    p = 4
    owner = "bench/" + secrets.token_hex(8)
    cpu = 0.0
    wall = 0.0
    split = {"restore": 0.0, "process": 0.0, "save": 0.0}
    sessions: set[tuple[int, int, int, int, float]] = set()
    for checkpoint_id, record_batches in enumerate(batches):
        plan = driver.begin(
            checkpoint_id,
            p,
            stage_bytes=INLINE_STATE_BYTES // p,
            use_cache=True,
            owner=owner,
        )
        task = _InstanceTask(
            plan,
            schema,
            plan.due_instances(),
            16 * 1024 * 1024 // p,
            hash_keys=True,
            processes=processes,
        )
        if profile is not None:
            profile.enable()
        t0 = time.process_time()
        w0 = time.perf_counter()
        if collector is not None:
            collector.active = True
        result = list(task.run_partition(iter(record_batches)))
        if collector is not None:
            collector.active = False
        wall += time.perf_counter() - w0
        cpu += time.process_time() - t0
        if profile is not None:
            profile.disable()
        table = pa.Table.from_batches(result, schema)
        reports: list[Any] = []
        for blob in table.column("__os_receipt").to_pylist():
            if blob is None:
                continue
            receipt, stats, output = unpack_receipt(blob)
            reports.append((receipt, stats))
            if output:
                rows = pa.ipc.open_stream(output).read_all().to_pylist()
                for r in rows:
                    sessions.add(
                        (
                            r["user"],
                            int(r["start"].timestamp() * 1000),
                            int(r["end"].timestamp() * 1000),
                            r["count"],
                            r["sum"],
                        )
                    )
        batch = driver.finish(plan, reports)
        split["restore"] += batch.seconds_restore
        split["process"] += batch.seconds_process
        split["save"] += batch.seconds_save
    storage.close()
    HELPERS.stop_all()
    TaskContext._setTaskContext(None)
    keep_frozen(False)
    return {"cpu": cpu, "wall": wall, "split": split, "sessions": sessions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--storage", choices=("sqlite", "segments", "memory"), default="sqlite")
    parser.add_argument("--profile", help="write a cProfile of the tasks (all runs) here")
    parser.add_argument(
        "--function",
        action="store_true",
        help="run bench_sessions' user function (state.value, timers) instead of session_window",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="run the instances in this many processes (the task and its helpers; the CPU "
        "figure is then the task's own, the wall figure counts)",
    )
    parser.add_argument(
        "--gc",
        action="store_true",
        help="time the cyclic collector's collections inside the tasks (gc.callbacks)",
    )
    args = parser.parse_args()
    import gc

    import objectspace

    print("objectspace from", os.path.dirname(objectspace.__file__))
    with tempfile.TemporaryDirectory(prefix="bench-session-task-") as root:
        work = Workload(args.users, args.batches)
        write_input(work, os.path.join(root, "input"))
        batches = _read_batches(work.folder)
        expected = {(u, s, e, c, float(v)) for u, s, e, c, v in work.expected}
        # Arrow's first conversions import modules (pandas among them): before any timing,
        # as a Spark worker has them loaded after its first batch.
        import pyarrow as pa

        pa.Table.from_pylist([{"user": 0, "__os_receipt": b""}], schema=_output_schema())
        profile = cProfile.Profile() if args.profile else None
        runs = []
        for i in range(args.repeat):
            folder = os.path.join(root, f"run-{i}")
            os.makedirs(folder)
            if args.storage == "sqlite":
                url = f"sqlite:///{folder}/state.db"
            elif args.storage == "segments":
                url = f"file://{folder}/seg?" + urlencode({"catalog": f"sqlite:///{folder}/cat.db"})
            else:
                url = f"memory://bench-session-task-{i}-{secrets.token_hex(4)}"
            collector = CollectorTimes() if args.gc else None
            if collector is not None:
                gc.callbacks.append(collector)
            try:
                res = run_once(batches, url, profile, args.function, args.processes, collector)
            finally:
                if collector is not None:
                    gc.callbacks.remove(collector)
            if res["sessions"] != expected:
                raise SystemExit(
                    f"run {i}: {len(res['sessions'])} sessions, "
                    f"{len(res['sessions'] ^ expected)} differ from the reference"
                )
            split = res["split"]
            print(
                f"run {i}: tasks wall {res['wall']:.3f} s, task CPU {res['cpu']:.3f} s  (restore {split['restore']:.3f} / "
                f"process {split['process']:.3f} / save {split['save']:.3f} s wall)",
                flush=True,
            )
            if collector is not None:
                print(f"run {i}: {collector.line()}", flush=True)
            runs.append(res)
        cpus = [r["cpu"] for r in runs]
        walls = [r["wall"] for r in runs]
        print(f"median tasks wall {statistics.median(walls):.3f} s over {len(walls)} runs")
        print(
            f"median task CPU {statistics.median(cpus):.3f} s over {len(cpus)} runs "
            f"(min {min(cpus):.3f}); gap {GAP_MS} ms, {len(expected):,} sessions"
        )
        if profile is not None:
            profile.dump_stats(args.profile)


if __name__ == "__main__":
    main()
