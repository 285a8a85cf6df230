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

try:
    from objectspace.collections import _core
except ImportError:  # pragma: no cover - the C extension was not built
    _core = None  # type: ignore[assignment]

IMPLEMENTATIONS = [pytest.param(_pycore.emit_rows, id="python")]
if _core is not None:
    IMPLEMENTATIONS.append(pytest.param(_core.emit_rows, id="c"))

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
