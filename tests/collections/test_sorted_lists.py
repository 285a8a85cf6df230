"""``sorted_between`` (a sorted list's elements in ``[low, high)``), ``sorted_insert``
(``SortedList.add``) and ``sorted_remove`` (``SortedList.remove``) in C and in Python: what
``irange``, ``add`` and ``remove`` give, over sublists of every size, with and without a
position index, and the same exceptions."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from sortedcontainers import SortedList

from tests.support.twins import twins

IMPLEMENTATIONS = twins("sorted_between")
INSERTS = twins("sorted_insert")
REMOVES = twins("sorted_remove")


@pytest.mark.parametrize("between", IMPLEMENTATIONS)
@pytest.mark.parametrize("load", [1, 4, 1000])
def test_what_irange_gives(between: Callable[..., list[Any]], load: int) -> None:
    rng = random.Random(load)
    for _ in range(300):
        values = SortedList([rng.randrange(100) for _ in range(rng.randrange(0, 400))])
        values._reset(load)
        low, high = rng.randrange(-3, 103), rng.randrange(-3, 103)
        assert between(values, low, high) == list(values.irange(low, high, inclusive=(True, False)))


@pytest.mark.parametrize("between", IMPLEMENTATIONS)
def test_tuples_of_a_prefix(between: Callable[..., list[Any]]) -> None:
    values = SortedList((p, t) for p in ("a/", "ab/", "b/") for t in range(50))
    values._reset(8)
    assert between(values, ("ab/",), ("ab/\x00",)) == [("ab/", t) for t in range(50)]
    assert between(values, ("c/",), ("c/\x00",)) == []
    assert between(values, ("a",), ("a/",)) == []


class _Fails:
    """Compares as its number, but raises once ``armed`` compares reach zero."""

    armed = -1

    def __init__(self, n: int) -> None:
        self.n = n

    def __lt__(self, other: Any) -> bool:
        if _Fails.armed == 0:
            raise ArithmeticError("comparison failed")
        if _Fails.armed > 0:
            _Fails.armed -= 1
        return bool(self.n < other.n)

    def __le__(self, other: Any) -> bool:  # (the list's own checks)
        return bool(self.n <= other.n)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Fails) and self.n == other.n

    def __hash__(self) -> int:
        return self.n


@pytest.mark.parametrize("between", IMPLEMENTATIONS)
@pytest.mark.parametrize("after", [0, 1, 3, 7, 12])
def test_a_comparison_that_fails_part_way_raises(
    between: Callable[..., list[Any]], after: int
) -> None:
    values = SortedList(_Fails(n) for n in range(40))
    values._reset(4)
    _Fails.armed = after
    try:
        with pytest.raises(ArithmeticError):
            between(values, _Fails(5), _Fails(30))
    finally:
        _Fails.armed = -1
    assert [x.n for x in between(values, _Fails(5), _Fails(9))] == [5, 6, 7, 8]


@pytest.mark.parametrize("between", IMPLEMENTATIONS)
def test_not_a_sorted_list(between: Callable[..., list[Any]]) -> None:
    with pytest.raises((AttributeError, TypeError)):
        between([1, 2, 3], 1, 2)


@pytest.mark.parametrize("between", IMPLEMENTATIONS)
def test_a_comparison_that_empties_the_list_ends_the_walk_safely(
    between: Callable[..., list[Any]],
) -> None:
    values = SortedList(_Fails(n) for n in range(40))
    values._reset(4)

    class _Clears(_Fails):
        def __gt__(self, other: Any) -> bool:  # (x < high is asked as high > x first)
            for sub in values._lists:
                sub.clear()
            values._lists.clear()
            return True

    try:  # no crash: what was found before, or IndexError (Python's list)
        found = between(values, _Fails(5), _Clears(30))
    except IndexError:
        found = []
    assert all(isinstance(x, _Fails) for x in found) and len(found) <= 1


@pytest.mark.parametrize("insert", INSERTS)
@pytest.mark.parametrize("load", [4, 8, 1000])
def test_insert_is_what_add_does(insert: Callable[..., None], load: int) -> None:
    rng = random.Random(load)
    for _ in range(40):
        mine, theirs = SortedList(), SortedList()
        mine._reset(load)
        theirs._reset(load)
        for _ in range(rng.randrange(0, 300)):
            if rng.random() < 0.05 and len(mine):  # builds the position index
                assert mine[len(mine) // 2] == theirs[len(theirs) // 2]
            value = rng.randrange(100)
            assert insert(mine, value) is None
            theirs.add(value)
            assert mine._lists == theirs._lists
            assert mine._maxes == theirs._maxes
            assert mine._index == theirs._index
            assert len(mine) == len(theirs)
        mine._check()


@pytest.mark.parametrize(
    ("edit", "probe", "count"),
    [
        *(pytest.param(p.values[0], 41, 1, id=f"insert-{p.id}") for p in INSERTS),
        *(pytest.param(p.values[0], 40, 0, id=f"remove-{p.id}") for p in REMOVES),
    ],
)
@pytest.mark.parametrize("after", [0, 1, 2, 5])
def test_an_insert_or_remove_whose_comparison_fails_changes_nothing(
    edit: Callable[..., None], probe: int, count: int, after: int
) -> None:
    """``sorted_insert`` of an absent element and ``sorted_remove`` of a held one whose
    comparisons raise part way leave the list as it was; done again, they do their edit."""
    values = SortedList(_Fails(n) for n in range(0, 80, 2))
    values._reset(4)
    before = [list(sub) for sub in values._lists], list(values._maxes), len(values)
    _Fails.armed = after
    try:
        with pytest.raises(ArithmeticError):
            edit(values, _Fails(probe))
    finally:
        _Fails.armed = -1
    assert ([list(sub) for sub in values._lists], list(values._maxes), len(values)) == before
    edit(values, _Fails(probe))
    assert [x.n for x in values].count(probe) == count
    values._check()


@pytest.mark.parametrize("remove", REMOVES)
@pytest.mark.parametrize("load", [4, 8, 1000])
def test_remove_is_what_remove_does(remove: Callable[..., None], load: int) -> None:
    rng = random.Random(load)
    for _ in range(40):
        start = [rng.randrange(100) for _ in range(rng.randrange(0, 300))]
        mine, theirs = SortedList(start), SortedList(start)
        mine._reset(load)
        theirs._reset(load)
        for _ in range(rng.randrange(0, 400)):
            if rng.random() < 0.05 and len(mine):  # builds the position index
                assert mine[len(mine) // 2] == theirs[len(theirs) // 2]
            if rng.random() < 0.3:  # keeps the list from emptying at once
                value = rng.randrange(100)
                mine.add(value)
                theirs.add(value)
                continue
            value = rng.randrange(-2, 102)
            if value in theirs:
                assert remove(mine, value) is None
                theirs.remove(value)
            else:
                with pytest.raises(ValueError, match="not in list"):
                    remove(mine, value)
            assert mine._lists == theirs._lists
            assert mine._maxes == theirs._maxes
            assert mine._index == theirs._index
            assert len(mine) == len(theirs)
        mine._check()


@pytest.mark.parametrize("remove", REMOVES)
def test_remove_from_an_empty_list_or_past_its_end(remove: Callable[..., None]) -> None:
    values = SortedList()
    with pytest.raises(ValueError, match="0 not in list"):
        remove(values, 0)
    values.update([1, 5])
    with pytest.raises(ValueError, match="9 not in list"):
        remove(values, 9)
    with pytest.raises(ValueError, match="3 not in list"):
        remove(values, 3)
    assert list(values) == [1, 5]


@pytest.mark.parametrize("load", [4, 8, 1000])
def test_dropping_the_front_is_what_deleting_the_slice_does(load: int) -> None:
    from objectspace.collections.sorted_set import drop_front

    rng = random.Random(load)
    for _ in range(300):
        values = sorted(rng.randrange(1000) for _ in range(rng.randrange(0, 200)))
        mine, theirs = SortedList(values), SortedList(values)
        mine._reset(load)
        theirs._reset(load)
        if rng.random() < 0.5 and len(mine):  # a built position index
            assert mine[len(mine) // 2] == theirs[len(theirs) // 2]
        n = rng.randrange(0, len(values) + 1)
        drop_front(mine, n)
        del theirs[:n]
        assert list(mine) == list(theirs) and len(mine) == len(theirs)
        mine._check()
        if len(mine):
            assert mine[len(mine) // 2] == theirs[len(theirs) // 2]
        mine.add(500)
        theirs.add(500)
        assert list(mine) == list(theirs)
        mine._check()
