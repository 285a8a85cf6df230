"""Serializers: every supported value round-trips with its Python type, alone and in a space."""

from __future__ import annotations

import datetime as dt
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import objectspace as osp
from objectspace.serialization import (
    JsonSerializer,
    MsgpackSerializer,
    PickleSerializer,
    Serializer,
)

UTC = dt.UTC
IST = dt.timezone(dt.timedelta(hours=5, minutes=30))


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
    if isinstance(value, dt.datetime | dt.date):
        return (type(value).__name__, value.isoformat())
    return (type(value).__name__, value)


def assert_same(actual: Any, expected: Any) -> None:
    assert canon(actual) == canon(expected), (actual, expected)
    assert actual == expected


# Values every serializer round-trips (JSON refuses the infinities, tested separately).
ROUND_TRIP: dict[str, Any] = {
    "none": None,
    "true": True,
    "false": False,
    "zero": 0,
    "int64-min": -(2**63),
    "int64-max": 2**63 - 1,
    "float": 1.5,
    "negative-zero": -0.0,
    "float-big": 1.7976931348623157e308,
    "float-tiny": 5e-324,
    "str-empty": "",
    "str": "text ü 🙂 \x00",
    "bytes-empty": b"",
    "bytes": b"\x00\xff binary",
    "tuple-empty": (),
    "tuple": (1, "a", None),
    "list-empty": [],
    "list": [1, "a", 2.5, None, True],
    "dict-empty": {},
    "dict": {"a": 1, "b": [1, 2]},
    "dict-int-keys": {1: "x", -2: "y"},
    "dict-mixed-keys": {1: "int", "1": "str", b"1": "bytes"},
    "dict-tuple-keys": {(1, 2): "t", ("a", (b"b",)): "nested"},
    "dict-dollar-key": {"$tuple": [1, 2]},
    "datetime-naive": dt.datetime(2024, 2, 29, 23, 59, 58, 123456),
    "datetime-utc": dt.datetime(2024, 1, 1, 12, 0, tzinfo=UTC),
    "datetime-offset": dt.datetime(1999, 12, 31, 23, 0, 1, tzinfo=IST),
    "date": dt.date(2020, 1, 31),
    "tuple-of-tuples": ((1, 2), (3, (4,))),
    "tuple-holding-list": (1, [2, 3], {"k": "v"}),
    "list-of-tuples": [(1, 2), (3, 4)],
    "dict-of-tuples": {"a": (1,), "b": ("x", "y")},
    "list-of-datetimes": [dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 2, tzinfo=UTC)],
    "set-in-list": [{1, 2}, frozenset({"a"})],
    "nested": {
        "list": [1, (2, 3), {"x": b"y"}],
        (1, "k"): [None, True, [(), [()]]],
        "deep": {"deeper": {"deepest": (b"\x01", dt.date(2000, 1, 1))}},
    },
}

SERIALIZERS = {
    "msgpack": osp.MsgpackSerializer(),
    "json": osp.JsonSerializer(),
    "pickle": osp.PickleSerializer(),
}


@pytest.mark.parametrize("serializer", SERIALIZERS.values(), ids=SERIALIZERS.keys())
@pytest.mark.parametrize("value", ROUND_TRIP.values(), ids=ROUND_TRIP.keys())
def test_round_trip_keeps_the_type(serializer: osp.Serializer, value: Any) -> None:
    data = serializer.dumps(value)
    assert isinstance(data, bytes)
    assert_same(serializer.loads(data), value)
    assert serializer.dumps(value) == data  # deterministic


@pytest.mark.parametrize("serializer", SERIALIZERS.values(), ids=SERIALIZERS.keys())
def test_aware_datetime_keeps_its_offset(serializer: osp.Serializer) -> None:
    value = dt.datetime(2021, 6, 1, 8, 30, tzinfo=IST)
    back = serializer.loads(serializer.dumps(value))
    assert back == value
    assert back.utcoffset() == dt.timedelta(hours=5, minutes=30)
    naive = serializer.loads(serializer.dumps(dt.datetime(2021, 6, 1, 8, 30)))
    assert naive.tzinfo is None


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
@pytest.mark.parametrize("name", ["msgpack", "pickle"])
def test_infinities_round_trip_in_binary_serializers(name: str, value: float) -> None:
    serializer = SERIALIZERS[name]
    assert serializer.loads(serializer.dumps(value)) == value


@pytest.mark.parametrize("value", [float("nan"), float("inf"), [float("-inf")]])
def test_json_refuses_what_json_cannot_express(value: Any) -> None:
    with pytest.raises(osp.SerializationError):
        osp.JsonSerializer().dumps(value)


@pytest.mark.parametrize(
    "value",
    [2**64, -(2**63) - 1, 2**100, [1, 2**64], {"k": -(2**70)}],
    ids=["2**64", "-2**63-1", "2**100", "in-list", "in-dict"],
)
def test_msgpack_refuses_ints_beyond_64_bits(value: Any) -> None:
    with pytest.raises(osp.SerializationError):
        osp.MsgpackSerializer().dumps(value)


class Opaque:
    """An arbitrary object no serializer but pickle understands."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque)

    __hash__ = object.__hash__


@pytest.mark.parametrize("name", ["msgpack", "json"])
@pytest.mark.parametrize(
    "value",
    [object(), Opaque(), [1, Opaque()], {"k": object()}, {Opaque(): 1}, (1, object())],
    ids=["object", "opaque", "in-list", "in-dict", "as-key", "in-tuple"],
)
def test_arbitrary_objects_raise_serialization_error(name: str, value: Any) -> None:
    with pytest.raises(osp.SerializationError):
        SERIALIZERS[name].dumps(value)


def test_pickle_handles_arbitrary_objects_but_not_unpicklable_ones() -> None:
    serializer = osp.PickleSerializer()
    assert serializer.loads(serializer.dumps(Opaque())) == Opaque()
    with pytest.raises(osp.SerializationError):
        serializer.dumps(lambda: None)


BAD_BYTES = [
    ("msgpack", b""),
    ("msgpack", b"\xc1"),  # a type byte msgpack never uses
    ("msgpack", b"\x92\x01"),  # an array of two holding one value
    ("msgpack", b"\x01\x02"),  # two values where one is expected
    ("json", b""),
    ("json", b"{not json"),
    ("json", b"\xff\xfe"),
    ("pickle", b""),
    ("pickle", b"\x80\x05garbage"),
]


@pytest.mark.parametrize(("name", "data"), BAD_BYTES)
def test_undecodable_bytes_raise_serialization_error(name: str, data: bytes) -> None:
    with pytest.raises(osp.SerializationError):
        SERIALIZERS[name].loads(data)


def test_serializers_pickle_and_compare_by_type() -> None:
    for serializer in SERIALIZERS.values():
        copy = pickle.loads(pickle.dumps(serializer))
        assert copy == serializer and hash(copy) == hash(serializer)
        assert copy.loads(copy.dumps((1, "x"))) == (1, "x")
    assert osp.MsgpackSerializer() != osp.JsonSerializer()
    assert osp.JsonSerializer() != osp.PickleSerializer()


def test_equal_keys_encode_to_equal_bytes() -> None:
    for serializer in (osp.MsgpackSerializer(), osp.JsonSerializer()):
        assert serializer.dumps((1, "a")) == serializer.dumps((1, "a"))
        assert serializer.dumps("k") != serializer.dumps(b"k")
        assert serializer.dumps(1) != serializer.dumps("1")


# -- the same values, through a space saved to SQLite -------------------------------------------


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[osp.SQLiteStore]:
    store = osp.SQLiteStore(tmp_path / "values.db")
    yield store
    store.close()


@pytest.mark.parametrize("serializer", SERIALIZERS.values(), ids=SERIALIZERS.keys())
@pytest.mark.parametrize("value", ROUND_TRIP.values(), ids=ROUND_TRIP.keys())
def test_values_round_trip_through_a_space_in_sqlite(
    sqlite_store: osp.SQLiteStore, serializer: osp.Serializer, value: Any
) -> None:
    space = osp.ObjectSpace(serializer)
    space.create_value("value", value)
    space.create_list("list").extend([value, value])
    space.create_queue("queue").enqueue(value)
    space.create_dict("dict")["k"] = value
    space.checkpoint(sqlite_store)
    restored = osp.ObjectSpace.load(sqlite_store.reader(), serializer=type(serializer)())
    assert_same(restored.get_value("value").value, value)
    assert_same(list(restored.get_list("list")), [value, value])
    assert_same(list(restored.get_queue("queue")), [value])
    assert_same(restored.get_dict("dict")["k"], value)


@pytest.mark.parametrize("serializer", SERIALIZERS.values(), ids=SERIALIZERS.keys())
def test_every_value_at_once_through_sqlite_with_differential_edits(
    sqlite_store: osp.SQLiteStore, serializer: osp.Serializer
) -> None:
    space = osp.ObjectSpace(serializer)
    values = list(ROUND_TRIP.values())
    lst = space.create_list("all")
    space.checkpoint(sqlite_store)
    lst.extend(values)  # a differential checkpoint of the new slots
    d = space.create_dict("keys")
    for i, value in enumerate(values):
        try:
            hash(value)
        except TypeError:
            continue  # lists, dicts, sets, and tuples holding them
        d[value] = i
    space.checkpoint(sqlite_store)
    restored = osp.ObjectSpace.load(sqlite_store.reader(), serializer=type(serializer)())
    assert_same(list(restored.get_list("all")), values)
    assert_same(dict(restored.get_dict("keys")), dict(d.items()))


# -- property tests ---------------------------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(),
    st.binary(),
    st.datetimes(),
    st.datetimes(
        timezones=st.integers(-23 * 60 + 1, 23 * 60 - 1).map(
            lambda m: dt.timezone(dt.timedelta(minutes=m))
        )
    ),
    st.dates(),
)
HASHABLE = st.recursive(
    st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=5), st.binary(max_size=5)),
    lambda inner: st.lists(inner, max_size=3).map(tuple),
    max_leaves=5,
)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(HASHABLE, inner, max_size=4),
        st.dictionaries(st.text(max_size=4), inner, max_size=4),
    )


RECURSIVE = st.recursive(
    SCALARS | st.frozensets(st.integers(-(2**63), 2**63 - 1), max_size=3),
    _containers,
    max_leaves=12,
)


TUPLE_KEYS = st.recursive(
    st.one_of(
        st.integers(-(2**64), 2**64),
        st.floats(allow_nan=False),
        st.text(max_size=4),
        st.binary(max_size=4),
        st.none(),
        st.booleans(),
    ),
    lambda inner: st.lists(inner, max_size=4).map(tuple),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(TUPLE_KEYS | RECURSIVE)
def test_flat_tuples_encode_to_the_bytes_of_the_general_path(value: Any) -> None:
    """A tuple of flat values is packed by one per-thread packer (a save encodes millions of
    tuple keys); its bytes, as a value and as a key, must be those of the general path
    (a new packer per element), which stored state was written with."""
    import objectspace.serialization as ser

    fast = osp.MsgpackSerializer()
    general = osp.MsgpackSerializer()

    def both(encode: Any) -> tuple[Any, Any]:
        try:
            first: Any = encode(fast)
        except (TypeError, ValueError, OverflowError, osp.SerializationError) as exc:
            first = type(exc)
        saved = ser._FLAT_TYPES
        ser._FLAT_TYPES = frozenset()
        try:
            second: Any = encode(general)
        except (TypeError, ValueError, OverflowError, osp.SerializationError) as exc:
            second = type(exc)
        finally:
            ser._FLAT_TYPES = saved
        return first, second

    first, second = both(lambda s: s.dumps(value))
    assert first == second
    try:
        hash(value)
    except TypeError:
        return
    first, second = both(lambda s: s.encode_key(value))
    assert first == second
    try:
        raw: Any = fast.raw_encode_key(value)  # what a save uses: packs flat tuples itself
    except (TypeError, ValueError, OverflowError):
        raw = osp.SerializationError
    assert raw == second


def test_a_flat_tuple_key_keeps_its_stored_bytes() -> None:
    """The stored encoding of a tuple key (an extension value of the packed elements)."""
    serializer = osp.MsgpackSerializer()
    assert serializer.encode_key(("0/", 1700000000000)) == (
        b"\xc7\x0c\x01\xa20/\xcf\x00\x00\x01\x8b\xcf\xe5h\x00",
        True,
    )
    with pytest.raises(osp.SerializationError):
        serializer.dumps((1, 2**64))  # the packer resets after the error:
    assert serializer.dumps((1.5, True, None)) == b"\xc7\x0b\x01\xcb?\xf8" + bytes(6) + b"\xc3\xc0"


def test_a_save_encodes_flat_tuple_keys_of_every_length_as_encode_key_does() -> None:
    """A save packs a short tuple key's elements in one call (an array's bytes without its
    header) and a long one's one by one: the stored bytes are encode_key's either way."""
    serializer = osp.MsgpackSerializer()
    raw = serializer.raw_encode_key
    parts: list[Any] = ["0/", 1700000000000, -1, b"\x00b", None, "é" * 40, 2**63, -(2**63)]
    for n in range(0, 21):
        key = tuple(parts[i % len(parts)] for i in range(n))
        assert raw(key) == serializer.encode_key(key), n
    big = ("k", 2**64)  # beyond msgpack's ints: the general path's encoding
    assert raw(big) == serializer.encode_key(big)
    assert raw((1, 2)) == serializer.encode_key((1, 2))  # the packers reset after the error


@settings(max_examples=200, deadline=None)
@given(RECURSIVE)
def test_msgpack_round_trips_recursive_values(value: Any) -> None:
    serializer = osp.MsgpackSerializer()
    assert_same(serializer.loads(serializer.dumps(value)), value)


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        SCALARS.filter(lambda v: not (isinstance(v, float) and v in (float("inf"), float("-inf")))),
        _containers,
        max_leaves=12,
    )
)
def test_json_round_trips_recursive_values(value: Any) -> None:
    serializer = osp.JsonSerializer()
    assert_same(serializer.loads(serializer.dumps(value)), value)


# -- raw_loads_many: bulk decoding on restore --------------------------------------------


@pytest.mark.parametrize("serializer", [MsgpackSerializer(), JsonSerializer(), PickleSerializer()])
def test_raw_loads_many_decodes_each_encoding(serializer: Serializer) -> None:
    values = [0, -1, 2**40, 1.5, "x", b"y", None, [1, 2], {"a": (1, 2)}, {3}] * 5
    if isinstance(serializer, JsonSerializer):
        values = [v for v in values if not isinstance(v, (bytes, tuple, set, dict))]
    encoded = [serializer.dumps(v) for v in values]
    assert serializer.raw_loads_many(encoded) == [serializer.loads(e) for e in encoded]
    assert serializer.raw_loads_many([]) == []


def test_raw_loads_many_raises_for_a_damaged_encoding() -> None:
    serializer = MsgpackSerializer()
    encoded = [serializer.dumps(float(i)) for i in range(40)]
    for damaged in (
        [*encoded[:7], encoded[7] + b"\x01", *encoded[8:]],  # trailing bytes
        [*encoded[:7], encoded[7][:-1], *encoded[8:]],  # cut short
    ):
        with pytest.raises(Exception) as raised:
            serializer.raw_loads_many(damaged)
        assert not isinstance(raised.value, AttributeError)


def test_msgpack_serializers_share_the_thread_s_packers() -> None:
    # A packer holds a buffer of its own: a worker's hundreds of spaces (a serializer
    # each) must not hold one each. A subclass, which may change the hooks, keeps its own.
    first, second = MsgpackSerializer(), MsgpackSerializer()
    assert first.raw_dumps.__self__ is second.raw_dumps.__self__  # type: ignore[attr-defined]
    assert first.loads(second.dumps((1, "a", 2.5))) == (1, "a", 2.5)

    class Own(MsgpackSerializer):
        pass

    assert Own().raw_dumps.__self__ is not first.raw_dumps.__self__  # type: ignore[attr-defined]


FLAT_PARTS: list[Any] = [
    None,
    *(
        v
        for n in (0, 5, 7, 8, 15, 16, 31, 32, 63, 64)
        for v in (2**n - 1, 2**n, -(2**n), -(2**n) - 1)
    ),
    2**64 - 1,
    2**64,
    -(2**63) - 1,
    "",
    "a",
    "x" * 31,
    "x" * 32,
    "x" * 255,
    "x" * 256,
    "x" * 65535,
    "x" * 65536,
    "é",
    "\x00",
    "\ud800",  # not UTF-8: the fallback's error
    b"",
    b"\x00",
    b"x" * 255,
    b"x" * 256,
    b"x" * 65536,
    True,  # a bool, a float, a nested tuple: not flat, the fallback's encoding
    1.5,
    ("n", 1),
]


def _encoded(encode: Any, key: Any) -> Any:
    try:
        return encode(key)
    except (TypeError, ValueError, OverflowError) as exc:
        return type(exc)


def test_the_key_encoder_stores_every_key_as_the_serializer_does() -> None:
    """A save's key encoder (flat tuple keys packed in C where the extension is built)
    gives, for every key, the bytes and exactness of the serializer's raw_encode_key, or
    its error: at every boundary of msgpack's int, str and bin formats and of the
    extension header's sizes (fixext 1/2/4/8/16, ext 8/16/32)."""
    import random

    from objectspace.collections._impl import key_encoder

    serializer = osp.MsgpackSerializer()
    raw = serializer.raw_encode_key
    code = serializer.flat_tuple_code
    assert code is not None
    encode = key_encoder(code, raw)
    rng = random.Random(7)
    keys: list[Any] = [(), *((p,) for p in FLAT_PARTS), "plain", 5, None, frozenset({1})]
    keys += [
        tuple(rng.choice(FLAT_PARTS) for _ in range(rng.randrange(1, 20))) for _ in range(3000)
    ]
    keys += [tuple(rng.choice([None, 1, "ab"]) for _ in range(n)) for n in range(40)]
    seen_sizes = set()
    for key in keys:
        want = _encoded(raw, key)
        assert _encoded(encode, key) == want, key[:4] if isinstance(key, tuple) else key
        if isinstance(want, tuple):
            seen_sizes.add(want[0][0])
    assert {0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xC7, 0xC8, 0xC9} <= seen_sizes

    class Key(tuple):  # type: ignore[type-arg]
        pass

    assert encode(Key(("a", 1))) == raw(Key(("a", 1)))


def test_the_key_encoder_hands_other_keys_to_its_fallback() -> None:
    """What the encoder does not pack goes to the fallback unchanged, its errors too."""
    from objectspace.collections._impl import key_encoder

    calls: list[Any] = []

    def fallback(key: Any) -> tuple[bytes, bool]:
        calls.append(key)
        if key == "boom":
            raise ValueError("boom")
        return b"F", False

    encode = key_encoder(1, fallback)
    assert encode("x") == (b"F", False)
    assert encode((1.5,)) == (b"F", False)
    assert encode(("k", 2**64)) == (b"F", False)
    with pytest.raises(ValueError, match="boom"):
        encode("boom")
    assert calls == ["x", (1.5,), ("k", 2**64), "boom"]


def test_only_msgpack_itself_names_its_flat_tuple_layout() -> None:
    """A subclass may encode tuples its own way: the save then uses its raw_encode_key."""

    class Custom(osp.MsgpackSerializer):
        pass

    assert osp.MsgpackSerializer().flat_tuple_code == 1
    assert Custom().flat_tuple_code is None
    assert osp.JsonSerializer().flat_tuple_code is None
    assert osp.PickleSerializer().flat_tuple_code is None
