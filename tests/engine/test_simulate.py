"""objectspace.testing.simulate: the runner's batches without Spark.

``simulate`` runs through the same execution code as ``StatefulRunner`` (key groups,
instances, ``order_by``, save and commit per batch); these tests compare it with plain
Python references, with itself across parallelisms, rescales and replays, and (once)
with the Spark runner on the same batches.
"""

# The session fixture `spark` is imported from tests.support.spark and requested by name.
# ruff: noqa: F811

from __future__ import annotations

import dataclasses
import pickle
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import objectspace as osp
from objectspace import operators as ops
from objectspace.checkpoint import Instance, PendingSave
from objectspace.engine import TaskPlan
from objectspace.errors import ReservedColumnError
from objectspace.keyed import KeyState
from objectspace.testing import simulate
from tests.operators.test_operators import CASES, KEYS, SOURCES, Case
from tests.support.spark import (
    BUFFER100_COLUMNS,
    BUFFER100_SCHEMA,
    Row,
    buffer100,
    buffer100_state,
    df_rows,
    dict_rows,
    dump_state,
    keyed_batches,
    ref_buffer100,
    reference_run,
    spark,  # noqa: F401
    to_df,
)

# 20 keys, ~20 rows per key and batch: keys reach 100 values in batch 4 or 5.
BATCHES = keyed_batches(7, 20, 6, (15, 25))


@pytest.fixture(scope="module")
def reference() -> tuple[list[list[Row]], dict[str, Any]]:
    outputs, states = reference_run(ref_buffer100, BATCHES)
    return outputs, buffer100_state(states, 16)


def test_simulate_equals_the_reference_at_parallelism_1_3_8(reference: Any) -> None:
    expected, state = reference
    assert sum(len(o) for o in expected) > 10  # buffers fill
    outputs = {}
    for p in (1, 3, 8):
        sim = simulate(buffer100, BATCHES, key="k", order_by="ts", max_key_groups=16, parallelism=p)
        for n, out in enumerate(sim.outputs):
            assert dict_rows(out, BUFFER100_COLUMNS) == dict_rows(expected[n], BUFFER100_COLUMNS)
            stats = sim.stats[n]
            assert stats.committed and not stats.replay and stats.parallelism == p
            assert stats.rows_in == len(BATCHES[n]) and stats.rows_out == len(out)
            assert stats.keys == 20 and 1 <= stats.instances <= p
        assert sim.job.last_checkpoint() == len(BATCHES) - 1
        assert dump_state(sim.storage, "simulate", "simulate") == state
        outputs[p] = sim.outputs
    # The documented order (key groups ascending, keys by repr) does not depend on p.
    assert outputs[1] == outputs[3] == outputs[8]


def test_parallelism_change_mid_way(reference: Any) -> None:
    expected, state = reference
    sim = simulate(
        buffer100,
        BATCHES,
        key="k",
        order_by="ts",
        max_key_groups=16,
        parallelism={0: 2, 2: 8, 3: 1, 5: 3},
    )
    assert [s.parallelism for s in sim.stats] == [2, 2, 8, 1, 1, 3]
    for n, out in enumerate(sim.outputs):
        assert dict_rows(out, BUFFER100_COLUMNS) == dict_rows(expected[n], BUFFER100_COLUMNS)
    assert dump_state(sim.storage, "simulate", "simulate") == state
    # Batches before the first entry run at parallelism 1.
    late = simulate(buffer100, BATCHES[:2], key="k", order_by="ts", parallelism={1: 4})
    assert [s.parallelism for s in late.stats] == [1, 4]


def test_replayed_batch_same_outputs_nothing_committed_twice(reference: Any) -> None:
    expected, state = reference
    plain = simulate(buffer100, BATCHES, key="k", order_by="ts", max_key_groups=16, parallelism=3)
    sim = simulate(
        buffer100,
        BATCHES,
        key="k",
        order_by="ts",
        max_key_groups=16,
        parallelism={0: 3, 3: 5},
        replay=(0, 3, 5),
    )
    assert sorted(sim.first_attempts) == [0, 3, 5]
    for n in (0, 3, 5):
        assert sim.first_attempts[n] == sim.outputs[n]
    for n, out in enumerate(sim.outputs):
        assert dict_rows(out, BUFFER100_COLUMNS) == dict_rows(expected[n], BUFFER100_COLUMNS)
    assert dump_state(sim.storage, "simulate", "simulate") == state
    # Every checkpoint holds one write per key group it changed: the first attempts'
    # pending writes were never committed.
    writes = {c.checkpoint_id: c.writes for c in sim.job.checkpoint_info()}
    assert writes == {c.checkpoint_id: c.writes for c in plain.job.checkpoint_info()}
    assert [s.rows_written for s in sim.stats] == [s.rows_written for s in plain.stats]


def test_a_function_that_changes_its_rows_changes_neither_a_replay_nor_the_callers() -> None:
    """Each attempt gets fresh rows: a value changed in place (a list, a dict) by the first
    attempt is as given in the second, and the caller's rows stay as they were."""

    def grow(key: Any, rows: list[Row], state: KeyState) -> list[Row]:
        out = []
        for row in rows:
            row["tags"].append("seen")
            row["meta"]["n"] += 1
            row["v"] = -1.0
            out.append({"tags": len(row["tags"]), "n": row["meta"]["n"]})
        return out

    batches = [
        [{"k": k, "ts": t, "v": 1.0, "tags": ["a"], "meta": {"n": 0}} for k in range(5)]
        for t in range(3)
    ]
    before = repr(batches)
    sim = simulate(grow, batches, key="k", order_by="ts", replay=(0, 1, 2))
    assert repr(batches) == before
    for n in range(3):
        assert sim.first_attempts[n] == sim.outputs[n]
        assert sorted((r["k"], r["tags"], r["n"]) for r in sim.outputs[n]) == [
            (k, 2, 1) for k in range(5)
        ]


def test_state_of_a_key_is_readable() -> None:
    def total(key: Any, rows: list[Row], state: KeyState) -> Any:
        t = state.value("total", 0.0)
        seen = state.list("seen")
        for r in rows:
            t.value = t.value + r["v"]
            seen.append(r["ts"])
        yield {"total": t.value}

    batches = [
        [
            {"k": "a", "ts": 2, "v": 1.0},
            {"k": "b", "ts": 1, "v": 5.0},
            {"k": "a", "ts": 1, "v": 2.0},
        ],
        [{"k": "a", "ts": 3, "v": 4.0}],
    ]
    sim = simulate(total, batches, key="k", order_by="ts", parallelism={0: 4, 1: 2})
    first = sorted([("a", 3.0), ("b", 5.0)], key=lambda kv: osp.KeyGroups(128).key_group(kv[0]))
    assert sim.outputs == [[{"total": t, "k": k} for k, t in first], [{"total": 7.0, "k": "a"}]]
    assert sim.state("a").value("total").value == 7.0
    assert list(sim.state("a").list("seen")) == [1, 2, 3]
    assert sim.state("b").value("total").value == 5.0
    assert sim.state("nobody").value("total", -1.0).value == -1.0


def test_multi_column_key_and_order() -> None:
    def count(key: Any, rows: list[Row], state: KeyState) -> Any:
        n = state.value("n", 0)
        n.value = n.value + len(rows)
        yield {"n": n.value, "first": (rows[0]["t1"], rows[0]["t2"])}

    rows = [
        {"a": a, "b": b, "t1": t % 2, "t2": -t, "x": t}
        for t in range(12)
        for a, b in (("x", 1), ("y", 2))
    ]
    random.Random(3).shuffle(rows)
    sim = simulate(count, [rows, rows[:4]], key=("a", "b"), order_by=("t1", "t2"), parallelism=3)
    assert sorted(sim.outputs[0], key=repr) == [
        {"n": 12, "first": (0, -10), "a": "x", "b": 1},
        {"n": 12, "first": (0, -10), "a": "y", "b": 2},
    ]
    assert sim.state(("x", 1)).value("n").value == 12 + sum(r["a"] == "x" for r in rows[:4])


def _case_batches(case: Case) -> list[list[Row]]:
    """A fixed stream of 60 rows over three keys, in shuffled batches of 7."""
    rows = []
    for i in range(60):
        row: Row = {"k": KEYS[i % 3], "ts": i}
        if case.rows.startswith("sourced"):
            pool = {"sourced": SOURCES, "sourced2": ["a", "b"], "sourced1": ["b"]}[case.rows]
            row.update(source=pool[(i * 7) % len(pool)], v=(i * 5) % 4)
        elif case.rows == "few":
            row["v"] = [0, 1, 1, 1.0, 2, 2, 0][(i // 3) % 7]
        else:
            row["v"] = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3][i % 10] + (i % 3) * 0.5
        rows.append(row)
    batches = [rows[i : i + 7] for i in range(0, len(rows), 7)]
    for n, batch in enumerate(batches):
        random.Random(n).shuffle(batch)
    return batches


def _without_key(rows: list[Row]) -> list[Row]:
    return [{c: v for c, v in r.items() if c != "k"} for r in rows]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_operator_matches_its_reference(case: Case) -> None:
    batches = _case_batches(case)
    sim = simulate(
        case.op,
        batches,
        key="k",
        order_by="ts",
        max_key_groups=8,
        parallelism={0: 1, 3: 4, 6: 2},
        replay=(4,),
    )
    for key in KEYS[:3]:
        per_batch = [
            sorted((r for r in batch if r["k"] == key), key=lambda r: r["ts"]) for batch in batches
        ]
        per_batch = [rows for rows in per_batch if rows]
        flat = [r for rows in per_batch for r in rows]
        expected = case.ref(per_batch if case.batched else flat)
        got = [r for out in sim.outputs for r in out if r["k"] == key]
        assert _without_key(got) == _without_key(expected), f"{case.name}: key {key!r}"


def test_bad_input_is_refused_before_any_batch_runs() -> None:
    storage = osp.open_storage("memory://testing-bad-input")
    ok = [{"k": 1, "ts": 1, "v": 1.0}]
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['ts'\]"):
        simulate(buffer100, [ok, [{"k": 1, "v": 2.0}]], key="k", order_by="ts", storage=storage)
    assert storage.job("simulate").last_checkpoint() is None
    with pytest.raises(ReservedColumnError, match="__os_kg"):
        simulate(buffer100, [[{**ok[0], "__os_kg": 3}]], key="k", order_by="ts")
    with pytest.raises(ValueError, match=r"parallelism must be an int in 1\.\.16"):
        simulate(buffer100, [ok], key="k", order_by="ts", max_key_groups=16, parallelism=17)
    with pytest.raises(ValueError, match="parallelism must be an int"):
        simulate(buffer100, [ok], key="k", order_by="ts", parallelism={0: 0})
    with pytest.raises(TypeError, match="fn must be callable"):
        simulate(42, [ok], key="k", order_by="ts")  # type: ignore[arg-type]


def test_output_columns_as_the_output_schema() -> None:
    sim = simulate(
        buffer100,
        BATCHES,
        key="k",
        order_by="ts",
        max_key_groups=16,
        output_columns=("k", "n", "s", "extra"),
    )
    rows = [r for out in sim.outputs for r in out]
    assert rows and all(set(r) == {"k", "n", "s", "extra"} and r["extra"] is None for r in rows)
    with pytest.raises(osp.ObjectSpaceError, match=r"fields \['s'\] that output_schema"):
        simulate(buffer100, BATCHES, key="k", order_by="ts", output_columns=("k", "n"))


def test_importing_testing_does_not_import_spark() -> None:
    code = (
        "import sys, objectspace.testing, objectspace.engine\n"
        "bad = sorted(m for m in ('pyspark', 'pyarrow', 'pandas') if m in sys.modules)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_simulate_equals_the_spark_runner(spark: Any, tmp_path: Any) -> None:
    """The same batches, the same parallelism changes: the same outputs and final state."""
    from objectspace.spark import StatefulRunner

    url = f"sqlite:///{tmp_path}/state.db"
    batches = BATCHES
    parallelism = {0: 1, 1: 3, 3: 8, 5: 2}
    runner = StatefulRunner(
        buffer100,
        key="k",
        order_by="ts",
        output_schema=BUFFER100_SCHEMA,
        storage=url,
        job="spark",
        operator="simulate",
        max_key_groups=16,
    )
    got = []
    for n, rows in enumerate(batches):
        p = parallelism[max(i for i in parallelism if i <= n)]
        got.append(df_rows(runner.process(to_df(spark, rows), checkpoint_id=n, parallelism=p)))
    runner.close()
    sim = simulate(
        buffer100,
        batches,
        key="k",
        order_by="ts",
        max_key_groups=16,
        parallelism=parallelism,
        storage=url,
        job="sim",
    )
    assert [dict_rows(out, BUFFER100_COLUMNS) for out in sim.outputs] == got
    assert sum(len(out) for out in got) > 0
    assert [s.parallelism for s in sim.stats] == [
        s.parallelism for s in list(runner.history)[-len(batches) :]
    ]
    assert dump_state(url, "spark", "simulate") == dump_state(url, "sim", "simulate")


def test_readme_example_runs() -> None:
    """The README's "Testing your functions without Spark" example, as written."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Testing your functions without Spark", 1)[1]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {"buffer100": buffer100}
    exec(code, namespace)
    namespace["test_buffer100_emits_every_hundred_values"]()


def test_task_plan_is_frozen_and_pickles() -> None:
    """The one plan object the driver sends to the tasks: immutable, picklable, and the
    one ``simulate`` runs with."""
    storage = osp.open_storage("memory://testing-plan")
    operator = storage.job("j").operator("o", max_key_groups=8)
    plan = TaskPlan(
        storage=storage,
        info=operator.info,
        compaction=operator.compaction,
        fn=ops.take(2),
        checkpoint_id=0,
        base=None,
        parallelism=2,
        replay=False,
        key_columns=("k",),
        order_columns=("ts",),
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.checkpoint_id = 1  # type: ignore[misc]
    assert not hasattr(plan, "__dict__")
    copy = pickle.loads(pickle.dumps(plan))
    assert (copy.info, copy.parallelism, copy.key_columns) == (plan.info, 2, ("k",))
    instance = plan.restore(1)
    assert (instance.index, instance.parallelism, instance.base) == (1, 2, None)


def test_pending_save_is_a_public_object_that_survives_a_snapshot() -> None:
    storage = osp.open_storage("memory://testing-pending-save")
    job = storage.job("j")
    operator = job.operator("o", max_key_groups=4)
    instance = operator.instance(0, 1)
    instance.space_for_key("k").create_value("v", 1)
    receipt = instance.save(1)
    pending = instance.pending_save
    assert isinstance(pending, PendingSave)
    assert pending.checkpoint_id == 1
    assert pending.write_ids() == [write_id for _, write_id in receipt.writes]
    adopted = Instance.from_snapshot(operator, pickle.loads(pickle.dumps(instance.to_snapshot())))
    assert adopted.pending_save == pending
    assert job.commit(1, [receipt])
    adopted.on_saved()
    assert adopted.pending_save is None and adopted.base == 1
