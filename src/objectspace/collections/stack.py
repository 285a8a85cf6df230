"""A persisted LIFO stack."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from objectspace.collections._impl import StackBase
from objectspace.collections.base import Emitter, Page, PersistedObject, int_key
from objectspace.errors import CorruptStateError
from objectspace.tables import StateReader

if TYPE_CHECKING:
    from objectspace.space import ObjectSpace

__all__ = ["PersistedStack"]


class PersistedStack(PersistedObject, StackBase):
    """A LIFO stack: ``push`` and ``pop`` at the top. Iteration goes from top to bottom.

    Stored as ``items: i = value`` from the bottom (0), one row per value: the count is the
    number of rows, so a push or pop writes one item (a pop, its delete) and ``clear()`` one
    table delete. Every operation is O(1). (A stack stored with ``metadata: count``, the
    layout before, is read up to that count and keeps writing it.)

    ``push``, ``pop``, ``peek`` and ``len`` are implemented by :class:`StackBase` (in C when
    built).
    """

    KIND = "Stack"
    TABLES = ("metadata", "items")
    __slots__ = ("_count_row",)

    def __init__(self, space: ObjectSpace, object_id: str, data: list[Any] | None = None) -> None:
        super().__init__(space, object_id)
        self._data: list[Any] = data if data is not None else []
        # Whether the store holds the count (``metadata: count``), as stacks stored before
        # their count was their number of rows do: such a stack keeps writing it.
        self._count_row = False

    def clear(self) -> None:
        """Remove every value. O(1) writes: one table delete."""
        if not self._registered:
            self._touch()
        self._data.clear()
        self._cleared = True
        self._meta = True
        self._dirty = None

    def __bool__(self) -> bool:
        return bool(self._data)

    def __iter__(self) -> Iterator[Any]:
        """Values from top to bottom (the order ``pop`` returns them)."""
        backwards: Iterator[Any] = reversed(self._data)
        return backwards

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PersistedStack):
            return self._data == other._data
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<PersistedStack {self._id!r}: {self._data!r}>"

    def _emit(self, out: Emitter, page: Page, whole: bool) -> None:
        dumps = out.dumps
        data = self._data
        n = len(data)
        if whole:
            rows = out.table(self._t_items)
            for i, value in enumerate(data):
                rows[int_key(i)] = dumps(value)
        else:
            self._emit_slots(out, self._t_items, page, lambda i: i < n, data.__getitem__, int_key)
        if self._count_row and (whole or page.meta):
            out.table(self._t_meta)[b"count"] = dumps(n)

    @classmethod
    def _load(
        cls, space: ObjectSpace, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> PersistedStack:
        raw = reader.get(f"state/item/{object_id}/metadata", b"count")
        items = {int(k): v for k, v in reader.items(f"state/item/{object_id}/items")}
        n = len(items) if raw is None else loads(raw)  # stored with its count: up to it
        try:
            data = [loads(items[i]) for i in range(n)]
        except KeyError as exc:
            raise CorruptStateError(
                f"stack {object_id!r} misses slot {exc} of {n}"
                + ("" if raw is not None else f": its {n} stored slots are not 0 to {n - 1}")
            ) from None
        stack = cls(space, object_id, data)
        stack._count_row = raw is not None
        return stack
