"""Deprecated: import from objectspace.demo.spark."""

from __future__ import annotations

import warnings

from objectspace.demo.spark import pipeline, run_spark_demo

__all__ = ["pipeline", "run_spark_demo"]

warnings.warn(
    "objectspace.spark_demo is deprecated: import from objectspace.demo.spark.",
    DeprecationWarning,
    stacklevel=2,
)
