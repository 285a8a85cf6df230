"""Layer 7: keyed stateful processing on Spark, with object-space state and exactly-once checkpoints.

The only package that imports pyspark. Modules: ``runner`` (the driver:
:class:`StatefulRunner`, around the :class:`~objectspace.engine.BatchDriver` that
:func:`objectspace.testing.simulate` runs too), ``task`` (the executor task: Arrow in and
out, the instance cache and snapshots, around the engine's per-instance loop), ``routing``
(key groups and instances as Spark SQL expressions, and the marker rows of instances with
something due), ``receipts`` (the wire format of a task's receipt and stats), ``cache`` (the
worker's :class:`~objectspace.spark.cache.InstanceCache` and the snapshot file format),
``state`` (:func:`read_state`), ``session`` (:func:`local_session`, and what works alike on a
classic and a Spark Connect session), ``ticks`` (:func:`with_ticks`, batches for a quiet
stream), ``metrics`` (each batch's statistics committed with its checkpoint, and
:class:`StateMetrics`: them beside a streaming query's progress), ``preflight`` (the checks a
query runs when it starts: storage every executor sees, the C extension on executors).

:class:`StatefulRunner` runs a function ``fn(key, rows, state)`` (or an operator of
:mod:`objectspace.operators`) over a DataFrame, batch by batch::

    runner = StatefulRunner(buffer100, key="k", order_by="ts",
                            output_schema="k long, n long, s double",
                            storage="sqlite:///state.db", job="demo", operator="buffer100",
                            max_key_groups=128, parallelism=4)
    out = runner.process(batch_df, checkpoint_id=7)
    query = stream.writeStream.foreachBatch(runner.foreach_batch(sink)).start()

How a batch runs:

1. On the driver: check the input, open the operator (its ``max_key_groups`` is fixed),
   and decide the base checkpoint, the last one committed before this batch.
2. Key groups and instances are computed in the JVM (``pmod(xxhash64(key), G)`` and the
   contiguous range formula), so rows are routed without a Python pass; then
   ``groupBy(instance).applyInArrow`` runs each instance inside a Spark task. The instance
   restores (or keeps cached in the Python worker) its key groups as of the base, feeds
   each key its rows in ``order_by`` order, and saves the changes as pending checkpoint N.
   Its receipt travels back as one extra row.
3. Only when every task succeeded does the driver commit N with the receipts, in one
   catalog transaction. A replayed batch id (query restart, retried batch) restores as of
   the checkpoint before N, yields the same output, and commits nothing twice. Task
   retries and speculative attempts leave pending writes that are never committed.

``parallelism`` may change between batches and across restarts: each instance restores
exactly the key groups of its new range. ``max_key_groups`` may not.

Restoring every instance at every batch would dominate small micro-batches, so a Python
worker keeps the instances it ran (``cache.WORKER``), and after each save writes a snapshot of
the instance to a local file that the other Python workers of the machine read: Spark hands
tasks to idle workers in turn, so the worker that runs an instance next is often not the one
that ran it last. A cached instance or a snapshot is adopted only when it is exactly the
committed state the batch runs on (see :meth:`objectspace.spark.task._InstanceTask._adopt_snapshot`); anything else
is restored from storage.
"""

from __future__ import annotations

from objectspace.engine import RESERVED_COLUMNS, BatchStats, StatefulFunction, TaskStats
from objectspace.spark.metrics import StateMetrics
from objectspace.spark.runner import StatefulRunner
from objectspace.spark.session import local_session
from objectspace.spark.state import read_state
from objectspace.spark.ticks import with_ticks

__all__ = [
    "RESERVED_COLUMNS",
    "BatchStats",
    "StateMetrics",
    "StatefulFunction",
    "StatefulRunner",
    "TaskStats",
    "local_session",
    "read_state",
    "with_ticks",
]
