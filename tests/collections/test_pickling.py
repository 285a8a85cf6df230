"""Object spaces pickle (Spark workers share instance snapshots that way): every one of the
ten types round-trips with its unacknowledged edit pages, and a differential save after
unpickling writes exactly what the original writes."""

from __future__ import annotations

import copy
import pickle
import sys
from collections.abc import Callable
from typing import Any

import pytest

import objectspace as osp
from objectspace.collections import LinkedListNode, PersistedLinkedList
from objectspace.tables import CheckpointKind

Edit = Callable[[osp.ObjectSpace], None]


def content(space: osp.ObjectSpace) -> dict[str, tuple[str, Any]]:
    """Every object's kind and content, as comparable Python data."""
    out: dict[str, tuple[str, Any]] = {}
    for object_id in space:
        obj = space.get(object_id)
        if isinstance(obj, osp.PersistedValue):
            data: Any = obj.value
        elif hasattr(obj, "items"):
            data = list(obj.items())
        else:
            data = list(obj)
        out[object_id] = (obj.KIND, data)
    return out


def _fill(add: Callable[[Any], Any]) -> None:
    for i in range(10):
        add(i)


def _linked_first_edits(space: osp.ObjectSpace) -> None:
    ll = space.get_linked_list("o")
    second = ll.first.next  # type: ignore[union-attr]
    ll.insert_after(second, "after-2")  # type: ignore[arg-type]
    ll.remove(ll.first)  # type: ignore[arg-type]
    ll.last.value = "new last"  # type: ignore[union-attr]


def _linked_second_edits(space: osp.ObjectSpace) -> None:
    ll = space.get_linked_list("o")
    ll.appendleft("front")
    ll.pop()
    node = ll.find(3)
    assert node is not None
    ll.insert_before(node, "before-3")


# kind -> (create and fill, edits before the unacknowledged save, edits after it, more edits)
CASES: dict[str, tuple[Edit, Edit, Edit, Edit]] = {
    "Value": (
        lambda s: s.create_value("o", {"a": 1}),
        lambda s: setattr(s.get_value("o"), "value", [1, 2]),
        lambda s: setattr(s.get_value("o"), "value", (3, "x")),
        lambda s: setattr(s.get_value("o"), "value", None),
    ),
    "Array": (
        lambda s: s.create_array("o", 8, 0.5),
        lambda s: s.get_array("o").__setitem__(2, "two"),
        lambda s: s.get_array("o").__setitem__(7, 7.0),
        lambda s: s.get_array("o").__setitem__(0, b"zero"),
    ),
    "List": (
        lambda s: s.create_list("o").extend(range(20)),
        lambda s: (s.get_list("o").insert(3, "ins"), s.get_list("o").pop()),
        lambda s: (s.get_list("o").append(99), s.get_list("o").__delitem__(0)),
        lambda s: s.get_list("o").clear(),
    ),
    "Queue": (
        lambda s: _fill(s.create_queue("o").enqueue),
        lambda s: (s.get_queue("o").dequeue(), s.get_queue("o").enqueue("a")),
        lambda s: (s.get_queue("o").dequeue(), s.get_queue("o").enqueue("b")),
        lambda s: s.get_queue("o").clear(),
    ),
    "Stack": (
        lambda s: _fill(s.create_stack("o").push),
        lambda s: (s.get_stack("o").pop(), s.get_stack("o").push("a")),
        lambda s: (s.get_stack("o").pop(), s.get_stack("o").pop()),
        lambda s: s.get_stack("o").push({"x": 1}),
    ),
    "LinkedList": (
        lambda s: _fill(s.create_linked_list("o").append),
        _linked_first_edits,
        _linked_second_edits,
        lambda s: s.get_linked_list("o").clear(),
    ),
    "Set": (
        lambda s: s.create_set("o").update(range(15)),
        lambda s: (s.get_set("o").discard(3), s.get_set("o").add("x")),
        lambda s: (s.get_set("o").discard("x"), s.get_set("o").add(100)),
        lambda s: s.get_set("o").clear(),
    ),
    "SortedSet": (
        lambda s: s.create_sorted_set("o").update(range(15)),
        lambda s: (s.get_sorted_set("o").discard(3), s.get_sorted_set("o").add(-1)),
        lambda s: (s.get_sorted_set("o").discard(-1), s.get_sorted_set("o").add(100)),
        lambda s: s.get_sorted_set("o").discard(0),
    ),
    "Dict": (
        lambda s: s.create_dict("o").update({f"k{i}": i for i in range(15)}),
        lambda s: (s.get_dict("o").__setitem__("k1", "one"), s.get_dict("o").pop("k2")),
        lambda s: (s.get_dict("o").__setitem__("new", [1]), s.get_dict("o").pop("k1")),
        lambda s: s.get_dict("o").clear(),
    ),
    "SortedDict": (
        lambda s: s.create_sorted_dict("o").update({i: str(i) for i in range(15)}),
        lambda s: (s.get_sorted_dict("o").__setitem__(1, "one"), s.get_sorted_dict("o").pop(2)),
        lambda s: (s.get_sorted_dict("o").__setitem__(-5, "m"), s.get_sorted_dict("o").pop(1)),
        lambda s: s.get_sorted_dict("o").__setitem__(3, None),
    ),
}


def test_the_cases_cover_the_ten_kinds() -> None:
    from objectspace.collections import KINDS

    assert sorted(CASES) == sorted(KINDS)


def _diff_save(space: osp.ObjectSpace, store: osp.MemoryStore) -> dict[str, Any]:
    """A committed differential save; returns what it wrote."""
    writer = store.writer(CheckpointKind.DIFFERENTIAL)
    space.save(writer)
    changes = dict(writer.changes)
    writer.commit()
    space.on_saved()
    return changes


def _store_copy(store: osp.MemoryStore) -> osp.MemoryStore:
    other = osp.MemoryStore()
    other._tables = copy.deepcopy(store.dump())
    return other


@pytest.mark.parametrize("kind", list(CASES))
@pytest.mark.parametrize("with_other_objects", [False, True])
def test_round_trip_with_pending_pages_saves_the_same(kind: str, with_other_objects: bool) -> None:
    create, first, second, more = CASES[kind]
    space = osp.ObjectSpace()
    create(space)
    if with_other_objects:
        space.create_value("bystander", 1)
        space.create_list("deleted-later").append(1)
    store = osp.MemoryStore()
    space.checkpoint(store, CheckpointKind.FULL)
    first(space)
    if with_other_objects:
        space.delete("deleted-later")
    # Saved but never acknowledged (the commit failed, or the snapshot is taken before
    # on_saved): the frozen page must survive pickling ...
    space.save(store.writer(CheckpointKind.DIFFERENTIAL))
    # ... and so must the current page, edits made after that save.
    second(space)

    clone = pickle.loads(pickle.dumps(space, pickle.HIGHEST_PROTOCOL))
    assert type(clone.get("o")) is type(space.get("o"))
    assert content(clone) == content(space)
    assert clone.is_dirty and space.is_dirty

    store_clone = _store_copy(store)
    wrote = _diff_save(space, store)
    wrote_clone = _diff_save(clone, store_clone)
    assert wrote_clone == wrote
    assert store_clone.dump() == store.dump()
    assert content(osp.ObjectSpace.load(store.reader())) == content(space)

    # Acknowledged after unpickling: later edits are differential as before.
    more(space)
    more(clone)
    assert _diff_save(clone, store_clone) == _diff_save(space, store)
    assert store_clone.dump() == store.dump()
    assert content(osp.ObjectSpace.load(store_clone.reader())) == content(clone)
    assert not clone.is_dirty


@pytest.mark.parametrize("kind", list(CASES))
def test_round_trip_of_an_acknowledged_space_writes_nothing(kind: str) -> None:
    space = osp.ObjectSpace()
    CASES[kind][0](space)
    store = osp.MemoryStore()
    space.checkpoint(store)
    clone = pickle.loads(pickle.dumps(space, pickle.HIGHEST_PROTOCOL))
    assert not clone.is_dirty
    assert content(clone) == content(space)
    CASES[kind][1](clone)
    CASES[kind][1](space)
    assert _diff_save(clone, _store_copy(store)) == _diff_save(space, store)


def test_long_linked_list_pickles_without_recursion() -> None:
    space = osp.ObjectSpace()
    ll = space.create_linked_list("ll")
    n = 20 * sys.getrecursionlimit()
    for i in range(n):
        ll.append(i)
    store = osp.MemoryStore()
    space.checkpoint(store)
    ll.popleft()
    ll.append("tail")
    clone = pickle.loads(pickle.dumps(space, pickle.HIGHEST_PROTOCOL))
    other = clone.get_linked_list("ll")
    assert list(other) == list(ll)
    assert list(reversed(other)) == list(reversed(ll))
    assert len(other) == len(ll) == n
    assert other.first.prev is None and other.last.next is None  # type: ignore[union-attr]
    assert all(node.list is other for node in other.nodes())
    assert _diff_save(clone, _store_copy(store)) == _diff_save(space, store)


def test_linked_list_nodes_pickle_as_references_into_their_list() -> None:
    space = osp.ObjectSpace()
    ll = space.create_linked_list("ll")
    nodes = [ll.append(i) for i in range(5)]
    removed = nodes[4]
    ll.remove(removed)
    got_list, got_node, got_removed = pickle.loads(
        pickle.dumps((ll, nodes[2], removed), pickle.HIGHEST_PROTOCOL)
    )
    assert isinstance(got_list, PersistedLinkedList) and list(got_list) == [0, 1, 2, 3]
    assert isinstance(got_node, LinkedListNode) and got_node.list is got_list
    assert got_node is got_list.find(2)
    assert got_node.prev is got_list.find(1) and got_node.next is got_list.find(3)
    got_node.value = "two"
    assert list(got_list) == [0, 1, "two", 3] and list(ll) == [0, 1, 2, 3]
    assert got_removed.list is None and got_removed.value == 4
    # A node pickled alone brings its list along.
    alone = pickle.loads(pickle.dumps(nodes[0], pickle.HIGHEST_PROTOCOL))
    assert alone.list is not None and list(alone.list) == [0, 1, 2, 3]
    assert alone is alone.list.first
