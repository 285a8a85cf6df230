"""A persisted set."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass
from objectspace.collections._setbase import _SetBase

__all__ = ["PersistedSet"]


class PersistedSet(_SetBase):
    """A set (``collections.abc.MutableSet``); add, discard and membership are O(1)."""

    KIND = "Set"
    TABLES = ("items",)
    __slots__ = ()

    @staticmethod
    def _new_data(data: Iterable[Any]) -> set[Any]:
        return set(data)
