"""Run every benchmark in sequence: ``python -m benchmarks [--quick] [--no-record] [NAME ...]``.

NAME picks a subset (``buffer``, ``mutation``, ``checkpoint``, ``restore``, ``keygroups``,
``segments``, ``diskfloor``, ``lookup``, ``ttl``, ``postgres``, ``spark``, ``sessions``); the other flags
are passed to each benchmark (see ``python -m benchmarks.bench_buffer --help``).
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Sequence

NAMES = (
    "buffer",
    "mutation",
    "checkpoint",
    "restore",
    "keygroups",
    "segments",
    "diskfloor",
    "lookup",
    "ttl",
    "postgres",
    "spark",
    "sessions",
)


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in {"-h", "--help"} for a in args):
        print(__doc__)
        return
    names = [a for a in args if not a.startswith("-")]
    flags = [a for a in args if a.startswith("-")]
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        sys.exit(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(NAMES)}")
    started = time.perf_counter()
    for name in names or NAMES:
        print(f"\n=== benchmarks.bench_{name} {' '.join(flags)}".rstrip() + " ===\n", flush=True)
        module = importlib.import_module(f"benchmarks.bench_{name}")
        t = time.perf_counter()
        module.main(flags)
        print(f"\n(bench_{name}: {time.perf_counter() - t:.1f} s)", flush=True)
    print(f"\nAll benchmarks done in {time.perf_counter() - started:.1f} s.")


if __name__ == "__main__":
    main()
