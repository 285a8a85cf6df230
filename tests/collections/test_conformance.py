"""CPython's own conformance suites run against the persisted list, dicts and sets.

``test.list_tests``, ``test.mapping_tests`` and ``test.test_set`` are ``unittest`` classes
parametrised by the type they test; here that type is a subclass of a persisted type whose
constructor creates it in a fresh space (the persisted types are made by ``space.create_*``).
Tests of what a ``MutableSequence``/``MutableMapping``/``MutableSet`` need not do are skipped,
each with its reason. After every test, each object the test created that holds encodable
values is checkpointed into a ``MemoryStore`` and loaded back, and must equal its live self:
the suites then also look for edits that are live but not saved.
"""

from __future__ import annotations

import os
import subprocess
import sys
import unittest
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from test import list_tests, mapping_tests, test_set

import objectspace as osp
from objectspace.collections import (
    PersistedDict,
    PersistedList,
    PersistedSet,
    PersistedSortedDict,
    PersistedSortedSet,
    _impl,
)
from objectspace.errors import SerializationError

# Every persisted object created by the current test, with its space.
_CREATED: list[tuple[osp.ObjectSpace, Any]] = []


def _register(obj: Any, space: osp.ObjectSpace) -> None:
    space._add(obj)
    _CREATED.append((space, obj))


def _content(obj: Any) -> Any:
    if isinstance(obj, PersistedDict | PersistedSortedDict):
        return (
            sorted(obj.items(), key=repr) if isinstance(obj, PersistedDict) else list(obj.items())
        )
    if isinstance(obj, PersistedSet):
        return sorted(obj, key=repr)
    return list(obj)


def _check_saved() -> None:
    """Checkpoint and reload every object the test created: it must equal its live self."""
    created = list(_CREATED)
    _CREATED.clear()
    for space, obj in created:
        if obj._space is None:
            continue
        store = osp.MemoryStore()
        try:
            space.checkpoint(store)
        except SerializationError:
            continue  # holds values msgpack cannot encode (the suites' helper classes)
        loaded = osp.ObjectSpace.load(store.reader()).get(obj.id)
        assert _content(loaded) == _content(obj), (obj.id, _content(loaded), _content(obj))
        # A differential save after more edits goes through the edit pages again.
        space.checkpoint(store)


class _Checked(unittest.TestCase):
    def setUp(self) -> None:
        _CREATED.clear()
        super().setUp()

    def tearDown(self) -> None:
        super().tearDown()
        _check_saved()


def _skipping(cls: type, skips: dict[str, str]) -> type:
    """``cls`` with each test named in ``skips`` replaced by a skip giving its reason."""
    for name, reason in skips.items():
        assert hasattr(cls, name), name

        def skipped(self: unittest.TestCase, reason: str = reason) -> None:
            self.skipTest(reason)

        setattr(cls, name, skipped)
    return cls


# -- list ---------------------------------------------------------------------------------------


class ListUnderTest(PersistedList):
    """A persisted list that ``ListUnderTest(iterable)`` creates in a fresh space."""

    __slots__ = ()

    def __init__(self, iterable: Iterable[Any] = ()) -> None:
        space = osp.ObjectSpace()
        super().__init__(space, "l")
        _register(self, space)
        self.extend(iterable)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PersistedList):
            return self._data == other._data
        if isinstance(other, list):
            return self._data == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __lt__(self, other: Any) -> bool:
        return self._data < list(other)

    def __le__(self, other: Any) -> bool:
        return self._data <= list(other)

    def __gt__(self, other: Any) -> bool:
        return self._data > list(other)

    def __ge__(self, other: Any) -> bool:
        return self._data >= list(other)

    def __add__(self, other: Any) -> Any:
        # The suites build expected values with + and *: plain-list results wrapped again.
        return type(self)(self._data + list(other))

    def __radd__(self, other: Any) -> Any:
        return type(self)(list(other) + self._data)

    def __mul__(self, n: int) -> Any:
        return type(self)(self._data * n)

    __rmul__ = __mul__

    def copy(self) -> Any:
        return type(self)(self._data)


_LIST_SKIPS = {
    "test_init": "calling __init__ again re-creates the object in a new space",
    "test_repr": "the repr names the object id: <PersistedList 'l': [...]>",
    "test_imul": "*= is not a MutableSequence method (u *= n rebinds u to u * n)",
    "test_free_after_iterating": "the object's space (and this suite's check) hold it",
}


class PersistedListConformance(_Checked, list_tests.CommonTest):
    type2test = ListUnderTest


_skipping(PersistedListConformance, _LIST_SKIPS)


# -- dicts --------------------------------------------------------------------------------------


class _MappingInFreshSpace:
    """Makes ``Type(mapping_or_pairs, **kw)`` create a persisted dict in a fresh space."""

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        space = osp.ObjectSpace()
        super().__init__(space, "d")  # type: ignore[call-arg]
        _register(self, space)
        self.update(*args, **kwargs)  # type: ignore[attr-defined]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, dict | PersistedDict | PersistedSortedDict):
            return dict(self.items()) == dict(other.items())  # type: ignore[attr-defined]
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def copy(self) -> Any:
        return type(self)(self)


class DictUnderTest(_MappingInFreshSpace, PersistedDict):
    __slots__ = ()


class SortedDictUnderTest(_MappingInFreshSpace, PersistedSortedDict):
    __slots__ = ()


_MAPPING_SKIPS = {
    "test_fromkeys": "fromkeys is a dict classmethod, not a MutableMapping one",
    "test_repr": "the repr names the object id",
}


def _mapping_suite(base: type, type2test: type, name: str, skips: dict[str, str]) -> type:
    cls = type(name, (_Checked, base), {"type2test": type2test})
    _skipping(cls, {k: v for k, v in skips.items() if hasattr(cls, k)})
    return cls


PersistedDictMappingConformance = _mapping_suite(
    mapping_tests.TestHashMappingProtocol,
    DictUnderTest,
    "PersistedDictMappingConformance",
    _MAPPING_SKIPS,
)


class _Orderable:
    """The reference data of the mapping suites with keys a sorted dict can order."""

    def _reference(self) -> dict[Any, Any]:
        return {"1": "2", "key1": "value1", "key2": (1, 2, 3)}


SortedDictMappingConformance = _mapping_suite(
    type("_SortedBase", (_Orderable, mapping_tests.TestMappingProtocol), {}),
    SortedDictUnderTest,
    "SortedDictMappingConformance",
    _MAPPING_SKIPS,
)


# -- sets ---------------------------------------------------------------------------------------


class _SetInFreshSpace:
    """Makes ``Type(iterable)`` create a persisted set in a fresh space."""

    __slots__ = ()

    def __init__(self, iterable: Iterable[Any] = ()) -> None:
        space = osp.ObjectSpace()
        super().__init__(space, "s")  # type: ignore[call-arg]
        _register(self, space)
        self.update(iterable)  # type: ignore[attr-defined]

    def copy(self) -> Any:
        return type(self)(self)


class SetUnderTest(_SetInFreshSpace, PersistedSet):
    __slots__ = ()


class SortedSetUnderTest(_SetInFreshSpace, PersistedSortedSet):
    __slots__ = ()


def _with_set(make: Callable[[Iterable[Any]], Any], base: type, name: str) -> type:
    """``base`` (a test_set class whose setUp makes ``self.set`` a ``set``) on ``make``."""

    def setUp(self: Any) -> None:
        _CREATED.clear()
        base.setUp(self)
        self.set = make(self.set)

    return type(name, (_Checked, base), {"setUp": setUp})


_BASIC_SKIPS = {"test_repr": "the repr names the object id"}
_SORTED_BASIC_SKIPS = {
    **_BASIC_SKIPS,
    "test_iteration": "sortedcontainers' iterator (itertools.chain) has no __length_hint__",
}

_UPDATE_SKIPS = {
    "test_intersection_method_call": "intersection_update() is a set method, not a MutableSet one",
    "test_sym_difference_method_call": "symmetric_difference_update() is not a MutableSet method",
    "test_difference_method_call": "difference_update() is a set method, not a MutableSet one",
}

_SUITES: dict[str, type] = {}
for _kind, _make in (("Set", SetUnderTest), ("SortedSet", SortedSetUnderTest)):
    for _base, _skips in (
        (test_set.TestBasicOpsEmpty, _BASIC_SKIPS),
        (test_set.TestBasicOpsSingleton, _BASIC_SKIPS),
        (test_set.TestBasicOpsTriple, _BASIC_SKIPS),
        (test_set.TestBasicOpsString, _BASIC_SKIPS),
        (test_set.TestBasicOpsBytes, _BASIC_SKIPS),
        (test_set.TestBinaryOps, {}),
        (test_set.TestUpdateOps, _UPDATE_SKIPS),
        (test_set.TestMutate, {}),
    ):
        if _kind == "SortedSet" and _skips is _BASIC_SKIPS:
            _skips = _SORTED_BASIC_SKIPS
        if _kind == "SortedSet" and _base is test_set.TestBasicOpsTriple:
            continue  # (0, "zero", operator.add): elements a sorted set cannot order
        _suite_name = f"{_kind}_{_base.__name__}"
        _cls = _with_set(_make, _base, _suite_name)
        _skipping(_cls, {k: v for k, v in _skips.items() if hasattr(_cls, k)})
        _SUITES[_suite_name] = _cls
globals().update(_SUITES)


# conftest.py runs these suites again in this process on a pure-Python copy of the collections
# ("tests/test_conformance.py[python]"), except the pickling tests: pickle finds classes by
# module name (the originals), so those run on the pure-Python classes in a subprocess.
def test_pure_python() -> None:
    """The pickling tests above on the pure-Python classes (``OBJECTSPACE_PURE_PYTHON=1``)."""
    if os.environ.get(_impl.PURE_PYTHON_ENV, "") not in ("", "0"):
        pytest.skip("this run already uses the pure-Python classes")
    env = dict(os.environ, **{_impl.PURE_PYTHON_ENV: "1"})
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__]
    cmd += ["-k", "pickl"]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run(
        cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]
