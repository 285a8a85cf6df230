"""Dict keys and set elements: Python-equal keys are one stored key, dicts restore in
insertion order, and a key that cannot be encoded never blocks a checkpoint.

Every storage backend for the behaviour a restore depends on (``any_storage_url``), the
rest on a :class:`~objectspace.MemoryStore` with each serializer.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import objectspace as osp
from objectspace.checkpoint import Operator
from objectspace.inspection import diff_checkpoints, entries
from objectspace.tables import DictReader

SERIALIZERS = [osp.MsgpackSerializer(), osp.JsonSerializer(), osp.PickleSerializer()]
SER_IDS = [s.name for s in SERIALIZERS]

UTC = dt.UTC
PLUS2 = dt.timezone(dt.timedelta(hours=2))

# Pairs of keys that Python treats as one key, the first spelling first.
EQUAL_SPELLINGS: list[tuple[Any, Any]] = [
    (0.0, -0.0),
    (0, 0.0),
    (0, False),
    (1, 1.0),
    (True, 1),
    (1.0, True),
    (frozenset({1, 2, 3}), frozenset({3, 2, 1.0})),
    (frozenset([1, 9]), frozenset([9, 1])),  # equal, iterating in another order
    (dt.datetime(2024, 5, 1, 12, tzinfo=UTC), dt.datetime(2024, 5, 1, 14, tzinfo=PLUS2)),
    (dt.datetime(2024, 5, 1, 14, tzinfo=PLUS2), dt.datetime(2024, 5, 1, 12, tzinfo=UTC)),
    ((1, 2.0), (1.0, 2)),
    (("a", True, (0.0,)), ("a", 1, (-0.0,))),
    ((frozenset({1}), 2), (frozenset({1.0}), 2.0)),
    (1e300, int(1e300)),
]
SPELLING_IDS = [f"{a!r}~{b!r}"[:60] for a, b in EQUAL_SPELLINGS]


def ordered(pair: tuple[Any, Any]) -> bool:
    """Whether the pair can be keys of a sorted collection (mutually comparable)."""
    return not isinstance(pair[0], frozenset | tuple)


def spelled(items: Any) -> list[tuple[type, Any]]:
    """Items with each key's type, so ``True`` and ``1`` differ."""
    return [(type(k), k, v) for k, v in items]


def reload(space: osp.ObjectSpace, store: osp.Store) -> osp.ObjectSpace:
    return osp.ObjectSpace.load(store.reader(), space.serializer)


# -- versioned storage on every backend ----------------------------------------------------------


class Versioned:
    """One operator of one key group on a storage URL: edit, checkpoint, restore."""

    def __init__(self, url: str) -> None:
        self.storage = osp.open_storage(url)
        self.job = self.storage.job(f"job-{uuid.uuid4().hex[:8]}")
        self.op: Operator = self.job.operator("o", max_key_groups=1)
        self.inst = self.op.instance(0, 1)
        self.checkpoint = 0

    @property
    def space(self) -> osp.ObjectSpace:
        return self.inst.space(0)

    def commit(self) -> None:
        self.checkpoint += 1
        receipt = self.inst.save(self.checkpoint)
        assert self.job.commit(self.checkpoint, [receipt]) is True
        self.inst.on_saved()

    def restored(self) -> osp.ObjectSpace:
        return self.op.instance(0, 1, checkpoint=self.checkpoint).space(0)

    def close(self) -> None:
        self.storage.close()


@pytest.fixture
def versioned(any_storage_url: str) -> Iterator[Versioned]:
    v = Versioned(any_storage_url)
    yield v
    v.close()


def test_equal_spellings_are_one_key_on_every_backend(versioned: Versioned) -> None:
    """Update and delete through another spelling reach the stored row, on every backend."""
    space = versioned.space
    updated = space.create_dict("updated")
    deleted = space.create_dict("deleted")
    members = space.create_set("members")
    gone = space.create_set("gone")
    for i, (a, _) in enumerate(EQUAL_SPELLINGS):
        updated[(i, a)] = "old"
        deleted[(i, a)] = "old"
        members.add((i, a))
        gone.add((i, a))
    # One sorted collection per pair: datetimes and numbers do not compare.
    pairs = list(filter(ordered, EQUAL_SPELLINGS))
    for i, (a, _) in enumerate(pairs):
        space.create_sorted_dict(f"sorted_dict{i}")[a] = "old"
        space.create_sorted_set(f"sorted_gone{i}").add(a)
    versioned.commit()
    for i, (_, b) in enumerate(EQUAL_SPELLINGS):
        updated[(i, b)] = "new"
        del deleted[(i, b)]
        members.discard((i, b))
        members.add((i, b))
        gone.discard((i, b))
    for i, (_, b) in enumerate(pairs):
        space.get_sorted_dict(f"sorted_dict{i}")[b] = "new"
        space.get_sorted_set(f"sorted_gone{i}").discard(b)
    versioned.commit()

    back = versioned.restored()
    assert spelled(back.get_dict("updated").items()) == spelled(updated.items())
    assert len(back.get_dict("deleted")) == 0
    assert sorted(map(repr, back.get_set("members"))) == sorted(map(repr, members))
    assert len(back.get_set("gone")) == 0
    for i, (a, _) in enumerate(pairs):
        assert spelled(back.get_sorted_dict(f"sorted_dict{i}").items()) == [(type(a), a, "new")]
        assert len(back.get_sorted_set(f"sorted_gone{i}")) == 0


def test_dict_restores_in_insertion_order_on_every_backend(versioned: Versioned) -> None:
    """Insertion order, an update keeping its place, a re-insert moving to the end."""
    d = versioned.space.create_dict("d")
    for key in ["m", "c", 30, "a", 10, (2, "z"), b"q", 20]:
        d[key] = key
    versioned.commit()
    d["c"] = "updated in place"
    del d[30]
    d[30] = "moved to the end"
    d.pop("a")
    d["new"] = 1
    versioned.commit()
    del d["m"]
    d["m"] = "back at the end"
    versioned.commit()

    back = versioned.restored().get_dict("d")
    assert list(back.items()) == list(d.items())
    assert next(iter(back)) == next(iter(d)) == "c"


@pytest.mark.parametrize("ser", SERIALIZERS, ids=SER_IDS)
@pytest.mark.parametrize("kind", list(osp.CheckpointKind))
def test_insertion_order_survives_full_checkpoints_and_clears(
    ser: osp.Serializer, kind: osp.CheckpointKind, tmp_path: Any
) -> None:
    store = osp.SQLiteStore(tmp_path / "state.db")  # reads rows in key order
    space = osp.ObjectSpace(ser)
    d = space.create_dict("d")
    for key in [5, 3, 9, 1]:
        d[key] = key
    space.checkpoint(store, kind)
    d.clear()
    for key in [7, 2, 8]:
        d[key] = key
    space.checkpoint(store, kind)
    del d[7]
    d[7] = "end"
    d[2] = "kept"
    space.checkpoint(store, kind)
    back = reload(space, store).get_dict("d")
    assert list(back.items()) == [(2, "kept"), (8, 8), (7, "end")]
    # The restored dict keeps numbering insertions after the stored ones.
    back[1] = "last"
    del back[2]
    back[2] = "very last"
    again = reload(back._space, _saved(back._space)).get_dict("d")  # type: ignore[arg-type]
    assert list(again.items()) == [(8, 8), (7, "end"), (1, "last"), (2, "very last")]
    store.close()


def _saved(space: osp.ObjectSpace) -> osp.MemoryStore:
    store = osp.MemoryStore()
    space.checkpoint(store, osp.CheckpointKind.FULL)
    return store


def test_evicting_the_oldest_key_behaves_the_same_after_a_restore(tmp_path: Any) -> None:
    """An LRU-ish cache that drops ``next(iter(d))`` drops the same key after a restore."""
    store = osp.SQLiteStore(tmp_path / "state.db")
    space = osp.ObjectSpace()
    cache = space.create_dict("cache")
    for key in ["z", "y", "x"]:
        cache[key] = 0
    space.checkpoint(store)
    back = reload(space, store).get_dict("cache")
    for d in (cache, back):
        del d[next(iter(d))]
    assert list(back) == list(cache) == ["y", "x"]
    store.close()


# -- spellings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("ser", SERIALIZERS, ids=SER_IDS)
@pytest.mark.parametrize(("a", "b"), EQUAL_SPELLINGS, ids=SPELLING_IDS)
def test_update_through_another_spelling_reaches_the_row(
    ser: osp.Serializer, a: Any, b: Any
) -> None:
    store = osp.MemoryStore()
    space = osp.ObjectSpace(ser)
    d = space.create_dict("d")
    s = space.create_set("s")
    d[a] = 1
    s.add(a)
    space.checkpoint(store)
    d[b] = 2  # Python keeps the key a
    space.checkpoint(store)
    back = reload(space, store)
    assert spelled(back.get_dict("d").items()) == [(type(a), a, 2)]
    assert [type(x) for x in back.get_set("s")] == [type(a)]
    rows = store.dump()["state/item/d/items"]
    assert len(rows) == 1


@pytest.mark.parametrize("ser", SERIALIZERS, ids=SER_IDS)
@pytest.mark.parametrize(("a", "b"), EQUAL_SPELLINGS, ids=SPELLING_IDS)
def test_delete_through_another_spelling_stays_deleted(ser: osp.Serializer, a: Any, b: Any) -> None:
    store = osp.MemoryStore()
    space = osp.ObjectSpace(ser)
    d = space.create_dict("d")
    s = space.create_set("s")
    d[a] = 1
    s.add(a)
    space.checkpoint(store)
    del d[b]
    s.discard(b)
    space.checkpoint(store)
    back = reload(space, store)
    assert dict(back.get_dict("d")) == {}
    assert set(back.get_set("s")) == set()


@pytest.mark.parametrize("ser", SERIALIZERS, ids=SER_IDS)
def test_reinserting_with_another_spelling_restores_that_spelling(ser: osp.Serializer) -> None:
    store = osp.MemoryStore()
    space = osp.ObjectSpace(ser)
    d = space.create_dict("d")
    s = space.create_set("s")
    sd = space.create_sorted_dict("sd")
    ss = space.create_sorted_set("ss")
    for obj in (d, sd):
        obj[True] = "t"
    for obj in (s, ss):
        obj.add(True)
    space.checkpoint(store)
    for obj in (d, sd):
        del obj[1]
        obj[1.0] = "f"
        obj[1] = "i"  # an update: the key stays 1.0
    for obj in (s, ss):
        obj.discard(1)
        obj.add(1.0)
        obj.add(1)  # already there: the element stays 1.0
    space.checkpoint(store)
    back = reload(space, store)
    for oid in ("d", "sd"):
        assert spelled(back.get(oid).items()) == [(float, 1.0, "i")]  # type: ignore[attr-defined]
    for oid in ("s", "ss"):
        assert [type(x) for x in back.get(oid)] == [float]  # type: ignore[attr-defined]
    # And back to an int after a clear.
    d.clear()
    d[1] = "int"
    s.clear()
    s.add(1)
    space.checkpoint(store)
    back = reload(space, store)
    assert spelled(back.get_dict("d").items()) == [(int, 1, "int")]
    assert [type(x) for x in back.get_set("s")] == [int]


def test_nan_keys_are_refused_and_removing_them_unblocks() -> None:
    store = osp.MemoryStore()
    space = osp.ObjectSpace()
    d = space.create_dict("d")
    nan = float("nan")
    d[nan] = 1
    d["ok"] = 2
    with pytest.raises(osp.SerializationError, match="NaN"):
        space.checkpoint(store)
    del d[nan]
    space.checkpoint(store)
    assert dict(reload(space, store).get_dict("d")) == {"ok": 2}


# -- unencodable keys and values ---------------------------------------------------------------


def _unencodable(ser: osp.Serializer) -> Any:
    # A key that the serializer cannot encode (pickle: a lambda).
    return (lambda: 0) if isinstance(ser, osp.PickleSerializer) else object()


@pytest.mark.parametrize("ser", SERIALIZERS, ids=SER_IDS)
def test_a_removed_unencodable_key_never_blocks_a_checkpoint(ser: osp.Serializer) -> None:
    store = osp.MemoryStore()
    space = osp.ObjectSpace(ser)
    d = space.create_dict("d")
    s = space.create_set("s")
    sd = space.create_sorted_dict("sd")
    ss = space.create_sorted_set("ss")
    d["kept"] = 1
    s.add("kept")
    space.checkpoint(store)
    bad = _unencodable(ser)
    d[bad] = 1
    del d[bad]
    s.add(bad)
    s.discard(bad)
    if not isinstance(ser, osp.PickleSerializer):
        sd[decimal.Decimal("1.5")] = 1  # orderable, but msgpack and JSON cannot encode it
        sd.pop(decimal.Decimal("1.5"))
        ss.add(decimal.Decimal("2.5"))
        ss.discard(decimal.Decimal("2.5"))
    space.checkpoint(store)
    space.checkpoint(store)
    back = reload(space, store)
    assert dict(back.get_dict("d")) == {"kept": 1}
    assert set(back.get_set("s")) == {"kept"}


@pytest.mark.parametrize("ser", SERIALIZERS, ids=SER_IDS)
def test_a_failed_save_then_removing_the_unencodable_key_saves(ser: osp.Serializer) -> None:
    store = osp.MemoryStore()
    space = osp.ObjectSpace(ser)
    d = space.create_dict("d")
    s = space.create_set("s")
    space.checkpoint(store)
    bad = _unencodable(ser)
    d[bad] = 1
    d["x"] = 2
    with pytest.raises(osp.SerializationError, match="'d'"):
        space.checkpoint(store)
    del d[bad]
    s.add(bad)
    with pytest.raises(osp.SerializationError, match="'s'"):
        space.checkpoint(store)
    s.discard(bad)
    space.checkpoint(store)
    back = reload(space, store)
    assert dict(back.get_dict("d")) == {"x": 2}
    assert set(back.get_set("s")) == set()


@pytest.mark.parametrize("ser", SERIALIZERS, ids=SER_IDS)
def test_an_unencodable_value_replaced_or_removed_saves(ser: osp.Serializer) -> None:
    """Values of every kind: a save fails while one is live, and succeeds once it is gone."""
    store = osp.MemoryStore()
    space = osp.ObjectSpace(ser)
    objects = {
        "value": space.create_value("value", 0),
        "array": space.create_array("array", 2, 0),
        "list": space.create_list("list"),
        "queue": space.create_queue("queue"),
        "stack": space.create_stack("stack"),
        "linked": space.create_linked_list("linked"),
        "dict": space.create_dict("dict"),
    }
    space.checkpoint(store)
    bad = _unencodable(ser)
    objects["value"].value = bad  # type: ignore[attr-defined]
    objects["array"][1] = bad  # type: ignore[index]
    objects["list"].append(bad)  # type: ignore[attr-defined]
    objects["queue"].enqueue(bad)  # type: ignore[attr-defined]
    objects["stack"].push(bad)  # type: ignore[attr-defined]
    objects["linked"].append(bad)  # type: ignore[attr-defined]
    objects["dict"]["k"] = bad  # type: ignore[index]
    with pytest.raises(osp.SerializationError):
        space.checkpoint(store)
    objects["value"].value = 1  # type: ignore[attr-defined]
    objects["array"][1] = 1  # type: ignore[index]
    objects["list"].pop()  # type: ignore[attr-defined]
    objects["queue"].dequeue()  # type: ignore[attr-defined]
    objects["stack"].pop()  # type: ignore[attr-defined]
    objects["linked"].pop()  # type: ignore[attr-defined]
    objects["dict"]["k"] = 1  # type: ignore[index]
    space.checkpoint(store)
    back = reload(space, store)
    assert back.get_value("value").value == 1
    assert list(back.get_array("array")) == [0, 1]
    assert len(back.get_list("list")) == len(back.get_queue("queue")) == 0
    assert len(back.get_stack("stack")) == len(back.get_linked_list("linked")) == 0
    assert dict(back.get_dict("dict")) == {"k": 1}


# -- the layout before canonical keys ----------------------------------------------------------


def _old_layout(ser: osp.Serializer) -> dict[str, dict[bytes, bytes]]:
    """Rows as the code before canonical keys wrote them: each key under its own
    encoding, a dict row's value just the encoded value, a set row's value ``b""``."""
    dumps = ser.dumps
    return {
        "state/index": {
            b"d": dumps({"kind": "Dict"}),
            b"s": dumps({"kind": "Set"}),
            b"sd": dumps({"kind": "SortedDict"}),
            b"ss": dumps({"kind": "SortedSet"}),
        },
        "state/item/d/items": {dumps(k): dumps(v) for k, v in [("b", 1), (1.0, "f"), ("a", 3)]},
        "state/item/s/items": {dumps(k): b"" for k in ["x", True, (1, 2.0)]},
        "state/item/sd/items": {dumps(k): dumps(v) for k, v in [(2.0, "two"), (1, "one")]},
        "state/item/ss/items": {dumps(k): b"" for k in [3, 0.0]},
    }


@pytest.mark.parametrize("ser", SERIALIZERS, ids=SER_IDS)
def test_state_in_the_old_layout_loads_and_keeps_working(ser: osp.Serializer) -> None:
    old = _old_layout(ser)
    space = osp.ObjectSpace.load(DictReader(old), ser)
    d, s = space.get_dict("d"), space.get_set("s")
    sd, ss = space.get_sorted_dict("sd"), space.get_sorted_set("ss")
    assert spelled(d.items()) == [(str, "b", 1), (float, 1.0, "f"), (str, "a", 3)]
    assert sorted(map(repr, s)) == sorted(map(repr, ["x", True, (1, 2.0)]))
    assert spelled(sd.items()) == [(int, 1, "one"), (float, 2.0, "two")]
    assert list(ss) == [0.0, 3]

    # Edits through other spellings, on a store holding the old rows.
    store = osp.MemoryStore()
    writer = store.writer(osp.CheckpointKind.DIFFERENTIAL)
    for table, rows in old.items():
        writer.put_many(table, rows.items())
    writer.commit()
    space = osp.ObjectSpace.load(store.reader(), ser)
    d, s = space.get_dict("d"), space.get_set("s")
    sd, ss = space.get_sorted_dict("sd"), space.get_sorted_set("ss")
    del d[1]
    d["b"] = 10
    d["c"] = 4
    s.discard(1)
    s.discard((1.0, 2))
    del sd[2]
    ss.discard(0)
    space.checkpoint(store)
    back = osp.ObjectSpace.load(store.reader(), ser)
    assert list(back.get_dict("d").items()) == [("b", 10), ("a", 3), ("c", 4)]
    assert set(back.get_set("s")) == {"x"}
    assert dict(back.get_sorted_dict("sd")) == {1: "one"}
    assert list(back.get_sorted_set("ss")) == [3]


# -- inspection --------------------------------------------------------------------------------


def test_diff_and_export_match_keys_by_their_stored_encoding() -> None:
    v = Versioned(f"memory://keys-{uuid.uuid4().hex}")
    try:
        d = v.space.create_dict("d")
        d[True] = "same"
        d["z"] = 1
        d["a"] = 2
        v.commit()
        del d[1]
        d[1.0] = "same"  # the same key and value, another spelling
        d["a"] = 3
        v.commit()
        data = diff_checkpoints(v.op, 1, 2)
        (change,) = data["objects"]
        assert change["slots"] == [{"slot": "a", "change": "changed", "old": 2, "new": 3}]
        exported = list(entries(v.restored().get_dict("d")))
        assert sorted(exported) == sorted([("1.0", '"same"'), ('"z"', "1"), ('"a"', "3")])
    finally:
        v.close()


# -- a random walk of spellings against a plain dict -------------------------------------------

SPELLINGS = st.sampled_from(
    [
        0,
        0.0,
        -0.0,
        False,
        1,
        1.0,
        True,
        2,
        "a",
        frozenset({1, 2}),
        frozenset({2.0, True}),
        dt.datetime(2024, 1, 1, tzinfo=UTC),
        dt.datetime(2024, 1, 1, 3, tzinfo=dt.timezone(dt.timedelta(hours=3))),
    ]
)
KEYS = st.one_of(SPELLINGS, st.tuples(SPELLINGS, SPELLINGS))
DIFF = osp.CheckpointKind.DIFFERENTIAL
ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, st.integers(0, 9)),
        st.tuples(st.just("del"), KEYS),
        st.tuples(st.just("add"), KEYS),
        st.tuples(st.just("discard"), KEYS),
        st.tuples(st.just("checkpoint"), st.sampled_from(list(osp.CheckpointKind))),
        st.just(("clear",)),
        st.just(("failed commit",)),
    ),
    max_size=40,
)


@pytest.mark.parametrize("ser", SERIALIZERS, ids=SER_IDS)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=ACTIONS)
@example(actions=[("set", True, 1), ("add", 0.0), ("checkpoint", DIFF), ("del", 1), ("discard", 0)])
@example(actions=[("set", "b", 1), ("set", "a", 2), ("checkpoint", DIFF), ("set", 0, 3)])
def test_random_spellings_reload_equal_to_the_live_dict_and_set(
    ser: osp.Serializer, actions: list[tuple[Any, ...]]
) -> None:
    store = osp.MemoryStore()
    space = osp.ObjectSpace(ser)
    d = space.create_dict("d")
    s = space.create_set("s")
    sd = space.create_sorted_dict("sd")  # numbers only: they compare
    model: dict[Any, Any] = {}
    model_set: set[Any] = set()

    def check() -> None:
        back = reload(space, store)
        assert spelled(back.get_dict("d").items()) == spelled(d.items()) == spelled(model.items())
        assert spelled(back.get_sorted_dict("sd").items()) == spelled(sd.items())
        got = {(type(x), repr(x)) for x in back.get_set("s")}
        assert got == {(type(x), repr(x)) for x in s} == {(type(x), repr(x)) for x in model_set}

    for action in actions:
        if action[0] == "set":
            d[action[1]] = model[action[1]] = action[2]
            if isinstance(action[1], int | float):
                sd[action[1]] = action[2]
        elif action[0] == "del":
            if action[1] in model:
                del d[action[1]]
                del model[action[1]]
            sd.pop(action[1], None)
        elif action[0] == "add":
            s.add(action[1])
            model_set.add(action[1])
        elif action[0] == "discard":
            s.discard(action[1])
            model_set.discard(action[1])
        elif action[0] == "failed commit":
            writer = store.writer(DIFF)
            space.save(writer)
            writer.rollback()  # no on_saved: the next save writes these edits again
        elif action[0] == "clear":
            d.clear()
            sd.clear()
            model.clear()
            s.clear()
            model_set.clear()
        else:
            space.checkpoint(store, action[1])
            check()
    space.checkpoint(store)
    check()
