"""What a batch's data can carry to the driver: never code (the reserved receipt column)."""

# The session fixture `spark` is imported from tests.support.spark and requested by name.
# ruff: noqa: F811

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from typing import Any

import pytest

import objectspace as osp
from objectspace.keyed import KeyState
from objectspace.spark import StatefulRunner
from tests.support.spark import Row, ship, spark  # noqa: F401

ship(__name__)


class _Payload:
    """Creates a marker file when unpickled."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.marker, "w"))


def pass_through(key: Any, rows: list[Row], state: KeyState) -> Iterator[Row]:
    state.value("seen", 0).value += len(rows)
    yield from rows


class AddColumn:
    """Passes rows through with an extra column."""

    def __init__(self, name: str, value: Any) -> None:
        self.name, self.value = name, value

    def __call__(self, key: Any, rows: list[Row], state: KeyState) -> Iterator[Row]:
        for row in rows:
            yield {**row, self.name: self.value}


def _runner(tmp_path: Any, fn: Any, schema: str = "k long, ts long") -> StatefulRunner:
    return StatefulRunner(
        fn,
        key="k",
        order_by="ts",
        output_schema=schema,
        storage=f"sqlite:///{tmp_path}/state.db",
        job="sec",
        operator="op",
        max_key_groups=8,
        parallelism=2,
    )


def test_json_input_with_the_receipt_column_runs_no_code_on_the_driver(
    spark: Any, tmp_path: Any
) -> None:
    """JSON whose inferred schema has the reserved column, through a pass-through function:
    refused with an error naming the column, nothing unpickled, nothing committed."""
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Payload(str(marker)), protocol=0).decode("latin-1")
    path = tmp_path / "in.json"
    path.write_text(
        "\n".join(json.dumps({"k": k, "ts": k, "__os_receipt": payload}) for k in range(6))
    )
    df = spark.read.json(str(path))
    runner = _runner(tmp_path, pass_through)
    with pytest.raises(osp.ReservedColumnError, match="__os_receipt"):
        runner.process(df, 0)
    assert not marker.exists()
    assert runner.job.last_checkpoint() is None
    # The same rows without the column run.
    out = runner.process(df.drop("__os_receipt"), 0)
    assert sorted(r["k"] for r in out.collect()) == list(range(6))
    assert runner.job.last_checkpoint() == 0
    runner.close()


def test_function_yielding_the_receipt_column_fails_the_batch(spark: Any, tmp_path: Any) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Payload(str(marker)))
    df = spark.createDataFrame([(k, k) for k in range(6)], "k long, ts long")
    runner = _runner(tmp_path, AddColumn("__os_receipt", payload))
    with pytest.raises(Exception, match="__os_receipt"):
        runner.process(df, 0)
    assert not marker.exists()
    assert runner.job.last_checkpoint() is None
    runner.close()


@pytest.mark.parametrize("column", ["__os_receipt", "__os_kg", "__os_instance"])
def test_output_schema_with_a_reserved_column_is_refused(
    spark: Any, tmp_path: Any, column: str
) -> None:
    df = spark.createDataFrame([(1, 1)], "k long, ts long")
    runner = _runner(tmp_path, pass_through, f"k long, ts long, {column} binary")
    with pytest.raises(osp.ReservedColumnError, match=column):
        runner.process(df, 0)
    assert runner.job.last_checkpoint() is None
