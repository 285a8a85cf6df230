"""Key groups of integer keys computed as Arrow columns (``long_key_groups``, what a
one-partition task routes its rows with): ``key_group_hash(k) % max_key_groups`` for
every value, the extremes of each width, nulls, and key-group counts that divide 2**64 and
that do not. (``tests/spark/test_spark.py`` checks ``route_table`` against Spark's own
``xxhash64``.)"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from objectspace.keygroups import MAX_KEY_GROUPS, key_group_hash
from objectspace.spark.routing import long_key_groups


@pytest.mark.parametrize("max_kg", [1, 2, 3, 7, 100, 128, 1000, MAX_KEY_GROUPS])
def test_long_key_groups_are_key_group_hash_modulo(max_kg: int) -> None:
    rng = random.Random(max_kg)
    values = [0, 1, -1, 2**63 - 1, -(2**63), 2**31, -(2**31) - 1, None]
    values += [rng.randrange(-(2**63), 2**63) for _ in range(3_000)] + list(range(-300, 300))
    got = long_key_groups(pa.array(values, pa.int64()), max_kg)
    assert got.type == pa.int32()
    assert got.to_pylist() == [key_group_hash(v) % max_kg for v in values]


@pytest.mark.parametrize(
    ("arrow_type", "low", "high"),
    [(pa.int8(), -128, 127), (pa.int16(), -(2**15), 2**15 - 1), (pa.int32(), -(2**31), 2**31 - 1),
     (pa.uint8(), 0, 255), (pa.uint32(), 0, 2**32 - 1)],
)  # fmt: skip
def test_narrower_integers_hash_as_longs(arrow_type: pa.DataType, low: int, high: int) -> None:
    values = [low, low + 1, -1 if low < 0 else 2, 0, high - 1, high, None]
    got = long_key_groups(pa.array(values, arrow_type), 128).to_pylist()
    assert got == [key_group_hash(v) % 128 for v in values]
