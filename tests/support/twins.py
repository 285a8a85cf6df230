"""The pure-Python and C twins of ``objectspace.collections``' hot functions, as pytest
parameters (the C one only when the extension was built)."""

from __future__ import annotations

from typing import Any

import pytest

from objectspace.collections import _pycore

try:
    from objectspace.collections import _core
except ImportError:  # pragma: no cover - the C extension was not built
    _core = None  # type: ignore[assignment]

CORE: Any = _core


def twins(name: str) -> list[Any]:
    """``name`` of ``_pycore`` (id "python") and of ``_core`` (id "c"), as parameters."""
    found = [pytest.param(getattr(_pycore, name), id="python")]
    if CORE is not None:
        found.append(pytest.param(getattr(CORE, name), id="c"))
    return found
