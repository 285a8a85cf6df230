"""A task's rows for a function that takes rows, sorted as columns by Arrow
(``_InstanceTask._ordered_rows``): exactly what ``group_rows`` and then ``order_rows`` give
each key (the same keys, the same rows in the same order), for keys of every type the task
hashes itself, null keys, order values that tie or are null, several order columns,
timestamps and strings (NaN, which orders nothing in Python, gets each key its rows in
some order); and the cases it leaves to ``group_rows``."""

from __future__ import annotations

import math
import random
import secrets
from typing import Any

import pyarrow as pa
import pytest

from objectspace.checkpoint import open_storage
from objectspace.engine import KEY_GROUP_COLUMN, BatchDriver, OrderedRows, TimeOptions
from objectspace.engine.task import group_rows, order_rows
from objectspace.spark.routing import DUE_MARK
from objectspace.spark.task import _InstanceTask

Row = dict[str, Any]


def make_task(order_columns: tuple[str, ...], key: str = "k") -> _InstanceTask:
    job = open_storage("memory://ordered-rows-" + secrets.token_hex(4)).job("j")
    job.fence()
    driver = BatchDriver(
        job.operator("o", 8),
        lambda key, rows, state: [],
        key_columns=(key,),
        order_columns=order_columns,
        time=TimeOptions.of("event", "ts", "0 seconds", "drop", None),
    )
    plan = driver.begin(0, 1, owner="probe")
    return _InstanceTask(plan, pa.schema([("x", pa.int64())]), hash_keys=True)


KEY_TYPES = {
    "int": (pa.int64(), lambda rng: rng.randrange(-3, 12)),
    "int32": (pa.int32(), lambda rng: rng.randrange(5)),
    "str": (pa.string(), lambda rng: rng.choice(["a", "b", "ab", "", "é", "z"])),
    "bytes": (pa.binary(), lambda rng: rng.choice([b"", b"\x00", b"a", b"ab"])),
    "bool": (pa.bool_(), lambda rng: rng.random() < 0.5),
}
ORDER_TYPES = {
    "int": (pa.int64(), lambda rng: rng.randrange(6)),
    "float": (pa.float64(), lambda rng: rng.choice([0.5, 1.0, 2.0, -0.0, 0.0, math.inf])),
    "str": (pa.string(), lambda rng: rng.choice(["a", "b", "ba", "B"])),
    "ts": (pa.timestamp("us", tz="UTC"), lambda rng: rng.randrange(4) * 1_000_000),
}


def random_table(rng: random.Random, key_type: str, order_type: str, second: bool) -> pa.Table:
    key_arrow, key_value = KEY_TYPES[key_type]
    order_arrow, order_value = ORDER_TYPES[order_type]
    n = rng.randrange(0, 80)
    columns: dict[str, Any] = {
        "k": [None if rng.random() < 0.05 else key_value(rng) for _ in range(n)],
        "ts": [None if rng.random() < 0.1 else order_value(rng) for _ in range(n)],
        "v": [rng.random() for _ in range(n)],
        "s": [rng.randrange(3) for _ in range(n)],
    }
    columns[KEY_GROUP_COLUMN] = [rng.randrange(3) for _ in range(n)]
    schema = pa.schema(
        [
            ("k", key_arrow),
            ("ts", order_arrow),
            ("v", pa.float64()),
            ("s", pa.int64()),
            (KEY_GROUP_COLUMN, pa.int32()),
        ]
    )
    if not second:
        del columns["s"]
        schema = schema.remove(schema.get_field_index("s"))
    if order_type == "ts":
        columns["ts"] = [None if t is None else pa.scalar(t, order_arrow) for t in columns["ts"]]
    return pa.Table.from_pydict(columns, schema=schema)


def by_rows(table: pa.Table, order_columns: tuple[str, ...]) -> dict[Any, list[Row]]:
    groups = group_rows(table.to_pylist(), ("k",), KEY_GROUP_COLUMN)
    for rows in groups.values():
        if len(rows) > 1:
            order_rows(rows, order_columns)
    return groups


def same(got: dict[Any, list[Row]], want: dict[Any, list[Row]]) -> bool:
    """Equal groups, rows compared by repr (NaN is not equal to itself)."""
    return sorted(map(repr, got.items())) == sorted(map(repr, want.items()))


@pytest.mark.parametrize("key_type", sorted(KEY_TYPES))
@pytest.mark.parametrize("order_type", sorted(ORDER_TYPES))
def test_ordered_rows_are_what_group_rows_and_order_rows_give(
    key_type: str, order_type: str
) -> None:
    rng = random.Random(f"{key_type}/{order_type}")
    for second in (False, True):
        order_columns = ("ts", "s") if second else ("ts",)
        task = make_task(order_columns)
        for _ in range(60):
            table = random_table(rng, key_type, order_type, second)
            got = task._ordered_rows(table, marks=False)
            assert type(got) is OrderedRows
            assert same(got, by_rows(table, order_columns)), table.to_pylist()
            times = [row["ts"] for rows in got.values() for row in rows]
            if order_type == "int" and times and None not in times:
                assert got.time_range == (min(times), max(times))
            else:  # floats, timestamps, a null: the late-row check reads the rows
                assert got.time_range is None


def test_nan_order_values_give_each_key_its_rows() -> None:
    task = make_task(("ts",))
    rng = random.Random(3)
    for _ in range(50):
        table = random_table(rng, "int", "float", False)
        ts = [None if t is None else rng.choice([t, math.nan]) for t in table["ts"].to_pylist()]
        table = table.set_column(1, "ts", pa.array(ts, pa.float64()))
        got = task._ordered_rows(table, marks=False)
        want = by_rows(table, ("ts",))
        assert got is not None and got.keys() == want.keys()
        for at, rows in want.items():
            assert sorted(map(repr, got[at])) == sorted(map(repr, rows))


def test_the_driver_s_marker_rows_are_left_out() -> None:
    task = make_task(("ts",))
    table = pa.table(
        {"k": [1, None, 2], "ts": [5, None, 6], KEY_GROUP_COLUMN: [0, DUE_MARK, 1]},
        schema=pa.schema([("k", pa.int64()), ("ts", pa.int64()), (KEY_GROUP_COLUMN, pa.int32())]),
    )
    got = task._ordered_rows(table, marks=True)
    assert got == {(0, 1): [{"k": 1, "ts": 5}], (1, 2): [{"k": 2, "ts": 6}]}
    assert got is not None and got.time_range == (5, 6)  # of the rows the function gets


def test_what_arrow_cannot_order_as_python_does_goes_to_group_rows() -> None:
    """Float keys (-0.0 and 0.0 are one key with two spellings), no order_by, columns
    Arrow does not sort: ``None``, and the task groups the rows as dicts."""
    floats = pa.table(
        {"k": [0.0, -0.0], "ts": [1, 2], KEY_GROUP_COLUMN: [0, 0]},
        schema=pa.schema([("k", pa.float64()), ("ts", pa.int64()), (KEY_GROUP_COLUMN, pa.int32())]),
    )
    assert make_task(("ts",))._ordered_rows(floats, marks=False) is None
    ints = floats.set_column(0, "k", pa.array([1, 1], pa.int64()))
    assert make_task(())._ordered_rows(ints, marks=False) is None
    nested = pa.table(
        {"k": [1, 1], "ts": [[1], [0]], KEY_GROUP_COLUMN: [0, 0]},
        schema=pa.schema(
            [("k", pa.int64()), ("ts", pa.list_(pa.int64())), (KEY_GROUP_COLUMN, pa.int32())]
        ),
    )
    assert make_task(("ts",))._ordered_rows(nested, marks=False) is None
