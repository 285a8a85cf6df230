"""A persisted set."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from objectspace.serialization import PLAIN_KEY_TYPES
from objectspace.tables import StateReader

if TYPE_CHECKING:
    from objectspace.space import ObjectSpace
from objectspace.collections._setbase import _SetBase

__all__ = ["PersistedSet"]


class PersistedSet(_SetBase):
    """A set (``collections.abc.MutableSet``); add, discard and membership are O(1)."""

    KIND = "Set"
    __slots__ = ()

    def __init__(self, space: ObjectSpace, object_id: str, data: Iterable[Any] = ()) -> None:
        super().__init__(space, object_id)
        self._data: set[Any] = set(data)
        self._spell = {v: v for v in self._data if type(v) not in PLAIN_KEY_TYPES}

    @classmethod
    def _load(
        cls, space: ObjectSpace, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> PersistedSet:
        elements, old = cls._load_elements(object_id, reader, loads)
        obj = cls(space, object_id, elements)
        if old:
            obj._rewrite(set(obj._data))
        return obj
