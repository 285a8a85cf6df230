"""The columns path of a task (``group_columns`` / ``run_columns``): an operator that takes
each key's rows as column lists (``session_window``) gives, batch by batch, exactly what
the rows path gives: the same output rows in the same order, the same task stats (rows in,
keys, late and bad-time rows, the largest event time, timers fired) and the same committed
state. The task Spark runs (``_InstanceTask.run_partition``) is driven directly, as
``StatefulRunner.process`` runs an input in one partition, and through ``applyInArrow``'s
entry point, with the driver's marker rows."""

from __future__ import annotations

import gc
import random
import secrets
from typing import Any

import pyarrow as pa
import pytest

from objectspace import operators as ops
from objectspace.checkpoint import open_storage
from objectspace.collections import _impl
from objectspace.engine import (
    INSTANCE_COLUMN,
    KEY_GROUP_COLUMN,
    BatchDriver,
    TaskStats,
    TimeOptions,
)
from objectspace.engine.task import group_columns, order_rows, takes_columns
from objectspace.keygroups import KeyGroups
from objectspace.spark import cache as spark_cache
from objectspace.spark.routing import DUE_MARK
from objectspace.spark.task import _InstanceTask
from tests.operators.test_group_paths import KeyByKey
from tests.support.spark import dump_state, task_result

Row = dict[str, Any]
MAX_KG = 16
P = 3
SEC = 1000
STATS = ("rows_in", "keys", "rows_late", "rows_bad_time", "max_event_time", "timers_fired")


class RowsOnly(KeyByKey):
    """``op`` without ``run_columns``: the task gives it rows (``run_group``), and it fires
    a key group's timers itself (``fire_group``)."""

    def run_group(self, space: Any, keys: Any, clock: Any) -> Any:
        return self.op.run_group(space, keys, clock)

    def fire_group(self, space: Any, now: Any, clock: Any) -> Any:
        return self.op.fire_group(space, now, clock)


def stream(seed: int, key_type: str, n_batches: int = 12) -> list[list[Row]]:
    """Keys with one to several rows a batch, times at whole seconds (ties within a key),
    rows out of order and late, null times, duplicate rows, a column the operator ignores."""
    rng = random.Random(seed)
    batches = []
    for b in range(n_batches):
        rows = []
        for _ in range(rng.randint(0, 60)):
            k = rng.randrange(30)
            roll = rng.random()
            if roll < 0.05:
                ts = None
            elif roll < 0.15 and b:
                ts = (b - rng.randint(1, 4)) * 20 * SEC + rng.randrange(20) * SEC  # late
            else:
                ts = b * 20 * SEC + rng.randrange(20) * SEC
            row = {
                "k": f"user-{k}" if key_type == "str" else k,
                "ts": ts,
                "v": rng.random() * 10 ** rng.randint(0, 12),  # sums depend on the order
                "note": rng.choice(["a", "b", None]),
            }
            rows.append(row)
            if rng.random() < 0.05:
                rows.append(dict(row))  # an exact duplicate
        batches.append(rows)
    batches.append([{"k": "user-0" if key_type == "str" else 0, "ts": 10**6 * SEC, "v": 1.0,
                     "note": None}])  # fmt: skip
    batches.append([])
    return batches


def input_schema(key_type: str) -> pa.Schema:
    key = pa.string() if key_type == "str" else pa.int64()
    return pa.schema([("k", key), ("ts", pa.int64()), ("v", pa.float64()), ("note", pa.string())])


def output_schema(key_type: str, aggs: tuple[str, ...]) -> pa.Schema:
    key = pa.string() if key_type == "str" else pa.int64()
    ts = pa.timestamp("us", tz="UTC")
    types = {"count": pa.int64(), "sum": pa.float64(), "min": pa.float64(),
             "max": pa.float64(), "mean": pa.float64()}  # fmt: skip
    fields = [("k", key), ("start", ts), ("end", ts), *((a, types[a]) for a in aggs)]
    return pa.schema([*fields, ("__os_receipt", pa.binary())])


class Job:
    """One operator's batches through the one-partition task, as the runner drives it."""

    def __init__(self, url: str, fn: Any, key_type: str, aggs: tuple[str, ...], late: str):
        job = open_storage(url).job("columns")
        operator = job.operator("sessions", MAX_KG)
        job.fence()
        self.url = url
        self.key_type = key_type
        self.schema = output_schema(key_type, aggs)
        self.driver = BatchDriver(
            operator,
            fn,
            key_columns=("k",),
            order_columns=("ts",),
            output_columns=tuple(self.schema.names),
            time=TimeOptions.of("event", "ts", "15 seconds", late, None),
        )
        self.owner = "test/" + secrets.token_hex(6)
        self.takes_columns: list[bool] = []

    def run(self, n: int, rows: list[Row], shuffle: bool) -> tuple[list[Row], list[Any]]:
        plan = self.driver.begin(n, P, use_cache=True, owner=self.owner)
        self.takes_columns.append(takes_columns(plan) is not None)
        due = plan.due_instances()
        if not shuffle:
            task = _InstanceTask(plan, self.schema, due, 1 << 20, hash_keys=True)
            batch = pa.RecordBatch.from_pylist(rows, schema=input_schema(self.key_type))
            tables = list(task.run_partition(iter([batch])))
            result = pa.Table.from_batches(tables, self.schema).to_pylist()
        else:
            # As applyInArrow hands each instance its rows: routed by the driver, with a
            # marker row for an instance with timers due.
            task = _InstanceTask(plan, self.schema, due, 1 << 20)
            groups = KeyGroups(MAX_KG)
            by_instance: dict[int, list[Row]] = {i: [] for i in range(P)}
            for row in rows:
                g = groups.key_group(row["k"])
                by_instance[groups.instance_of(g, P)].append(
                    {**row, KEY_GROUP_COLUMN: g, INSTANCE_COLUMN: groups.instance_of(g, P)}
                )
            for index in due:
                mark = dict.fromkeys(rows[0] if rows else ("k", "ts", "v", "note"))
                by_instance[index].append(
                    {**mark, KEY_GROUP_COLUMN: DUE_MARK, INSTANCE_COLUMN: index}
                )
            schema = input_schema(self.key_type).append(pa.field(KEY_GROUP_COLUMN, pa.int32()))
            schema = schema.append(pa.field(INSTANCE_COLUMN, pa.int32()))
            result = []
            for index, part in sorted(by_instance.items()):
                if not part:
                    continue
                table = pa.Table.from_pylist(part, schema=schema)
                result.extend(task((pa.scalar(index),), table).to_pylist())
        out, reports = task_result(result)
        self.driver.finish(plan, reports)
        stats = sorted((s for _, s in reports), key=lambda s: s.index)
        return out, [(s.index, *(getattr(s, f) for f in STATS)) for s in stats]


@pytest.fixture(autouse=True)
def own_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark_cache, "WORKER", spark_cache.InstanceCache())


@pytest.mark.parametrize(
    ("seed", "key_type", "aggs", "late", "shuffle"),
    [
        (1, "int", ("count", "sum"), "drop", False),
        (2, "str", ("count", "sum"), "drop", False),
        (3, "int", ("count",), "keep", False),
        (4, "int", ("min", "max", "mean"), "drop", False),
        (5, "str", ("sum", "count"), "keep", True),
        (6, "int", ("count", "sum"), "drop", True),
    ],
)
def test_columns_give_what_rows_give(
    tmp_path: Any, seed: int, key_type: str, aggs: tuple[str, ...], late: str, shuffle: bool
) -> None:
    op = ops.session_window("30 seconds", value="v", aggs=aggs)
    cols = Job(f"sqlite:///{tmp_path}/columns.db", op, key_type, aggs, late)
    rows = Job(f"sqlite:///{tmp_path}/rows.db", RowsOnly(op), key_type, aggs, late)
    seen = {"late": 0, "bad": 0, "out": 0}
    for n, batch in enumerate(stream(seed, key_type)):
        got, got_stats = cols.run(n, [dict(r) for r in batch], shuffle)
        want, want_stats = rows.run(n, [dict(r) for r in batch], shuffle)
        assert got == want, n
        assert got_stats == want_stats, n
        seen["late"] += sum(s[3] for s in got_stats)
        seen["bad"] += sum(s[4] for s in got_stats)
        seen["out"] += len(got)
    assert all(cols.takes_columns) and not any(rows.takes_columns)
    # the workload reached what it is for: late rows, rows without a time, sessions out
    assert seen["late"] and seen["bad"] and seen["out"] > 20, seen
    assert dump_state(cols.url, "columns", "sessions") == dump_state(
        rows.url, "columns", "sessions"
    )


def test_ties_and_nulls_take_the_rows_order() -> None:
    """A key whose order values repeat (or are null) gets its rows in ``order_rows``'s
    order, ties by the whole row: the float sum of its session is the rows path's."""
    op = ops.session_window("1 minute", value="v", aggs=("count", "sum"))
    job = open_storage("memory://columns-ties-" + secrets.token_hex(4)).job("j")
    job.fence()
    driver = BatchDriver(
        job.operator("o", 4),
        op,
        key_columns=("k",),
        order_columns=("ts",),
        time=TimeOptions.of("event", "ts", "0 seconds", "drop", None),
    )
    plan = driver.begin(0, 1, owner="probe")
    needs = takes_columns(plan)
    assert needs == ("ts", "v")
    # key 7: rows 0-2 tie at ts 5 (values whose float sum depends on the order); key 8:
    # one row; key 9: a null time (dropped, counted) between two rows
    values = [1e16, 1.0, -1e16, 2.0, 3.0, 4.0, 5.0]
    columns = {
        KEY_GROUP_COLUMN: [0, 0, 0, 0, 1, 1, 1],
        "k": [7, 7, 7, 8, 9, 9, 9],
        "ts": [5, 5, 5, 6, 1, 2, None],
        "v": values,
    }
    full = [
        {"k": k, "ts": t, "v": v}
        for k, t, v in zip(columns["k"], columns["ts"], values, strict=True)
    ]
    asked: list[list[int]] = []

    def rows_at(positions: list[int]) -> list[Row]:
        asked.append(positions)
        return [dict(full[i]) for i in positions]

    stats = TaskStats(index=0)
    grouped = group_columns(
        plan, columns, needs, stats, ([0, 3, 4], {0, 2}), rows_at, KEY_GROUP_COLUMN
    )
    # the tied rows as order_rows puts them (by repr(sorted(row.items()))): a sum in the
    # order they came would differ
    tied = [dict(r) for r in full[:3]]
    order_rows(tied, ("ts",))
    assert [r["v"] for r in tied] == [-1e16, 1.0, 1e16]
    assert grouped.groups[(0, 7)] == ([5, 5, 5], [-1e16, 1.0, 1e16])
    assert grouped.groups[(0, 8)] == ([6], [2.0])
    assert grouped.groups[(1, 9)] == ([1, 2], [3.0, 4.0])
    if _impl.IMPLEMENTATION == "c":  # a key's columns are left out of the cyclic collector
        assert not any(map(gc.is_tracked, grouped.groups[(0, 8)]))
    assert asked == [[0, 1, 2, 4, 5]]  # the dropped row is not asked for
    assert grouped.touched == {0, 1}
    assert (stats.rows_in, stats.keys, stats.rows_bad_time, stats.max_event_time) == (6, 3, 1, 6)
