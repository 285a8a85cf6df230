"""Layer 2: versioned checkpoint storage, chosen by URL.

The names this package exported before the table contract moved to :mod:`objectspace.tables`
and the one-space stores to :mod:`objectspace.stores` still resolve here, with a
``DeprecationWarning``.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from objectspace.storage.urls import redact_text, redact_url

__all__ = [
    "redact_text",
    "redact_url",
]

_MOVED = {
    "DELETED": "objectspace.tables",
    "CheckpointKind": "objectspace.tables",
    "DictReader": "objectspace.tables",
    "StateReader": "objectspace.tables",
    "StateWriter": "objectspace.tables",
    "TableChanges": "objectspace.tables",
    "WriteStats": "objectspace.tables",
    "WriterStatus": "objectspace.tables",
    "Store": "objectspace.stores",
    "MemoryStore": "objectspace.stores",
    "SQLiteStore": "objectspace.stores",
}


def __getattr__(name: str) -> Any:
    """The names that moved out of this package, with a ``DeprecationWarning``."""
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"objectspace.storage.{name} moved: import it from {home}",
        DeprecationWarning,
        stacklevel=2,
    )
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
