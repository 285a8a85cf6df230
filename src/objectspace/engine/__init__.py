"""Layer 5: the batch engine the Spark runner and :func:`simulate` share.

A batch is one protocol, written once: the driver's :class:`BatchDriver` plans it
(``begin``: the checkpoint it runs on, its time, the frozen :class:`TaskPlan`), the tasks run
the plan's instances (:func:`route_rows` routes rows to instances, :func:`group_rows` groups
an instance's rows by key, :func:`run_instance` runs and saves it), and the driver commits
the receipts (``finish`` → :class:`BatchStats`). The Spark runner runs the tasks inside Spark
tasks (:mod:`objectspace.spark`); :func:`simulate` runs them in this process, exactly alike.

Modules: ``columns`` (reserved columns, argument checks), ``plan`` (:class:`TaskPlan`),
``routing``, ``task`` (the per-instance loop), ``stats``, ``time_driver`` (the driver's
watermark, batch times and deadlines), ``driver`` (:class:`BatchDriver`), ``simulate``.
Nothing here imports pyspark, pandas or pyarrow.
"""

from __future__ import annotations

from objectspace.engine.columns import (
    INSTANCE_COLUMN,
    KEY_GROUP_COLUMN,
    RECEIPT_COLUMN,
    RESERVED_COLUMNS,
    TICK_COLUMN,
    check_input_columns,
    check_output_columns,
    check_parallelism,
    check_retain,
    column_names,
)
from objectspace.engine.driver import BatchDriver
from objectspace.engine.plan import INLINE_STATE_BYTES, StatefulFunction, TaskPlan, plan_base
from objectspace.engine.residency import (
    Residency,
    adopt,
    heads_match,
    instance_identity,
    parse_bytes,
)
from objectspace.engine.routing import route_rows
from objectspace.engine.simulate import Simulation, simulate
from objectspace.engine.stats import NO_TIME, BatchStats, TaskStats, finish_task
from objectspace.engine.task import (
    KeyColumns,
    OrderedRows,
    group_columns,
    group_rows,
    order_rows,
    run_instance,
    takes_columns,
)
from objectspace.engine.time_driver import TIME_OPERATOR_SUFFIX, TimeDriver, TimeOptions, TimePlan

__all__ = [
    "INLINE_STATE_BYTES",
    "INSTANCE_COLUMN",
    "KEY_GROUP_COLUMN",
    "NO_TIME",
    "RECEIPT_COLUMN",
    "RESERVED_COLUMNS",
    "TICK_COLUMN",
    "TIME_OPERATOR_SUFFIX",
    "BatchDriver",
    "BatchStats",
    "KeyColumns",
    "OrderedRows",
    "Residency",
    "Simulation",
    "StatefulFunction",
    "TaskPlan",
    "TaskStats",
    "TimeDriver",
    "TimeOptions",
    "TimePlan",
    "adopt",
    "check_input_columns",
    "check_output_columns",
    "check_parallelism",
    "check_retain",
    "column_names",
    "finish_task",
    "group_columns",
    "group_rows",
    "heads_match",
    "instance_identity",
    "order_rows",
    "parse_bytes",
    "plan_base",
    "route_rows",
    "run_instance",
    "simulate",
    "takes_columns",
]
