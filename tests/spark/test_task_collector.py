"""A Spark worker's tasks (and its helpers') keep the state they hold out of the cyclic
collector's collections between batches (:func:`objectspace.collector.keep_frozen`); a
process that runs the same task code outside a Spark task does not."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tests.support.task_plan import TASK_PLAN

# An executor's task without a JVM, in a process of its own (the collector's state is the
# process's): with or without a Spark task context, as a worker has one.
TASK = (
    r"""
import gc
import sys
from pyspark import TaskContext

if sys.argv[2] == "1":
    TaskContext._getOrCreate()
"""
    + TASK_PLAN
    + r"""
from objectspace.collector import keeps_frozen
from objectspace.spark.task import _InstanceTask
from objectspace.keygroups import KeyGroups
groups = KeyGroups(8)
rows = [{"k": k % 5, "ts": k, "v": float(k), "__os_kg": groups.key_group(k % 5)} for k in range(50)]
_InstanceTask(plan, schema)._run(0, rows)
print("keeps", keeps_frozen(), "frozen", gc.get_freeze_count() > 0)
"""
)


@pytest.mark.parametrize("in_task", [True, False])
def test_a_spark_task_keeps_the_state_frozen_between_batches(tmp_path: Any, in_task: bool) -> None:
    done = subprocess.run(
        [sys.executable, "-c", TASK, f"sqlite:///{tmp_path}/s.db", "1" if in_task else "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-4:] == ["keeps", str(in_task), "frozen", str(in_task)]
