"""A persisted linked list (one module per persisted type)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from objectspace.collections.base import Emitter, Page, PersistedObject, int_key
from objectspace.errors import CorruptStateError
from objectspace.tables import DELETED, StateReader

if TYPE_CHECKING:
    from objectspace.space import ObjectSpace

__all__ = ["LinkedListNode", "PersistedLinkedList"]


class LinkedListNode:
    """A node of a :class:`PersistedLinkedList`: ``.value`` (settable), ``.next``, ``.prev``.

    A node stays valid until it is removed; a removed node belongs to no list.
    """

    __slots__ = ("_list", "_next", "_nid", "_prev", "_value")

    def __init__(self, owner: PersistedLinkedList, nid: int, value: Any) -> None:
        self._list: PersistedLinkedList | None = owner
        self._nid = nid
        self._value = value
        self._prev: LinkedListNode | None = None
        self._next: LinkedListNode | None = None

    @property
    def value(self) -> Any:
        return self._value

    @value.setter
    def value(self, value: Any) -> None:
        owner = self._list
        if owner is None:
            raise ValueError("cannot set the value of a node that was removed from its list")
        if not owner._registered:
            owner._touch()
        self._value = value
        owner._dirty_set().add(self._nid)

    @property
    def next(self) -> LinkedListNode | None:
        """The following node, or ``None`` at the end."""
        return self._next

    @property
    def prev(self) -> LinkedListNode | None:
        """The preceding node, or ``None`` at the start."""
        return self._prev

    @property
    def list(self) -> PersistedLinkedList | None:
        """The list the node belongs to (``None`` once removed)."""
        return self._list

    def __repr__(self) -> str:
        return f"<LinkedListNode {self._value!r}>"

    def __reduce__(self) -> tuple[Any, ...]:
        # A node pickles as a reference into its list (which pickles its nodes flat), not
        # as a chain of neighbours: pickling that chain recursed once per node.
        owner = self._list
        if owner is None:
            return (_removed_node, (self._nid, self._value))
        return (_node_of, (owner, self._nid))


def _node_of(owner: PersistedLinkedList, nid: int) -> LinkedListNode:
    return owner._nodes[nid]


def _removed_node(nid: int, value: Any) -> LinkedListNode:
    node = LinkedListNode.__new__(LinkedListNode)
    node._list = node._prev = node._next = None
    node._nid = nid
    node._value = value
    return node


_LINKED_FIELDS = ("_first", "_last", "_nodes")


class PersistedLinkedList(PersistedObject):
    """A doubly linked list; inserting or removing at a node is O(1).

    Stored as ``metadata: first, last, count, next_id``, ``items: node id = value`` and
    ``data: node id = [prev id, next id]``: an insert or remove writes the node and its
    neighbours' links, setting a node's value writes one item, and ``clear()`` two table
    deletes.
    """

    KIND = "LinkedList"
    TABLES = ("metadata", "items", "data")
    __slots__ = ("_count", "_first", "_last", "_links", "_next_id", "_nodes")

    def __init__(self, space: ObjectSpace, object_id: str) -> None:
        super().__init__(space, object_id)
        self._first: LinkedListNode | None = None
        self._last: LinkedListNode | None = None
        self._count = 0
        self._next_id = 0
        self._nodes: dict[int, LinkedListNode] = {}
        self._links: set[int] = set()

    # -- edits ---------------------------------------------------------------------------------

    def _new_node(self, value: Any) -> LinkedListNode:
        if not self._registered:
            self._touch()
        self._meta = True
        node = LinkedListNode(self, self._next_id, value)
        self._next_id += 1
        self._nodes[node._nid] = node
        self._count += 1
        self._dirty_set().add(node._nid)
        self._links.add(node._nid)
        return node

    def _own(self, node: LinkedListNode) -> None:
        if not isinstance(node, LinkedListNode) or node._list is not self:
            raise ValueError(f"node {node!r} does not belong to linked list {self._id!r}")

    def _link_between(
        self, node: LinkedListNode, prev: LinkedListNode | None, nxt: LinkedListNode | None
    ) -> None:
        node._prev, node._next = prev, nxt
        if prev is None:
            self._first = node
        else:
            prev._next = node
            self._links.add(prev._nid)
        if nxt is None:
            self._last = node
        else:
            nxt._prev = node
            self._links.add(nxt._nid)

    def append(self, value: Any) -> LinkedListNode:
        """Add ``value`` at the end and return its node. O(1)."""
        node = self._new_node(value)
        self._link_between(node, self._last, None)
        return node

    def appendleft(self, value: Any) -> LinkedListNode:
        """Add ``value`` at the start and return its node. O(1)."""
        node = self._new_node(value)
        self._link_between(node, None, self._first)
        return node

    def insert_after(self, node: LinkedListNode, value: Any) -> LinkedListNode:
        """Insert ``value`` right after ``node`` and return the new node. O(1)."""
        self._own(node)
        new = self._new_node(value)
        self._link_between(new, node, node._next)
        return new

    def insert_before(self, node: LinkedListNode, value: Any) -> LinkedListNode:
        """Insert ``value`` right before ``node`` and return the new node. O(1)."""
        self._own(node)
        new = self._new_node(value)
        self._link_between(new, node._prev, node)
        return new

    def remove(self, node: LinkedListNode) -> None:
        """Unlink ``node`` (which then belongs to no list). O(1)."""
        self._own(node)
        if not self._registered:
            self._touch()
        self._meta = True
        prev, nxt = node._prev, node._next
        if prev is None:
            self._first = nxt
        else:
            prev._next = nxt
            self._links.add(prev._nid)
        if nxt is None:
            self._last = prev
        else:
            nxt._prev = prev
            self._links.add(nxt._nid)
        del self._nodes[node._nid]
        self._count -= 1
        self._dirty_set().add(node._nid)
        self._links.add(node._nid)
        node._list = node._prev = node._next = None

    def pop(self) -> Any:
        """Remove the last node and return its value. O(1). Empty: ``IndexError``."""
        if self._last is None:
            raise IndexError(f"pop from empty linked list {self._id!r}")
        node = self._last
        self.remove(node)
        return node._value

    def popleft(self) -> Any:
        """Remove the first node and return its value. O(1). Empty: ``IndexError``."""
        if self._first is None:
            raise IndexError(f"pop from empty linked list {self._id!r}")
        node = self._first
        self.remove(node)
        return node._value

    def clear(self) -> None:
        """Remove every node. O(n) in memory, O(1) writes (two table deletes)."""
        if not self._registered:
            self._touch()
        for node in self._nodes.values():
            node._list = node._prev = node._next = None
        self._nodes = {}
        self._first = self._last = None
        self._count = 0
        self._cleared = True
        self._meta = True
        self._dirty = None
        self._links = set()

    # -- reads ---------------------------------------------------------------------------------

    @property
    def first(self) -> LinkedListNode | None:
        """The first node, or ``None`` when empty."""
        return self._first

    @property
    def last(self) -> LinkedListNode | None:
        """The last node, or ``None`` when empty."""
        return self._last

    def find(self, value: Any) -> LinkedListNode | None:
        """The first node whose value equals ``value``, or ``None``. O(n)."""
        node = self._first
        while node is not None:
            if node._value == value:
                return node
            node = node._next
        return None

    def nodes(self) -> Iterator[LinkedListNode]:
        """The nodes from first to last."""
        node = self._first
        while node is not None:
            nxt = node._next
            yield node
            node = nxt

    def __iter__(self) -> Iterator[Any]:
        """The values from first to last."""
        node = self._first
        while node is not None:
            yield node._value
            node = node._next

    def __reversed__(self) -> Iterator[Any]:
        node = self._last
        while node is not None:
            yield node._value
            node = node._prev

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PersistedLinkedList):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<PersistedLinkedList {self._id!r}: {list(self)!r}>"

    # -- pickling: the nodes flat, in order (a chain of node objects recursed per node) ----

    def __getstate__(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for cls in type(self).__mro__:
            names = cls.__dict__.get("__slots__", ())
            for name in (names,) if isinstance(names, str) else names:
                if name not in _LINKED_FIELDS and hasattr(self, name):
                    state[name] = getattr(self, name)
        nids: list[int] = []
        values: list[Any] = []
        node = self._first
        while node is not None:
            nids.append(node._nid)
            values.append(node._value)
            node = node._next
        state["_order"] = (nids, values)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        nids, values = state.pop("_order")
        for name, value in state.items():
            setattr(self, name, value)
        nodes: dict[int, LinkedListNode] = {}
        prev: LinkedListNode | None = None
        for nid, value in zip(nids, values, strict=True):
            node = LinkedListNode(self, nid, value)
            node._prev = prev
            if prev is not None:
                prev._next = node
            nodes[nid] = node
            prev = node
        self._nodes = nodes
        self._first = nodes[nids[0]] if nids else None
        self._last = prev

    # -- persistence -------------------------------------------------------------------------

    def _dirty_links(self) -> set[Any]:
        return self._links

    def _reset_extra(self) -> None:
        self._links = set()

    @staticmethod
    def _nid_of(node: LinkedListNode | None) -> int | None:
        return None if node is None else node._nid

    def _emit(self, out: Emitter, page: Page, whole: bool) -> None:
        dumps = out.dumps
        nodes = self._nodes
        nid_of = self._nid_of
        if whole:
            items = out.table(self._t_items)
            links = out.table(self._t_data)
            for nid, node in nodes.items():
                key = int_key(nid)
                items[key] = dumps(node._value)
                links[key] = dumps([nid_of(node._prev), nid_of(node._next)])
        else:
            self._emit_slots(
                out,
                self._t_items,
                page,
                nodes.__contains__,
                lambda nid: nodes[nid]._value,
                int_key,
            )
            if page.cleared:
                out.truncate(self._t_data)
            links = out.table(self._t_data)
            for nid in page.links:
                live = nodes.get(nid)
                if live is not None:
                    links[int_key(nid)] = dumps([nid_of(live._prev), nid_of(live._next)])
                elif not page.cleared:
                    links[int_key(nid)] = DELETED
        if whole or page.meta:
            meta = out.table(self._t_meta)
            meta[b"first"] = dumps(nid_of(self._first))
            meta[b"last"] = dumps(nid_of(self._last))
            meta[b"count"] = dumps(self._count)
            meta[b"next_id"] = dumps(self._next_id)

    @classmethod
    def _load(
        cls, space: ObjectSpace, object_id: str, reader: StateReader, loads: Callable[[bytes], Any]
    ) -> PersistedLinkedList:
        meta_table = f"state/item/{object_id}/metadata"
        meta = {k: loads(v) for k, v in reader.items(meta_table)}
        if not {b"first", b"last", b"count", b"next_id"} <= meta.keys():
            raise CorruptStateError(f"linked list {object_id!r} has incomplete metadata")
        self = cls(space, object_id)
        self._next_id = meta[b"next_id"]
        values = {int(k): v for k, v in reader.items(f"state/item/{object_id}/items")}
        links = {int(k): v for k, v in reader.items(f"state/item/{object_id}/data")}
        nid = meta[b"first"]
        prev: LinkedListNode | None = None
        try:
            while nid is not None:
                if nid in self._nodes or len(self._nodes) > meta[b"count"]:
                    raise CorruptStateError(f"linked list {object_id!r} has a cycle at {nid}")
                node = LinkedListNode(self, nid, loads(values[nid]))
                node._prev = prev
                if prev is None:
                    self._first = node
                else:
                    prev._next = node
                self._nodes[nid] = node
                prev = node
                nid = loads(links[nid])[1]
        except KeyError as exc:
            raise CorruptStateError(f"linked list {object_id!r} misses node {exc}") from None
        self._last = prev
        self._count = len(self._nodes)
        if self._count != meta[b"count"] or self._nid_of(prev) != meta[b"last"]:
            raise CorruptStateError(
                f"linked list {object_id!r} holds {self._count} linked nodes, "
                f"its metadata says {meta[b'count']}"
            )
        return self
