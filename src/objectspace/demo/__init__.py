"""The demos of ``objectspace demo``: ``core`` (no Spark) and ``spark`` (Structured
Streaming)."""

from __future__ import annotations

from objectspace.demo.core import run_demo

__all__ = ["run_demo"]
