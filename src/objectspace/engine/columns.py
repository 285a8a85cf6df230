"""The columns a batch's rows carry, and the checks of a runner's arguments.

The runner adds :data:`KEY_GROUP_COLUMN`, :data:`INSTANCE_COLUMN` and :data:`RECEIPT_COLUMN`
to a batch's rows (:data:`RESERVED_COLUMNS`): an input, an output row or an output schema
that uses one is refused with :class:`~objectspace.errors.ReservedColumnError` before
anything runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from objectspace.errors import ReservedColumnError

__all__ = [
    "INSTANCE_COLUMN",
    "KEY_GROUP_COLUMN",
    "RECEIPT_COLUMN",
    "RESERVED_COLUMNS",
    "TICK_COLUMN",
    "check_copy_every",
    "check_input_columns",
    "check_output_columns",
    "check_parallelism",
    "check_retain",
    "column_names",
]

KEY_GROUP_COLUMN = "__os_kg"
INSTANCE_COLUMN = "__os_instance"
RECEIPT_COLUMN = "__os_receipt"
RESERVED_COLUMNS = (KEY_GROUP_COLUMN, INSTANCE_COLUMN, RECEIPT_COLUMN)
"""Column names the runner adds to a batch: an input, an output row or an output_schema
that uses one is refused with :class:`~objectspace.errors.ReservedColumnError`."""
TICK_COLUMN = "__os_tick"
"""Marks the tick rows of :func:`objectspace.spark.with_ticks`: the runner drops a row
whose ``TICK_COLUMN`` is not null before anything runs, and the column with it."""


def column_names(value: str | Sequence[str], what: str) -> tuple[str, ...]:
    """``key``/``order_by`` as a tuple of column names (``what`` names the argument)."""
    cols = (value,) if isinstance(value, str) else tuple(value)
    if not cols or not all(isinstance(c, str) and c for c in cols):
        raise ValueError(
            f"{what} must be a column name or a non-empty list of names, not {value!r}"
        )
    return cols


def check_parallelism(parallelism: object, max_key_groups: int) -> int:
    """``parallelism`` if it is an int in ``1..max_key_groups``, else :class:`ValueError`."""
    if type(parallelism) is not int or not 1 <= parallelism <= max_key_groups:
        raise ValueError(
            f"parallelism must be an int in 1..{max_key_groups} (max_key_groups), "
            f"not {parallelism!r}"
        )
    return parallelism


def check_retain(retain: int | None) -> None:
    """Refuse a ``retain`` that would drop the checkpoint a replay needs."""
    if retain is not None and retain < 2:
        raise ValueError(
            f"retain must keep at least 2 checkpoints (replays need the one "
            f"before the last), not {retain}"
        )


def check_copy_every(copy_every: int | None) -> None:
    """Refuse a ``local_copy_every`` that is not ``None`` or an int >= 1."""
    if copy_every is not None and (type(copy_every) is not int or copy_every < 1):
        raise ValueError(
            f"local_copy_every must be None (no copies) or a number of checkpoints >= 1, "
            f"not {copy_every!r}"
        )


def check_input_columns(
    columns: Sequence[str],
    key_columns: Sequence[str],
    order_columns: Sequence[str],
    operator: str,
) -> None:
    """Refuse an input with a reserved column (:class:`ReservedColumnError`) or without a
    key or order column (:class:`ValueError`), before any state changes."""
    reserved = [c for c in columns if c in RESERVED_COLUMNS]
    if reserved:
        raise ReservedColumnError(
            f"input of operator {operator!r} has the column {reserved[0]!r}, "
            f"which objectspace reserves (reserved: {', '.join(RESERVED_COLUMNS)}): "
            "drop or rename it before the batch"
        )
    missing = [c for c in (*key_columns, *order_columns) if c not in columns]
    if missing:
        raise ValueError(f"input of {operator!r} lacks column(s) {missing}; it has {columns}")


def check_output_columns(columns: Sequence[str], what: str, operator: str) -> None:
    """Refuse output columns (``what``: where they come from) with a reserved name."""
    reserved = [c for c in columns if c in RESERVED_COLUMNS]
    if reserved:
        raise ReservedColumnError(
            f"{what} of operator {operator!r} uses the column "
            f"{reserved[0]!r}, which objectspace reserves (reserved: "
            f"{', '.join(RESERVED_COLUMNS)})"
        )
