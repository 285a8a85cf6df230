"""Run a stateful function or operator over a list of batches without Spark, as the runner would.

:func:`simulate` is the unit-test harness for ``fn(key, rows, state)`` functions and the
operators of :mod:`objectspace.operators`: no Spark, no pyarrow, milliseconds per batch::

    from objectspace.testing import simulate

    sim = simulate(fn, [[{"k": 1, "ts": 1, "v": 2.0}], [{"k": 1, "ts": 2, "v": 3.0}]],
                   key="k", order_by="ts", parallelism={0: 1, 1: 4}, replay=(1,))
    assert sim.outputs[1] == [...]
    assert sim.state(1).value("total").value == 5.0

Each batch runs through the same code as a :class:`~objectspace.spark.StatefulRunner`
batch (:mod:`objectspace.engine`): the :class:`~objectspace.engine.BatchDriver` plans the
base checkpoint and the batch's time, rows are routed to key groups and instances exactly
as the runner routes them (:func:`~objectspace.engine.route_rows`), each instance is
restored from the storage as of the base, feeds each key its rows in ``order_by`` order,
saves its edits as pending checkpoint ``i`` and hands back its receipt; the driver then
commits checkpoint ``i`` and keeps ``retain`` checkpoints.
"""

from __future__ import annotations

from objectspace.engine.simulate import Simulation, simulate

__all__ = ["Simulation", "simulate"]
