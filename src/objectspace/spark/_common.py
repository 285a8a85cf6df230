"""What the driver and the tasks share: the function type, the reserved columns, argument checks.

They live in :mod:`objectspace.operators.execution` (Spark-free, shared with
:mod:`objectspace.testing`); the short private names are this package's.
"""

from __future__ import annotations

from objectspace.operators.execution import (
    INSTANCE_COLUMN,
    KEY_GROUP_COLUMN,
    RECEIPT_COLUMN,
    RESERVED_COLUMNS,
    StatefulFunction,
    check_parallelism,
    column_names,
)

__all__ = ["RESERVED_COLUMNS", "StatefulFunction"]

_KG = KEY_GROUP_COLUMN
_INSTANCE = INSTANCE_COLUMN
_RECEIPT = RECEIPT_COLUMN
_columns = column_names
_check_parallelism = check_parallelism


def _quote(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"
