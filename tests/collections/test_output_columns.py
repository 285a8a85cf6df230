"""``columns_from_rows`` (rows as Arrow's ``from_pylist`` takes them, a list per column) and
``utc_micros`` (naive or UTC datetimes as epoch microseconds) in C and in Python: the same
values, the same refusals, and, in the task, the same output table as ``from_pylist``."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pytest

from tests.support.twins import twins

COLUMNS = twins("columns_from_rows")
MICROS = twins("utc_micros")


@pytest.mark.parametrize("columns_from_rows", COLUMNS)
def test_columns_are_what_from_pylist_takes(columns_from_rows: Any) -> None:
    rows = [{"a": 1, "b": "x"}, {"b": None}, {"a": 2, "c": 3}, {}]
    assert columns_from_rows(rows, ("a", "b")) == [[1, None, 2, None], ["x", None, None, None]]
    assert columns_from_rows([], ("a",)) == [[]]
    assert columns_from_rows(rows, ()) == []
    with pytest.raises(TypeError, match="row 1 is not a dict"):
        columns_from_rows([{"a": 1}, [("a", 1)]], ("a",))
    with pytest.raises(TypeError):
        columns_from_rows((), ("a",))


class _Datetime(datetime):
    pass


@pytest.mark.parametrize("utc_micros", MICROS)
def test_micros_of_naive_and_utc_datetimes(utc_micros: Any) -> None:
    rng = random.Random(3)
    epoch = datetime(1970, 1, 1)
    values: list[Any] = [None, datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999)]
    for _ in range(2000):
        values.append(
            epoch
            + timedelta(microseconds=rng.randrange(-62135596800 * 10**6, 253402300799 * 10**6))
        )
    values += [v.replace(tzinfo=UTC) for v in values[1:50]]
    want = [
        None if v is None else (v.replace(tzinfo=None) - epoch) // timedelta(microseconds=1)
        for v in values
    ]
    assert utc_micros(values) == want
    assert utc_micros([]) == []


@pytest.mark.parametrize("utc_micros", MICROS)
@pytest.mark.parametrize(
    "odd",
    [
        datetime(2020, 1, 1, tzinfo=timezone(timedelta(hours=2))),
        datetime(2020, 1, 1, tzinfo=timezone(timedelta(0), "not the UTC object")),
        _Datetime(2020, 1, 1),
        "2020-01-01",
        1577836800000000,
    ],
)
def test_anything_else_is_left_to_arrow(utc_micros: Any, odd: Any) -> None:
    assert utc_micros([datetime(2020, 1, 1), odd]) is None
    with pytest.raises(TypeError):
        utc_micros((datetime(2020, 1, 1),))


def test_the_task_s_output_table_is_from_pylist_s() -> None:
    from tests.spark.test_task_ordered_rows import make_task

    task = make_task(("ts",))
    ts = pa.timestamp("us", tz="UTC")
    task.output_schema = pa.schema(
        [("k", pa.int64()), ("at", ts), ("s", pa.string()), ("__os_receipt", pa.binary())]
    )
    rng = random.Random(5)
    kinds: list[Any] = [
        lambda: datetime(2026, 1, 1) + timedelta(microseconds=rng.randrange(10**12)),
        lambda: datetime(2026, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randrange(10**12)),
        lambda: datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=-5))),
        lambda: None,
    ]
    for _ in range(200):
        rows: list[dict[str, Any]] = []
        mixed = rng.random() < 0.3
        for _ in range(rng.randrange(0, 30)):
            row: dict[str, Any] = {"k": rng.randrange(9), "s": rng.choice(["a", None])}
            if rng.random() < 0.9:
                row["at"] = rng.choice(kinds if mixed else kinds[:2] + kinds[3:])()
            rows.append(row)
        assert task._table(rows).equals(pa.Table.from_pylist(rows, schema=task.output_schema))


def test_output_that_does_not_fit_is_refused_naming_the_schema() -> None:
    from objectspace.errors import ObjectSpaceError
    from tests.spark.test_task_ordered_rows import make_task

    task = make_task(("ts",))
    task.output_schema = pa.schema([("k", pa.int64()), ("__os_receipt", pa.binary())])
    with pytest.raises(ObjectSpaceError, match="output rows do not fit output_schema"):
        task._table([{"k": "not an int"}])
    with pytest.raises(ObjectSpaceError, match="output rows do not fit output_schema"):
        task._table([{"k": 1}, ["not", "a", "dict"]])  # type: ignore[list-item]
