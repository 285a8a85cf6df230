"""A persisted single value."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from objectspace.collections._impl import ValueBase
from objectspace.collections.base import Emitter, Page, PersistedObject
from objectspace.tables import StateReader

if TYPE_CHECKING:
    from objectspace.space import ObjectSpace

__all__ = ["PersistedValue"]

_KEY = b"value"


class PersistedValue(PersistedObject, ValueBase):
    """One persisted slot, read and written through :attr:`value`.

    Stored as ``state/item/<id>/items: value = <value>``. Setting it costs O(1) and a
    checkpoint writes one row. The value is encoded when saved: replace it to change it,
    do not mutate it in place.

    :attr:`value` (get and set) is implemented by :class:`ValueBase` (in C when built).
    """

    KIND = "Value"
    TABLES = ("items",)
    __slots__ = ()

    def __init__(self, space: ObjectSpace, object_id: str, value: Any = None) -> None:
        super().__init__(space, object_id)
        self._value = value

    def _emit(self, out: Emitter, page: Page, whole: bool) -> None:
        if whole or page.meta:
            out.table(self._t_items)[_KEY] = out.dumps(self._value)

    @classmethod
    def _load(
        cls, space: ObjectSpace, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> PersistedValue:
        raw = reader.get(f"state/item/{object_id}/items", _KEY)
        return cls(space, object_id, None if raw is None else loads(raw))

    def __repr__(self) -> str:
        return f"<PersistedValue {self._id!r}: {self._value!r}>"
