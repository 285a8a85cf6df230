"""Storage URLs shared by the tests."""

from __future__ import annotations

import urllib.parse

__all__ = ["segment_url"]


def segment_url(root: str, catalog: str, **options: str) -> str:
    """A segment-storage URL: ``root`` with ``catalog`` (and options) in its query."""
    query = urllib.parse.urlencode({"catalog": catalog, **options})
    return f"{root}?{query}"
