"""Ticks for a quiet stream: micro-batches that carry no rows, so that timers and TTL fire
when no input arrives.

Why a helper: Spark plans a micro-batch only when a source has new data, or when a stateful
operator of the query's own plan asks for one (``shouldRunAnotherBatch``: its watermark
moved, or, for ``transformWithState`` in processing time, at every trigger). A
:class:`~objectspace.spark.StatefulRunner` keeps its state outside Spark's plan, behind
``foreachBatch``, so Spark never plans a batch for it without input. :func:`with_ticks`
adds Spark's ``rate`` source to the stream: each trigger then has rows, the runner drops
them before anything runs (they count nowhere, carry no event time and never reach the
function), and the batch fires what is due: in event mode the timers and TTL that the
watermark of the last data reached (what Spark's own no-data batch does), in processing
time those that the batch time reached.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from objectspace.engine import TICK_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["TICK_COLUMN", "with_ticks"]


def with_ticks(stream: DataFrame, rows_per_second: int = 1) -> DataFrame:
    """``stream`` with tick rows from Spark's ``rate`` source (``rows_per_second`` of them,
    at least 1), marked in column :data:`~objectspace.engine.TICK_COLUMN`, which the runner
    drops. How often a quiet stream then runs a batch is the query's trigger interval
    (``trigger(processingTime="10 seconds")``); every batch costs a catalog commit, so pick
    an interval, not the default continuous trigger. Example::

        query = (with_ticks(spark.readStream.schema(ddl).json(folder))
                 .writeStream.foreachBatch(runner.foreach_batch(sink))
                 .trigger(processingTime="10 seconds").start())
    """
    if type(rows_per_second) is not int or rows_per_second < 1:
        raise ValueError(f"rows_per_second is an int >= 1, not {rows_per_second!r}")
    ticks = (
        stream.sparkSession.readStream.format("rate")
        .option("rowsPerSecond", rows_per_second)
        .load()
        .selectExpr(f"true AS `{TICK_COLUMN}`")
    )
    return stream.unionByName(ticks, allowMissingColumns=True)
