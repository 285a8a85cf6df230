"""The time stage of ``make demo``: sessions and pages-seen-recently in event time.

A click stream of ``USERS`` users over ``BATCHES`` micro-batches of one minute of event time
each (a user is active in a minute with probability 0.4, with 1-3 clicks at random seconds,
arriving up to 20 seconds out of order, some of them later than that), run by
:class:`~objectspace.spark.StatefulRunner` with ``time_mode="event"`` and a watermark delay
of 20 seconds through :func:`pipeline`: ``session_window("2 minutes")`` (a timer per open
session, fired when the watermark passes its end) and ``distinct(by="page",
ttl="3 minutes")`` (a TTL'd set: a page is new again 3 minutes after it was last new).
Per batch it prints the watermark, the late rows dropped, the timers fired, the entries
expired and the bytes written; at the end it checks the output against
:func:`objectspace.testing.simulate` run over the same batches.
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

__all__ = ["pipeline", "run_time_stage"]

USERS = 500
BATCHES = 12
PAGES = ("home", "search", "item", "cart", "checkout", "help")
OUTPUT_SCHEMA = "user long, what string, start timestamp, end timestamp, clicks long, page string"
START = datetime(2026, 1, 1, tzinfo=UTC)

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
    ``simulate``'s."""
    from objectspace.spark import StatefulRunner
    from objectspace.testing import simulate

    print(
        f"\ntime stage: {USERS} users x {batches} one-minute batches of event time, "
        "watermark delay 20 s; session_window('2 minutes') and "
        "distinct(by='page', ttl='3 minutes')"
    )
    all_events = events(random.Random(12), batches)
    folder = os.path.join(work, "clicks")
    os.makedirs(folder)
    for b, rows in enumerate(all_events):
        path = os.path.join(folder, f"clicks-{b:04d}.json")
        with open(path, "w") as fh:
            fh.writelines(json.dumps({**r, "ts": r["ts"].isoformat()}) + "\n" for r in rows)
        os.utime(path, (1_700_000_000 + b, 1_700_000_000 + b))
    options: dict[str, Any] = {
        "key": "user",
        "order_by": "ts",
        "time_mode": "event",
        "event_time": "ts",
        "watermark_delay": "20 seconds",
        "on_timer": on_timer,
    }
    runner = StatefulRunner(
        pipeline,
        output_schema=OUTPUT_SCHEMA,
        storage=f"sqlite:///{work}/time.db",
        job="demo-time",
        operator="sessions",
        max_key_groups=128,
        parallelism=3,
        **options,
    )
    produced: list[tuple[Any, ...]] = []

    def sink(df: Any, batch_id: int) -> None:
        rows = df.collect()
        produced.extend(_key(r.asDict()) for r in rows)
        s = runner.last_batch
        assert s is not None
        wm = "-" if s.watermark is None else from_ms(s.watermark).strftime("%H:%M:%S")
        print(
            f"  batch {batch_id:>2}  watermark {wm:>8}  rows {s.rows_in:>4}  "
            f"late {s.rows_late:>3}  timers fired {s.timers_fired:>4}  "
            f"entries expired {s.entries_expired:>4}  "
            f"sessions {sum(r['what'] == 'session' for r in rows):>4}  "
            f"state written {s.bytes_written / 1024:6.1f} KiB",
            flush=True,
        )

    started = time.perf_counter()
    query = (
        spark.readStream.schema("user long, ts timestamp, v double, page string")
        .option("maxFilesPerTrigger", 1)
        .json(folder)
        .writeStream.foreachBatch(runner.foreach_batch(sink))
        .option("checkpointLocation", os.path.join(work, "time-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    runner.close()
    sim = simulate(pipeline, all_events, **options)
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


def _key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """A row as a tuple, times as epoch ms (``collect`` gives naive local datetimes,
    ``simulate`` aware UTC ones: ``timestamp()`` reads both as the same instant)."""
    return tuple(
        round(v.timestamp() * 1000) if isinstance(v, datetime) else v
        for v in (row.get(c) for c in ("user", "what", "start", "end", "clicks", "page"))
    )
