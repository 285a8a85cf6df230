"""``row_columns`` (a block's rows as its columns) in C and in Python, against its
definition written out plainly: random tables of canonical and non-canonical decimal keys,
other keys, values of every width around the fixed-width bound, empty values and deletes,
in differential and full blocks; and the errors for rows that are not bytes."""

from __future__ import annotations

import random
from typing import Any

import pytest

from objectspace.tables import DELETED
from tests.support.twins import twins

IMPLEMENTATIONS = twins("row_columns")

KEYS = [b"0", b"1", b"7", b"10", b"01", b"00", b"", b"-1", b"+1", b" 1", b"1a", b"x", b"length"]
KEYS += [b"9" * 18, b"9" * 19, b"123456789012345678", "\u0661".encode()]


def canonical(key: bytes) -> bool:
    return 0 < len(key) <= 18 and key.isascii() and key.isdigit() and b"%d" % int(key) == key


def definition(tables: list[dict[bytes, Any]], full: bool) -> tuple[Any, ...]:
    """The columns as the block format describes them, one table at a time."""
    counts, modes, ints, key_lens, keys, widths = [], [], [], [], [], []
    fixed: dict[int, list[bytes]] = {}
    value_lens: list[int] = []
    values: list[bytes] = []
    for rows in tables:
        kept = [(k, v) for k, v in rows.items() if not (full and v is DELETED)]
        counts.append(len(kept))
        if kept and all(canonical(k) for k, _ in kept):
            modes.append(1)
            numbers = [int(k) for k, _ in kept]
            ints += [b - a for a, b in zip([0, *numbers], numbers, strict=False)]
        else:
            modes.append(0)
            key_lens += [len(k) for k, _ in kept]
            keys += [k for k, _ in kept]
        puts = [v for _, v in kept if v is not DELETED]
        sizes = {len(v) for v in puts}
        if kept and len(puts) == len(kept) and len(sizes) == 1 and 0 < min(sizes) <= 64:
            widths.append(len(puts[0]))
            fixed.setdefault(len(puts[0]), []).extend(puts)
        else:
            widths.append(0)
            for _, v in kept:
                value_lens.append(-1 if v is DELETED else len(v))
                if v is not DELETED:
                    values.append(v)
    return (counts, modes, ints, key_lens, keys, widths, fixed, value_lens, values, sum(counts))


def random_tables(rng: random.Random) -> list[dict[bytes, Any]]:
    tables = []
    for _ in range(rng.randint(0, 12)):
        rows: dict[bytes, Any] = {}
        shape = rng.random()
        for _ in range(rng.choice([0, 1, 1, 1, 2, 3, 5, 9])):
            if shape < 0.4:  # a list's slots: canonical ints, mostly
                key = b"%d" % rng.randrange(10 ** rng.randint(1, 19))
                if rng.random() < 0.05:
                    key = rng.choice(KEYS)
            else:
                key = rng.choice(KEYS) + bytes([rng.randrange(97, 100)]) * rng.randint(0, 1)
            if rng.random() < 0.15:
                rows[key] = DELETED
            elif shape < 0.7:  # one width: a float table's entries
                rows[key] = bytes(rng.randrange(256) for _ in range(9))
            else:
                rows[key] = b"v" * rng.choice([0, 1, 8, 63, 64, 65, 100])
        tables.append(rows)
    return tables


@pytest.mark.parametrize("row_columns", IMPLEMENTATIONS)
def test_row_columns_match_their_definition(row_columns: Any) -> None:
    rng = random.Random(11)
    for _ in range(3_000):
        tables = random_tables(rng)
        for full in (False, True):
            assert row_columns(tables, full, DELETED) == definition(tables, full), tables


@pytest.mark.parametrize("row_columns", IMPLEMENTATIONS)
def test_row_columns_of_one_width_and_no_decimal_key_take_the_short_path_alike(
    row_columns: Any,
) -> None:
    """Every key bytes and every value a put of one width (the pure-Python twin's pass
    without a loop): the columns the loop gives."""
    tables: list[dict[bytes, Any]] = [
        {b"a": b"12345678", b"b": b"87654321"},
        {},
        {b"c": b"00000000"},
    ]
    assert row_columns(tables, False, DELETED) == definition(tables, False)
    assert row_columns(tables, True, DELETED) == definition(tables, True)


@pytest.mark.parametrize("row_columns", IMPLEMENTATIONS)
def test_row_columns_keep_the_value_objects_and_the_key_order(row_columns: Any) -> None:
    value = b"x" * 100
    (counts, modes, ints, _, _, widths, _, value_lens, values, rows) = row_columns(
        [{b"9": value, b"3": b"y" * 70}], False, DELETED
    )
    assert (counts, modes, ints, widths, value_lens, rows) == ([2], [1], [9, -6], [0], [100, 70], 2)
    assert values[0] is value


@pytest.mark.parametrize("row_columns", IMPLEMENTATIONS)
def test_row_columns_refuse_rows_that_are_not_bytes(row_columns: Any) -> None:
    with pytest.raises((TypeError, AttributeError)):
        row_columns([{"1": b"v", "2": b"w"}], False, DELETED)
    with pytest.raises(TypeError):
        row_columns([{b"1": 5, b"2": b"w"}], False, DELETED)
