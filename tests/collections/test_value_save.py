"""A value's save in C (``ValueBase._save_value`` and ``_freeze_value``, the C build's
``PersistedValue._save`` and ``_freeze``) does what the Python methods do: the same rows
into the emitter, the same page, the same fields after; an encoder that fails leaves what
the Python method leaves."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

import objectspace as osp
from objectspace.collections._impl import ValueBase
from objectspace.collections.base import Emitter
from objectspace.collections.value import _PAGES, _PY_FREEZE, _PY_SAVE, PersistedValue
from objectspace.serialization import MsgpackSerializer as Serializer

pytestmark = pytest.mark.skipif(
    not hasattr(ValueBase, "_save_value"), reason="the pure-Python build runs the Python methods"
)
C_SAVE = getattr(ValueBase, "_save_value", None)
C_FREEZE = getattr(ValueBase, "_freeze_value", None)


def _emitter(dumps: Any = None) -> Emitter:
    codec = Serializer()
    return Emitter(dumps or codec.raw_dumps, None, codec.raw_key_dumps)


def _value(new: bool, meta: bool, pending: Any, value: Any, object_id: str) -> PersistedValue:
    space = osp.ObjectSpace()
    v = space.create_value(object_id, value)
    v._new, v._meta, v._pending = new, meta, pending
    return v


def _state(v: PersistedValue) -> tuple[Any, ...]:
    return (v._new, v._meta, v._registered, v._pending, v._value)


PENDINGS = [None, *(_PAGES[n][m] for n in (False, True) for m in (False, True))]


@pytest.mark.parametrize(
    ("new", "meta", "pending", "full"),
    list(itertools.product((False, True), (False, True), PENDINGS, (False, True))),
)
def test_save_and_freeze_do_what_the_python_methods_do(
    new: bool, meta: bool, pending: Any, full: bool
) -> None:
    for object_id, value in [("k/1/sessions", [[1, 2, 3, 4.5]]), ("é/ü", None), ("x", b"\x00")]:
        py, c = (_value(new, meta, pending, value, object_id) for _ in range(2))
        out_py, out_c = _emitter(), _emitter()
        out_py.table("other")[b"k"] = b"v"  # an emitter with tables already
        out_c.table("other")[b"k"] = b"v"
        page_py = _PY_SAVE(py, out_py, full)
        page_c = C_SAVE(c, out_c, full)
        assert page_c is page_py
        assert list(out_c.changes) == list(out_py.changes)
        for name, changes in out_py.changes.items():
            assert out_c.changes[name].rows == changes.rows
            assert out_c.changes[name].truncated == changes.truncated
        _PY_FREEZE(py, page_py)
        C_FREEZE(c, page_c)
        assert _state(c) == _state(py)


def test_a_second_value_in_the_same_table_adds_its_row() -> None:
    out = _emitter()
    for value in (1, 2):
        v = _value(True, True, None, value, "same")
        C_SAVE(v, out, False)
    assert out.changes["state/item/same/items"].rows == {b"value": Serializer().raw_dumps(2)}


def test_an_encoder_that_fails_leaves_what_the_python_method_leaves() -> None:
    def failing(value: Any) -> bytes:
        raise ValueError("cannot encode")

    unencodable = object()
    py, c = (_value(True, True, None, unencodable, "v") for _ in range(2))
    out_py, out_c = _emitter(failing), _emitter(failing)
    with pytest.raises(ValueError, match="cannot encode"):
        _PY_SAVE(py, out_py, False)
    with pytest.raises(ValueError, match="cannot encode"):
        C_SAVE(c, out_c, False)
    assert list(out_c.changes) == list(out_py.changes)
    assert {n: ch.rows for n, ch in out_c.changes.items()} == {
        n: ch.rows for n, ch in out_py.changes.items()
    }
    assert _state(c) == _state(py)


def test_unset_fields_raise_as_the_python_method_does() -> None:
    v = PersistedValue.__new__(PersistedValue)
    with pytest.raises(AttributeError):
        C_SAVE(v, _emitter(), False)
    with pytest.raises(TypeError):
        C_SAVE(_value(True, True, None, 1, "v"), _emitter())  # type: ignore[call-arg]


def test_a_space_saves_restores_and_acknowledges_values_through_them() -> None:
    space = osp.ObjectSpace()
    store = osp.MemoryStore()
    values = [space.create_value(f"v/{i}", i) for i in range(20)]
    space.checkpoint(store)
    for v in values[::2]:
        v.value = v.value * 10
    stats = space.checkpoint(store)
    assert stats.items_written == 10
    assert not space.is_dirty
    restored = osp.ObjectSpace.load(store.reader())
    assert [restored.get_value(f"v/{i}").value for i in range(20)] == [
        i * 10 if i % 2 == 0 else i for i in range(20)
    ]


def _generic_change_rows(space: osp.ObjectSpace) -> int:
    """``ObjectSpace.change_rows`` counted from each object's merged page (the count the
    values' shortcut must give)."""
    rows = 0
    for object_id in space._dirty.keys() | space._pending.keys():
        page = space._objects[object_id]._merged_page()
        if page.new:
            rows += 3
        else:
            rows += len(page.slots) + len(page.links) + page.meta + page.cleared
    return rows


def test_the_change_estimate_of_values_is_their_merged_pages() -> None:
    store = osp.MemoryStore()
    space = osp.ObjectSpace()
    space.create_value("old", 1)
    space.create_value("kept", 1)
    space.checkpoint(store)
    assert space.change_rows() == _generic_change_rows(space) == 0
    space.create_value("new", 2)  # new, not saved
    space.get_value("old").value = 3  # set
    assert space.change_rows() == _generic_change_rows(space) == 3 + 1
    space.save(store.writer(osp.CheckpointKind.DIFFERENTIAL))  # saved, not acknowledged
    assert space.change_rows() == _generic_change_rows(space) == 3 + 1
    space.get_value("new").value = 4  # set again while its save is pending
    space.get_value("kept").value = 5
    assert space.change_rows() == _generic_change_rows(space) == 3 + 1 + 1
