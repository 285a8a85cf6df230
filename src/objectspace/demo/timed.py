"""The time stage of ``make demo``: sessions and pages-seen-recently in event time.

A click stream of ``USERS`` users over ``BATCHES`` micro-batches of one minute of event time
each (a user is active in a minute with probability 0.4, with 1-3 clicks at random seconds,
arriving up to 20 seconds out of order, some of them later than that), run by
:class:`~objectspace.spark.StatefulRunner` with ``time_mode="event"`` and a watermark delay
of 20 seconds through :func:`pipeline`: ``session_window("2 minutes")`` (a timer per open
session, fired when the watermark passes its end) and ``distinct(by="page",
ttl="3 minutes")`` (a TTL'd set: a page is new again 3 minutes after it was last new).
The sink (:class:`ParquetSink`) writes each batch's output to Parquet, so the stage runs
the same on a classic session and through Spark Connect (where the runner runs in the
server's Python process). Per batch it prints the watermark, the late rows dropped, the
timers fired, the entries expired (from the statistics committed with each checkpoint,
:func:`objectspace.read_stats`), the sessions closed (from the Parquet output) and the
bytes written; at the end it checks the output against :func:`objectspace.testing.simulate`
run over the same batches.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from objectspace import operators as ops
from objectspace.keyed import KeyState, from_ms, to_ms

__all__ = ["OPTIONS", "ParquetSink", "events", "pipeline", "run_time_stage"]

USERS = 500
BATCHES = 12
PAGES = ("home", "search", "item", "cart", "checkout", "help")
OUTPUT_SCHEMA = "user long, what string, start timestamp, end timestamp, clicks long, page string"
START = datetime(2026, 1, 1, tzinfo=UTC)
JOB = "demo-time"

_sessions = ops.session_window("2 minutes", value="v", aggs=("count",))
_new_pages = ops.distinct(by="page", ttl="3 minutes")


def pipeline(key: Any, rows: list[dict[str, Any]], state: KeyState) -> Iterable[Mapping[str, Any]]:
    """Sessions and recently new pages of one user, each in its own namespace."""
    _sessions(key, rows, state.namespace("sessions"))  # emits from its timers only
    for row in _new_pages(key, rows, state.namespace("pages")):
        yield {"what": "new page", "start": _utc(row["ts"]), "page": row["page"]}


def on_timer(key: Any, when: datetime, state: KeyState) -> Iterable[Mapping[str, Any]]:
    """The sessions' timers (``state`` is the namespace that registered them)."""
    for row in _sessions.on_timer(key, when, state):  # type: ignore[attr-defined]
        yield {
            "what": "session",
            "start": row["start"],
            "end": row["end"],
            "clicks": row["count"],
        }


OPTIONS: Mapping[str, Any] = {
    "key": "user",
    "order_by": "ts",
    "time_mode": "event",
    "event_time": "ts",
    "watermark_delay": "20 seconds",
    "on_timer": on_timer,
}
"""The stage's keyword arguments of :class:`~objectspace.spark.StatefulRunner` and of
:func:`~objectspace.testing.simulate`, which its output is checked against."""


def _utc(t: Any) -> datetime:
    return from_ms(to_ms(t))


def events(rng: random.Random, batches: int = BATCHES) -> list[list[dict[str, Any]]]:
    """Each batch's clicks: minute ``b`` of event time, some late, then two batches of one
    far-future click each, so that the watermark passes every session's end."""
    out = []
    for b in range(batches):
        rows = []
        for user in range(USERS):
            if rng.random() >= 0.4:
                continue
            for _ in range(rng.randint(1, 3)):
                second = (
                    b * 60 + rng.randrange(60) - (rng.randrange(20) if rng.random() < 0.3 else 0)
                )
                if rng.random() < 0.02:
                    second -= 90  # late: behind the watermark
                rows.append(
                    {
                        "user": user,
                        "ts": START + timedelta(seconds=second),
                        "v": 1.0,
                        "page": rng.choice(PAGES),
                    }
                )
        out.append(rows)
    far = START + timedelta(days=1)
    out.append([{"user": 0, "ts": far, "v": 1.0, "page": "home"}])
    out.append([{"user": 0, "ts": far + timedelta(hours=1), "v": 1.0, "page": "home"}])
    return out


def run_time_stage(spark: Any, work: str, batches: int = BATCHES) -> bool:
    """Run the stage on ``spark`` with its files under ``work``; True if the output equals
    ``simulate``'s.

    The same on a classic session and through Spark Connect, where the query's
    ``foreachBatch`` function (and so the runner) runs in the server's Python process: the
    sink writes each batch's output to Parquet under ``work``, and this process reads the
    outputs back with ``spark.read.parquet`` and each batch's statistics from the
    checkpoint catalog (:func:`objectspace.read_stats`), never from its own copy of the
    runner."""
    from objectspace.inspection.stats import read_stats
    from objectspace.spark import StatefulRunner
    from objectspace.testing import simulate

    print(
        f"\ntime stage: {USERS} users x {batches} one-minute batches of event time, "
        "watermark delay 20 s; session_window('2 minutes') and "
        "distinct(by='page', ttl='3 minutes')"
    )
    all_events = events(random.Random(12), batches)
    folder = os.path.join(work, "clicks")
    output = os.path.join(work, "time-output")
    os.makedirs(folder)
    for b, rows in enumerate(all_events):
        path = os.path.join(folder, f"clicks-{b:04d}.json")
        with open(path, "w") as fh:
            fh.writelines(json.dumps({**r, "ts": r["ts"].isoformat()}) + "\n" for r in rows)
        os.utime(path, (1_700_000_000 + b, 1_700_000_000 + b))
    storage = f"sqlite:///{work}/time.db"
    runner = StatefulRunner(
        pipeline,
        output_schema=OUTPUT_SCHEMA,
        storage=storage,
        job=JOB,
        operator="sessions",
        max_key_groups=128,
        parallelism=3,
        **OPTIONS,
    )
    started = time.perf_counter()
    query = (
        spark.readStream.schema("user long, ts timestamp, v double, page string")
        .option("maxFilesPerTrigger", 1)
        .json(folder)
        .writeStream.foreachBatch(runner.foreach_batch(ParquetSink(output)))
        .option("checkpointLocation", os.path.join(work, "time-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    runner.close()
    by_batch: dict[int, list[tuple[Any, ...]]] = {}
    for row in spark.read.parquet(output).collect():
        record = row.asDict()
        by_batch.setdefault(record.pop("batch"), []).append(_key(record))
    for s in read_stats(storage, JOB):
        wm = "-" if s.watermark is None else from_ms(s.watermark).strftime("%H:%M:%S")
        sessions = sum(p[1] == "session" for p in by_batch.get(s.checkpoint_id, ()))
        print(
            f"  batch {s.checkpoint_id:>2}  watermark {wm:>8}  rows {s.rows_in:>4}  "
            f"late {s.rows_late:>3}  timers fired {s.timers_fired:>4}  "
            f"entries expired {s.entries_expired:>4}  "
            f"sessions {sessions:>4}  "
            f"state written {s.bytes_written / 1024:6.1f} KiB",
            flush=True,
        )
    produced = [p for rows in by_batch.values() for p in rows]
    sim = simulate(pipeline, all_events, **OPTIONS)
    expected = sorted((_key(r) for out in sim.outputs for r in out), key=repr)
    sim.close()
    same = sorted(produced, key=repr) == expected
    print(
        f"  {sum(p[1] == 'session' for p in produced):,} sessions, "
        f"{sum(p[1] == 'new page' for p in produced):,} new pages in "
        f"{time.perf_counter() - started:.1f} s; output equals simulate's: "
        f"{'yes' if same else 'NO'}"
    )
    return same


class ParquetSink:
    """A ``foreachBatch`` sink that writes each batch's output to its own Parquet folder
    under ``folder`` (``batch=<id>``, so reading ``folder`` gives a ``batch`` column),
    replaced when the batch is replayed. It runs where the runner runs (the driver, or
    the Spark Connect server's Python process), so it keeps nothing in memory."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __call__(self, out: Any, batch_id: int) -> None:
        """Write ``out``, batch ``batch_id``'s output (an empty batch writes its schema)."""
        out.write.mode("overwrite").parquet(os.path.join(self.folder, f"batch={batch_id}"))


def _key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """A row as a tuple, times as epoch ms (``collect`` gives naive local datetimes,
    ``simulate`` aware UTC ones: ``timestamp()`` reads both as the same instant)."""
    return tuple(
        round(v.timestamp() * 1000) if isinstance(v, datetime) else v
        for v in (row.get(c) for c in ("user", "what", "start", "end", "clicks", "page"))
    )
