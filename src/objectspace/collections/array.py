"""A persisted array of fixed length."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from objectspace.collections._impl import ArrayBase
from objectspace.collections.base import Emitter, Page, PersistedObject, int_key, load_indexed
from objectspace.tables import StateReader

if TYPE_CHECKING:
    from objectspace.space import ObjectSpace

__all__ = ["PersistedArray"]


class PersistedArray(PersistedObject, ArrayBase):
    """A fixed-length array: indexing (negative too), assignment, iteration.

    Stored as ``metadata: length = n`` and ``items: i = value``. Reading and assigning a slot
    cost O(1); a checkpoint writes one row per assigned slot.

    ``len``, indexing, assignment and iteration are implemented by :class:`ArrayBase` (in C
    when built).
    """

    KIND = "Array"
    TABLES = ("metadata", "items")
    __slots__ = ()

    def __init__(self, space: ObjectSpace, object_id: str, data: list[Any]) -> None:
        super().__init__(space, object_id)
        self._data = data

    def __contains__(self, value: object) -> bool:
        return value in self._data

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PersistedArray):
            return self._data == other._data
        if isinstance(other, list | tuple):
            return self._data == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def _emit(self, out: Emitter, page: Page, whole: bool) -> None:
        dumps = out.dumps
        data = self._data
        rows = out.table(self._t_items)
        if whole:
            out.table(self._t_meta)[b"length"] = dumps(len(data))
            for i, value in enumerate(data):
                rows[int_key(i)] = dumps(value)
        else:
            for i in page.slots:
                rows[int_key(i)] = dumps(data[i])

    @classmethod
    def _load(
        cls, space: ObjectSpace, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> PersistedArray:
        return cls(space, object_id, load_indexed("array", object_id, reader, loads))

    def __repr__(self) -> str:
        return f"<PersistedArray {self._id!r}: {self._data!r}>"
