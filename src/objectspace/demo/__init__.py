"""The demos of ``objectspace demo``: ``core`` (no Spark), ``spark`` (Structured Streaming),
and ``plots`` (the figures of ``objectspace bench``)."""

from __future__ import annotations

from objectspace.demo.core import run_demo

__all__ = ["run_demo"]
