"""A persisted single value."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from objectspace.collections._impl import ValueBase, untrack, value_setup
from objectspace.collections.base import Emitter, Page, PersistedObject
from objectspace.tables import StateReader, TableChanges

if TYPE_CHECKING:
    from objectspace.space import ObjectSpace

__all__ = ["PersistedValue"]

_KEY = b"value"

# A value's page says only whether it is new and whether its value was set (it has no
# slots, links or length, and is never cleared): one of four shared pages, [new][meta],
# which nothing changes after it is made (a merge makes a new page).
_PAGES = tuple(
    tuple(untrack(Page(new, False, meta)) for meta in (False, True)) for new in (False, True)
)


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

    def _save(self, out: Emitter, full: bool) -> Page:
        # What _merged_page and _emit do, in one frame (once per set value per save).
        new = self._new
        meta = self._meta
        pending = self._pending
        if pending is not None:
            new = new or pending.new
            meta = meta or pending.meta
        if full or new or meta:
            name = f"state/item/{self._id}/items"
            changes = out.changes.get(name)
            if changes is None:
                changes = out.changes[name] = untrack(TableChanges())
            changes.rows[_KEY] = out.dumps(self._value)
        return _PAGES[new][meta]

    def _freeze(self, page: Page) -> None:
        # PersistedObject._freeze for a value (no dirty slots, never cleared, no extra).
        self._pending = page
        self._registered = False
        self._meta = False
        self._new = False

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


# The C extension's ValueBase does _save and _freeze in C (no Python frame per value per
# save); the methods above define them, and run on the pure-Python build.
_PY_SAVE = PersistedValue._save
_PY_FREEZE = PersistedValue._freeze
_C_SAVE = getattr(ValueBase, "_save_value", None)
_C_FREEZE = getattr(ValueBase, "_freeze_value", None)
if _C_SAVE is not None and _C_FREEZE is not None:
    value_setup(_PAGES, TableChanges)
    PersistedValue._save = _C_SAVE  # type: ignore[method-assign]
    PersistedValue._freeze = _C_FREEZE  # type: ignore[method-assign]
