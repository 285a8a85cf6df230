"""Regression tests for the bugs of the original design, and the exact cost of each edit.

Every test runs on a MemoryStore and on a SQLiteStore. A *cost* is the triple
``(items_written, items_deleted, tables_deleted)`` of one differential checkpoint, counted
by the writer before the commit and reported by the commit (the two must agree).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import objectspace as osp
from objectspace.tables import WriterStatus

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


class CommitFailed(Exception):
    pass


def _fail() -> osp.WriteStats:
    raise CommitFailed("injected")


def failing_writer(store: osp.Store, kind: osp.CheckpointKind = DIFF) -> osp.StateWriter:
    """A writer of ``store`` whose commit raises and leaves the store as it was."""
    writer = store.writer(kind)
    writer._apply = _fail  # type: ignore[method-assign]
    return writer


class FailingStore(osp.Store):
    """Reads ``inner``; every writer's commit fails."""

    def __init__(self, inner: osp.Store) -> None:
        self.inner = inner

    def writer(self, kind: osp.CheckpointKind = DIFF) -> osp.StateWriter:
        return failing_writer(self.inner, kind)

    def reader(self) -> osp.StateReader:
        return self.inner.reader()


def cost(space: osp.ObjectSpace, store: osp.Store, kind: osp.CheckpointKind = DIFF) -> tuple:
    """Run one checkpoint by hand; return (items written, items deleted, tables deleted)."""
    writer = store.writer(kind)
    space.save(writer)
    counted = writer.count()
    stats = writer.commit()
    space.on_saved()
    triple = (stats.items_written, stats.items_deleted, stats.tables_deleted)
    assert triple == (counted.items_written, counted.items_deleted, counted.tables_deleted)
    return triple


def load(store: osp.Store) -> osp.ObjectSpace:
    return osp.ObjectSpace.load(store.reader())


def full_dump(space: osp.ObjectSpace) -> dict[str, dict[bytes, bytes]]:
    """What a FULL checkpoint of ``space`` writes into an empty store."""
    fresh = osp.MemoryStore()
    space.checkpoint(fresh, kind=FULL)
    return fresh.dump()


def contents(space: osp.ObjectSpace) -> dict[str, tuple[str, Any]]:
    """Every object as (kind, plain content), for comparisons across spaces."""
    out: dict[str, tuple[str, Any]] = {}
    for oid in space:
        obj = space.get(oid)
        if isinstance(obj, osp.PersistedValue):
            plain: Any = obj.value
        elif isinstance(obj, osp.PersistedDict):
            plain = sorted(obj.items(), key=repr)
        elif isinstance(obj, osp.PersistedSortedDict):
            plain = list(obj.items())
        elif isinstance(obj, osp.PersistedSet):
            plain = sorted(obj, key=repr)
        else:
            plain = list(obj)
        out[oid] = (obj.kind, plain)
    return out


def assert_no_stale_rows(store: osp.Store) -> None:
    """The store holds exactly what a FULL save of its own load writes."""
    assert store.dump() == full_dump(load(store))


# -- builders: one object of each kind with some content ---------------------------------------


def build_all(space: osp.ObjectSpace, n: int = 5) -> None:
    space.create_value("value", (n, "x", [1, {"k": b"v"}]))
    arr = space.create_array("array", n, fill=0)
    arr[1] = "one"
    space.create_list("list").extend(range(n))
    q = space.create_queue("queue")
    s = space.create_stack("stack")
    ll = space.create_linked_list("linked")
    for i in range(n):
        q.enqueue(i)
        s.push(i)
        ll.append(i)
    space.create_set("set").update(range(n))
    space.create_sorted_set("sorted_set").update(range(n, 0, -1))
    space.create_dict("dict").update({f"k{i}": i for i in range(n)})
    space.create_sorted_dict("sorted_dict").update({i: str(i) for i in range(n, 0, -1)})


# -- the queue bug: enqueue, then dequeue past the persisted tail within one interval ---------


def test_queue_dequeues_past_persisted_tail(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    q = space.create_queue("q")
    q.enqueue("a")
    q.enqueue("b")
    space.checkpoint(store)  # stored: head 0, tail 2
    q.enqueue("c")  # position 2, beyond the stored tail
    assert [q.dequeue() for _ in range(3)] == ["a", "b", "c"]
    space.checkpoint(store)
    assert list(load(store).get_queue("q")) == []
    assert "state/item/q/items" not in store.dump()  # no row left behind
    assert_no_stale_rows(store)
    q.enqueue("d")
    space.checkpoint(store)
    restored = load(store).get_queue("q")
    assert list(restored) == ["d"]
    assert restored.dequeue() == "d"
    assert_no_stale_rows(store)


def test_queue_enqueue_two_dequeue_three_in_one_interval(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    q = space.create_queue("q")
    for v in (1, 2):
        q.enqueue(v)
    space.checkpoint(store)
    q.enqueue(3)
    q.enqueue(4)
    assert [q.dequeue(), q.dequeue(), q.dequeue()] == [1, 2, 3]
    space.checkpoint(store)
    restored = load(store).get_queue("q")
    assert list(restored) == [4]
    assert_no_stale_rows(store)
    # and the restored queue keeps working from its stored head
    restored.enqueue(5)
    assert restored.dequeue() == 4


def test_queue_dequeue_past_tail_across_failed_commit(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    q = space.create_queue("q")
    q.enqueue("a")
    space.checkpoint(store)
    q.enqueue("b")
    writer = failing_writer(store)
    space.save(writer)
    with pytest.raises(CommitFailed):
        writer.commit()
    assert q.dequeue() == "a"
    assert q.dequeue() == "b"
    space.checkpoint(store)
    assert list(load(store).get_queue("q")) == []
    assert_no_stale_rows(store)


# -- FULL checkpoints -------------------------------------------------------------------------


def test_full_checkpoint_after_load_rewrites_untouched_objects(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    build_all(space)
    space.checkpoint(store, kind=FULL)
    before = store.dump()
    expected = contents(space)

    restored = load(store)
    assert contents(restored) == expected
    assert not restored.is_dirty
    stats = restored.checkpoint(store, kind=FULL)  # nothing was touched since the load
    assert stats.items_written == sum(len(rows) for rows in before.values())
    assert store.dump() == before
    assert contents(load(store)) == expected

    # one object touched, the others not: still every object after a FULL checkpoint
    again = load(store)
    again.get_list("list").append("x")
    again.checkpoint(store, kind=FULL)
    expected["list"] = ("List", [*expected["list"][1], "x"])
    assert contents(load(store)) == expected
    assert_no_stale_rows(store)


def test_full_checkpoint_leaves_no_stale_entry(store: osp.Store) -> None:
    """After shrinking everything, a FULL checkpoint writes what a fresh space would."""
    space = osp.ObjectSpace()
    build_all(space, n=10)
    space.create_list("gone").extend(range(10))
    space.checkpoint(store, kind=FULL)

    space = load(store)  # continue from a load, as after a restart
    space.get_value("value").value = "small"
    space.get_array("array")[1] = 0
    lst = space.get_list("list")
    del lst[3:]
    st = space.get_stack("stack")
    for _ in range(7):
        st.pop()
    s = space.get_set("set")
    s -= set(range(3, 10))
    ss = space.get_sorted_set("sorted_set")
    for v in range(4, 11):
        ss.discard(v)
    d = space.get_dict("dict")
    for i in range(3, 10):
        del d[f"k{i}"]
    sd = space.get_sorted_dict("sorted_dict")
    for i in range(4, 11):
        del sd[i]
    q = space.get_queue("queue")
    for _ in range(7):
        q.dequeue()
    ll = space.get_linked_list("linked")
    for _ in range(7):
        ll.pop()
    space.delete("gone")
    space.checkpoint(store, kind=FULL)

    # Kinds whose layout depends only on their content: a fresh space writes the same rows.
    fresh = osp.ObjectSpace()
    fresh.create_value("value", "small")
    fresh.create_array("array", 10, fill=0)
    fresh.create_list("list").extend(range(3))
    fresh_stack = fresh.create_stack("stack")
    for i in range(3):
        fresh_stack.push(i)
    fresh.create_set("set").update(range(3))
    fresh.create_sorted_set("sorted_set").update(range(1, 4))
    fresh.create_dict("dict").update({f"k{i}": i for i in range(3)})
    fresh.create_sorted_dict("sorted_dict").update({i: str(i) for i in range(1, 4)})
    fresh_dump = full_dump(fresh)
    dump = store.dump()
    for name, rows in fresh_dump.items():
        if name != "state/index":
            assert dump[name] == rows, name
    # The queue and linked list keep their positions and node ids: compare with a FULL
    # checkpoint of the same space into an empty store.
    assert dump == full_dump(space)
    assert not [name for name in dump if name.startswith("state/item/gone/")]
    assert b"gone" not in dump["state/index"]
    assert_no_stale_rows(store)
    assert list(load(store).get_queue("queue")) == [7, 8, 9]
    assert list(load(store).get_linked_list("linked")) == [0, 1, 2]


# -- deleting objects -------------------------------------------------------------------------


def test_delete_then_full_checkpoint(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    space.create_list("a").extend([1, 2, 3])
    space.create_dict("b")["k"] = "v"
    space.checkpoint(store)
    space.delete("a")
    space.checkpoint(store, kind=FULL)
    dump = store.dump()
    assert not [name for name in dump if name.startswith("state/item/a/")]
    assert set(dump["state/index"]) == {b"b"}
    restored = load(store)
    assert list(restored) == ["b"]
    assert dict(restored.get_dict("b")) == {"k": "v"}
    # a differential checkpoint afterwards has nothing left to do
    assert cost(space, store) == (0, 0, 0)
    assert_no_stale_rows(store)


def test_delete_then_differential_checkpoint(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    space.create_list("a").extend([1, 2, 3])
    space.create_value("b", 1)
    space.checkpoint(store)
    space.delete("a")
    space.checkpoint(store)
    assert list(load(store)) == ["b"]
    assert_no_stale_rows(store)


def _make(kind: str, space: osp.ObjectSpace, oid: str, n: int) -> None:
    """Create ``oid`` of ``kind`` holding ``n`` elements (values ``0..n-1``)."""
    if kind == "value":
        space.create_value(oid, list(range(n)))
    elif kind == "array":
        arr = space.create_array(oid, n, fill=0)
        for i in range(n):
            arr[i] = i
    elif kind == "list":
        space.create_list(oid).extend(range(n))
    elif kind == "queue":
        q = space.create_queue(oid)
        for i in range(n + 2):
            q.enqueue(i)
        q.dequeue()
        q.dequeue()
    elif kind == "stack":
        s = space.create_stack(oid)
        for i in range(n):
            s.push(i)
    elif kind == "linked":
        ll = space.create_linked_list(oid)
        for i in range(n):
            ll.append(i)
    elif kind == "set":
        space.create_set(oid).update(range(n))
    elif kind == "sorted_set":
        space.create_sorted_set(oid).update(range(n))
    elif kind == "dict":
        space.create_dict(oid).update({i: i for i in range(n)})
    elif kind == "sorted_dict":
        space.create_sorted_dict(oid).update({i: i for i in range(n)})
    else:  # pragma: no cover
        raise AssertionError(kind)


RECREATE_CASES = [
    ("list", "dict"),
    ("dict", "list"),
    ("list", "list"),
    ("array", "array"),
    ("queue", "queue"),
    ("stack", "stack"),
    ("linked", "linked"),
    ("set", "set"),
    ("sorted_set", "sorted_set"),
    ("dict", "dict"),
    ("sorted_dict", "sorted_dict"),
    ("sorted_dict", "value"),
    ("value", "sorted_set"),
    ("linked", "queue"),
    ("queue", "array"),
]


@pytest.mark.parametrize(("old", "new"), RECREATE_CASES)
def test_delete_and_recreate_same_id_in_one_interval(store: osp.Store, old: str, new: str) -> None:
    space = osp.ObjectSpace()
    space.create_value("other", "untouched")
    _make(old, space, "x", 10)
    space.checkpoint(store)
    space.delete("x")
    _make(new, space, "x", 2)  # fewer slots than the old object had
    space.checkpoint(store)

    expected = osp.ObjectSpace()
    expected.create_value("other", "untouched")
    _make(new, expected, "x", 2)
    assert contents(load(store)) == contents(expected)
    assert store.dump() == full_dump(expected)


@pytest.mark.parametrize(
    ("old", "new"), [("list", "list"), ("queue", "dict"), ("linked", "linked")]
)
def test_delete_and_recreate_between_save_and_on_saved(
    store: osp.Store, old: str, new: str
) -> None:
    space = osp.ObjectSpace()
    _make(old, space, "x", 10)
    space.checkpoint(store)
    writer = store.writer(DIFF)
    space.save(writer)
    space.delete("x")
    _make(new, space, "x", 2)
    writer.commit()
    space.on_saved()
    assert contents(load(store))["x"] == contents(_space_with(old, 10))["x"]
    space.checkpoint(store)
    assert store.dump() == full_dump(_space_with(new, 2))


@pytest.mark.parametrize(("old", "new"), [("list", "list"), ("stack", "set")])
def test_delete_and_recreate_across_failed_commit(store: osp.Store, old: str, new: str) -> None:
    space = osp.ObjectSpace()
    _make(old, space, "x", 10)
    space.checkpoint(store)
    space.delete("x")
    writer = failing_writer(store)
    space.save(writer)
    with pytest.raises(CommitFailed):
        writer.commit()
    _make(new, space, "x", 2)
    space.checkpoint(store)
    assert store.dump() == full_dump(_space_with(new, 2))


def _space_with(kind: str, n: int) -> osp.ObjectSpace:
    space = osp.ObjectSpace()
    _make(kind, space, "x", n)
    return space


def test_recreated_object_is_a_new_object() -> None:
    space = osp.ObjectSpace()
    old = space.create_list("x")
    old.append(1)
    space.delete("x")
    new = space.create_list("x")
    assert new is not old
    assert list(new) == []
    with pytest.raises(osp.ObjectDeletedError):
        old.append(2)
    assert list(new) == []


# -- failed commits ---------------------------------------------------------------------------


def _edit_everything(space: osp.ObjectSpace, tag: int) -> None:
    space.get_value("value").value = tag
    space.get_array("array")[tag % 5] = tag
    space.get_list("list").append(tag)
    space.get_queue("queue").enqueue(tag)
    space.get_queue("queue").dequeue()
    space.get_stack("stack").push(tag)
    ll = space.get_linked_list("linked")
    ll.appendleft(tag)
    ll.remove(ll.last)
    space.get_set("set").add(100 + tag)
    space.get_sorted_set("sorted_set").discard(tag)
    space.get_dict("dict")[f"t{tag}"] = tag
    del space.get_sorted_dict("sorted_dict")[tag]


@pytest.mark.parametrize("kind", [DIFF, FULL])
def test_failed_commit_keeps_every_edit_for_the_next_save(
    store: osp.Store, kind: osp.CheckpointKind
) -> None:
    space = osp.ObjectSpace()
    build_all(space)
    space.create_value("doomed", 1)
    space.checkpoint(store)
    before = store.dump()

    _edit_everything(space, 1)
    space.delete("doomed")
    writer = failing_writer(store, kind)
    space.save(writer)
    with pytest.raises(CommitFailed):
        writer.commit()
    assert writer.status is WriterStatus.FAILED
    assert store.dump() == before  # nothing of the failed commit reached the store
    # on_saved is not called; more edits, then a successful checkpoint
    _edit_everything(space, 2)
    space.checkpoint(store, kind=kind)
    assert contents(load(store)) == contents(space)
    assert "doomed" not in load(store)
    assert_no_stale_rows(store)


def test_failed_checkpoint_call_keeps_edits(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    lst = space.create_list("l")
    lst.extend([1, 2])
    space.checkpoint(store)
    before = store.dump()
    lst.append(3)
    lst.pop(0)
    with pytest.raises(CommitFailed):
        space.checkpoint(FailingStore(store))
    assert space.is_dirty
    assert store.dump() == before
    with pytest.raises(CommitFailed):
        space.checkpoint(FailingStore(store))  # failing twice loses nothing either
    lst.append(4)
    space.checkpoint(store)
    assert list(load(store).get_list("l")) == [2, 3, 4]
    assert_no_stale_rows(store)


def test_failed_commit_then_differential_save_writes_the_unsaved_slots(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    lst = space.create_list("l")
    space.checkpoint(store)
    lst.append("a")
    lst.append("b")
    writer = failing_writer(store)
    space.save(writer)
    with pytest.raises(CommitFailed):
        writer.commit()
    lst.append("c")
    # the next save carries the two unsaved appends and the new one: 3 items
    assert cost(space, store) == (3, 0, 0)
    assert list(load(store).get_list("l")) == ["a", "b", "c"]


def test_a_value_carries_a_failed_saves_edits_into_the_next(store: osp.Store) -> None:
    # A value's save keeps the page of a failed commit: a new value is written with its
    # kind row, a set value with its row, by the next save even when nothing changed since.
    space = osp.ObjectSpace()
    space.create_value("kept", 1)
    space.checkpoint(store)
    space.create_value("new", [1, 2])
    space.get_value("kept").value = 2
    for _ in range(2):  # failing twice loses nothing either
        writer = failing_writer(store)
        space.save(writer)
        with pytest.raises(CommitFailed):
            writer.commit()
    assert cost(space, store) == (3, 0, 0)  # "new": kind row and value; "kept": value
    restored = load(store)
    assert restored.get_value("new").value == [1, 2]
    assert restored.get_value("kept").value == 2
    assert cost(space, store) == (0, 0, 0)  # acknowledged: nothing left to write
    space.get_value("kept").value = 3
    writer = failing_writer(store)
    space.save(writer)
    with pytest.raises(CommitFailed):
        writer.commit()
    space.get_value("kept").value = 4  # set again after the failed save: written once
    assert cost(space, store) == (1, 0, 0)
    assert load(store).get_value("kept").value == 4
    assert cost(space, store, FULL) == (4, 0, 0)  # a full save writes every value
    assert_no_stale_rows(store)


def test_edits_between_save_and_on_saved_stay_dirty(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    d = space.create_dict("d")
    d["a"] = 1
    writer = store.writer(DIFF)
    space.save(writer)
    d["b"] = 2  # after save, before commit
    writer.commit()
    d["c"] = 3  # after commit, before on_saved
    space.on_saved()
    assert dict(load(store).get_dict("d")) == {"a": 1}
    assert space.is_dirty
    assert cost(space, store) == (2, 0, 0)
    assert dict(load(store).get_dict("d")) == {"a": 1, "b": 2, "c": 3}
    assert not space.is_dirty


# -- serialization errors ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", [DIFF, FULL])
def test_serialization_error_names_the_object_and_leaves_the_store_untouched(
    store: osp.Store, kind: osp.CheckpointKind
) -> None:
    space = osp.ObjectSpace()
    good = space.create_value("good", 1)
    bad = space.create_list("bad id/ü")
    space.checkpoint(store)
    before = store.dump()

    good.value = 2
    bad.append(object())
    with pytest.raises(osp.SerializationError) as info:
        space.checkpoint(store, kind=kind)
    assert "'bad id/ü'" in str(info.value)
    assert store.dump() == before

    writer = store.writer(kind)
    with pytest.raises(osp.SerializationError, match="bad id/ü"):
        space.save(writer)
    assert writer.changes == {}  # nothing reached the writer
    writer.rollback()
    assert store.dump() == before

    bad[0] = "fixed"
    space.checkpoint(store, kind=kind)
    restored = load(store)
    assert restored.get_value("good").value == 2  # the edit made before the failure survived
    assert list(restored.get_list("bad id/ü")) == ["fixed"]
    assert_no_stale_rows(store)


@pytest.mark.parametrize(
    ("make", "fix"),
    [
        (lambda sp: sp.create_value("v", 2**64), lambda sp: setattr(sp.get_value("v"), "value", 1)),
        (
            lambda sp: sp.create_dict("v").__setitem__(object(), 1),
            lambda sp: sp.get_dict("v").clear(),
        ),
        (lambda sp: sp.create_set("v").add(object()), lambda sp: sp.get_set("v").clear()),
        (
            lambda sp: sp.create_linked_list("v").append({1, object()}),
            lambda sp: sp.get_linked_list("v").clear(),
        ),
    ],
    ids=["int-beyond-64-bits", "dict-key", "set-element", "linked-list-value"],
)
def test_serialization_error_in_every_place(
    store: osp.Store, make: Callable[[osp.ObjectSpace], Any], fix: Callable[[Any], Any]
) -> None:
    space = osp.ObjectSpace()
    space.create_value("ok", "fine")
    space.checkpoint(store)
    before = store.dump()
    make(space)
    with pytest.raises(osp.SerializationError, match="'v'"):
        space.checkpoint(store)
    assert store.dump() == before
    fix(space)
    space.checkpoint(store)
    assert set(load(store)) == {"ok", "v"}


def test_serialization_error_with_json_names_the_object(store: osp.Store) -> None:
    space = osp.ObjectSpace(osp.JsonSerializer())
    space.create_value("nan", float("nan"))
    with pytest.raises(osp.SerializationError, match="'nan'"):
        space.checkpoint(store)
    assert store.dump() == {}


# -- exact costs of differential checkpoints --------------------------------------------------


def _baseline(store: osp.Store, make: Callable[[osp.ObjectSpace], Any]) -> tuple:
    space = osp.ObjectSpace()
    obj = make(space)
    space.checkpoint(store)
    assert cost(space, store) == (0, 0, 0)  # nothing dirty: nothing written
    return space, obj


def _list5(sp: osp.ObjectSpace) -> osp.PersistedList:
    lst = sp.create_list("l")
    lst.extend(range(5))
    return lst


def _queue5(sp: osp.ObjectSpace) -> osp.PersistedQueue:
    q = sp.create_queue("q")
    for i in range(5):
        q.enqueue(i)
    return q


def _stack5(sp: osp.ObjectSpace) -> osp.PersistedStack:
    s = sp.create_stack("s")
    for i in range(5):
        s.push(i)
    return s


def _linked5(sp: osp.ObjectSpace) -> osp.PersistedLinkedList:
    ll = sp.create_linked_list("ll")
    for i in range(5):
        ll.append(i)
    return ll


# (builder, edit, expected cost): cost = (items written, items deleted, tables deleted)
COST_CASES: list[tuple[str, Callable[..., Any], Callable[[Any], Any], tuple[int, int, int]]] = [
    ("value set", lambda sp: sp.create_value("v", 1), lambda o: setattr(o, "value", 2), (1, 0, 0)),
    (
        "array slot",
        lambda sp: sp.create_array("a", 100, fill=0),
        lambda o: o.__setitem__(3, 1),
        (1, 0, 0),
    ),
    (
        "array slot twice",
        lambda sp: sp.create_array("a", 100, fill=0),
        lambda o: (o.__setitem__(-1, 1), o.__setitem__(99, 2)),
        (1, 0, 0),
    ),
    # list (its length is its number of items): append → 1 item; pop() → 1 delete;
    # assignment → 1 item; a value appended and popped was never stored: nothing
    ("list append", _list5, lambda o: o.append(9), (1, 0, 0)),
    ("list pop", _list5, lambda o: o.pop(), (0, 1, 0)),
    ("list setitem", _list5, lambda o: o.__setitem__(2, "x"), (1, 0, 0)),
    ("list extend 3", _list5, lambda o: o.extend([7, 8, 9]), (3, 0, 0)),
    ("list append then pop", _list5, lambda o: (o.append(9), o.pop()), (0, 0, 0)),
    # list insert/delete in the middle: the shifted slots from there on
    ("list insert at 3", _list5, lambda o: o.insert(3, "x"), (3, 0, 0)),
    ("list del at 3", _list5, lambda o: o.__delitem__(3), (1, 1, 0)),
    # list pop(0): the head moves (1 delete, the head row)
    ("list pop front", _list5, lambda o: o.pop(0), (1, 1, 0)),
    # queue: 1 item + head + tail
    ("queue enqueue", _queue5, lambda o: o.enqueue(9), (3, 0, 0)),
    ("queue dequeue", _queue5, lambda o: o.dequeue(), (2, 1, 0)),
    ("queue enqueue+dequeue", _queue5, lambda o: (o.enqueue(9), o.dequeue()), (3, 1, 0)),
    # stack (its count is its number of items): 1 item, or its delete
    ("stack push", _stack5, lambda o: o.push(9), (1, 0, 0)),
    ("stack pop", _stack5, lambda o: o.pop(), (0, 1, 0)),
    # linked list: node value + node links + neighbours' links + 4 metadata rows
    ("linked append", _linked5, lambda o: o.append(9), (1 + 1 + 1 + 4, 0, 0)),
    ("linked appendleft", _linked5, lambda o: o.appendleft(9), (1 + 1 + 1 + 4, 0, 0)),
    (
        "linked insert_after",
        _linked5,
        lambda o: o.insert_after(o.first.next, 9),
        (1 + 1 + 2 + 4, 0, 0),
    ),
    (
        "linked insert_before",
        _linked5,
        lambda o: o.insert_before(o.last, 9),
        (1 + 1 + 2 + 4, 0, 0),
    ),
    ("linked remove middle", _linked5, lambda o: o.remove(o.first.next), (2 + 4, 2, 0)),
    ("linked pop", _linked5, lambda o: o.pop(), (1 + 4, 2, 0)),
    ("linked popleft", _linked5, lambda o: o.popleft(), (1 + 4, 2, 0)),
    ("linked node value", _linked5, lambda o: setattr(o.first.next, "value", "x"), (1, 0, 0)),
    # sets and dicts: one row per changed element or key
    (
        "set add",
        lambda sp: sp.create_set("s").update(range(5)) or sp.get_set("s"),
        lambda o: o.add(9),
        (1, 0, 0),
    ),
    (
        "set add present",
        lambda sp: sp.create_set("s").update(range(5)) or sp.get_set("s"),
        lambda o: o.add(1),
        (0, 0, 0),
    ),
    (
        "set discard",
        lambda sp: sp.create_set("s").update(range(5)) or sp.get_set("s"),
        lambda o: o.discard(1),
        (0, 1, 0),
    ),
    (
        "sorted set add+discard",
        lambda sp: sp.create_sorted_set("s").update(range(5)) or sp.get_sorted_set("s"),
        lambda o: (o.add(9), o.discard(0)),
        (1, 1, 0),
    ),
    (
        "dict set",
        lambda sp: sp.create_dict("d").update({i: i for i in range(5)}) or sp.get_dict("d"),
        lambda o: o.__setitem__(1, "x"),
        (1, 0, 0),
    ),
    (
        "dict del",
        lambda sp: sp.create_dict("d").update({i: i for i in range(5)}) or sp.get_dict("d"),
        lambda o: o.__delitem__(1),
        (0, 1, 0),
    ),
    (
        "sorted dict set+pop",
        lambda sp: (
            sp.create_sorted_dict("d").update({i: i for i in range(5)}) or sp.get_sorted_dict("d")
        ),
        lambda o: (o.__setitem__(9, 9), o.pop(0)),
        (1, 1, 0),
    ),
]


@pytest.mark.parametrize(
    ("build", "edit", "expected"),
    [case[1:] for case in COST_CASES],
    ids=[case[0] for case in COST_CASES],
)
def test_differential_cost_of_one_edit(
    store: osp.Store,
    build: Callable[[osp.ObjectSpace], Any],
    edit: Callable[[Any], Any],
    expected: tuple[int, int, int],
) -> None:
    space, obj = _baseline(store, build)
    edit(obj)
    assert cost(space, store) == expected
    assert contents(load(store)) == contents(space)
    assert_no_stale_rows(store)


def test_new_object_writes_index_and_content(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    space.checkpoint(store)
    space.create_list("l").extend([1, 2])
    assert cost(space, store) == (1 + 2, 0, 0)  # index row, two items


SIZE = 1000


def _big(kind: str, sp: osp.ObjectSpace) -> Any:
    if kind == "list":
        obj = sp.create_list("big")
        obj.extend(range(SIZE))
    elif kind == "queue":
        obj = sp.create_queue("big")
        for i in range(SIZE):
            obj.enqueue(i)
        obj.dequeue()
    elif kind == "stack":
        obj = sp.create_stack("big")
        for i in range(SIZE):
            obj.push(i)
    elif kind == "linked":
        obj = sp.create_linked_list("big")
        for i in range(SIZE):
            obj.append(i)
    elif kind == "set":
        obj = sp.create_set("big")
        obj.update(range(SIZE))
    elif kind == "sorted_set":
        obj = sp.create_sorted_set("big")
        obj.update(range(SIZE))
    elif kind == "dict":
        obj = sp.create_dict("big")
        obj.update({i: i for i in range(SIZE)})
    else:
        obj = sp.create_sorted_dict("big")
        obj.update({i: i for i in range(SIZE)})
    return obj


# clear(): a constant number of rows (the new length, head/tail, count, or the linked
# list's four metadata rows) and one table delete per table holding elements.
CLEAR_COSTS = {
    "list": (0, 0, 1),
    "queue": (2, 0, 1),
    "stack": (0, 0, 1),
    "linked": (4, 0, 2),
    "set": (0, 0, 1),
    "sorted_set": (0, 0, 1),
    "dict": (0, 0, 1),
    "sorted_dict": (0, 0, 1),
}


@pytest.mark.parametrize("kind", sorted(CLEAR_COSTS))
def test_clear_costs_a_constant_number_of_writes(store: osp.Store, kind: str) -> None:
    space = osp.ObjectSpace()
    obj = _big(kind, space)
    space.checkpoint(store)
    obj.clear()
    written, deleted, tables = cost(space, store)
    assert (written, deleted, tables) == CLEAR_COSTS[kind]
    assert written <= 4 and deleted == 0
    assert len(load(store).get("big")) == 0
    assert_no_stale_rows(store)


@pytest.mark.parametrize("kind", ["list", "queue", "stack"])
def test_clear_then_refill_in_one_interval(store: osp.Store, kind: str) -> None:
    space = osp.ObjectSpace()
    obj = _big(kind, space)
    space.checkpoint(store)
    obj.clear()
    add = {"list": "append", "queue": "enqueue", "stack": "push"}[kind]
    getattr(obj, add)("new")
    written, deleted, tables = cost(space, store)
    assert (deleted, tables) == (0, 1)
    assert written <= 3
    assert list(load(store).get("big")) == ["new"]
    assert_no_stale_rows(store)


@pytest.mark.parametrize("kind", sorted(CLEAR_COSTS))
def test_delete_costs_a_constant_number_of_writes(store: osp.Store, kind: str) -> None:
    space = osp.ObjectSpace()
    _big(kind, space)
    space.create_value("keep", 1)
    space.checkpoint(store)
    tables = type(space.get("big")).TABLES
    space.delete("big")
    # the index row, and the tables of the object's kind
    assert cost(space, store) == (0, 1, len(tables))
    assert list(load(store)) == ["keep"]
    assert not [name for name in store.dump() if name.startswith("state/item/big/")]


def _table_names(dump: dict[str, Any]) -> dict[str, set[str]]:
    """Per object id, the last components of the tables that ``dump`` holds for it."""
    found: dict[str, set[str]] = {}
    for name in dump:
        if name.startswith("state/item/"):
            object_id, _, table = name[len("state/item/") :].rpartition("/")
            found.setdefault(object_id, set()).add(table)
    return found


def test_every_kind_writes_only_its_tables(store: osp.Store) -> None:
    """What a deleted object's save deletes (its kind's ``TABLES``) covers every table the
    kind writes, full and differential: with contents, a list and a queue whose head
    moved, a linked list's links, clears and refills."""
    space = osp.ObjectSpace()
    build_all(space, 40)
    space.checkpoint(store)
    lst, q = space.get_list("list"), space.get_queue("queue")
    del lst[:3]
    for _ in range(5):
        q.dequeue()
    ll = space.get_linked_list("linked")
    ll.insert_after(ll.first, "between")
    ll.remove(ll.last)
    space.get_stack("stack").pop()
    space.get_dict("dict").clear()
    space.get_dict("dict")["again"] = 1
    space.get_sorted_set("sorted_set").discard(3)
    space.get_value("value").value = "changed"
    space.checkpoint(store)
    for dump in (store.dump(), full_dump(load(store))):
        written = _table_names(dump)
        assert written.keys() == set(space)
        for object_id, tables in written.items():
            assert tables <= set(type(space.get(object_id)).TABLES), object_id


def test_an_id_deleted_as_two_kinds_in_one_interval_deletes_both_kinds_tables(
    store: osp.Store,
) -> None:
    space = osp.ObjectSpace()
    ll = space.create_linked_list("x")
    ll.append("a")
    ll.append("b")
    space.create_value("keep", 1)
    space.checkpoint(store)
    space.delete("x")  # a linked list: metadata, items, data
    space.create_value("x", 2)
    space.delete("x")  # a value: items
    assert cost(space, store) == (0, 1, 3)
    assert list(load(store)) == ["keep"]
    assert_no_stale_rows(store)


def test_deletes_of_a_failed_commit_are_written_by_the_next(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    space.create_linked_list("x").append(1)
    space.create_value("v", 1)
    space.checkpoint(store)
    space.delete("x")
    space.delete("v")
    writer = store.writer(DIFF)
    space.save(writer)
    writer.rollback()  # the commit failed: the deletes await the next save
    space.create_list("x").append(3)
    space.delete("x")  # deleted again, as a list this time
    assert cost(space, store) == (0, 2, 4)  # x: metadata, items, data; v: items
    assert list(load(store)) == []
    assert_no_stale_rows(store)


def test_clear_in_failed_interval_then_edits(store: osp.Store) -> None:
    space = osp.ObjectSpace()
    lst = space.create_list("l")
    lst.extend(range(10))
    space.checkpoint(store)
    lst.clear()
    lst.append("a")
    writer = failing_writer(store)
    space.save(writer)
    with pytest.raises(CommitFailed):
        writer.commit()
    lst.append("b")
    written, deleted, tables = cost(space, store)
    assert (written, deleted, tables) == (2, 0, 1)  # two items
    assert list(load(store).get_list("l")) == ["a", "b"]
    assert_no_stale_rows(store)
