"""``emit_rows`` (a dict's changed entries as rows) in C and in Python: the same rows, the
same result, the same exceptions, for plain keys, spelled keys, deletes, insertion numbers
past the cached prefixes, and keys or values that fail part-way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack
import pytest

from objectspace.collections import _pycore
from objectspace.collections.base import ENTRY_MARK, UNENCODABLE
from objectspace.serialization import PLAIN_KEY_TYPES, MsgpackSerializer
from objectspace.tables import DELETED
from tests.support.twins import CORE as _core
from tests.support.twins import twins

IMPLEMENTATIONS = twins("emit_rows")

PREFIXES = tuple(ENTRY_MARK + msgpack.packb(n) for n in range(4))
CODEC = MsgpackSerializer()
PACK_UINT = msgpack.Packer(autoreset=True).pack


def _emit(
    emit_rows: Callable[..., bool],
    slots: Any,
    data: dict[Any, Any],
    order: dict[Any, int],
    *,
    dumps: Callable[[Any], bytes] | None = None,
    encode_key: Callable[[Any], tuple[bytes, bool]] | None = None,
) -> tuple[bool, dict[bytes, Any]]:
    rows: dict[bytes, Any] = {}
    done = emit_rows(
        rows,
        slots,
        data,
        order,
        CODEC.raw_key_dumps,
        dumps or CODEC.raw_dumps,
        PACK_UINT,
        PLAIN_KEY_TYPES,
        PREFIXES,
        ENTRY_MARK,
        DELETED,
        encode_key or CODEC.encode_key,
        UNENCODABLE,
    )
    return done, rows


class Boom:
    """A key whose equality raises once armed (after it was stored)."""

    armed = False

    def __hash__(self) -> int:
        return 7

    def __eq__(self, other: object) -> bool:
        if Boom.armed:
            raise RuntimeError("boom")
        return self is other


@pytest.mark.parametrize("emit_rows", IMPLEMENTATIONS)
def test_live_and_removed_keys(emit_rows: Callable[..., bool]) -> None:
    data = {1: 1.5, "a": [1, 2], b"b": None, (1, 2): "t", 9: "late"}
    order = {1: 0, "a": 3, b"b": 2, (1, 2): 1, 9: 40}
    done, rows = _emit(emit_rows, [1, "a", b"b", (1, 2), 9, "gone", (3, 4)], data, order)
    assert done
    assert rows[msgpack.packb(1)] == PREFIXES[0] + msgpack.packb(1.5)
    assert rows[msgpack.packb("a")] == PREFIXES[3] + msgpack.packb([1, 2])
    assert rows[CODEC.encode_key((1, 2))[0]] == PREFIXES[1] + msgpack.packb("t")
    # an insertion number past the cached prefixes is packed on the spot
    assert rows[msgpack.packb(9)] == ENTRY_MARK + msgpack.packb(40) + msgpack.packb("late")
    assert rows[msgpack.packb("gone")] is DELETED
    assert rows[CODEC.encode_key((3, 4))[0]] is DELETED
    assert len(rows) == 7


@pytest.mark.parametrize("emit_rows", IMPLEMENTATIONS)
def test_a_key_without_number_gets_the_first_prefix(emit_rows: Callable[..., bool]) -> None:
    done, rows = _emit(emit_rows, {5}, {5: "x"}, {})
    assert done and rows == {msgpack.packb(5): PREFIXES[0] + msgpack.packb("x")}


@pytest.mark.parametrize("emit_rows", IMPLEMENTATIONS)
def test_an_int_beyond_64_bits_asks_for_the_general_way(emit_rows: Callable[..., bool]) -> None:
    big = 1 << 70
    done, rows = _emit(emit_rows, [1, big], {1: "a", big: "b"}, {1: 0, big: 1})
    assert done is False
    assert rows == {msgpack.packb(1): PREFIXES[0] + msgpack.packb("a")}  # written so far
    done, _ = _emit(emit_rows, [1], {1: big}, {1: 0})  # a value too
    assert done is False


@pytest.mark.parametrize("emit_rows", IMPLEMENTATIONS)
def test_an_unencodable_removed_key_is_skipped(emit_rows: Callable[..., bool]) -> None:
    def encode_key(key: Any) -> tuple[bytes, bool]:
        if key == "bad":
            raise TypeError("cannot encode")
        return CODEC.encode_key(key)

    done, rows = _emit(emit_rows, ["bad", "ok"], {}, {}, encode_key=encode_key)
    assert done and rows == {msgpack.packb("ok"): DELETED}


@pytest.mark.parametrize("emit_rows", IMPLEMENTATIONS)
def test_errors_propagate_with_the_rows_so_far(emit_rows: Callable[..., bool]) -> None:
    def dumps(value: Any) -> bytes:
        if value == "fail":
            raise KeyError("no")
        return CODEC.raw_dumps(value)

    with pytest.raises(KeyError):
        _emit(emit_rows, [1, 2, 3], {1: "a", 2: "fail", 3: "c"}, {1: 0, 2: 1, 3: 2}, dumps=dumps)
    key = Boom()
    data = {key: 1}
    Boom.armed = True
    try:
        with pytest.raises(RuntimeError, match="boom"):
            _emit(emit_rows, [Boom()], data, {})
    finally:
        Boom.armed = False
    with pytest.raises(TypeError):
        _emit(emit_rows, 5, {}, {})  # slots that do not iterate


@pytest.mark.parametrize("emit_rows", IMPLEMENTATIONS)
def test_a_removed_key_whose_encoding_fails_otherwise_propagates(
    emit_rows: Callable[..., bool],
) -> None:
    def encode_key(key: Any) -> tuple[bytes, bool]:
        raise LookupError("not an encoding error")

    with pytest.raises(LookupError):
        _emit(emit_rows, ["x"], {}, {}, encode_key=encode_key)


def test_both_give_the_same_rows() -> None:
    if _core is None:
        pytest.skip("the C extension is not built")
    data = {i: i * 0.5 for i in range(0, 200, 3)}
    data.update({f"k{i}": [i] for i in range(20)})
    order = {key: n for n, key in enumerate(data)}
    slots = [*data, *range(1, 200, 7), "missing"]
    assert _emit(_core.emit_rows, slots, data, order) == _emit(
        _pycore.emit_rows, slots, data, order
    )


# -- emit_sorted_rows and emit_set_rows: a sorted dict's and a set's general loops ----------

SORTED = twins("emit_sorted_rows")
SETS = twins("emit_set_rows")


def _sorted(
    emit: Callable[..., None],
    slots: Any,
    data: Any,
    *,
    cleared: bool = False,
    dumps: Callable[[Any], bytes] | None = None,
    encode_key: Callable[[Any], tuple[bytes, bool]] | None = None,
) -> tuple[BaseException | None, dict[bytes, Any]]:
    from objectspace.collections.base import pack_entry

    rows: dict[bytes, Any] = {}
    try:
        emit(
            rows,
            slots,
            data,
            data._list,
            cleared,
            dumps or CODEC.raw_dumps,
            encode_key or CODEC.encode_key,
            PREFIXES[0],
            pack_entry,
            DELETED,
            UNENCODABLE,
        )
    except Exception as exc:  # the error and the rows written before it
        return exc, rows
    return None, rows


def _set(
    emit: Callable[..., None],
    slots: Any,
    members: set[Any],
    spell: dict[Any, Any],
    *,
    cleared: bool = False,
    dumps: Callable[[Any], bytes] | None = None,
    encode_key: Callable[[Any], tuple[bytes, bool]] | None = None,
) -> tuple[BaseException | None, dict[bytes, Any]]:
    rows: dict[bytes, Any] = {}
    try:
        emit(
            rows,
            slots,
            members,
            spell,
            cleared,
            CODEC.raw_key_dumps,
            encode_key or CODEC.encode_key,
            PLAIN_KEY_TYPES,
            ENTRY_MARK,
            b"\xc1S",
            dumps or CODEC.raw_dumps,
            DELETED,
            UNENCODABLE,
        )
    except Exception as exc:
        return exc, rows
    return None, rows


def _same(a: tuple[BaseException | None, dict[bytes, Any]], b: Any) -> None:
    assert type(a[0]) is type(b[0]) and str(a[0]) == str(b[0])
    assert a[1] == b[1]


def test_a_sorted_dicts_rows_keep_the_held_spelling() -> None:
    """A slot spelled otherwise than the held key (1.0, True against 1) writes the held
    key's row with its spelling when that is not exact; removed keys are deleted unless
    the table is cleared; an unencodable removed key is skipped."""
    from sortedcontainers import SortedDict

    data = SortedDict({(1, "a"): 1.5, (2, True): [1], (3, "x"): "x", (4.5, "y"): None})
    slots = [(1.0, "a"), (2, 1), (3, "x"), (4.5, "y"), (9, "gone"), (float("nan"), "z")]
    results = [_sorted(emit, slots, data) for emit in (p.values[0] for p in SORTED)]
    error, rows = results[0]
    assert error is None
    assert rows[CODEC.encode_key((1, "a"))[0]] == PREFIXES[0] + CODEC.dumps(1.5)
    spelled = rows[CODEC.encode_key((2, True))[0]]
    assert spelled.startswith(b"\xc1\xc1") and CODEC.dumps((2, True)) in spelled
    assert rows[CODEC.encode_key((9, "gone"))[0]] is DELETED
    assert len(rows) == 5  # the NaN slot was never stored: no row
    for other in results[1:]:
        _same(results[0], other)
    cleared = [_sorted(emit, slots, data, cleared=True) for emit in (p.values[0] for p in SORTED)]
    assert DELETED not in cleared[0][1].values()
    for other in cleared[1:]:
        _same(cleared[0], other)


@pytest.mark.parametrize("fail_at", ["dumps-value", "dumps-key", "encode", "encode-deleted"])
def test_sorted_dict_rows_fail_alike_part_way(fail_at: str) -> None:
    """An error of dumps or encode_key part-way propagates as it is, with the same rows
    written before it, in C and in Python."""
    from sortedcontainers import SortedDict

    data = SortedDict({(k, "a"): float(k) for k in range(6)})
    data[(6, True)] = 6.0
    slots = [(k, "a") for k in range(6)] + [(6, 1), (7, "gone")]

    def dumps(value: Any) -> bytes:
        if fail_at == "dumps-value" and value == 3.0:
            raise ValueError("value 3")
        if fail_at == "dumps-key" and value == (6, True):
            raise ValueError("spelling")
        return CODEC.raw_dumps(value)

    def encode_key(key: Any) -> tuple[bytes, bool]:
        if fail_at == "encode" and key == (4, "a"):
            raise RuntimeError("encode 4")
        if fail_at == "encode-deleted" and key == (7, "gone"):
            raise RuntimeError("encode 7")
        return CODEC.encode_key(key)

    results = [
        _sorted(emit, slots, data, dumps=dumps, encode_key=encode_key)
        for emit in (p.values[0] for p in SORTED)
    ]
    assert results[0][0] is not None
    for other in results[1:]:
        _same(results[0], other)


def test_a_sets_rows_keep_the_held_spelling() -> None:
    """Plain elements by key_dumps, others by encode_key of the held element (its _spell
    entry), spelled when not exact; removed elements deleted unless cleared."""
    members = {1, "a", (1, "b"), (2, True), 2.5}
    spell = {(1, "b"): (1, "b"), (2, True): (2, True), 2.5: 2.5}
    slots = [1, "a", (1.0, "b"), (2, 1), 2.5, (3, "gone"), "gone", float("nan")]
    results = [_set(emit, slots, members, spell) for emit in (p.values[0] for p in SETS)]
    error, rows = results[0]
    assert error is None
    assert rows[CODEC.raw_key_dumps(1)] == ENTRY_MARK
    assert rows[CODEC.encode_key((1, "b"))[0]] == ENTRY_MARK
    assert rows[CODEC.encode_key((2, True))[0]] == b"\xc1S" + CODEC.dumps((2, True))
    assert rows[CODEC.encode_key((3, "gone"))[0]] is DELETED
    assert rows[CODEC.raw_key_dumps("gone")] is DELETED
    assert len(rows) == 7
    for other in results[1:]:
        _same(results[0], other)
    empty = [_set(emit, [(1, "b")], {(1, "b")}, {}) for emit in (p.values[0] for p in SETS)]
    assert empty[0][1] == {CODEC.encode_key((1, "b"))[0]: ENTRY_MARK}
    for other in empty[1:]:
        _same(empty[0], other)


@pytest.mark.parametrize("fail_at", ["dumps", "encode", "encode-deleted", "membership"])
def test_set_rows_fail_alike_part_way(fail_at: str) -> None:
    members: set[Any] = {(k, "a") for k in range(6)} | {(6, True)}
    spell = {m: m for m in members}
    slots: list[Any] = [(k, "a") for k in range(6)] + [(6, 1), (7, "gone")]
    if fail_at == "membership":
        slots.insert(3, [1])  # unhashable

    def dumps(value: Any) -> bytes:
        if fail_at == "dumps":
            raise ValueError("spelling")
        return CODEC.raw_dumps(value)

    def encode_key(key: Any) -> tuple[bytes, bool]:
        if fail_at == "encode" and key == (4, "a"):
            raise RuntimeError("encode 4")
        if fail_at == "encode-deleted" and key == (7, "gone"):
            raise RuntimeError("encode 7")
        return CODEC.encode_key(key)

    results = [
        _set(emit, slots, members, spell, dumps=dumps, encode_key=encode_key)
        for emit in (p.values[0] for p in SETS)
    ]
    assert results[0][0] is not None
    for other in results[1:]:
        _same(results[0], other)
