"""The runner's use of :mod:`objectspace.spark.preflight`: its ``require_c`` reaches every
task, and a task on the pure-Python collections fails before it touches state when the
driver asked for C."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from objectspace import operators as ops
from objectspace.spark import StatefulRunner, preflight
from tests.support.spark import spark  # noqa: F401
from tests.support.task_plan import TASK_PLAN

# An executor's task, without a JVM: the plan a driver makes, run by the task class the
# Spark tasks use, in a process on the pure-Python collections.
TASK = (
    TASK_PLAN
    + r"""
from objectspace.spark.preflight import DeploymentError, c_extension_in_use
from objectspace.spark.task import _InstanceTask

print("c", c_extension_in_use())
try:
    _InstanceTask(plan, schema, require_c=sys.argv[2] == "1")._run(0, [])
except DeploymentError as exc:
    print("refused:", exc)
    print("committed", job.checkpoints())
else:
    print("ran")
"""
)


@pytest.mark.parametrize("require_c", [True, False])
def test_a_task_on_pure_python_fails_when_c_was_required(tmp_path: Any, require_c: bool) -> None:
    if not preflight.c_extension_in_use():
        pytest.skip("this interpreter has no C extension to compare with")
    done = subprocess.run(
        [sys.executable, "-c", TASK, f"sqlite:///{tmp_path}/s.db", "1" if require_c else "0"],
        env={**os.environ, "OBJECTSPACE_PURE_PYTHON": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "c False" in done.stdout
    if require_c:
        assert "refused: the driver requires objectspace's C extension" in done.stdout
        assert "OBJECTSPACE_PURE_PYTHON is set" in done.stdout
        assert "committed []" in done.stdout
    else:
        assert "ran" in done.stdout


def test_runner_requires_c_when_its_driver_has_it(spark: Any, tmp_path: Any) -> None:  # noqa: F811
    def runner(**options: Any) -> StatefulRunner:
        return StatefulRunner(
            ops.aggregate("sum"),
            key="k",
            order_by="ts",
            output_schema="k long, sum double",
            storage=f"sqlite:///{tmp_path}/state.db",
            job=f"j{len(options)}{options.get('require_c')}",
            operator="op",
            **options,
        )

    assert runner().require_c is preflight.c_extension_in_use()
    assert runner(require_c=False).require_c is False
    on = runner(require_c=True)
    df = spark.createDataFrame([(1, 1, 2.0), (1, 2, 3.0)], "k long, ts long, v double")
    out = on.process(df, 0, parallelism=1)  # a local master: storage unchecked, C in use
    assert [tuple(r) for r in out.collect()] == [(1, 5.0)]
    with pytest.raises(TypeError, match="require_c"):
        runner(require_c="yes")
