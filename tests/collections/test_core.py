"""The C extension ``objectspace.collections._core`` and its pure-Python twin ``collections._pycore``.

The edge cases here run on whichever implementation is in use, and again in the same run on the
pure-Python classes ("tests/test_core.py[python]", see conftest.py), so both implementations
meet the same expectations; ``test_pure_python_fallback`` runs the pickling tests, which cannot
run on that in-process copy, in a subprocess forced to the pure-Python classes.
"""

from __future__ import annotations

import collections.abc
import copy
import enum
import gc
import os
import pickle
import subprocess
import sys
import tracemalloc
import weakref
from collections import deque
from pathlib import Path
from typing import Any

import pytest

import objectspace as osp
from objectspace.collections import (
    PersistedArray,
    PersistedList,
    PersistedQueue,
    PersistedStack,
    PersistedValue,
    _impl,
    _pycore,
)
from objectspace.collections.base import INF
from objectspace.errors import ObjectDeletedError
from objectspace.tables import CheckpointKind

ROOT = Path(__file__).resolve().parents[2]
PURE = os.environ.get(_impl.PURE_PYTHON_ENV, "") not in ("", "0")

BASES = {
    PersistedValue: "ValueBase",
    PersistedArray: "ArrayBase",
    PersistedList: "ListBase",
    PersistedQueue: "QueueBase",
    PersistedStack: "StackBase",
}

FIELDS = {
    "_cleared",
    "_dirty",
    "_id",
    "_meta",
    "_new",
    "_pending",
    "_registered",
    "_space",
}
KIND_FIELDS = {
    PersistedValue: {"_value"},
    PersistedArray: {"_data"},
    PersistedList: {"_data", "_from", "_head", "_length_row", "_stored_head", "_stored_len"},
    PersistedQueue: {"_data", "_head"},
    PersistedStack: {"_count_row", "_data"},
}


def _core_module() -> Any:
    try:
        import objectspace.collections._core as core
    except ImportError:
        return None
    return core


# -- which implementation ------------------------------------------------------------------------


def test_the_extension_is_in_use_when_built() -> None:
    core = _core_module()
    if core is None:
        pytest.skip("objectspace.collections._core was not built (no C compiler at install time?)")
    if PURE:
        pytest.skip(f"{_impl.PURE_PYTHON_ENV} is set")
    assert _impl.IMPLEMENTATION == "c"
    assert _impl.ObjectBase is core.ObjectBase
    for cls, base in BASES.items():
        assert getattr(core, base) in cls.__mro__
        assert getattr(_pycore, base) not in cls.__mro__


def test_the_environment_forces_the_pure_python_classes() -> None:
    code = (
        "from objectspace.collections import _impl, _pycore, PersistedList;"
        "assert _impl.IMPLEMENTATION == 'python', _impl.IMPLEMENTATION;"
        "assert _pycore.ListBase in PersistedList.__mro__"
    )
    env = dict(os.environ, **{_impl.PURE_PYTHON_ENV: "1"})
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)


def test_public_types_keep_their_abcs_and_slots() -> None:
    space = osp.ObjectSpace()
    lst = space.create_list("l")
    assert isinstance(lst, collections.abc.MutableSequence)
    assert isinstance(lst, collections.abc.Sequence)
    assert not hasattr(lst, "__dict__")
    with pytest.raises(TypeError):
        weakref.ref(lst)
    # The persisted list is still a sequence for pattern matching.
    match lst:
        case []:
            matched = True
        case _:
            matched = False
    assert matched


# -- fixtures ------------------------------------------------------------------------------------


def _space_of_five() -> tuple[osp.ObjectSpace, dict[str, Any]]:
    space = osp.ObjectSpace()
    objs: dict[str, Any] = {
        "v": space.create_value("v", 1),
        "a": space.create_array("a", 5, 0),
        "l": space.create_list("l"),
        "q": space.create_queue("q"),
        "s": space.create_stack("s"),
    }
    for i in range(5):
        objs["l"].append(i)
        objs["q"].enqueue(i)
        objs["s"].push(i)
    return space, objs


def _saved(space: osp.ObjectSpace) -> osp.MemoryStore:
    store = osp.MemoryStore()
    space.checkpoint(store, CheckpointKind.FULL)
    return store


class Small(enum.IntEnum):
    ONE = 1
    TWO = 2


# -- Value ---------------------------------------------------------------------------------------


def test_value_get_set_and_tracking() -> None:
    space = osp.ObjectSpace()
    v = space.create_value("v", 1)
    _saved(space)
    assert not v._registered and not v._meta and "v" not in space._dirty
    assert v.value == 1
    assert not v._registered  # reading does not touch
    v.value = "x"
    assert v.value == "x" and v._value == "x"
    assert v._registered and v._meta and space._dirty["v"] is v
    assert v._dirty is None  # a value tracks no slots: no set is made


def test_value_cannot_be_deleted() -> None:
    v = osp.ObjectSpace().create_value("v", 1)
    with pytest.raises(AttributeError, match="property 'value' of 'PersistedValue' object"):
        del v.value


def test_a_subclass_can_override_value() -> None:
    class Loud(PersistedValue):
        __slots__ = ()

        @property
        def value(self) -> Any:
            return ("loud", self._value)

        @value.setter
        def value(self, value: Any) -> None:
            PersistedValue.value.__set__(self, value * 2)  # type: ignore[attr-defined]

    space = osp.ObjectSpace()
    plain, loud = space.create_value("v", 1), space._add(Loud(space, "loud", 1))
    for _ in range(2):  # the second time on the remembered type
        plain.value = 2
        loud.value = 2
        assert plain.value == 2 and loud.value == ("loud", 4) and loud._value == 4
    Loud.value = property(lambda self: "patched")  # type: ignore[assignment]
    with pytest.raises(AttributeError):
        loud.value = 3
    assert loud._value == 4 and loud.value == "patched"
    plain.value = 3
    assert plain.value == 3


def test_value_refcounts() -> None:
    v = osp.ObjectSpace().create_value("v")
    x = object()
    before = sys.getrefcount(x)
    for _ in range(100):
        v.value = x
        assert v.value is x
    assert sys.getrefcount(x) == before + 1
    v.value = None
    assert sys.getrefcount(x) == before


# -- Array ---------------------------------------------------------------------------------------


def test_array_indexes() -> None:
    space = osp.ObjectSpace()
    a = space.create_array("a", 4, 0)
    _saved(space)
    a[1] = "one"
    a[-1] = "last"
    a[-4] = "first"
    assert a[0] == "first" and a[-3] == "one" and a[3] == "last" and a[-1] == "last"
    assert a[1:3] == ["one", 0] and isinstance(a[1:3], list)
    assert a[True] == "one"
    assert len(a) == 4 and list(a) == ["first", "one", 0, "last"]
    assert a._dirty == {0, 1, 3}
    assert not a._meta


def test_array_bool_and_int_subclass_indexes_are_stored_as_ints() -> None:
    space = osp.ObjectSpace()
    a = space.create_array("a", 4, 0)
    _saved(space)
    a[True] = "t"
    a[Small.TWO] = "two"
    assert a._dirty == {1, 2}
    assert all(type(key) is int for key in a._dirty)
    assert a[1] == "t" and a[2] == "two"


@pytest.mark.parametrize("index", [4, -5, 2**70, -(2**70), 2**63, -(2**63) - 1])
def test_array_index_errors(index: int) -> None:
    space = osp.ObjectSpace()
    a = space.create_array("a", 4, 0)
    _saved(space)
    message = f"array 'a' index {index} out of range (length 4)"
    with pytest.raises(IndexError) as got:
        a[index]
    assert str(got.value) == message
    assert got.value.__cause__ is None and got.value.__suppress_context__
    with pytest.raises(IndexError) as got:
        a[index] = 1
    assert str(got.value) == message
    assert got.value.__suppress_context__
    # the assignment touched the object (as the first edit of a page does), changed nothing
    assert a._registered and a._dirty is None and list(a) == [0, 0, 0, 0]


def test_array_bad_index_types() -> None:
    space = osp.ObjectSpace()
    a = space.create_array("a", 4, 0)
    _saved(space)
    for bad, name in [("1", "str"), (1.0, "float"), (slice(0, 1), "slice"), (None, "NoneType")]:
        with pytest.raises(TypeError, match=f"^array 'a' indices are ints, not {name}$"):
            a[bad] = 1  # type: ignore[index]
    assert a._registered and a._dirty is None
    with pytest.raises(TypeError, match="list indices must be integers or slices, not str"):
        a["1"]  # type: ignore[call-overload]
    assert not hasattr(PersistedArray, "__delitem__")
    with pytest.raises(AttributeError):
        del a[0]  # type: ignore[attr-defined]
    assert list(a) == [0, 0, 0, 0]


def test_array_refcounts() -> None:
    a = osp.ObjectSpace().create_array("a", 3)
    x = object()
    before = sys.getrefcount(x)
    for i in range(-3, 3):
        a[i] = x
        assert a[i] is x
    assert sys.getrefcount(x) == before + 3
    for i in range(3):
        a[i] = None
    assert sys.getrefcount(x) == before


# -- List ----------------------------------------------------------------------------------------


def test_list_append_len_getitem() -> None:
    space = osp.ObjectSpace()
    lst = space.create_list("l")
    lst.extend([0, 1])
    _saved(space)
    lst.append("x")
    lst.append("y")
    assert len(lst) == 4 and lst[-1] == "y" and lst[2] == "x" and lst[1:] == [1, "x", "y"]
    # Appends lower _from (the first slot written whole) instead of filling a set.
    assert lst._from == 2 and lst._dirty is None and lst._meta and lst._registered
    assert type(lst._from) is int
    assert lst[True] == 1
    for index in (4, -5, 2**70):
        with pytest.raises(IndexError):
            lst[index]
    with pytest.raises(TypeError, match="list indices must be integers or slices, not str"):
        lst["0"]  # type: ignore[call-overload]


# -- Queue and Stack -----------------------------------------------------------------------------


def test_queue_operations_and_tracking() -> None:
    space = osp.ObjectSpace()
    q = space.create_queue("q")
    q.enqueue("a")
    q.enqueue("b")
    _saved(space)
    assert q.peek() == "a" and len(q) == 2 and not q._registered
    assert q.dequeue() == "a"
    assert q._head == 1 and q._dirty == {0} and q._meta and q._registered
    q.enqueue("c")
    assert q._dirty == {0, 2}
    assert q.dequeue() == "b" and q.dequeue() == "c"
    assert q._head == 3 and q._dirty == {0, 1, 2} and len(q) == 0
    assert all(type(key) is int for key in q._dirty)
    with pytest.raises(IndexError, match=r"^dequeue from empty queue 'q'$"):
        q.dequeue()
    with pytest.raises(IndexError, match=r"^peek at empty queue 'q'$"):
        q.peek()
    q.enqueue("d")
    assert q._dirty == {0, 1, 2, 3} and q.peek() == "d" and list(q) == ["d"]


def test_stack_operations_and_tracking() -> None:
    space = osp.ObjectSpace()
    s = space.create_stack("s")
    s.push("a")
    s.push("b")
    _saved(space)
    assert s.peek() == "b" and len(s) == 2 and not s._registered
    assert s.pop() == "b"
    assert s._dirty == {1} and s._meta and s._registered
    s.push("c")
    s.push("d")
    assert s._dirty == {1, 2} and list(s) == ["d", "c", "a"]
    assert s.pop() == "d" and s.pop() == "c" and s.pop() == "a"
    assert s._dirty == {0, 1, 2} and len(s) == 0
    with pytest.raises(IndexError, match=r"^pop from empty stack 's'$"):
        s.pop()
    with pytest.raises(IndexError, match=r"^peek at empty stack 's'$"):
        s.peek()


def test_no_argument_methods_take_no_arguments() -> None:
    space = osp.ObjectSpace()
    q, s = space.create_queue("q"), space.create_stack("s")
    q.enqueue(1)
    s.push(1)
    for method in (q.dequeue, q.peek, s.pop, s.peek):
        with pytest.raises(TypeError):
            method(1)  # type: ignore[operator]
        with pytest.raises(TypeError):
            method(x=1)  # type: ignore[operator]
    assert list(q) == [1] and list(s) == [1] and q._dirty == {0} and s._dirty == {0}


def test_queue_and_stack_refcounts() -> None:
    space = osp.ObjectSpace()
    q, s = space.create_queue("q"), space.create_stack("s")
    x = object()
    before = sys.getrefcount(x)
    for _ in range(100):
        q.enqueue(x)
        s.push(x)
        assert q.peek() is x and s.peek() is x
        assert q.dequeue() is x and s.pop() is x
    assert sys.getrefcount(x) == before


def test_queue_head_of_any_int_size() -> None:
    space = osp.ObjectSpace()
    big = 2**64
    q = PersistedQueue(space, "q", deque(["a", "b"]), big)
    space._add(q)
    q.enqueue("c")
    assert q.dequeue() == "a"
    assert q._head == big + 1 and q._dirty == {big, big + 2}


# -- deleted objects -----------------------------------------------------------------------------


def test_edits_of_a_deleted_object_raise() -> None:
    space, objs = _space_of_five()
    _saved(space)
    for object_id in list(objs):
        space.delete(object_id)
    v, a, lst, q, s = objs["v"], objs["a"], objs["l"], objs["q"], objs["s"]
    for edit in (
        lambda: setattr(v, "value", 2),
        lambda: a.__setitem__(0, 1),
        lambda: a.__setitem__("bad", 1),  # the deletion is reported before the index type
        lambda: lst.append(1),
        lambda: q.enqueue(1),
        lambda: q.dequeue(),
        lambda: s.push(1),
        lambda: s.pop(),
    ):
        with pytest.raises(ObjectDeletedError, match="was deleted from its space"):
            edit()
    # nothing changed, and reads still work
    assert v.value == 1 and list(a) == [0] * 5 and list(lst) == list(range(5))
    assert list(q) == list(range(5)) and q._head == 0 and list(s) == [4, 3, 2, 1, 0]
    assert q.peek() == 0 and s.peek() == 4 and len(q) == len(s) == len(lst) == 5
    # an empty one reports the emptiness first, as before the object was deleted
    empty = osp.ObjectSpace()
    eq, es = empty.create_queue("q"), empty.create_stack("s")
    empty.delete("q")
    empty.delete("s")
    with pytest.raises(IndexError):
        eq.dequeue()
    with pytest.raises(IndexError):
        es.pop()


def test_unset_fields_raise_attribute_error() -> None:
    for cls in BASES:
        obj = cls.__new__(cls)
        with pytest.raises(AttributeError):
            obj._id  # noqa: B018
    with pytest.raises(AttributeError):
        PersistedValue.__new__(PersistedValue).value  # noqa: B018
    with pytest.raises(AttributeError):
        PersistedList.__new__(PersistedList).append(1)
    with pytest.raises(AttributeError):
        len(PersistedQueue.__new__(PersistedQueue))


def test_flag_fields_behave_like_bool_slots() -> None:
    """``_registered``, ``_meta``, ``_cleared`` and ``_new`` (bits of one C int in the
    extension) read, write and delete like the slots of the pure-Python classes."""
    for cls in BASES:
        obj = cls.__new__(cls)
        for name in ("_registered", "_meta", "_cleared", "_new"):
            with pytest.raises(AttributeError):
                getattr(obj, name)
            setattr(obj, name, True)
            assert getattr(obj, name) is True
            setattr(obj, name, False)
            assert getattr(obj, name) is False
            delattr(obj, name)
            with pytest.raises(AttributeError):
                getattr(obj, name)
            with pytest.raises(AttributeError):
                delattr(obj, name)


def test_a_clean_object_holds_no_dirty_set_and_no_table_names() -> None:
    space, objs = _space_of_five()
    # new objects are written whole: only the edits after creation made a set (a list's
    # appends move its _from instead)
    assert all(objs[k]._dirty for k in "qs")
    assert objs["a"]._dirty is None and objs["v"]._dirty is None and objs["l"]._dirty is None
    assert objs["l"]._from == 0
    _saved(space)
    for obj in objs.values():
        assert obj._dirty is None and not obj._registered
        assert not {"_t_meta", "_t_items", "_t_data"} & set(obj.__getstate__()[1])
        assert obj._t_meta == f"state/item/{obj.id}/metadata"
        assert obj._t_items == f"state/item/{obj.id}/items"
        assert obj._t_data == f"state/item/{obj.id}/data"
    objs["v"].value = 2
    objs["a"][-1] = 1
    objs["l"].append(1)
    objs["q"].enqueue(1)
    objs["s"].push(1)
    assert objs["v"]._dirty is None and objs["l"]._dirty is None and objs["l"]._from == 5
    assert (objs["a"]._dirty, objs["q"]._dirty, objs["s"]._dirty) == ({4}, {5}, {5})
    _saved(space)
    assert all(obj._dirty is None for obj in objs.values())
    assert objs["l"]._from == INF
    if _impl.IMPLEMENTATION == "c" and not PURE:
        # the header (with the GC's) and five pointers, the four bools in one int
        assert sys.getsizeof(objs["v"]) <= 80


# -- pickling ------------------------------------------------------------------------------------


def _fields(obj: Any) -> dict[str, Any]:
    out = {}
    for name in FIELDS | KIND_FIELDS[type(obj)]:
        value = getattr(obj, name)
        if name == "_space":
            value = type(value)
        elif name == "_pending" and value is not None:
            value = {slot: getattr(value, slot) for slot in value.__slots__}
        elif isinstance(value, deque):
            value = list(value)
        out[name] = value
    return out


def _diff_save(space: osp.ObjectSpace, store: osp.MemoryStore) -> dict[str, Any]:
    writer = store.writer(CheckpointKind.DIFFERENTIAL)
    space.save(writer)
    wrote = {name: (change.truncated, dict(change.rows)) for name, change in writer.changes.items()}
    writer.commit()
    space.on_saved()
    return wrote


def _pending_space() -> tuple[osp.ObjectSpace, dict[str, Any], osp.MemoryStore]:
    """Five objects, each with a saved-but-unacknowledged page and a current page."""
    space, objs = _space_of_five()
    store = _saved(space)
    objs["v"].value = "saved, not acknowledged"
    objs["a"][-2] = "x"
    objs["l"].append("x")
    objs["q"].dequeue()
    objs["s"].pop()
    space.save(store.writer(CheckpointKind.DIFFERENTIAL))  # no on_saved: pages stay pending
    objs["v"].value = "current"
    objs["a"][0] = "y"
    objs["l"].append("y")
    objs["q"].enqueue("y")
    objs["s"].push("y")
    return space, objs, store


@pytest.mark.parametrize("protocol", range(2, pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_round_trip_with_pending_pages(protocol: int) -> None:
    space, objs, store = _pending_space()
    clone = pickle.loads(pickle.dumps(space, protocol))
    for object_id, obj in objs.items():
        other = clone.get(object_id)
        assert type(other) is type(obj)
        assert other._space is clone
        assert other._pending is not None
        assert _fields(other) == _fields(obj)
    clone_store = osp.MemoryStore()
    clone_store._tables = copy.deepcopy(store.dump())
    assert _diff_save(clone, clone_store) == _diff_save(space, store)
    assert clone_store.dump() == store.dump()


_ACROSS = """
import pickle, sys
sys.path.insert(0, ".")
import tests.collections.test_core as test_core
mode, path = sys.argv[1:]
if mode == "dump":
    with open(path, "wb") as f:
        pickle.dump(test_core._pending_space()[0], f)
else:
    with open(path, "rb") as f:
        space = pickle.load(f)
    with open(path + ".fields", "wb") as f:
        pickle.dump({i: test_core._fields(space.get(i)) for i in space}, f)
"""


def test_pickles_load_across_implementations(tmp_path: Path) -> None:
    """A space pickled with the extension loads without it, and the other way round."""
    if _core_module() is None or PURE:
        pytest.skip("needs the extension, in use")
    env = dict(os.environ, **{_impl.PURE_PYTHON_ENV: "1"})
    space, objs, _store = _pending_space()
    expected = {object_id: _fields(obj) for object_id, obj in objs.items()}

    pure_pickle = tmp_path / "pure.pickle"
    subprocess.run(
        [sys.executable, "-c", _ACROSS, "dump", str(pure_pickle)], cwd=ROOT, env=env, check=True
    )
    loaded = pickle.loads(pure_pickle.read_bytes())
    assert {i: _fields(loaded.get(i)) for i in loaded} == expected

    c_pickle = tmp_path / "c.pickle"
    c_pickle.write_bytes(pickle.dumps(space))
    subprocess.run(
        [sys.executable, "-c", _ACROSS, "load", str(c_pickle)], cwd=ROOT, env=env, check=True
    )
    assert pickle.loads((tmp_path / "c.pickle.fields").read_bytes()) == expected


def test_state_names_every_field() -> None:
    _space, objs = _space_of_five()
    for obj in objs.values():
        state = obj.__getstate__()
        assert isinstance(state, tuple) and state[0] is None
        assert set(state[1]) == FIELDS | KIND_FIELDS[type(obj)]
        other = copy.copy(obj)
        assert _fields(other) == _fields(obj)
        assert getattr(other, "_data", None) is getattr(obj, "_data", None)


# -- garbage collection and leaks ----------------------------------------------------------------


def test_a_space_and_its_objects_are_collected() -> None:
    space, objs = _space_of_five()
    for obj in objs.values():
        assert gc.is_tracked(obj)
        assert space in gc.get_referents(obj)
    ref = weakref.ref(space)
    del space, objs, obj
    gc.collect()
    assert ref() is None


# The extension shares the int objects of slot indexes below 2**18 (made once, kept): a
# reference leaked on one of those would not show as memory, so the leak test works above
# that, and the refcount test below it.
BEYOND_SHARED_INTS = 2**18


def test_no_leak_over_many_operations() -> None:
    def run(n: int) -> None:
        space = osp.ObjectSpace()
        big = BEYOND_SHARED_INTS
        v = space.create_value("v")
        a = space.create_array("a", big + 10, 0)
        lst = space.create_list("l")
        lst.extend(range(big))
        q = PersistedQueue(space, "q", deque(), big)
        space._add(q)
        s = space.create_stack("s")
        for i in range(big):
            s.push(i)
        for i in range(n):
            v.value = i
            a[i % 5] = v.value
            a[-1 - i % 5] = a[i % 5]
            lst.append(i)
            _ = lst[-1], len(lst)
            q.enqueue(i)
            q.peek()
            q.dequeue()
            s.push(i)
            s.peek()
            s.pop()
            if i % 10_000 == 0:
                del lst[big:]
        with pytest.raises(IndexError):
            for _ in range(6):
                q.dequeue()

    n = 50_000
    run(n)  # warm up
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run(n)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # a leaked reference per operation would keep megabytes
    assert after - before < 64 * 1024, after - before


def test_index_refcounts_are_stable() -> None:
    space = osp.ObjectSpace()
    a, lst, s = space.create_array("a", 1000), space.create_list("l"), space.create_stack("s")
    lst.extend(range(999))
    for i in range(1000):
        s.push(i)
    space.checkpoint(osp.MemoryStore(), CheckpointKind.FULL)
    a[-300] = 1  # slot 700
    lst.append(1)  # slot 999
    s.pop()  # slot 999
    keys = [next(iter(a._dirty)), lst._from, next(iter(s._dirty))]
    assert keys == [700, 999, 999]
    counts = [sys.getrefcount(key) for key in keys]
    for _ in range(1000):
        a[-300] = 2
        lst.pop()
        lst.append(2)
        s.push(2)
        s.pop()
    assert [sys.getrefcount(key) for key in keys] == counts


# -- the pure-Python fallback ------------------------------------------------------------------
# conftest.py runs this module and the state machines again in this process, on a pure-Python
# copy of the collections ("tests/test_core.py[python]"). Pickling cannot work on such a copy
# (pickle finds classes by module name, i.e. the originals), so the pickling tests run on the
# pure-Python classes here, in a subprocess.


def test_pure_python_fallback() -> None:
    """This module's pickling tests on the pure-Python classes."""
    if PURE:
        pytest.skip("this run already uses the pure-Python classes")
    env = dict(os.environ, **{_impl.PURE_PYTHON_ENV: "1"})
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-x",
        "-p",
        "no:cacheprovider",
        "tests/collections/test_core.py",
        "-k",
        "pickl",
    ]
    done = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]


def test_a_dict_key_beyond_64_bits_round_trips_through_differential_saves() -> None:
    store = osp.MemoryStore()
    space = osp.ObjectSpace()
    d = space.create_dict("d")
    d[1] = "one"
    space.checkpoint(store, osp.CheckpointKind.FULL)
    d[2**70] = "big"  # plain int type, but msgpack cannot pack it: encode_key stores it
    d[2] = "two"
    space.checkpoint(store)
    del d[1]
    d[-(2**70)] = "small"
    space.checkpoint(store)
    restored = osp.ObjectSpace.load(store.reader()).get_dict("d")
    assert list(restored.items()) == [(2**70, "big"), (2, "two"), (-(2**70), "small")]


def test_dirty_slots_and_pages_are_not_tracked_by_the_cyclic_collector(tmp_path: Path) -> None:
    """An object's set of edited slots and its saved page live for a checkpoint interval and
    can be in no cycle: on the C extension the collector does not track them (tracked, the
    young collections promoted them all and set off full collections that walk the whole
    state). Edits, saves and restores work as ever."""
    if _impl.IMPLEMENTATION != "c":
        pytest.skip("the pure-Python classes track every set")
    space = osp.ObjectSpace()
    objects = [
        space.create_list("l"),
        space.create_dict("d"),
        space.create_sorted_dict("sd"),
        space.create_set("s"),
        space.create_sorted_set("ss"),
        space.create_value("v"),
        space.create_queue("q"),
    ]
    objects[0].append(0.5)
    store = osp.SQLiteStore(str(tmp_path / "space.db"))
    space.checkpoint(store)
    objects[0][0] = 1.5  # an assignment tracks its slot (an append moves _from)
    objects[1][("a", 1)] = [1]
    objects[2][("a", 1)] = [2]
    objects[3].add(("b", 2))
    objects[4].add((3, "c"))
    objects[5].value = 4
    objects[6].enqueue(5)
    for obj in objects[:5]:  # the kinds that track slots (a value and a queue track a range)
        assert obj._dirty is not None
        assert not gc.is_tracked(obj._dirty), obj
    page = objects[0]._current_page()
    assert not gc.is_tracked(page)
    assert _impl.untrack(page) is page
    space.checkpoint(store)
    gc.collect()
    restored = osp.ObjectSpace.load(store.reader())
    assert list(restored.get_list("l")) == [1.5]
    assert dict(restored.get_dict("d")) == {("a", 1): [1]}
    assert set(restored.get_sorted_set("ss")) == {(3, "c")}
    store.close()


def test_the_key_encoder_checks_its_arguments() -> None:
    """The C KeyEncoder refuses a bad type code or fallback, and takes one key."""
    if _impl.IMPLEMENTATION != "c":
        assert _pycore.key_encoder(1, len) is len
        return
    from objectspace.collections import _core

    with pytest.raises(ValueError, match=r"0\.\.127"):
        _core.KeyEncoder(128, len)
    with pytest.raises(TypeError, match="callable"):
        _core.KeyEncoder(1, None)
    encode = _core.KeyEncoder(1, lambda key: (b"F", False))
    with pytest.raises(TypeError, match="one positional"):
        encode()
    with pytest.raises(TypeError, match="one positional"):
        encode(("a",), key=1)
    assert encode(("a", None)) == (b"\xc7\x03\x01\xa1a\xc0", True)  # ext 8, 3 bytes
    assert encode(("ab", None)) == (b"\xd6\x01\xa2ab\xc0", True)  # fixext 4
    freed: list[int] = []

    class Mark:
        def __del__(self) -> None:
            freed.append(1)

    cycle: list[Any] = [Mark()]
    encode = _core.KeyEncoder(1, lambda key, held=cycle: held)
    cycle.append(encode)  # a cycle through the fallback: the collector frees it
    del encode, cycle
    gc.collect()
    assert freed == [1]
