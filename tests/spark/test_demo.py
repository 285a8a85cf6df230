"""The demo's time stage (:mod:`objectspace.demo.timed`) on the suite's classic session.

:func:`check_time_stage` reads what the stage printed and checks each batch's line against
:func:`objectspace.testing.simulate` over the same events; ``test_connect`` uses it for the
same stage run through Spark Connect.
"""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from objectspace.demo.timed import OPTIONS, events, pipeline, run_time_stage
from objectspace.testing import simulate
from tests.support.spark import spark  # noqa: F401

pytestmark = pytest.mark.slow

_LINE = re.compile(
    r"^  batch +(\d+)  watermark +(\S+)  rows +(\d+)  late +(\d+)  timers fired +(\d+)  "
    r"entries expired +(\d+)  sessions +(\d+)  state written +[\d.]+ KiB$"
)


def check_time_stage(printed: str, batches: int) -> None:
    """Assert that ``printed``, the output of ``run_time_stage(..., batches)``, has one line
    per batch with the figures ``simulate`` has for it, and says that the outputs agree."""
    all_events = events(random.Random(12), batches)
    sim = simulate(pipeline, all_events, **OPTIONS)
    try:
        expected = [
            (
                n,
                "-"
                if s.watermark is None
                else datetime.fromtimestamp(s.watermark / 1000, UTC).strftime("%H:%M:%S"),
                s.rows_in,
                s.rows_late,
                s.timers_fired,
                s.entries_expired,
                sum(r["what"] == "session" for r in out),
            )
            for n, (s, out) in enumerate(zip(sim.stats, sim.outputs, strict=True))
        ]
        sessions = sum(r["what"] == "session" for out in sim.outputs for r in out)
        pages = sum(r["what"] == "new page" for out in sim.outputs for r in out)
    finally:
        sim.close()
    lines = printed.splitlines()
    assert f"time stage: 500 users x {batches} one-minute batches of event time" in printed
    shown = [
        (int(m[1]), m[2], *(int(g) for g in m.groups()[2:]))
        for m in (_LINE.match(line) for line in lines)
        if m
    ]
    assert shown == expected
    # the stage's figures are not trivial: late rows, fired timers, expired entries, sessions
    assert all(sum(row[i] for row in shown) > 0 for i in (3, 4, 5, 6))
    assert len(all_events) == batches + 2
    assert (
        f"  {sessions:,} sessions, {pages:,} new pages in " in printed
        and "output equals simulate's: yes" in printed
    )


def test_time_stage_classic(
    spark: Any,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_time_stage(spark, str(tmp_path), batches=3)
    check_time_stage(capsys.readouterr().out, 3)
    # each batch's output, written by the sink where the runner ran, is in the work folder
    assert sorted(p.name for p in (tmp_path / "time-output").iterdir() if p.is_dir()) == [
        f"batch={n}" for n in range(5)
    ]
