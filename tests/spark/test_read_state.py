"""``read_state``: an operator's state as a Spark DataFrame, read by key group on the
executors, holds exactly the rows ``objectspace export`` writes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import objectspace as osp
import objectspace.spark as spark_module
from objectspace.inspection import export_parquet, find_operator, open_existing
from objectspace.spark.state import read_state
from tests.cli.test_cli import JOB, SESSIONS, TOTALS, export_rows, populate
from tests.support.spark import spark  # noqa: F401
from tests.support.storage import segment_url


def _exported(url: str, operator: str, checkpoint: int | None, path: Path) -> list[tuple[Any, ...]]:
    storage = open_existing(url)
    try:
        export_parquet(find_operator(storage, JOB, operator), path, checkpoint)
    finally:
        storage.close()
    frame = pd.read_parquet(path)
    return [
        tuple(None if isinstance(v, float) and math.isnan(v) else v for v in row)
        for row in frame.itertuples(index=False, name=None)
    ]


def _sorted(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=repr)


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_read_state_equals_export(spark: Any, kind: str, tmp_path: Path) -> None:  # noqa: F811
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path}/state.db"
    else:
        url = segment_url(f"file://{tmp_path}/segments", f"sqlite:///{tmp_path}/catalog.db")
    populate(url)
    for operator, checkpoint in ((SESSIONS, None), (SESSIONS, 1), (TOTALS, 2)):
        exported = _exported(url, operator, checkpoint, tmp_path / "out.parquet")
        assert exported == export_rows(operator, checkpoint or 2)
        df = read_state(spark, url, JOB, operator, checkpoint, num_partitions=3)
        assert df.columns == ["key_group", "object_id", "kind", "slot", "value"]
        assert [f.dataType.simpleString() for f in df.schema.fields] == [
            "int",
            "string",
            "string",
            "string",
            "string",
        ]
        assert _sorted([tuple(r) for r in df.collect()]) == _sorted(exported)
        # Spark reads the exported file with the same schema and rows
        parquet = spark.read.parquet(str(tmp_path / "out.parquet"))
        assert [(f.name, f.dataType) for f in parquet.schema.fields] == [
            (f.name, f.dataType) for f in df.schema.fields
        ]
        assert _sorted([tuple(r) for r in parquet.collect()]) == _sorted(exported)


def test_read_state_in_parallel_by_key_group(spark: Any, tmp_path: Path) -> None:  # noqa: F811
    """Many key groups, several tasks: every key group's objects, once."""
    url = f"sqlite:///{tmp_path}/state.db"
    storage = osp.open_storage(url)
    job = storage.job("big")
    op = job.operator("op", 300)
    inst = op.instance(0, 1)
    for key in range(500):
        inst.space_for_key(key).create_value(f"{key}/v", key * 2)
    job.commit(1, [inst.save(1)])
    storage.close()
    df = read_state(spark, url, "big", "op", num_partitions=4)
    assert df.rdd.getNumPartitions() == 4
    rows = df.collect()
    assert sorted((r.object_id, r.value) for r in rows) == sorted(
        (f"{k}/v", str(k * 2)) for k in range(500)
    )
    assert len({r.key_group for r in rows}) > 64  # more than one slice of key groups


def test_read_state_errors_on_the_driver(spark: Any, tmp_path: Path) -> None:  # noqa: F811
    url = f"sqlite:///{tmp_path}/state.db"
    populate(url)
    with pytest.raises(osp.CheckpointError, match="no job 'nope'"):
        read_state(spark, url, "nope", SESSIONS)
    with pytest.raises(osp.CheckpointError, match="has no operator 'nope'"):
        read_state(spark, url, JOB, "nope")
    with pytest.raises(osp.CheckpointError, match=r"checkpoint 7 .* is not restorable"):
        read_state(spark, url, JOB, SESSIONS, 7)
    with pytest.raises(osp.StorageError, match="does not exist"):
        read_state(spark, f"sqlite:///{tmp_path}/missing.db", JOB, SESSIONS)
    assert not (tmp_path / "missing.db").exists()


def test_spark_module_reexports_read_state() -> None:
    if hasattr(spark_module, "read_state"):
        assert spark_module.read_state is read_state
