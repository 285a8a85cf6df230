"""The public API of an object space: the seed's example, errors, ids and each kind's methods."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, MutableMapping, MutableSequence, MutableSet
from pathlib import Path
from typing import Any

import pytest

import objectspace as osp

FULL = osp.CheckpointKind.FULL
DIFF = osp.CheckpointKind.DIFFERENTIAL


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[osp.Store]:
    if request.param == "memory":
        yield osp.MemoryStore()
        return
    sqlite = osp.SQLiteStore(tmp_path / "state.db")
    yield sqlite
    sqlite.close()


def load(store: osp.Store, serializer: osp.Serializer | None = None) -> osp.ObjectSpace:
    return osp.ObjectSpace.load(store.reader(), serializer=serializer)


# -- the seed's array example, table by table --------------------------------------------------


def test_seed_array_example_table_by_table() -> None:
    space = osp.ObjectSpace(osp.JsonSerializer())
    arr = space.create_array("foo", 8, fill=0)
    assert space.get_array("foo") is arr
    arr[3] = 42
    arr[5] = 43
    store = osp.MemoryStore()
    writer = store.writer(osp.CheckpointKind.FULL)
    space.save(writer)
    writer.commit()
    space.on_saved()
    assert store.dump() == {
        "state/index": {b"foo": b'{"kind":"Array"}'},
        "state/item/foo/metadata": {b"length": b"8"},
        "state/item/foo/items": {
            b"0": b"0",
            b"1": b"0",
            b"2": b"0",
            b"3": b"42",
            b"4": b"0",
            b"5": b"43",
            b"6": b"0",
            b"7": b"0",
        },
    }

    arr[3] = 44
    stats = space.checkpoint(store, kind=osp.CheckpointKind.DIFFERENTIAL)
    assert (stats.items_written, stats.items_deleted, stats.tables_deleted) == (1, 0, 0)
    assert stats.bytes_written > 0
    dump = store.dump()
    assert dump["state/item/foo/items"][b"3"] == b"44"
    assert dump["state/item/foo/items"][b"5"] == b"43"

    restored = osp.ObjectSpace.load(store.reader(), serializer=osp.JsonSerializer())
    assert list(restored.get_array("foo")) == [0, 0, 0, 44, 0, 43, 0, 0]


def test_checkpoint_returns_write_stats(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    space.create_value("v", "hello")
    stats = space.checkpoint(store)
    assert isinstance(stats, osp.WriteStats)
    assert stats.items_written == 2  # index row and the value
    assert stats.items_deleted == 0
    assert stats.bytes_written >= len(b"v") + len(b"hello")
    assert stats.seconds >= 0
    assert space.checkpoint(store).items_written == 0  # nothing dirty


def test_default_serializer_is_msgpack_and_load_takes_a_serializer(store: osp.Store) -> None:
    assert osp.ObjectSpace().serializer == osp.MsgpackSerializer()
    for serializer in (osp.JsonSerializer(), osp.PickleSerializer()):
        space = osp.ObjectSpace(serializer)
        assert space.serializer is serializer
        space.create_list("l").extend([1, (2, 3), b"x"])
        space.checkpoint(store, kind=FULL)
        restored = load(store, serializer=type(serializer)())
        assert list(restored.get_list("l")) == [1, (2, 3), b"x"]


# -- errors -----------------------------------------------------------------------------------

CREATORS: dict[str, Callable[[osp.ObjectSpace, Any], Any]] = {
    "value": lambda sp, oid: sp.create_value(oid, 1),
    "array": lambda sp, oid: sp.create_array(oid, 3, fill=0),
    "list": lambda sp, oid: sp.create_list(oid),
    "queue": lambda sp, oid: sp.create_queue(oid),
    "stack": lambda sp, oid: sp.create_stack(oid),
    "linked_list": lambda sp, oid: sp.create_linked_list(oid),
    "set": lambda sp, oid: sp.create_set(oid),
    "sorted_set": lambda sp, oid: sp.create_sorted_set(oid),
    "dict": lambda sp, oid: sp.create_dict(oid),
    "sorted_dict": lambda sp, oid: sp.create_sorted_dict(oid),
}
GETTERS = {kind: f"get_{kind}" for kind in CREATORS}
CLASSES = {
    "value": osp.PersistedValue,
    "array": osp.PersistedArray,
    "list": osp.PersistedList,
    "queue": osp.PersistedQueue,
    "stack": osp.PersistedStack,
    "linked_list": osp.PersistedLinkedList,
    "set": osp.PersistedSet,
    "sorted_set": osp.PersistedSortedSet,
    "dict": osp.PersistedDict,
    "sorted_dict": osp.PersistedSortedDict,
}
KIND_NAMES = {
    "value": "Value",
    "array": "Array",
    "list": "List",
    "queue": "Queue",
    "stack": "Stack",
    "linked_list": "LinkedList",
    "set": "Set",
    "sorted_set": "SortedSet",
    "dict": "Dict",
    "sorted_dict": "SortedDict",
}


@pytest.mark.parametrize("kind", sorted(CREATORS))
def test_create_get_and_kind_of_each_type(kind: str) -> None:
    space = osp.ObjectSpace()
    obj = CREATORS[kind](space, "x")
    assert isinstance(obj, CLASSES[kind])
    assert isinstance(obj, osp.PersistedObject)
    assert getattr(space, GETTERS[kind])("x") is obj
    assert space.get("x") is obj
    assert obj.id == "x"
    assert obj.kind == KIND_NAMES[kind]


@pytest.mark.parametrize("kind", sorted(CREATORS))
@pytest.mark.parametrize("existing", ["value", "list"])
def test_create_of_an_existing_id_raises(kind: str, existing: str) -> None:
    space = osp.ObjectSpace()
    first = CREATORS[existing](space, "x")
    with pytest.raises(osp.ObjectExistsError):
        CREATORS[kind](space, "x")
    assert space.get("x") is first
    assert len(space) == 1


@pytest.mark.parametrize("kind", sorted(CREATORS))
def test_get_and_delete_of_a_missing_id_raise_key_error(kind: str) -> None:
    space = osp.ObjectSpace()
    CREATORS["value"](space, "present")
    with pytest.raises(KeyError):
        getattr(space, GETTERS[kind])("missing")
    with pytest.raises(KeyError):
        space.get("missing")
    with pytest.raises(KeyError):
        space.delete("missing")
    assert list(space) == ["present"]


@pytest.mark.parametrize("kind", sorted(CREATORS))
def test_get_of_another_kind_raises_wrong_kind_error(kind: str) -> None:
    space = osp.ObjectSpace()
    CREATORS[kind](space, "x")
    for other in CREATORS:
        if other == kind:
            continue
        with pytest.raises(osp.WrongKindError) as info:
            getattr(space, GETTERS[other])("x")
        assert isinstance(info.value, TypeError)
        assert isinstance(info.value, osp.ObjectSpaceError)


def test_error_hierarchy() -> None:
    for cls in (
        osp.ObjectExistsError,
        osp.WrongKindError,
        osp.ObjectDeletedError,
        osp.SerializationError,
        osp.StorageError,
        osp.CorruptStateError,
        osp.CheckpointError,
    ):
        assert issubclass(cls, osp.ObjectSpaceError)
    assert issubclass(osp.WrongKindError, TypeError)
    assert issubclass(osp.CorruptStateError, osp.StorageError)


def test_empty_containers_raise_index_error() -> None:
    space = osp.ObjectSpace()
    q = space.create_queue("q")
    s = space.create_stack("s")
    ll = space.create_linked_list("ll")
    for call in (q.dequeue, q.peek, s.pop, s.peek, ll.pop, ll.popleft):
        with pytest.raises(IndexError):
            call()
    q.enqueue(1)
    assert q.dequeue() == 1
    with pytest.raises(IndexError):
        q.dequeue()
    s.push(1)
    assert s.pop() == 1
    with pytest.raises(IndexError):
        s.peek()
    ll.append(1)
    assert ll.pop() == 1
    with pytest.raises(IndexError):
        ll.popleft()
    assert not space.create_list("l")
    with pytest.raises(IndexError):
        space.get_list("l").pop()


@pytest.mark.parametrize("kind", sorted(CREATORS))
def test_deleted_object_raises_when_edited(kind: str) -> None:
    space = osp.ObjectSpace()
    obj = CREATORS[kind](space, "x")
    edits: dict[str, Callable[[Any], Any]] = {
        "value": lambda o: setattr(o, "value", 2),
        "array": lambda o: o.__setitem__(0, 2),
        "list": lambda o: o.append(2),
        "queue": lambda o: o.enqueue(2),
        "stack": lambda o: o.push(2),
        "linked_list": lambda o: o.append(2),
        "set": lambda o: o.add(2),
        "sorted_set": lambda o: o.add(2),
        "dict": lambda o: o.__setitem__(2, 2),
        "sorted_dict": lambda o: o.__setitem__(2, 2),
    }
    space.delete("x")
    assert "x" not in space
    with pytest.raises(osp.ObjectDeletedError):
        edits[kind](obj)
    assert "x" not in space
    assert len(space) == 0


def test_node_of_a_deleted_linked_list_raises_when_edited() -> None:
    space = osp.ObjectSpace()
    ll = space.create_linked_list("ll")
    node = ll.append(1)
    space.delete("ll")
    with pytest.raises(osp.ObjectDeletedError):
        node.value = 2


@pytest.mark.parametrize(
    "edit",
    [
        lambda o: o.__setitem__(0, "x"),
        lambda o: o.insert(0, "x"),
        lambda o: o.pop(0),
        lambda o: o.__delitem__(0),
        lambda o: o.extend(["x"]),
        lambda o: o.sort(reverse=True),
        lambda o: o.reverse(),
        lambda o: o.__setitem__(slice(0, 1), ["x", "y"]),
        lambda o: o.clear(),
    ],
    ids=["setitem", "insert", "pop", "delitem", "extend", "sort", "reverse", "slice", "clear"],
)
def test_deleted_list_refuses_every_edit(edit: Callable[[Any], Any]) -> None:
    space = osp.ObjectSpace()
    lst = space.create_list("l")
    lst.extend([1, 2, 3])
    space.delete("l")
    with pytest.raises(osp.ObjectDeletedError):
        edit(lst)


# -- ids --------------------------------------------------------------------------------------

ODD_IDS = [
    "user/42",
    "ключ/🙂",
    "with space",
    " leading and trailing ",
    "a",
    "a/items",
    "a/metadata",
    "a/data",
    "a/items/items",
    "state/index",
    "état",
    "tab\tand\nnewline",
    "nul\x00inside",
    "e\u0301",  # "é" decomposed: a different id from the composed one above
    "x" * 300,
]


@pytest.mark.parametrize("serializer", [osp.MsgpackSerializer(), osp.JsonSerializer()])
def test_odd_ids_coexist_and_round_trip(store: osp.Store, serializer: osp.Serializer) -> None:
    space = osp.ObjectSpace(serializer)
    for i, oid in enumerate(ODD_IDS):
        if i % 3 == 0:
            space.create_list(oid).extend([oid, i])
        elif i % 3 == 1:
            space.create_dict(oid)[oid] = i
        else:
            space.create_queue(oid).enqueue(oid)
    space.checkpoint(store)
    restored = load(store, type(serializer)())
    assert sorted(restored) == sorted(ODD_IDS)
    for i, oid in enumerate(ODD_IDS):
        if i % 3 == 0:
            assert list(restored.get_list(oid)) == [oid, i]
        elif i % 3 == 1:
            assert dict(restored.get_dict(oid)) == {oid: i}
        else:
            assert list(restored.get_queue(oid)) == [oid]

    # deleting "a" leaves "a/items" and friends alone, and the other way round
    restored.delete("a")
    restored.delete("a/items/items")
    restored.checkpoint(store)
    again = load(store, type(serializer)())
    assert sorted(again) == sorted(set(ODD_IDS) - {"a", "a/items/items"})
    for oid in ("a/items", "a/metadata", "a/data"):
        i = ODD_IDS.index(oid)
        obj = again.get(oid)
        expected = [[oid, i], [oid], [oid]][i % 3]
        assert (list(obj) if i % 3 != 1 else list(obj.items())) == (
            expected if i % 3 != 1 else [(oid, i)]
        )


@pytest.mark.parametrize("kind", sorted(CREATORS))
@pytest.mark.parametrize("bad", ["", 42, None, b"bytes", ("t",)])
def test_bad_ids_raise(kind: str, bad: Any) -> None:
    space = osp.ObjectSpace()
    with pytest.raises((TypeError, ValueError)):
        CREATORS[kind](space, bad)
    assert len(space) == 0


def test_space_get_contains_iter_len() -> None:
    space = osp.ObjectSpace()
    assert len(space) == 0
    assert list(space) == []
    a = space.create_value("a")
    b = space.create_list("b")
    assert space.get("a") is a
    assert space.get("b") is b
    assert "a" in space and "b" in space
    assert "c" not in space
    assert 42 not in space
    assert sorted(space) == ["a", "b"]
    assert len(space) == 2
    ids = iter(space)
    space.delete("a")  # iterating a snapshot of the ids: deleting does not break it
    assert sorted(ids) == ["a", "b"]
    assert list(space) == ["b"]
    assert len(space) == 1


def test_load_gives_clean_objects_of_the_right_kinds(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    for kind, create in CREATORS.items():
        create(space, kind)
    assert space.is_dirty
    space.checkpoint(store)
    assert not space.is_dirty
    restored = load(store)
    assert not restored.is_dirty
    assert sorted(restored) == sorted(CREATORS)
    for kind in CREATORS:
        assert isinstance(getattr(restored, GETTERS[kind])(kind), CLASSES[kind])


# -- each kind --------------------------------------------------------------------------------


def test_value() -> None:
    space = osp.ObjectSpace()
    v = space.create_value("v")
    assert v.value is None
    v.value = [1, 2]
    assert v.value == [1, 2]
    assert space.create_value("w", "init").value == "init"


def test_array(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    arr = space.create_array("a", 4, fill="f")
    assert len(arr) == 4
    assert list(arr) == ["f"] * 4
    arr[0] = 0
    arr[-1] = 3
    assert arr[3] == 3 and arr[-4] == 0
    assert list(arr) == [0, "f", "f", 3]
    for bad in (4, -5):
        with pytest.raises(IndexError):
            arr[bad]
        with pytest.raises(IndexError):
            arr[bad] = 1
    assert len(arr) == 4
    assert not hasattr(arr, "append")
    assert list(space.create_array("empty", 0)) == []
    assert list(space.create_array("nones", 2)) == [None, None]
    with pytest.raises((ValueError, TypeError)):
        space.create_array("neg", -1)
    space.checkpoint(store)
    assert list(load(store).get_array("a")) == [0, "f", "f", 3]
    assert list(load(store).get_array("empty")) == []


def test_list_is_a_mutable_sequence(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    lst = space.create_list("l")
    assert isinstance(lst, MutableSequence)
    lst.extend([3, 1, 2])
    lst += [5]
    lst.insert(0, 0)
    assert list(lst) == [0, 3, 1, 2, 5]
    assert lst[-1] == 5 and lst[1:3] == [3, 1]
    lst.remove(5)
    assert lst.index(2) == 3 and lst.count(1) == 1 and 3 in lst
    lst.sort()
    assert list(lst) == [0, 1, 2, 3]
    lst.reverse()
    assert list(reversed(lst)) == [0, 1, 2, 3]
    lst[1:3] = ["a", "b", "c"]
    del lst[0]
    assert list(lst) == ["a", "b", "c", 0]
    assert lst.pop() == 0 and lst.pop(0) == "a"
    assert lst == ["b", "c"]
    space.checkpoint(store)
    assert list(load(store).get_list("l")) == ["b", "c"]


@pytest.mark.parametrize("remove", ["pop(0)", "del [0]", "del [:k]"])
def test_removing_from_the_front_of_a_list_writes_rows_for_what_was_removed(
    store: osp.Store, remove: str
) -> None:
    """A list used as a FIFO: removing its first values moves its stored head, one delete
    per value removed, instead of rewriting every slot behind them."""
    space = osp.ObjectSpace()
    lst = space.create_list("l")
    lst.extend(range(1000))
    space.checkpoint(store)
    for _ in range(3):
        if remove == "pop(0)":
            for _ in range(5):
                lst.pop(0)
        elif remove == "del [0]":
            for _ in range(5):
                del lst[0]
        else:
            del lst[:5]
        lst.append(-1)
        stats = space.checkpoint(store)
        assert stats.items_deleted == 5 and stats.items_written <= 3
    assert list(load(store).get_list("l")) == [*range(15, 1000), -1, -1, -1]
    lst.clear()
    lst.append("x")
    space.checkpoint(store)
    assert list(load(store).get_list("l")) == ["x"]


@pytest.mark.parametrize(
    ("head", "error"),
    [("x", "invalid stored head 'x'"), (-1, "invalid stored head -1"), (7, "misses slot")],
)
def test_a_list_with_a_bad_stored_head_is_corrupt_state(head: Any, error: str) -> None:
    from objectspace.tables import CheckpointKind, TableChanges

    store = osp.MemoryStore()
    space = osp.ObjectSpace()
    lst = space.create_list("l")
    lst.extend(range(5))
    space.checkpoint(store)
    del lst[:2]
    space.checkpoint(store)
    assert list(load(store).get_list("l")) == [2, 3, 4]
    writer = store.writer(CheckpointKind.DIFFERENTIAL)
    raw = osp.MsgpackSerializer().dumps(head)
    writer.merge({"state/item/l/metadata": TableChanges(rows={b"head": raw})})
    writer.commit()
    with pytest.raises(osp.CorruptStateError, match=error) as info:
        load(store)
    assert "'l'" in str(info.value)


def _extend_with_itself(op: str) -> subprocess.CompletedProcess[str]:
    """Run ``lst.extend(lst)`` (or ``lst += lst``) in a child with 1 GiB of address space."""
    code = textwrap.dedent(
        f"""
        import objectspace as osp
        lst = osp.ObjectSpace().create_list("l")
        lst.extend([1, 2])
        {op}
        print(list(lst))
        """
    )

    def limit() -> None:  # pragma: no cover - runs in the child
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
        check=False,
    )


@pytest.mark.parametrize("op", ["lst.extend(lst)", "lst += lst"])
def test_list_extend_with_itself_doubles_it(op: str) -> None:
    """``l.extend(l)`` on a Python list doubles it; the persisted list must do the same."""
    result = _extend_with_itself(op)
    assert result.returncode == 0, result.stderr[-500:]
    assert result.stdout.strip() == "[1, 2, 1, 2]"


def test_queue(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    q = space.create_queue("q")
    for v in "abc":
        q.enqueue(v)
    assert len(q) == 3
    assert list(q) == ["a", "b", "c"]  # front to back
    assert q.peek() == "a"
    assert q.dequeue() == "a"
    assert list(q) == ["b", "c"]
    space.checkpoint(store)
    restored = load(store).get_queue("q")
    assert list(restored) == ["b", "c"]
    assert restored.dequeue() == "b"
    q.clear()
    assert len(q) == 0 and not q


def test_stack(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    s = space.create_stack("s")
    for v in "abc":
        s.push(v)
    assert len(s) == 3
    assert s.peek() == "c"
    assert s.pop() == "c"
    assert len(s) == 2
    space.checkpoint(store)
    restored = load(store).get_stack("s")
    assert restored.pop() == "b" and restored.pop() == "a"
    s.clear()
    assert len(s) == 0


def test_linked_list_nodes(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    ll = space.create_linked_list("ll")
    assert ll.first is None and ll.last is None and len(ll) == 0
    b = ll.append("b")
    a = ll.appendleft("a")
    d = ll.append("d")
    c = ll.insert_before(d, "c")
    e = ll.insert_after(d, "e")
    assert list(ll) == ["a", "b", "c", "d", "e"]
    assert ll.first is a and ll.last is e
    assert a.prev is None and a.next is b and b.next is c and c.next is d and e.next is None
    assert e.prev is d and d.prev is c and c.prev is b and b.prev is a
    assert ll.find("c") is c and ll.find("zzz") is None
    c.value = "C"
    assert c.value == "C" and ll.find("C") is c
    ll.remove(c)
    assert b.next is d and d.prev is b
    with pytest.raises(ValueError):
        ll.remove(c)
    with pytest.raises(ValueError):
        ll.insert_after(c, "x")
    assert ll.pop() == "e" and ll.popleft() == "a"
    assert list(ll) == ["b", "d"] and len(ll) == 2

    other = space.create_linked_list("other")
    with pytest.raises(ValueError):
        other.insert_before(b, "x")

    space.checkpoint(store)
    restored = load(store).get_linked_list("ll")
    assert list(restored) == ["b", "d"]
    first = restored.first
    assert first.value == "b" and first.next.value == "d" and first.next.prev is first
    new = restored.insert_after(first, "mid")
    assert list(restored) == ["b", "mid", "d"] and new.prev is first


def test_set_is_a_mutable_set(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    s = space.create_set("s")
    assert isinstance(s, MutableSet)
    s.add(1)
    s |= {2, 3}
    s -= {3}
    s.discard(99)
    with pytest.raises(KeyError):
        s.remove(99)
    assert s == {1, 2} and 1 in s and len(s) == 2
    assert s.isdisjoint({5}) and s <= {1, 2, 3}
    space.checkpoint(store)
    assert set(load(store).get_set("s")) == {1, 2}


@pytest.mark.parametrize("kind", ["set", "sorted_set"])
@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (lambda s: s & {1, 5}, {1}),
        (lambda s: s | {9}, {1, 2, 3, 9}),
        (lambda s: s - {1}, {2, 3}),
        (lambda s: s ^ {1, 9}, {2, 3, 9}),
    ],
    ids=["and", "or", "sub", "xor"],
)
def test_set_binary_operators(kind: str, expr: Callable[[Any], Any], expected: set) -> None:
    """``collections.abc.Set`` gives ``& | - ^``: they return the plain result."""
    space = osp.ObjectSpace()
    s = CREATORS[kind](space, "s")
    s.update([1, 2, 3])
    assert set(expr(s)) == expected
    assert set(s) == {1, 2, 3}  # the operands are unchanged


@pytest.mark.parametrize("kind", ["set", "sorted_set"])
def test_set_in_place_intersection(store: osp.Store, kind: str) -> None:
    space = osp.ObjectSpace()
    s = CREATORS[kind](space, "s")
    s.update([1, 2, 3])
    space.checkpoint(store)
    s &= {2, 3, 4}
    assert set(s) == {2, 3}
    s ^= {3, 5}
    assert set(s) == {2, 5}
    space.checkpoint(store)
    assert set(load(store).get("s")) == {2, 5}


def test_sorted_set_positions_and_irange(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    s = space.create_sorted_set("s")
    assert isinstance(s, MutableSet)
    s.update([5, 1, 9, 3, 7])
    assert list(s) == [1, 3, 5, 7, 9]
    assert s[0] == 1 and s[2] == 5 and s[-1] == 9
    with pytest.raises(IndexError):
        s[5]
    assert list(s.irange(3, 7)) == [3, 5, 7]
    assert list(s.irange(minimum=4)) == [5, 7, 9]
    assert list(s.irange(maximum=4)) == [1, 3]
    assert list(s.irange()) == [1, 3, 5, 7, 9]
    assert list(reversed(s)) == [9, 7, 5, 3, 1]
    assert s.index(7) == 3
    s.discard(5)
    space.checkpoint(store)
    restored = load(store).get_sorted_set("s")
    assert list(restored) == [1, 3, 7, 9] and restored[1] == 3


def test_dict_is_a_mutable_mapping(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    d = space.create_dict("d")
    assert isinstance(d, MutableMapping)
    d["a"] = 1
    d.update({"b": 2, 3: "three"})
    assert d.setdefault("c", 4) == 4 and d.setdefault("a", 99) == 1
    assert d.pop("c") == 4 and d.pop("zz", None) is None
    with pytest.raises(KeyError):
        d.pop("zz")
    with pytest.raises(KeyError):
        del d["zz"]
    with pytest.raises(KeyError):
        d["zz"]
    assert d.get("zz") is None and d.get("a") == 1
    assert d == {"a": 1, "b": 2, 3: "three"} and len(d) == 3
    assert set(d.keys()) == {"a", "b", 3} and sorted(map(str, d.values())) == ["1", "2", "three"]
    space.checkpoint(store)
    assert dict(load(store).get_dict("d")) == {"a": 1, "b": 2, 3: "three"}


def test_sorted_dict_irange_and_peekitem(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    d = space.create_sorted_dict("d")
    assert isinstance(d, MutableMapping)
    for k in (5, 1, 9, 3):
        d[k] = str(k)
    assert list(d) == [1, 3, 5, 9]
    assert list(d.items()) == [(1, "1"), (3, "3"), (5, "5"), (9, "9")]
    assert d.peekitem() == (9, "9")
    assert d.peekitem(0) == (1, "1")
    assert d.peekitem(-2) == (5, "5")
    with pytest.raises(IndexError):
        d.peekitem(4)
    assert list(d.irange(2, 6)) == [3, 5]
    assert list(d.irange(minimum=5)) == [5, 9]
    assert list(d.irange(maximum=3)) == [1, 3]
    del d[3]
    space.checkpoint(store)
    restored = load(store).get_sorted_dict("d")
    assert list(restored.items()) == [(1, "1"), (5, "5"), (9, "9")]
    assert restored.peekitem() == (9, "9")


def test_full_checkpoint_protocol_by_hand(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    space.create_list("l").append(1)
    writer = store.writer(osp.CheckpointKind.FULL)
    space.save(writer)
    writer.commit()
    space.on_saved()
    assert not space.is_dirty
    assert list(load(store).get_list("l")) == [1]


def test_reprs_name_the_objects() -> None:
    space = osp.ObjectSpace()
    for kind, create in CREATORS.items():
        assert repr(f"id-{kind}") in repr(create(space, f"id-{kind}"))
    assert "10 objects" in repr(space)
