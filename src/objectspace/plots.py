"""Deprecated: import from objectspace.demo.plots."""

from __future__ import annotations

import warnings

from objectspace.demo.plots import WORKLOADS, draw_benchmarks, draw_workload, load_results

__all__ = ["WORKLOADS", "draw_benchmarks", "draw_workload", "load_results"]

warnings.warn(
    "objectspace.plots is deprecated: import from objectspace.demo.plots.",
    DeprecationWarning,
    stacklevel=2,
)
