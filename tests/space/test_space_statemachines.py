"""Stateful tests: every persisted type against its plain Python equivalent.

Each machine holds a space with up to two objects of one kind (ids ``obj`` and ``obj/items``,
the second looking like a table of the first) and interleaves:

* every mutator of the type, applied to the persisted object and to a plain Python model;
* FULL and DIFFERENTIAL ``save`` + ``commit`` + ``on_saved``;
* edits made between ``save`` and ``on_saved`` (before and after the commit);
* commits that fail (the writer raises in ``commit``; ``on_saved`` is then not called);
* ``space.delete`` and re-creation of an id;
* a restart: the live space is replaced by ``ObjectSpace.load(store.reader())``.

After every step the live objects equal their models, and a fresh load of the store equals
the machine's record of what was committed (the models as of the last successful save).
Every machine runs on a MemoryStore and on a SQLiteStore.

Values compare with their Python types (``1``, ``1.0`` and ``True`` are told apart).

The value strategy nests tuples inside tuples and lists/dicts inside tuples, but not tuples
inside lists or dicts: ``MsgpackSerializer`` mis-encodes those (see
``tests/test_serialization.py``, which shows that bug on its own).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import objectspace as osp
from objectspace.tables import WriterStatus

FULL = osp.CheckpointKind.FULL
DIFF = osp.CheckpointKind.DIFFERENTIAL
CHECKPOINT_KINDS = st.sampled_from([DIFF, DIFF, FULL])

SETTINGS = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)

# -- values -------------------------------------------------------------------------------------

INT64 = st.integers(-(2**63), 2**63 - 1)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    INT64,
    st.floats(allow_nan=False),
    st.text(max_size=6),
    st.binary(max_size=6),
)
_FLAT_LIST = st.lists(SCALARS, max_size=3)
_FLAT_DICT = st.dictionaries(st.text(max_size=3), SCALARS, max_size=3)
VALUES = st.one_of(
    SCALARS,
    SCALARS,
    # tuples, holding scalars, lists, dicts and tuples
    st.lists(st.one_of(SCALARS, _FLAT_LIST, _FLAT_DICT), max_size=3).map(tuple),
    st.tuples(SCALARS, st.lists(SCALARS, max_size=2).map(tuple)),
    # small nested lists and dicts (of scalars, lists and dicts)
    st.lists(st.one_of(SCALARS, _FLAT_LIST, _FLAT_DICT), max_size=3),
    st.dictionaries(st.text(max_size=3), st.one_of(SCALARS, _FLAT_LIST, _FLAT_DICT), max_size=3),
)
# Set elements and dict keys: ints and text (never 1 with True or 1.0).
KEYS = st.one_of(
    st.integers(-4, 4),
    INT64,
    st.text(alphabet="ab/é", max_size=3),
)
# Keys of the sorted types: one comparable type.
SORTED_KEYS = st.one_of(st.integers(-12, 12), st.sampled_from([-(2**63), 2**63 - 1]))


def canon(value: Any) -> Any:
    """A hashable form of ``value`` that keeps every type (``1`` ≠ ``1.0`` ≠ ``True``)."""
    if isinstance(value, list):
        return ("list", tuple(canon(v) for v in value))
    if isinstance(value, tuple):
        return ("tuple", tuple(canon(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((canon(k), canon(v)) for k, v in value.items()))
    if isinstance(value, set | frozenset):
        return (type(value).__name__, frozenset(canon(v) for v in value))
    if isinstance(value, float):
        return ("float", repr(value))
    return (type(value).__name__, value)


def both(model: Any, obj: Any, action: Callable[[Any], Any]) -> None:
    """Apply ``action`` to the model, then to the object: equal results or the same error."""
    try:
        expected = action(model)
    except Exception as exc:
        with pytest.raises(type(exc)):
            action(obj)
        return
    actual = action(obj)
    assert canon(actual) == canon(expected)


class CommitFailed(Exception):
    """What the sabotaged writers raise from ``commit``."""


def _fail() -> osp.WriteStats:
    raise CommitFailed("injected commit failure")


# -- the shared machine ------------------------------------------------------------------------


class SpaceMachine(RuleBasedStateMachine):
    """A space of objects of one kind, their models, and what the store should hold."""

    IDS: ClassVar[tuple[str, ...]] = ("obj", "obj/items")
    OPS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, make_store: Callable[[], osp.Store]) -> None:
        super().__init__()
        self.store = make_store()
        self.space = osp.ObjectSpace()
        self.objs: dict[str, Any] = {}
        self.models: dict[str, Any] = {}
        # id -> canonical content, as of the last save whose commit succeeded.
        self.committed: dict[str, Any] = {}

    @initialize(data=st.data())
    def populate(self, data: st.DataObject) -> None:
        """Both objects, with some content, usually committed: later edits meet stored state."""
        for oid in self.IDS:
            self._create(oid, data)
        for _ in range(data.draw(st.integers(0, 8), label="initial edits")):
            self.run_op(data.draw(st.sampled_from(self.OPS), label="edit"), data)
        kind = data.draw(st.sampled_from([DIFF, DIFF, FULL, None]), label="initial checkpoint")
        if kind is not None:
            snap = self.snapshot()
            self.space.checkpoint(self.store, kind=kind)
            self.committed = snap

    # -- what each kind provides -------------------------------------------------------------

    def new_object(self, oid: str, data: st.DataObject | None) -> tuple[Any, Any]:
        raise NotImplementedError

    def get(self, space: osp.ObjectSpace, oid: str) -> Any:
        raise NotImplementedError

    def model_from(self, obj: Any) -> Any:
        raise NotImplementedError

    def canon_obj(self, obj: Any) -> Any:
        raise NotImplementedError

    def canon_model(self, model: Any) -> Any:
        raise NotImplementedError

    def poke(self, obj: Any) -> None:
        """One edit of ``obj`` (used to check that a deleted object refuses edits)."""
        raise NotImplementedError

    def check_extra(self, obj: Any, model: Any) -> None:
        """Kind-specific checks of a live object against its model."""

    # -- helpers -------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {oid: self.canon_model(model) for oid, model in self.models.items()}

    def _create(self, oid: str, data: st.DataObject | None) -> None:
        obj, model = self.new_object(oid, data)
        assert self.get(self.space, oid) is obj
        assert obj.id == oid
        with pytest.raises(osp.ObjectExistsError):
            self.new_object(oid, None)
        assert self.get(self.space, oid) is obj
        self.objs[oid] = obj
        self.models[oid] = model

    def _delete(self, data: st.DataObject) -> None:
        oid = data.draw(st.sampled_from(sorted(self.models)), label="delete id")
        old = self.objs.pop(oid)
        del self.models[oid]
        self.space.delete(oid)
        assert oid not in self.space
        with pytest.raises(KeyError):
            self.space.get(oid)
        with pytest.raises(osp.ObjectDeletedError):
            self.poke(old)

    def _create_missing(self, data: st.DataObject) -> None:
        missing = [oid for oid in self.IDS if oid not in self.models]
        oid = data.draw(st.sampled_from(missing), label="create id")
        self._create(oid, data)

    def run_op(self, name: str, data: st.DataObject) -> None:
        oid = data.draw(st.sampled_from(sorted(self.models)), label="id")
        getattr(self, name)(self.objs[oid], self.models[oid], data)

    def random_edits(self, data: st.DataObject, most: int = 3) -> None:
        """Up to ``most`` edits of any kind, deletes and creates included."""
        for _ in range(data.draw(st.integers(0, most), label="edits")):
            choice = data.draw(st.sampled_from((*self.OPS, "delete", "create")), label="edit")
            if choice == "delete":
                if self.models:
                    self._delete(data)
            elif choice == "create":
                if len(self.models) < len(self.IDS):
                    self._create_missing(data)
            elif self.models:
                self.run_op(choice, data)

    # -- rules shared by every kind ------------------------------------------------------------

    @precondition(lambda self: len(self.models) < len(self.IDS))
    @rule(data=st.data())
    def create(self, data: st.DataObject) -> None:
        self._create_missing(data)

    @precondition(lambda self: bool(self.models))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        self._delete(data)

    @rule(kind=CHECKPOINT_KINDS, in_one_call=st.booleans())
    def checkpoint(self, kind: osp.CheckpointKind, in_one_call: bool) -> None:
        snap = self.snapshot()
        if in_one_call:
            self.space.checkpoint(self.store, kind=kind)
            assert not self.space.is_dirty
        else:
            writer = self.store.writer(kind)
            self.space.save(writer)
            counted = writer.count()
            stats = writer.commit()
            self.space.on_saved()
            assert (stats.items_written, stats.items_deleted, stats.tables_deleted) == (
                counted.items_written,
                counted.items_deleted,
                counted.tables_deleted,
            )
        self.committed = snap

    @rule(kind=CHECKPOINT_KINDS, data=st.data())
    def checkpoint_with_edits_before_on_saved(
        self, kind: osp.CheckpointKind, data: st.DataObject
    ) -> None:
        writer = self.store.writer(kind)
        self.space.save(writer)
        snap = self.snapshot()
        self.random_edits(data)  # after save, before commit
        writer.commit()
        self.random_edits(data)  # after commit, before on_saved
        self.space.on_saved()
        self.committed = snap

    @rule(kind=CHECKPOINT_KINDS, data=st.data())
    def failed_commit(self, kind: osp.CheckpointKind, data: st.DataObject) -> None:
        before = self.store.dump()
        writer = self.store.writer(kind)
        self.space.save(writer)
        self.random_edits(data, most=2)
        writer._apply = _fail  # type: ignore[method-assign]
        with pytest.raises(CommitFailed):
            writer.commit()
        assert writer.status is WriterStatus.FAILED
        if data.draw(st.booleans(), label="rollback"):
            writer.rollback()
        # on_saved is not called: every edit of that save must reach the next one.
        assert self.store.dump() == before

    @rule()
    def restart(self) -> None:
        """Continue from a load of the store, as a restarted job would."""
        restored = osp.ObjectSpace.load(self.store.reader())
        self.space = restored
        self.objs = {oid: self.get(restored, oid) for oid in restored}
        self.models = {oid: self.model_from(obj) for oid, obj in self.objs.items()}
        assert self.snapshot() == self.committed
        assert not restored.is_dirty

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def live_objects_equal_models(self) -> None:
        assert sorted(self.space) == sorted(self.models)
        assert len(self.space) == len(self.models)
        for oid, obj in self.objs.items():
            assert oid in self.space
            assert self.space.get(oid) is obj
            model = self.models[oid]
            assert self.canon_obj(obj) == self.canon_model(model)
            self.check_extra(obj, model)

    @invariant()
    def store_equals_committed(self) -> None:
        loaded = osp.ObjectSpace.load(self.store.reader())
        assert sorted(loaded) == sorted(self.committed)
        for oid in loaded:
            assert self.canon_obj(self.get(loaded, oid)) == self.committed[oid]
        # No stale row: the store holds exactly what a FULL save of its own load writes
        # (a row that loading ignores, such as a list slot beyond the length, fails this).
        canonical = osp.MemoryStore()
        loaded.checkpoint(canonical, kind=FULL)
        assert canonical.dump() == self.store.dump()

    def teardown(self) -> None:
        close = getattr(self.store, "close", None)
        if close is not None:
            close()


def op_rules(cls: type[SpaceMachine]) -> type[SpaceMachine]:
    """Give every ``op_<name>(obj, model, data)`` method a rule of its own."""
    names = sorted(name for name in dir(cls) if name.startswith("op_"))

    def make(name: str) -> Any:
        def apply_op(self: SpaceMachine, data: st.DataObject) -> None:
            self.run_op(name, data)

        apply_op.__name__ = "do_" + name[3:]
        return precondition(lambda self: bool(self.models))(rule(data=st.data())(apply_op))

    for name in names:
        setattr(cls, "rule_" + name[3:], make(name))
    cls.OPS = tuple(names)
    return cls


def draw_index(data: st.DataObject, n: int, slack: int = 0) -> int:
    """An index into a sequence of length ``n`` (negative too), ``slack`` beyond each end."""
    return data.draw(st.integers(-n - slack, max(n - 1 + slack, -n - slack)), label="index")


# -- the ten kinds -------------------------------------------------------------------------------


@op_rules
class ValueMachine(SpaceMachine):
    def new_object(self, oid, data):
        value = data.draw(VALUES, label="initial") if data is not None else None
        return self.space.create_value(oid, value), [value]

    def get(self, space, oid):
        return space.get_value(oid)

    def model_from(self, obj):
        return [obj.value]

    def canon_obj(self, obj):
        return canon(obj.value)

    def canon_model(self, model):
        return canon(model[0])

    def poke(self, obj):
        obj.value = 1

    def op_set(self, obj, model, data):
        value = data.draw(VALUES)
        obj.value = value
        model[0] = value


@op_rules
class ArrayMachine(SpaceMachine):
    def new_object(self, oid, data):
        if data is None:
            length, fill = 3, 0
        else:
            length = data.draw(st.integers(0, 5), label="length")
            fill = data.draw(VALUES, label="fill")
        return self.space.create_array(oid, length, fill=fill), [fill] * length

    def get(self, space, oid):
        return space.get_array(oid)

    def model_from(self, obj):
        return list(obj)

    def canon_obj(self, obj):
        return canon(list(obj))

    def canon_model(self, model):
        return canon(model)

    def check_extra(self, obj, model):
        assert len(obj) == len(model)
        if model:
            assert canon(obj[-1]) == canon(model[-1])
            assert canon(obj[0]) == canon(model[0])

    def poke(self, obj):
        obj[0] = 1

    def op_set(self, obj, model, data):
        n = len(model)
        i = draw_index(data, n, slack=1)
        value = data.draw(VALUES)
        both(model, obj, lambda t: t.__setitem__(i, value))

    def op_read(self, obj, model, data):
        i = draw_index(data, len(model), slack=1)
        both(model, obj, lambda t: t[i])
        both(model, obj, lambda t: t[i:])


@op_rules
class ListMachine(SpaceMachine):
    def new_object(self, oid, data):
        return self.space.create_list(oid), []

    def get(self, space, oid):
        return space.get_list(oid)

    def model_from(self, obj):
        return list(obj)

    def canon_obj(self, obj):
        return canon(list(obj))

    def canon_model(self, model):
        return canon(model)

    def check_extra(self, obj, model):
        assert len(obj) == len(model)
        assert canon(list(reversed(obj))) == canon(list(reversed(model)))

    def poke(self, obj):
        obj.append(1)

    def op_append(self, obj, model, data):
        value = data.draw(VALUES)
        both(model, obj, lambda t: t.append(value))

    def op_insert(self, obj, model, data):
        i = draw_index(data, len(model), slack=2)
        value = data.draw(VALUES)
        both(model, obj, lambda t: t.insert(i, value))

    def op_pop(self, obj, model, data):
        if data.draw(st.booleans(), label="default index"):
            both(model, obj, lambda t: t.pop())
        else:
            i = draw_index(data, len(model), slack=1)
            both(model, obj, lambda t: t.pop(i))

    def op_del_index(self, obj, model, data):
        i = draw_index(data, len(model), slack=1)
        both(model, obj, lambda t: t.__delitem__(i))

    def op_del_slice(self, obj, model, data):
        s = self._slice(model, data)
        both(model, obj, lambda t: t.__delitem__(s))

    def op_remove_front(self, obj, model, data):
        # Removing from the front moves the stored head instead of shifting the slots.
        how = data.draw(st.sampled_from(["pop(0)", "del [0]", "del [:k]", "del [-n]"]))
        if how == "pop(0)":
            both(model, obj, lambda t: t.pop(0))
        elif how == "del [0]":
            both(model, obj, lambda t: t.__delitem__(0))
        elif how == "del [-n]":
            both(model, obj, lambda t: t.__delitem__(-len(t) if t else 0))
        else:
            k = data.draw(st.integers(0, len(model) + 1), label="k")
            both(model, obj, lambda t: t.__delitem__(slice(None, k)))

    def op_setitem(self, obj, model, data):
        i = draw_index(data, len(model), slack=1)
        value = data.draw(VALUES)
        both(model, obj, lambda t: t.__setitem__(i, value))

    def op_set_slice(self, obj, model, data):
        s = self._slice(model, data)
        if s.step not in (None, 1) and data.draw(st.booleans(), label="matching length"):
            k = len(range(*s.indices(len(model))))
        else:
            k = data.draw(st.integers(0, 3), label="length")
        values = data.draw(st.lists(VALUES, min_size=k, max_size=k))
        both(model, obj, lambda t: t.__setitem__(s, list(values)))

    def op_extend(self, obj, model, data):
        values = data.draw(st.lists(VALUES, max_size=3))
        both(model, obj, lambda t: t.extend(iter(values)))

    def op_iadd(self, obj, model, data):
        values = data.draw(st.lists(VALUES, max_size=3))
        result = obj.__iadd__(values)
        assert result is obj
        model += values

    def op_clear(self, obj, model, data):
        both(model, obj, lambda t: t.clear())

    def op_sort(self, obj, model, data):
        reverse = data.draw(st.booleans(), label="reverse")
        both(model, obj, lambda t: t.sort(key=repr, reverse=reverse))

    def op_reverse(self, obj, model, data):
        both(model, obj, lambda t: t.reverse())

    def op_remove(self, obj, model, data):
        if model and data.draw(st.booleans(), label="present"):
            value = data.draw(st.sampled_from(model))
        else:
            value = data.draw(VALUES)
        both(model, obj, lambda t: t.remove(value))

    def op_read(self, obj, model, data):
        s = self._slice(model, data)
        both(model, obj, lambda t: t[s])
        if model:
            value = data.draw(st.sampled_from(model))
            both(model, obj, lambda t: (t.index(value), t.count(value), value in t))

    @staticmethod
    def _slice(model, data):
        n = len(model)
        bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
        step = data.draw(st.sampled_from([None, None, 1, 2, -1, -2]), label="step")
        return slice(data.draw(bound, label="start"), data.draw(bound, label="stop"), step)


@op_rules
class QueueMachine(SpaceMachine):
    def new_object(self, oid, data):
        return self.space.create_queue(oid), deque()

    def get(self, space, oid):
        return space.get_queue(oid)

    def model_from(self, obj):
        return deque(obj)

    def canon_obj(self, obj):
        return canon(list(obj))

    def canon_model(self, model):
        return canon(list(model))

    def check_extra(self, obj, model):
        assert len(obj) == len(model)
        assert bool(obj) == bool(model)
        if model:
            assert canon(obj.peek()) == canon(model[0])
        else:
            with pytest.raises(IndexError):
                obj.peek()
            with pytest.raises(IndexError):
                obj.dequeue()

    def poke(self, obj):
        obj.enqueue(1)

    def op_enqueue(self, obj, model, data):
        for value in data.draw(st.lists(VALUES, min_size=1, max_size=3)):
            obj.enqueue(value)
            model.append(value)

    def op_dequeue(self, obj, model, data):
        for _ in range(data.draw(st.integers(1, 3), label="count")):
            if model:
                assert canon(obj.dequeue()) == canon(model.popleft())
            else:
                with pytest.raises(IndexError):
                    obj.dequeue()

    def op_clear(self, obj, model, data):
        obj.clear()
        model.clear()


@op_rules
class StackMachine(SpaceMachine):
    """The model is a list with the top at the end; the stack iterates from the top."""

    def new_object(self, oid, data):
        return self.space.create_stack(oid), []

    def get(self, space, oid):
        return space.get_stack(oid)

    def model_from(self, obj):
        return list(reversed(list(obj)))

    def canon_obj(self, obj):
        return canon(list(obj))

    def canon_model(self, model):
        return canon(list(reversed(model)))

    def check_extra(self, obj, model):
        assert len(obj) == len(model)
        assert bool(obj) == bool(model)
        if model:
            assert canon(obj.peek()) == canon(model[-1])
        else:
            with pytest.raises(IndexError):
                obj.peek()
            with pytest.raises(IndexError):
                obj.pop()

    def poke(self, obj):
        obj.push(1)

    def op_push(self, obj, model, data):
        for value in data.draw(st.lists(VALUES, min_size=1, max_size=3)):
            obj.push(value)
            model.append(value)

    def op_pop(self, obj, model, data):
        for _ in range(data.draw(st.integers(1, 3), label="count")):
            if model:
                assert canon(obj.pop()) == canon(model.pop())
            else:
                with pytest.raises(IndexError):
                    obj.pop()

    def op_clear(self, obj, model, data):
        obj.clear()
        model.clear()


class LinkedModel:
    """The values of a linked list and, in parallel, the node handles the list returned."""

    def __init__(self, values: list[Any] | None = None, nodes: list[Any] | None = None):
        self.values: list[Any] = values if values is not None else []
        self.nodes: list[Any] = nodes if nodes is not None else []


@op_rules
class LinkedListMachine(SpaceMachine):
    def new_object(self, oid, data):
        return self.space.create_linked_list(oid), LinkedModel()

    def get(self, space, oid):
        return space.get_linked_list(oid)

    def model_from(self, obj):
        return LinkedModel(list(obj), list(obj.nodes()))

    def canon_obj(self, obj):
        return canon(list(obj))

    def canon_model(self, model):
        return canon(model.values)

    def check_extra(self, obj, model):
        nodes = list(obj.nodes())
        assert len(nodes) == len(model.nodes)
        assert all(a is b for a, b in zip(nodes, model.nodes, strict=True))
        assert len(obj) == len(model.values)
        assert bool(obj) == bool(model.values)
        assert canon(list(reversed(obj))) == canon(list(reversed(model.values)))
        assert obj.first is (nodes[0] if nodes else None)
        assert obj.last is (nodes[-1] if nodes else None)
        for i, node in enumerate(nodes):
            assert node.list is obj
            assert canon(node.value) == canon(model.values[i])
            assert node.prev is (nodes[i - 1] if i > 0 else None)
            assert node.next is (nodes[i + 1] if i + 1 < len(nodes) else None)

    def poke(self, obj):
        obj.append(1)

    def op_append(self, obj, model, data):
        value = data.draw(VALUES)
        model.nodes.append(obj.append(value))
        model.values.append(value)

    def op_appendleft(self, obj, model, data):
        value = data.draw(VALUES)
        model.nodes.insert(0, obj.appendleft(value))
        model.values.insert(0, value)

    def op_insert_after(self, obj, model, data):
        if not model.nodes:
            return
        i = data.draw(st.integers(0, len(model.nodes) - 1), label="node")
        value = data.draw(VALUES)
        new = obj.insert_after(model.nodes[i], value)
        assert new.prev is model.nodes[i]
        model.nodes.insert(i + 1, new)
        model.values.insert(i + 1, value)

    def op_insert_before(self, obj, model, data):
        if not model.nodes:
            return
        i = data.draw(st.integers(0, len(model.nodes) - 1), label="node")
        value = data.draw(VALUES)
        new = obj.insert_before(model.nodes[i], value)
        assert new.next is model.nodes[i]
        model.nodes.insert(i, new)
        model.values.insert(i, value)

    def op_remove(self, obj, model, data):
        if not model.nodes:
            return
        i = data.draw(st.integers(0, len(model.nodes) - 1), label="node")
        node = model.nodes.pop(i)
        model.values.pop(i)
        obj.remove(node)
        assert node.list is None
        with pytest.raises(ValueError):
            obj.remove(node)
        with pytest.raises(ValueError):
            node.value = 1

    def op_pop(self, obj, model, data):
        if not model.nodes:
            with pytest.raises(IndexError):
                obj.pop()
            return
        node = model.nodes.pop()
        assert canon(obj.pop()) == canon(model.values.pop())
        assert node.list is None

    def op_popleft(self, obj, model, data):
        if not model.nodes:
            with pytest.raises(IndexError):
                obj.popleft()
            return
        node = model.nodes.pop(0)
        assert canon(obj.popleft()) == canon(model.values.pop(0))
        assert node.list is None

    def op_clear(self, obj, model, data):
        old = list(model.nodes)
        obj.clear()
        model.nodes.clear()
        model.values.clear()
        assert all(node.list is None for node in old)

    def op_set_value(self, obj, model, data):
        if not model.nodes:
            return
        i = data.draw(st.integers(0, len(model.nodes) - 1), label="node")
        value = data.draw(VALUES)
        model.nodes[i].value = value
        model.values[i] = value

    def op_find(self, obj, model, data):
        if model.values and data.draw(st.booleans(), label="present"):
            value = data.draw(st.sampled_from(model.values))
        else:
            value = data.draw(VALUES)
        expected = None
        for node, v in zip(model.nodes, model.values, strict=True):
            if v == value:
                expected = node
                break
        assert obj.find(value) is expected

    def op_foreign_node(self, obj, model, data):
        others = [o for o in self.objs.values() if o is not obj and o.first is not None]
        if not others:
            return
        with pytest.raises(ValueError):
            obj.insert_after(others[0].first, 1)
        with pytest.raises(ValueError):
            obj.remove(others[0].first)


@op_rules
class SetMachine(SpaceMachine):
    keys = KEYS

    def new_object(self, oid, data):
        return self.space.create_set(oid), set()

    def get(self, space, oid):
        return space.get_set(oid)

    def model_from(self, obj):
        return set(obj)

    def canon_obj(self, obj):
        return frozenset(canon(v) for v in obj)

    def canon_model(self, model):
        return frozenset(canon(v) for v in model)

    def check_extra(self, obj, model):
        assert len(obj) == len(model)
        assert obj == model

    def poke(self, obj):
        obj.add(("new",))

    def _key(self, model, data):
        if model and data.draw(st.booleans(), label="present"):
            return data.draw(st.sampled_from(sorted(model, key=repr)))
        return data.draw(self.keys)

    def op_add(self, obj, model, data):
        key = self._key(model, data)
        both(model, obj, lambda t: t.add(key))

    def op_discard(self, obj, model, data):
        key = self._key(model, data)
        both(model, obj, lambda t: t.discard(key))

    def op_remove(self, obj, model, data):
        key = self._key(model, data)
        both(model, obj, lambda t: t.remove(key))

    def op_clear(self, obj, model, data):
        both(model, obj, lambda t: t.clear())

    def op_ior(self, obj, model, data):
        keys = data.draw(st.sets(self.keys, max_size=3))
        assert obj.__ior__(set(keys)) is obj
        model |= keys

    def op_isub(self, obj, model, data):
        keys = {self._key(model, data) for _ in range(data.draw(st.integers(0, 3)))}
        assert obj.__isub__(set(keys)) is obj
        model -= keys

    def op_ixor(self, obj, model, data):
        keys = {self._key(model, data) for _ in range(data.draw(st.integers(0, 3)))}
        assert obj.__ixor__(set(keys)) is obj
        model ^= keys

    def op_update(self, obj, model, data):
        keys = data.draw(st.lists(self.keys, max_size=3))
        obj.update(keys)
        model.update(keys)

    def op_pop(self, obj, model, data):
        if not model:
            with pytest.raises(KeyError):
                obj.pop()
            return
        value = obj.pop()
        model.remove(value)

    def op_contains(self, obj, model, data):
        key = self._key(model, data)
        assert (key in obj) == (key in model)


@op_rules
class SortedSetMachine(SetMachine):
    keys = SORTED_KEYS

    def new_object(self, oid, data):
        return self.space.create_sorted_set(oid), set()

    def get(self, space, oid):
        return space.get_sorted_set(oid)

    def canon_obj(self, obj):
        return tuple(canon(v) for v in obj)

    def canon_model(self, model):
        return tuple(canon(v) for v in sorted(model))

    def poke(self, obj):
        obj.add(100)

    def op_position(self, obj, model, data):
        ordered = sorted(model)
        i = draw_index(data, len(ordered), slack=1)
        both(ordered, obj, lambda t: t[i])

    def op_irange(self, obj, model, data):
        low = data.draw(st.one_of(st.none(), self.keys), label="minimum")
        high = data.draw(st.one_of(st.none(), self.keys), label="maximum")
        expected = [
            v for v in sorted(model) if (low is None or v >= low) and (high is None or v <= high)
        ]
        assert list(obj.irange(low, high)) == expected
        assert list(obj.irange(minimum=low, maximum=high)) == expected


@op_rules
class DictMachine(SpaceMachine):
    keys = KEYS

    def new_object(self, oid, data):
        return self.space.create_dict(oid), {}

    def get(self, space, oid):
        return space.get_dict(oid)

    def model_from(self, obj):
        return dict(obj.items())

    def canon_obj(self, obj):
        return frozenset((canon(k), canon(v)) for k, v in obj.items())

    def canon_model(self, model):
        return frozenset((canon(k), canon(v)) for k, v in model.items())

    def check_extra(self, obj, model):
        assert len(obj) == len(model)
        assert set(obj) == set(model)
        assert obj == model

    def poke(self, obj):
        obj["new"] = 1

    def _key(self, model, data):
        if model and data.draw(st.booleans(), label="present"):
            return data.draw(st.sampled_from(sorted(model, key=repr)))
        return data.draw(self.keys)

    def op_set(self, obj, model, data):
        key = self._key(model, data)
        value = data.draw(VALUES)
        both(model, obj, lambda t: t.__setitem__(key, value))

    def op_del(self, obj, model, data):
        key = self._key(model, data)
        both(model, obj, lambda t: t.__delitem__(key))

    def op_pop(self, obj, model, data):
        key = self._key(model, data)
        if data.draw(st.booleans(), label="with default"):
            both(model, obj, lambda t: t.pop(key, "default"))
        else:
            both(model, obj, lambda t: t.pop(key))

    def op_clear(self, obj, model, data):
        both(model, obj, lambda t: t.clear())

    def op_update(self, obj, model, data):
        items = data.draw(st.dictionaries(self.keys, VALUES, max_size=3))
        if data.draw(st.booleans(), label="as pairs"):
            both(model, obj, lambda t: t.update(list(items.items())))
        else:
            both(model, obj, lambda t: t.update(items))

    def op_setdefault(self, obj, model, data):
        key = self._key(model, data)
        value = data.draw(VALUES)
        both(model, obj, lambda t: t.setdefault(key, value))

    def op_popitem(self, obj, model, data):
        if not model:
            with pytest.raises(KeyError):
                obj.popitem()
            return
        key, value = obj.popitem()
        assert canon(model.pop(key)) == canon(value)

    def op_read(self, obj, model, data):
        key = self._key(model, data)
        both(model, obj, lambda t: (t.get(key), t.get(key, "d"), key in t))
        both(model, obj, lambda t: t[key])


@op_rules
class SortedDictMachine(DictMachine):
    keys = SORTED_KEYS

    def new_object(self, oid, data):
        return self.space.create_sorted_dict(oid), {}

    def get(self, space, oid):
        return space.get_sorted_dict(oid)

    def canon_obj(self, obj):
        return tuple((canon(k), canon(v)) for k, v in obj.items())

    def canon_model(self, model):
        return tuple((canon(k), canon(model[k])) for k in sorted(model))

    def check_extra(self, obj, model):
        super().check_extra(obj, model)
        assert list(obj) == sorted(model)

    def poke(self, obj):
        obj[100] = 1

    def op_popitem(self, obj, model, data):
        if not model:
            with pytest.raises(KeyError):
                obj.popitem()
            return
        key, value = obj.popitem()
        assert key == max(model)
        assert canon(model.pop(key)) == canon(value)

    def op_peekitem(self, obj, model, data):
        ordered = sorted(model)
        if data.draw(st.booleans(), label="default index"):
            i = -1
        else:
            i = draw_index(data, len(ordered), slack=1)
        try:
            key = ordered[i]
            expected = (key, model[key])
        except IndexError:
            with pytest.raises(IndexError):
                obj.peekitem(i)
            return
        got = obj.peekitem() if i == -1 else obj.peekitem(i)
        assert canon(got) == canon(expected)

    def op_irange(self, obj, model, data):
        low = data.draw(st.one_of(st.none(), self.keys), label="minimum")
        high = data.draw(st.one_of(st.none(), self.keys), label="maximum")
        expected = [
            k for k in sorted(model) if (low is None or k >= low) and (high is None or k <= high)
        ]
        assert list(obj.irange(low, high)) == expected


MACHINES = [
    ValueMachine,
    ArrayMachine,
    ListMachine,
    QueueMachine,
    StackMachine,
    LinkedListMachine,
    SetMachine,
    SortedSetMachine,
    DictMachine,
    SortedDictMachine,
]


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
@pytest.mark.parametrize("machine", MACHINES, ids=lambda cls: cls.__name__)
def test_machine(machine: type[SpaceMachine], store_kind: str, tmp_path: Path) -> None:
    counter = itertools.count()

    def make_store() -> osp.Store:
        if store_kind == "memory":
            return osp.MemoryStore()
        return osp.SQLiteStore(tmp_path / f"space-{next(counter)}.db")

    run_state_machine_as_test(lambda: machine(make_store), settings=SETTINGS)
