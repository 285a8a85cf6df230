"""``PersistedSortedSet.add`` and ``discard`` (``sorted_set_add`` and
``sorted_set_discard``, in C and in Python): the same elements, dirty slots and spellings
over random edits; a flat tuple of plain values keeps no spelling and is stored exactly,
other elements keep theirs; failures leave the set as it was."""

from __future__ import annotations

import random
from typing import Any

import pytest

import objectspace as osp
from objectspace.collections import _impl, _pycore
from objectspace.serialization import PLAIN_KEY_TYPES
from tests.support.twins import CORE

IMPLEMENTATIONS = [pytest.param(_pycore, id="python")]
if CORE is not None and _impl.IMPLEMENTATION == "c":  # (C's twin takes C-based objects)
    IMPLEMENTATIONS.append(pytest.param(CORE, id="c"))

# Elements of every kind a set orders together: tuples starting with an int.
POOL: list[Any] = [
    (1, "a"),
    (1, "b"),
    (2, "a", b"x"),
    (2, "b", None),
    (1.0, "a"),  # equal to (1, "a"): one element, its own spelling kept
    (3, ("n", 1)),  # a nested tuple
    (True, "b"),  # equal to (1, "b")
    (4,),
    (4.5, "z"),
]


def _types(value: Any) -> Any:
    return tuple(map(type, value)) if type(value) is tuple else type(value)


def _state(s: Any) -> tuple[Any, ...]:
    return (
        [(x, _types(x)) for x in s._data],
        set(s._data._set),
        set(s._dirty or ()),
        {k: _types(v) for k, v in s._spell.items()},
    )


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_random_edits_match_the_model(impl: Any) -> None:
    rng = random.Random(7)
    for _ in range(30):
        space = osp.ObjectSpace()
        s = space.create_sorted_set("s")
        space.checkpoint(osp.MemoryStore())
        held: dict[Any, Any] = {}  # canonical -> the spelling the set holds
        touched: set[Any] = set()
        for _ in range(rng.randrange(1, 40)):
            value = rng.choice(POOL)
            if rng.random() < 0.6:
                impl.sorted_set_add(s, value, PLAIN_KEY_TYPES)
                if value not in held:  # an edit: its slot tracked
                    held[value] = value
                    touched.add(value)
            else:
                impl.sorted_set_discard(s, value)
                if held.pop(value, None) is not None:
                    touched.add(value)
            assert sorted(held.values()) == list(s._data)
            assert {tuple(map(type, v)) for v in held.values()} == {
                tuple(map(type, v)) for v in s._data
            }
            assert set(s._dirty or ()) == touched
            assert s._registered or not touched
        spelled = {v for v in held.values() if not set(map(type, v)) <= PLAIN_KEY_TYPES}
        assert set(s._spell) == spelled
        assert all(s._spell[v] is held[v] for v in spelled)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_flat_tuple_is_stored_exactly_without_a_spelling(impl: Any) -> None:
    store = osp.MemoryStore()
    space = osp.ObjectSpace()
    s = space.create_sorted_set("s")
    for value in [(5, "t", "k/", 9), (1.0, "a"), (2, ("n",)), (3, "u", b"b", None)]:
        impl.sorted_set_add(s, value, PLAIN_KEY_TYPES)
    assert set(s._spell) == {(1, "a"), (2, ("n",))}
    space.checkpoint(store)
    again = osp.ObjectSpace.load(store.reader()).get_sorted_set("s")
    assert [(x, tuple(map(type, x))) for x in again] == [(x, tuple(map(type, x))) for x in s]
    impl.sorted_set_discard(s, (5, "t", "k/", 9))
    impl.sorted_set_discard(s, (1, "a"))  # the held (1.0, "a"), spelling and all
    assert set(s._spell) == {(2, ("n",))}
    space.checkpoint(store)
    assert list(osp.ObjectSpace.load(store.reader()).get_sorted_set("s")) == list(s)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_an_element_that_cannot_be_ordered_or_hashed_changes_nothing(impl: Any) -> None:
    space = osp.ObjectSpace()
    s = space.create_sorted_set("s")
    impl.sorted_set_add(s, 1, PLAIN_KEY_TYPES)
    before = _state(s)
    with pytest.raises(TypeError):
        impl.sorted_set_add(s, "a", PLAIN_KEY_TYPES)  # str < int
    with pytest.raises(TypeError):
        impl.sorted_set_add(s, [1], PLAIN_KEY_TYPES)  # unhashable
    with pytest.raises(TypeError):
        impl.sorted_set_discard(s, [1])
    impl.sorted_set_discard(s, "absent")  # not a member: nothing to do
    assert _state(s) == before


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_deleted_set_refuses_an_edit(impl: Any) -> None:
    space = osp.ObjectSpace()
    s = space.create_sorted_set("s")
    space.checkpoint(osp.MemoryStore())
    space.delete("s")
    with pytest.raises(osp.ObjectDeletedError):
        impl.sorted_set_add(s, 1, PLAIN_KEY_TYPES)
