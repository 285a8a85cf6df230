"""Benchmark plots: ``docs/bench-*.png`` drawn with matplotlib (the dev extra) from
``benchmarks/results.json``: ``python -m benchmarks --plots`` (after the benchmarks) or
``python -m benchmarks.plots`` (only the plots).

The benchmark scripts may write ``benchmarks/results.json``; :func:`draw_benchmarks` reads
it. Its shape (every part optional except ``designs`` within a workload)::

    {"buffer": {
        "title": "Buffer workload, 1,000 keys, 60 checkpoints",      (optional)
        "designs": [
            {"name": "object space, differential (SQLite)",
             "bytes_per_checkpoint": [41200, 40950, ...],    one number per checkpoint
             "wall_seconds": 1.92},                          the whole run
            {"name": "baseline: whole buffer pickled per key", ...}]}}

For the Buffer workload it draws ``bench-buffer.png``: bytes written per checkpoint for each
design (a line each, left) and the wall time of each design (bars, right), side by side.
A design without ``bytes_per_checkpoint`` or ``wall_seconds`` is left out of that panel.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["WORKLOADS", "draw_benchmarks", "draw_workload", "load_results"]

WORKLOADS = {"buffer": "Buffer workload"}
"""Workloads drawn (``results.json`` key → title), each to ``bench-<key>.png``."""


def load_results(path: str | Path) -> dict[str, Any] | None:
    """The parsed results file, ``None`` if it does not exist; ValueError if malformed."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read benchmark results {str(path)!r}: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"benchmark results {str(path)!r}: expected a JSON object at the top")
    return data


def _designs(workload: Any, name: str) -> list[dict[str, Any]]:
    designs = workload.get("designs") if isinstance(workload, dict) else None
    if not isinstance(designs, list) or not all(
        isinstance(d, dict) and isinstance(d.get("name"), str) for d in designs
    ):
        raise ValueError(f"benchmark results: {name!r} needs a list of designs, each with a name")
    for d in designs:
        series = d.get("bytes_per_checkpoint")
        if series is not None and not (
            isinstance(series, list) and all(isinstance(x, int | float) for x in series)
        ):
            raise ValueError(
                f"benchmark results: {name!r} design {d['name']!r}: bytes_per_checkpoint must "
                "be a list of numbers"
            )
        wall = d.get("wall_seconds")
        if wall is not None and not isinstance(wall, int | float):
            raise ValueError(
                f"benchmark results: {name!r} design {d['name']!r}: wall_seconds must be a number"
            )
    return designs


def draw_workload(name: str, workload: dict[str, Any], out: Path) -> Path:
    """Draw one workload's figure (bytes per checkpoint | wall time) to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    designs = _designs(workload, name)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    title = workload.get("title") or WORKLOADS.get(name, name)
    fig.suptitle(str(title))
    for d in designs:
        series = d.get("bytes_per_checkpoint")
        if series:
            left.plot(range(1, len(series) + 1), series, label=d["name"])
    left.set_xlabel("checkpoint")
    left.set_ylabel("bytes written")
    left.set_yscale("symlog")
    left.set_title("bytes written per checkpoint")
    if left.lines:
        left.legend(fontsize="small")
    timed = [d for d in designs if d.get("wall_seconds") is not None]
    right.barh([d["name"] for d in timed], [float(d["wall_seconds"]) for d in timed])
    right.set_xlabel("seconds")
    right.set_title("wall time (whole run)")
    right.invert_yaxis()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def draw_benchmarks(results: str | Path, out_dir: str | Path) -> list[Path]:
    """Draw ``bench-<workload>.png`` in ``out_dir`` for each known workload in ``results``.

    Returns the files drawn: none when ``results`` does not exist.
    """
    data = load_results(results)
    if data is None:
        return []
    drawn = []
    for name in WORKLOADS:
        workload = data.get(name)
        if workload is not None:
            drawn.append(draw_workload(name, workload, Path(out_dir) / f"bench-{name}.png"))
    return drawn


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.plots [RESULTS [OUT_DIR]]``: draw the plots of a results file
    (default ``benchmarks/results.json`` into ``docs/``, from the checkout's root)."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(__file__).resolve().parents[1]
    results = Path(args[0]) if args else root / "benchmarks" / "results.json"
    out_dir = Path(args[1]) if len(args) > 1 else root / "docs"
    drawn = draw_benchmarks(results, out_dir)
    if not drawn:
        print(f"no {results} found: no plots drawn")
    for path in drawn:
        print(f"drew {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
