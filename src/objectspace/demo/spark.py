"""The main job that ``make demo`` runs: Structured Streaming with object-space state.

1. Generates a stream of click events (JSON files with increasing modification times, read
   with ``maxFilesPerTrigger=1``): every batch, each of 1,000 users sends 2 events.
2. Runs a pipeline of stateful operators per user in a ``foreachBatch`` query on local
   Spark, with state in SQLite: a buffer of the last 100 values (emitting its mean when
   full), ``chain(take(5), aggregate("mean"))`` (the mean of a user's first five events),
   ``distinct(by="page")`` (first visit of each page) and ``top_k(3, by="v")``.
3. Half-way, stops the query and restarts it from its checkpoint with another parallelism:
   each new instance restores exactly the key groups of its new range.
4. Ends with bytes written per checkpoint (each batch's statistics as committed with its
   checkpoint, :func:`objectspace.read_stats`) against a design that rewrites each touched
   user's whole state at every checkpoint, and checks the output (written to Parquet by
   the sink) against a plain Python run of the same pipeline. With ``--connect`` all of it
   runs through Spark Connect.
5. The time stage (:mod:`objectspace.demo.timed`): sessions and a TTL'd set in event time,
   with per batch the watermark, the timers fired and the entries expired, its output
   checked against :func:`objectspace.testing.simulate`; through Spark Connect too.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from typing import Any

from objectspace import operators as ops
from objectspace.demo.timed import BATCHES as TIME_BATCHES
from objectspace.demo.timed import ParquetSink, run_time_stage
from objectspace.keyed import KeyState

__all__ = ["pipeline", "run_spark_demo"]

USERS = 1000
BATCHES = 24
EVENTS_PER_USER = 2
PAGES = ("home", "search", "item", "cart", "checkout", "help")
OUTPUT_SCHEMA = "user long, metric string, value double, detail string"

_buffer = ops.buffer(100, value="v")
_first_five_mean = ops.chain(ops.take(5), ops.aggregate("mean"))
_new_pages = ops.distinct(by="page")
_top = ops.top_k(3, by="v")


def pipeline(key: Any, rows: list[dict[str, Any]], state: KeyState) -> Iterable[Mapping[str, Any]]:
    """Four operators over one user's events, each in its own namespace of the user's state."""
    for out in _buffer(key, rows, state.namespace("buffer")):
        items = out["items"]
        yield {"metric": "buffer_mean", "value": sum(items) / len(items), "detail": None}
    for out in _first_five_mean(key, rows, state.namespace("first5")):
        yield {"metric": "first5_mean", "value": float(out["mean"]), "detail": None}
    for out in _new_pages(key, rows, state.namespace("pages")):
        yield {"metric": "new_page", "value": float(out["ts"]), "detail": out["page"]}
    for out in _top(key, rows, state.namespace("top")):
        yield {"metric": f"top{out['rank']}", "value": float(out["v"]), "detail": None}


def _events(batch: int, rng: random.Random) -> list[dict[str, Any]]:
    return [
        {
            "user": user,
            "ts": batch * EVENTS_PER_USER + i,
            "v": round(rng.uniform(0, 100), 3),
            "page": rng.choice(PAGES),
        }
        for user in range(USERS)
        for i in range(EVENTS_PER_USER)
    ]


def _write_batch(folder: str, batch: int, events: list[dict[str, Any]]) -> None:
    path = os.path.join(folder, f"events-{batch:04d}.json")
    with open(path + ".tmp", "w") as fh:
        fh.writelines(json.dumps(e) + "\n" for e in events)
    os.replace(path + ".tmp", path)
    stamp = 1_700_000_000 + batch  # the file source orders files by modification time
    os.utime(path, (stamp, stamp))


def _whole_state_bytes(model: dict[int, dict[str, Any]], touched: Iterable[int]) -> int:
    """What a design that pickles each touched user's whole state would write."""
    return sum(len(pickle.dumps((user, model[user]), protocol=5)) for user in touched)


def _reference(all_events: list[list[dict[str, Any]]]) -> list[tuple[Any, ...]]:
    """The same pipeline in plain Python, one object space per user, no Spark."""
    from objectspace.space import ObjectSpace

    spaces: dict[int, ObjectSpace] = {}
    out = []
    for events in all_events:
        by_user: dict[int, list[dict[str, Any]]] = {}
        for event in sorted(events, key=lambda e: (e["ts"], repr(e))):
            by_user.setdefault(event["user"], []).append(event)
        for user, rows in by_user.items():
            space = spaces.setdefault(user, ObjectSpace())
            for row in pipeline(user, rows, KeyState.for_key(space, user)):
                out.append((user, row["metric"], row["value"], row["detail"]))
    return sorted(out, key=repr)


def run_spark_demo(
    batches: int = BATCHES,
    first_parallelism: int = 4,
    second_parallelism: int = 3,
    *,
    connect: bool = False,
    spark: Any = None,
    time_batches: int = TIME_BATCHES,
) -> int:
    """Run the demo; 0 when the output equals the plain Python run's.

    ``connect=True`` runs it through Spark Connect (``SparkSession.builder.remote
    ("local[2]")``): the queries' ``foreachBatch`` functions run in the server's Python
    process, so the sink writes each batch's output to Parquet and this process reads the
    batches' statistics from the checkpoint catalog (:func:`objectspace.read_stats`),
    as it does without Connect; so does the time stage, over ``time_batches`` minutes of
    event time. ``spark``: a session to use (and leave running) instead of starting
    one."""
    from objectspace.inspection.stats import read_stats
    from objectspace.spark import StatefulRunner, local_session

    started = time.perf_counter()
    work = tempfile.mkdtemp(prefix="objectspace-demo-")
    try:
        print(
            f"objectspace demo: {USERS:,} users x {EVENTS_PER_USER} events x {batches} "
            f"micro-batches, state in SQLite under {work}"
        )
        own_session = spark is None
        if spark is None:
            mode = "Spark Connect, remote('local[2]')" if connect else "local[2]"
            print(f"starting local Spark ({mode}) ...", flush=True)
            spark = local_session("local[2]", connect=connect)
            print(f"  Spark {spark.version} up in {time.perf_counter() - started:.1f} s")
        events_dir = os.path.join(work, "events")
        output_dir = os.path.join(work, "output")
        os.makedirs(events_dir)
        storage = f"sqlite:///{work}/state.db"
        checkpoint_dir = os.path.join(work, "query-checkpoint")
        rng = random.Random(42)
        all_events = [_events(b, rng) for b in range(batches)]
        model: dict[int, dict[str, Any]] = {
            u: {"buffer": [], "seen": 0, "first5": [], "pages": set(), "top": []}
            for u in range(USERS)
        }
        totals = {"ours": 0, "whole": 0}

        def simulate_whole_state(batch: int) -> int:
            for event in all_events[batch]:
                m = model[event["user"]]
                m["buffer"].append(event["v"])
                if len(m["buffer"]) > 100:
                    m["buffer"].pop(0)
                if m["seen"] < 5:
                    m["first5"].append(event["v"])
                m["seen"] += 1
                m["pages"].add(event["page"])
                m["top"] = sorted([*m["top"], event["v"]], reverse=True)[:3]
            return _whole_state_bytes(model, {e["user"] for e in all_events[batch]})

        schema = "user long, ts long, v double, page string"

        def run_query(runner: StatefulRunner, upto: int, first: int) -> None:
            for b in range(upto):
                if not os.path.exists(os.path.join(events_dir, f"events-{b:04d}.json")):
                    _write_batch(events_dir, b, all_events[b])
            query = (
                spark.readStream.schema(schema)
                .option("maxFilesPerTrigger", 1)
                .json(events_dir)
                .writeStream.foreachBatch(runner.foreach_batch(ParquetSink(output_dir)))
                .option("checkpointLocation", checkpoint_dir)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            # The batches' statistics, committed with their checkpoints: read here, where
            # the runner may not have run (Spark Connect runs it in the server).
            for stats in read_stats(storage, "demo"):
                if stats.checkpoint_id < first:
                    continue
                whole = simulate_whole_state(stats.checkpoint_id)
                totals["ours"] += stats.bytes_written
                totals["whole"] += whole
                print(
                    f"  batch {stats.checkpoint_id:>2}  p={stats.parallelism}  "
                    f"keys {stats.keys:>5,}  rows in {stats.rows_in:>5,}  "
                    f"out {stats.rows_out:>4,}  "
                    f"state written {stats.bytes_written / 1024:7.1f} KiB "
                    f"(whole-state design {whole / 1024:7.1f} KiB)  "
                    f"{stats.seconds_total:5.2f} s",
                    flush=True,
                )

        def make_runner(parallelism: int) -> StatefulRunner:
            return StatefulRunner(
                pipeline,
                key="user",
                order_by="ts",
                output_schema=OUTPUT_SCHEMA,
                storage=storage,
                job="demo",
                operator="pipeline",
                max_key_groups=128,
                parallelism=parallelism,
            )

        half = batches // 2
        print(f"\nrunning batches 0..{half - 1} at parallelism {first_parallelism}:")
        runner = make_runner(first_parallelism)
        run_query(runner, half, 0)
        runner.close()
        print(
            f"\nquery stopped; restarting from its checkpoint at parallelism "
            f"{second_parallelism} (the key groups move to new instances):"
        )
        runner = make_runner(second_parallelism)
        run_query(runner, batches, half)
        runner.close()

        produced = sorted(
            (tuple(r) for r in spark.read.parquet(output_dir).drop("batch").collect()),
            key=repr,
        )
        expected = _reference(all_events)
        payload = sum(len(events) for events in all_events) * 8
        print("\nsummary")
        print(f"  batches processed: {batches}   output rows: {len(produced):,}")
        print(
            f"  state bytes written, object spaces (differential): {totals['ours'] / 1e6:6.2f} MB"
        )
        print(
            f"  state bytes written, whole state per touched user: {totals['whole'] / 1e6:6.2f} MB"
            f"  ({totals['whole'] / max(totals['ours'], 1):.1f}x more)"
        )
        print(f"  raw event values (8-byte floats): {payload / 1e6:6.2f} MB")
        print(f"  checkpoints retained: {runner.job.checkpoints()}")
        same = produced == expected
        print(f"  output equals a plain Python run of the same pipeline: {'yes' if same else 'NO'}")
        timed_ok = run_time_stage(spark, work, time_batches)
        print(f"\n  wall time: {time.perf_counter() - started:.1f} s")
        if own_session:
            spark.stop()
        return 0 if same and timed_ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
