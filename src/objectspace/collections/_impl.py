"""Chooses, once at import, the base classes holding the persisted types' fields.

The C extension ``objectspace.collections._core`` when it was built (``pip install`` compiles it when a
C compiler is available), else the pure-Python :mod:`objectspace.collections._pycore`. Set
``OBJECTSPACE_PURE_PYTHON=1`` in the environment to use the pure-Python classes anyway.
"""

from __future__ import annotations

import functools
import os
from types import ModuleType
from typing import TYPE_CHECKING, Literal

__all__ = [
    "IMPLEMENTATION",
    "PURE_PYTHON_ENV",
    "ArrayBase",
    "ListBase",
    "ObjectBase",
    "QueueBase",
    "StackBase",
    "ValueBase",
    "columns_from_rows",
    "emit_rows",
    "emit_set_rows",
    "emit_sorted_rows",
    "grouped_tables",
    "key_encoder",
    "numbered_folders",
    "row_columns",
    "rows_from_columns",
    "sorted_between",
    "sorted_insert",
    "sorted_remove",
    "sorted_set_add",
    "sorted_set_discard",
    "table_heads",
    "untrack",
    "untracked_set",
    "utc_from_ms",
    "utc_micros",
    "value_setup",
]

PURE_PYTHON_ENV = "OBJECTSPACE_PURE_PYTHON"

IMPLEMENTATION: Literal["c", "python"]
"""``"c"`` when the classes come from the extension, ``"python"`` otherwise."""


def _choose() -> tuple[ModuleType, Literal["c", "python"]]:
    """The module the classes come from, and which implementation it is."""
    if os.environ.get(PURE_PYTHON_ENV, "") in ("", "0"):
        try:
            from objectspace.collections import _core
        except ImportError:
            pass
        else:
            return _core, "c"
    from objectspace.collections import _pycore

    return _pycore, "python"


if TYPE_CHECKING:
    from objectspace.collections._pycore import (
        ArrayBase,
        ListBase,
        ObjectBase,
        QueueBase,
        StackBase,
        ValueBase,
        columns_from_rows,
        emit_rows,
        emit_set_rows,
        emit_sorted_rows,
        grouped_tables,
        key_encoder,
        numbered_folders,
        row_columns,
        rows_from_columns,
        sorted_between,
        sorted_insert,
        sorted_remove,
        sorted_set_add,
        sorted_set_discard,
        table_heads,
        untrack,
        untracked_set,
        utc_from_ms,
        utc_micros,
        value_setup,
    )
else:
    _module, IMPLEMENTATION = _choose()
    ObjectBase = _module.ObjectBase
    ValueBase = _module.ValueBase
    ArrayBase = _module.ArrayBase
    ListBase = _module.ListBase
    QueueBase = _module.QueueBase
    StackBase = _module.StackBase
    emit_rows = _module.emit_rows
    columns_from_rows = _module.columns_from_rows
    utc_micros = _module.utc_micros
    emit_set_rows = _module.emit_set_rows
    emit_sorted_rows = _module.emit_sorted_rows
    key_encoder = _module.KeyEncoder if IMPLEMENTATION == "c" else _module.key_encoder
    numbered_folders = _module.numbered_folders
    row_columns = _module.row_columns
    rows_from_columns = _module.rows_from_columns
    sorted_between = _module.sorted_between
    sorted_insert = _module.sorted_insert
    sorted_remove = _module.sorted_remove
    sorted_set_add = _module.sorted_set_add
    sorted_set_discard = _module.sorted_set_discard
    table_heads = _module.table_heads
    grouped_tables = _module.grouped_tables
    if IMPLEMENTATION == "c":

        def utc_from_ms(fallback):
            return functools.partial(_module.datetime_from_ms, fallback)

    else:
        utc_from_ms = _module.utc_from_ms
    untrack = _module.untrack
    untracked_set = _module.untracked_set
    value_setup = _module.value_setup
