"""A persisted FIFO queue."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from objectspace.collections._impl import QueueBase
from objectspace.collections.base import Emitter, Page, PersistedObject, int_key
from objectspace.errors import CorruptStateError
from objectspace.tables import StateReader

if TYPE_CHECKING:
    from objectspace.space import ObjectSpace

__all__ = ["PersistedQueue"]


class PersistedQueue(PersistedObject, QueueBase):
    """A FIFO queue: ``enqueue`` at the tail, ``dequeue`` at the head.

    Stored as ``metadata: head, tail`` and ``items: n = value`` for the absolute positions
    ``head <= n < tail``, so an ``enqueue`` or ``dequeue`` writes one item and the head/tail,
    and ``clear()`` one table delete. Every operation is O(1).

    ``enqueue``, ``dequeue``, ``peek`` and ``len`` are implemented by :class:`QueueBase` (in C
    when built).
    """

    KIND = "Queue"
    TABLES = ("metadata", "items")
    __slots__ = ()

    def __init__(
        self, space: ObjectSpace, object_id: str, data: deque[Any] | None = None, head: int = 0
    ) -> None:
        super().__init__(space, object_id)
        self._data: deque[Any] = data if data is not None else deque()
        self._head = head

    def clear(self) -> None:
        """Remove every value. O(1) writes: one table delete and the head/tail."""
        if not self._registered:
            self._touch()
        self._data.clear()
        self._head = 0
        self._cleared = True
        self._meta = True
        self._dirty = None

    def __bool__(self) -> bool:
        return bool(self._data)

    def __iter__(self) -> Iterator[Any]:
        """Values from head to tail."""
        return iter(self._data)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PersistedQueue):
            return list(self._data) == list(other._data)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<PersistedQueue {self._id!r}: {list(self._data)!r}>"

    def _emit(self, out: Emitter, page: Page, whole: bool) -> None:
        dumps = out.dumps
        head = self._head
        data = self._data
        tail = head + len(data)
        if whole:
            rows = out.table(self._t_items)
            for i, value in enumerate(data, head):
                rows[int_key(i)] = dumps(value)
        else:
            self._emit_slots(
                out,
                self._t_items,
                page,
                lambda n: head <= n < tail,
                lambda n: data[n - head],
                int_key,
            )
        if whole or page.meta:
            meta = out.table(self._t_meta)
            meta[b"head"] = dumps(head)
            meta[b"tail"] = dumps(tail)

    @classmethod
    def _load(
        cls, space: ObjectSpace, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> PersistedQueue:
        raw_head = reader.get(f"state/item/{object_id}/metadata", b"head")
        raw_tail = reader.get(f"state/item/{object_id}/metadata", b"tail")
        if raw_head is None or raw_tail is None:
            raise CorruptStateError(f"queue {object_id!r} has no stored head/tail")
        head, tail = loads(raw_head), loads(raw_tail)
        items = {int(k): v for k, v in reader.items(f"state/item/{object_id}/items")}
        try:
            data = deque(loads(items[n]) for n in range(head, tail))
        except KeyError as exc:
            raise CorruptStateError(f"queue {object_id!r} misses position {exc}") from None
        return cls(space, object_id, data, head)
