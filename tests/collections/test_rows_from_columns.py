"""``rows_from_columns`` (C, and its pure-Python twin) makes the dicts ``pyarrow.Table.
to_pylist`` makes of a table, from its columns' lists; bad arguments raise, the same in
both."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from objectspace.collections import _impl, _pycore

TWINS = [pytest.param(_pycore.rows_from_columns, id="python")]
if _impl.IMPLEMENTATION == "c":
    TWINS.append(pytest.param(_impl.rows_from_columns, id="c"))


def _tables() -> list[pa.Table]:
    ts = [dt.datetime(2026, 1, 1, tzinfo=dt.UTC), None, dt.datetime(1970, 1, 1, tzinfo=dt.UTC)]
    return [
        pa.table({"user": [1, 2, None], "tsm": [10, 11, 12], "v": [0.5, float("nan"), -0.0]}),
        pa.table({"s": ["a", None, "é"], "b": [b"\x00", b"", None], "t": ts}),
        pa.table({"x": pa.array([[1, 2], None, []]), "m": pa.array([{"a": 1}, None, {"a": 2}])}),
        pa.table({"only": pa.array([], pa.int64())}),
        pa.Table.from_arrays([pa.array([1, 2]), pa.array([3, 4])], names=["same", "same"]),
    ]


@pytest.mark.parametrize("rows_from_columns", TWINS)
@pytest.mark.parametrize("table", _tables(), ids=lambda t: ",".join(t.column_names) or "-")
def test_the_dicts_are_to_pylists(rows_from_columns: Any, table: pa.Table) -> None:
    rows = rows_from_columns(tuple(table.column_names), [c.to_pylist() for c in table.columns])
    expected = table.to_pylist()
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected, strict=True):
        assert list(row) == list(want)
        for name in want:  # NaN: the same object, not equal to itself
            assert (
                row[name] is want[name]
                or row[name] == want[name]
                or (row[name] != row[name] and want[name] != want[name])
            )


@pytest.mark.parametrize("rows_from_columns", TWINS)
@pytest.mark.parametrize(
    ("names", "columns", "error"),
    [
        (("a", "b"), [[1, 2], [3]], ValueError),  # unequal lengths
        (("a",), [[1], [2]], ValueError),  # a column per name
        ((), [], ValueError),  # at least one
        (["a"], [[1]], TypeError),  # names a tuple
        (("a",), ([1],), TypeError),  # columns a list
        (("a",), [(1,)], TypeError),  # each column a list
    ],
)
def test_bad_arguments_raise_in_both(
    rows_from_columns: Any, names: Any, columns: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        rows_from_columns(names, columns)


@pytest.mark.parametrize("rows_from_columns", TWINS)
def test_the_rows_are_new_dicts_sharing_the_values(rows_from_columns: Any) -> None:
    value = object()
    rows = rows_from_columns(("a", "b"), [[value, value], [1, 2]])
    assert rows == [{"a": value, "b": 1}, {"a": value, "b": 2}]
    assert rows[0] is not rows[1] and rows[0]["a"] is value
    rows[0]["c"] = 3  # plain dicts
    assert "c" not in rows[1]
