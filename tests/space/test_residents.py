"""A backed space between uses: objects evicted, plain values kept as values."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from objectspace import MemoryStore, ObjectSpace
from objectspace.residents import COMPACT_BYTES


class _Kept:
    """A backing that holds the tables a store committed (what a local store holds once
    the saves are acknowledged)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def _tables(self) -> dict[str, dict[bytes, bytes]]:
        return self.store.dump()  # type: ignore[no-any-return]

    def fetch(self, object_id: str) -> tuple[bytes, dict[str, dict[bytes, bytes]]] | None:
        tables = self._tables()
        kind = tables.get("state/index", {}).get(object_id.encode())
        if kind is None:
            return None
        prefix = f"state/item/{object_id}/"
        return kind, {t: rows for t, rows in tables.items() if t.startswith(prefix)}

    def ids(self, prefix: str = "") -> Iterator[str]:
        for raw in self._tables().get("state/index", {}):
            if raw.decode().startswith(prefix):
                yield raw.decode()

    def rows(self) -> Iterator[tuple[str, str, bytes, bytes]]:
        return iter(())


def _space() -> tuple[ObjectSpace, MemoryStore]:
    store = MemoryStore()
    space = ObjectSpace(backing=_Kept(store))
    return space, store


VALUES: list[Any] = [1.5, 7, "text", b"raw", True, None]


def test_plain_values_stay_as_values_between_uses() -> None:
    space, store = _space()
    for i, value in enumerate(VALUES):
        space.create_value(f"v{i}", value)
    space.create_value("boxed", [1, 2])  # not a plain value: evicted whole
    space.create_dict("d")["a"] = 1
    space.checkpoint(store)
    residents = space.residents
    assert residents is not None
    before = residents.nbytes()
    assert residents.evict(100) == len(VALUES) + 2
    assert residents.count() == 0
    assert list(residents.compact) == [f"v{i}" for i in range(len(VALUES))]
    assert residents.nbytes() == COMPACT_BYTES * len(VALUES) < before
    loaded = residents.loaded
    for i, value in enumerate(VALUES):
        obj = space.get(f"v{i}")
        assert obj.value == value and type(obj.value) is type(value)  # type: ignore[attr-defined]
        assert not space.is_dirty
    assert residents.loaded == loaded  # none read from the backing
    assert space.get("boxed").value == [1, 2]  # type: ignore[attr-defined]
    assert residents.loaded == loaded + 1
    assert not residents.compact
    assert sorted(space.ids()) == sorted([*(f"v{i}" for i in range(len(VALUES))), "boxed", "d"])


def test_an_edit_after_a_compact_stay_is_saved() -> None:
    space, store = _space()
    space.create_value("a", 1.0)
    space.checkpoint(store)
    residents = space.residents
    assert residents is not None
    residents.evict(10)
    space.get("a").value = 2.0  # type: ignore[attr-defined]
    assert space.is_dirty
    space.checkpoint(store)
    assert ObjectSpace.load(store.reader()).get("a").value == 2.0  # type: ignore[attr-defined]


def test_a_deleted_value_leaves_the_compact_values() -> None:
    space, store = _space()
    space.create_value("a", 1.0)
    space.create_value("b", 2.0)
    space.checkpoint(store)
    residents = space.residents
    assert residents is not None
    residents.evict(10)
    space.delete("a")
    assert "a" not in residents.compact
    assert "a" not in space
    with pytest.raises(KeyError):
        space.get("a")
    assert residents.drop_compact(5) == 1  # b, the only one left
    assert space.get("b").value == 2.0  # type: ignore[attr-defined]  (from the backing)


def test_drop_compact_forgets_the_oldest_first() -> None:
    space, store = _space()
    for i in range(10):
        space.create_value(f"v{i}", float(i))
    space.checkpoint(store)
    residents = space.residents
    assert residents is not None
    residents.evict(10)
    assert residents.drop_compact(4) == 4
    assert list(residents.compact) == [f"v{i}" for i in range(4, 10)]
    assert residents.drop_compact(0) == 0
    assert residents.drop_compact(-3) == 0


def test_compact_values_keeps_acknowledged_plain_values_as_values() -> None:
    space, store = _space()
    for i, value in enumerate(VALUES):
        space.create_value(f"v{i}", value)
    space.create_value("boxed", [1, 2])  # not a plain value: stays an object
    space.create_dict("d")["a"] = 1
    residents = space.residents
    assert residents is not None
    assert residents.compact_values() == 0  # every edit unsaved: nothing leaves
    space.checkpoint(store)
    space.get_value("v0").value = 2.5  # edited again: stays
    detached = space.get("v1")
    assert residents.compact_values() == len(VALUES) - 1
    assert list(residents.compact) == [f"v{i}" for i in range(1, len(VALUES))]
    assert sorted(space._objects) == ["boxed", "d", "v0"]
    assert detached._space is None
    loaded = residents.loaded
    for i, value in enumerate(VALUES[1:], start=1):
        obj = space.get(f"v{i}")
        assert obj.value == value and type(obj.value) is type(value)  # type: ignore[attr-defined]
    assert residents.loaded == loaded  # none read from the backing
    space.get("v3").value = b"new"  # type: ignore[attr-defined]
    space.checkpoint(store)
    restored = ObjectSpace.load(store.reader())
    assert restored.get("v0").value == 2.5  # type: ignore[attr-defined]
    assert restored.get("v3").value == b"new"  # type: ignore[attr-defined]
    assert restored.get("v1").value == 7  # type: ignore[attr-defined]


def test_large_plain_values_are_not_kept_as_values() -> None:
    """A value's bytes between uses are counted as COMPACT_BYTES: only small ones qualify,
    a large str or bytes leaves memory whole (the backing keeps it)."""
    space, store = _space()
    large: list[Any] = ["x" * 1000, b"y" * 1000]
    for i, value in enumerate(large):
        space.create_value(f"big{i}", value)
    space.create_value("small", "x" * 15)
    space.checkpoint(store)
    residents = space.residents
    assert residents is not None
    assert residents.compact_values() == 1
    assert list(residents.compact) == ["small"]
    assert residents.count() == len(large)
    assert residents.evict(10) == len(large)
    assert list(residents.compact) == ["small"]  # evicted whole, not kept as values
    for i, value in enumerate(large):
        assert space.get_value(f"big{i}").value == value  # from the backing


class _Counting(_Kept):
    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.asked: list[str] = []

    def fetch(self, object_id: str) -> tuple[bytes, dict[str, dict[bytes, bytes]]] | None:
        self.asked.append(object_id)
        return super().fetch(object_id)


def test_an_id_the_backing_lacks_is_asked_for_once_across_saves() -> None:
    """An operator asks for the same absent id batch after batch (state older stores kept):
    the backing is asked once, across saves and evictions, until the id is created; the
    ids remembered are bounded (ABSENT_KEPT), forgotten at the save past it."""
    from objectspace.residents import ABSENT_KEPT

    store = MemoryStore()
    backing = _Counting(store)
    space = ObjectSpace(backing=backing)
    residents = space.residents
    assert residents is not None
    for _ in range(3):
        assert "k/legacy" not in space
        if "k/v" not in space:
            space.create_value("k/v", 1.0)
        space.checkpoint(store)
        residents.evict(10)
    assert backing.asked.count("k/legacy") == 1
    space.create_dict("k/legacy")["a"] = 1  # created after it was absent: found after all
    space.checkpoint(store)
    residents.evict(10)
    assert "k/legacy" in space and dict(space.get_dict("k/legacy")) == {"a": 1}
    assert backing.asked.count("k/legacy") == 2  # loaded again after the eviction
    for i in range(ABSENT_KEPT + 1):
        assert f"gone/{i}" not in space
    space.checkpoint(store)  # past the bound: forgotten
    assert "gone/0" not in space
    assert backing.asked.count("gone/0") == 2
