"""Deprecated: import read_state from objectspace.spark."""

from __future__ import annotations

import warnings

from objectspace.spark.state import read_state, state_schema

__all__ = ["read_state", "state_schema"]

warnings.warn(
    "objectspace.spark_state is deprecated: import read_state from objectspace.spark.",
    DeprecationWarning,
    stacklevel=2,
)
