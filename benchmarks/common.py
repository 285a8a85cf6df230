"""Small helpers shared by the benchmarks: timing, medians, markdown tables, BENCHMARKS.md.

Each benchmark prints its figures and rewrites its own section of ``BENCHMARKS.md``::

    <!-- bench:buffer -->
    ...
    <!-- /bench:buffer -->

so ``python -m benchmarks`` regenerates every section and ``python -m benchmarks.bench_x``
only its own. ``--quick`` runs shrink the sizes and do not touch the file.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import os
import platform
import re
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

__all__ = [
    "BENCHMARKS_MD",
    "REPO_ROOT",
    "Timer",
    "fmt_bytes",
    "fmt_ms",
    "machine",
    "markdown_table",
    "median",
    "parse_args",
    "print_table",
    "profile",
    "record",
    "sqlite_size",
    "status",
    "temp_dir",
    "time_call",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS_MD = REPO_ROOT / "BENCHMARKS.md"

_FILE_HEADER = """# Benchmarks

Figures recorded by the scripts in `benchmarks/` (plain scripts, not timed tests).
`.venv/bin/python -m benchmarks` regenerates every section; each section names the command
that regenerates it alone. Sizes are decimal (1 MB = 1,000,000 bytes).
"""


class Timer:
    """``with Timer() as t: ...`` then ``t.seconds``."""

    __slots__ = ("_start", "seconds")

    def __init__(self) -> None:
        self._start = 0.0
        self.seconds = 0.0

    def __enter__(self) -> Timer:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._start


def time_call(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Run ``fn()`` once (after a garbage collection); return (seconds, result)."""
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def median(values: Sequence[float]) -> float:
    """The median of ``values`` (of several repeats)."""
    return float(statistics.median(values))


def fmt_bytes(n: float) -> str:
    """Bytes in decimal units: ``2_460_000`` → ``2.46 MB``."""
    if n >= 1e6:
        return f"{n / 1e6:.2f} MB"
    if n >= 1e3:
        return f"{n / 1e3:.1f} kB"
    return f"{n:.0f} B"


def fmt_ms(seconds: float) -> str:
    """Seconds as milliseconds with sensible precision."""
    ms = seconds * 1e3
    if ms >= 100:
        return f"{ms:,.0f} ms"
    if ms >= 10:
        return f"{ms:.1f} ms"
    return f"{ms:.2f} ms"


def status(met: bool) -> str:
    """The verdict cell of a target."""
    return "met" if met else "**MISSED**"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; numbers right-aligned, everything else left-aligned."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    numeric = [
        any(_looks_numeric(row[i]) for row in cells)
        and all(_looks_numeric(row[i]) or row[i].strip() in {"-", ""} for row in cells)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "| " + " | ".join(parts) + " |"

    rule = (
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if num else ("-" * (w + 2))
            for w, num in zip(widths, numeric, strict=True)
        )
        + "|"
    )
    return "\n".join([line(headers), rule, *(line(row) for row in cells)])


def _looks_numeric(cell: str) -> bool:
    return bool(re.match(r"^[-+]?[\d.,]+\s*(x|%|ms|s|B|kB|MB|GB|/s)?$", cell.strip()))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Print a markdown table and return it."""
    table = markdown_table(headers, rows)
    print(table)
    return table


def machine() -> str:
    """Processor, CPU count, Python version and OS, for the record."""
    cpu = platform.processor()
    if not cpu:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                for text in f:
                    if text.startswith("model name"):
                        cpu = text.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
    cpu = cpu or platform.machine() or "unknown CPU"
    return (
        f"{cpu} ({platform.machine()}), {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.release()}"
    )


def _loadavg() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def record(
    section: str,
    markdown: str,
    *,
    title: str | None = None,
    command: str | None = None,
    path: Path | None = None,
) -> None:
    """Rewrite the section ``<!-- bench:NAME -->…<!-- /bench:NAME -->`` of BENCHMARKS.md.

    The file and the section are created when missing (a new section goes at the end). The
    section starts with ``title``, the command that repeats it (by default
    ``.venv/bin/python -m benchmarks.bench_NAME``), the date and the machine.
    """
    path = path or BENCHMARKS_MD
    command = command or f".venv/bin/python -m benchmarks.bench_{section}"
    today = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    begin, end = f"<!-- bench:{section} -->", f"<!-- /bench:{section} -->"
    parts = [begin]
    if title:
        parts.append(f"## {title}\n")
    parts.append(f"Command (from the repository root): `{command}`  ")
    parts.append(f"Date: {today}  ")
    parts.append(f"Machine: {machine()}  ")
    parts.append(f"Load average when recorded (1/5/15 min): {_loadavg()}\n")
    parts.append(markdown.strip())
    parts.append(end)
    block = "\n".join(parts)

    text = path.read_text(encoding="utf-8") if path.exists() else _FILE_HEADER
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _m: block, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    print(f"[recorded section {section!r} in {path}]")


RESULTS_JSON = Path(__file__).resolve().parent / "results.json"


def write_results(workload: str, data: dict[str, Any]) -> None:
    """Store one workload's series in ``benchmarks/results.json`` (what ``make bench``
    plots; see ``benchmarks/plots.py`` for the shape)."""
    import json

    results: dict[str, Any] = {}
    if RESULTS_JSON.exists():
        results = json.loads(RESULTS_JSON.read_text(encoding="utf-8"))
    results[workload] = data
    tmp = RESULTS_JSON.with_name(RESULTS_JSON.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, RESULTS_JSON)


@contextmanager
def temp_dir(prefix: str = "osp-bench-") -> Iterator[str]:
    """A temporary folder removed afterwards (for SQLite files)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as d:
        yield d


def parse_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``--quick`` (smaller sizes, no BENCHMARKS.md update) and ``--no-record``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--quick", action="store_true", help="shrink sizes for a smoke run (not recorded)"
    )
    parser.add_argument(
        "--no-record", action="store_true", help="print the figures, leave BENCHMARKS.md alone"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also print a cProfile of the main workload (top 15 by cumulative time)",
    )
    args = parser.parse_args(argv)
    args.record = not (args.quick or args.no_record)
    return args


def sqlite_size(path: str) -> int:
    """Bytes of a SQLite database on disk, with its -wal and -shm files if present."""
    total = 0
    for suffix in ("", "-wal", "-shm"):
        with suppress(OSError):
            total += os.path.getsize(path + suffix)
    return total


def sqlite_settle(path: str) -> None:
    """Copy a SQLite database's WAL back into it and empty the WAL (as closing its last
    connection does): for a measurement of the bytes a run wrote while other processes (a
    Spark job's Python workers) still hold connections open. A file that is not there, or
    not a database, is left alone."""
    if not os.path.exists(path):
        return
    with suppress(sqlite3.Error):
        conn = sqlite3.connect(path, timeout=30)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            conn.close()


def profile(fn: Callable[[], Any], *, top: int = 15, label: str = "") -> str:
    """Run ``fn()`` under cProfile; print and return the ``top`` entries by cumulative time.

    The profiler keeps its default wall clock: a CPU-time clock is a system call per event
    and would inflate call-heavy code. On a busy machine the absolute times are inflated
    but the shares stay comparable.
    """
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    gc.collect()
    profiler.enable()
    try:
        fn()
    finally:
        profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.strip_dirs().sort_stats("cumulative").print_stats(top)
    text = out.getvalue()
    print(f"--- cProfile {label} (top {top} by cumulative time) ---")
    print(text)
    return text
