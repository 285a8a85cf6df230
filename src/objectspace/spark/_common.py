"""What the driver and the tasks share: the function type, the reserved columns, argument checks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from objectspace.operators.state import KeyState

__all__ = ["RESERVED_COLUMNS", "StatefulFunction"]


StatefulFunction = Callable[[Any, list[dict[str, Any]], KeyState], Iterable[Mapping[str, Any]]]

_KG = "__os_kg"
_INSTANCE = "__os_instance"
_RECEIPT = "__os_receipt"
RESERVED_COLUMNS = (_KG, _INSTANCE, _RECEIPT)
"""Column names the runner adds to a batch: an input, an output row or an output_schema
that uses one is refused with :class:`~objectspace.errors.ReservedColumnError`."""


def _columns(value: str | Sequence[str], what: str) -> tuple[str, ...]:
    cols = (value,) if isinstance(value, str) else tuple(value)
    if not cols or not all(isinstance(c, str) and c for c in cols):
        raise ValueError(
            f"{what} must be a column name or a non-empty list of names, not {value!r}"
        )
    return cols


def _check_parallelism(parallelism: object, max_key_groups: int) -> int:
    if type(parallelism) is not int or not 1 <= parallelism <= max_key_groups:
        raise ValueError(
            f"parallelism must be an int in 1..{max_key_groups} (max_key_groups), "
            f"not {parallelism!r}"
        )
    return parallelism


def _quote(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"
