"""A local Spark session set up for objectspace, and what the runner asks of a session,
classic or Spark Connect alike: its application id, its default parallelism and the
description of the Spark jobs it starts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "application_id",
    "default_parallelism",
    "executor_cores",
    "is_connect",
    "job_description",
    "local_session",
]


def local_session(
    master: str = "local[2]", app_name: str = "objectspace", *, connect: bool = False, **conf: str
) -> Any:
    """A SparkSession for local runs and tests, whose Python workers use this interpreter
    (so they import the same objectspace), with small shuffles and no UI.

    ``connect=True``: a Spark Connect session, ``SparkSession.builder.remote(master)``,
    whose server (a local Spark with the Connect plugin, started in this process) runs the
    queries; this process is a Connect client from then on (PySpark allows no classic
    session beside it). Needs PySpark's ``connect`` extra (grpcio, grpcio-status,
    googleapis-common-protos)."""
    import sys
    import warnings

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.remote(master) if connect else SparkSession.builder.master(master)
    )
    builder = (
        builder.appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.pyspark.python", sys.executable)
    )
    for name, value in conf.items():
        builder = builder.config(name.replace("__", "."), value)
    with warnings.catch_warnings():
        # A Connect client applies the builder's options to its session too, where the
        # server's startup ones (the UI's) cannot change: they were the server's already.
        warnings.filterwarnings("ignore", message="Failed to set", category=UserWarning)
        session = builder.getOrCreate()
    if not connect:
        session.sparkContext.setLogLevel("ERROR")
    return session


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session: a client of a Spark server, with no
    SparkContext (no ``sparkContext``, no RDDs, no ``_jdf``) on this side. The function a
    ``foreachBatch`` of a Connect query runs in the server's Python process gets such a
    session too."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def application_id(spark: Any) -> str:
    """The Spark application's id (``spark.app.id``), classic or Connect; ``""`` when the
    session cannot say."""
    try:
        if is_connect(spark):
            return str(spark.conf.get("spark.app.id", "") or "")
        return str(spark.sparkContext.applicationId)
    except Exception:  # a session that cannot say: callers name the owner otherwise
        return ""


def default_parallelism(spark: Any) -> int:
    """Spark's default parallelism (``SparkContext.defaultParallelism``: the cores of the
    executors, or ``spark.default.parallelism`` when set).

    Under Spark Connect, which has no SparkContext: ``spark.default.parallelism`` when the
    session sets it, else the partitions of ``spark.range`` (Spark splits a range into
    ``spark.sql.leafNodeDefaultParallelism`` partitions, the default parallelism unless
    set): one small Spark job, which callers should run once per session."""
    if not is_connect(spark):
        return max(1, int(spark.sparkContext.defaultParallelism))
    value = spark.conf.get("spark.default.parallelism", None)
    if value:
        return max(1, int(value))
    with job_description(spark, "objectspace: the default parallelism"):
        row = spark.range(0, 1 << 16).selectExpr("spark_partition_id() AS p").agg({"p": "max"})
        return int(row.first()[0]) + 1


def executor_cores(spark: Any) -> int:
    """The cores one executor runs tasks on: ``spark.executor.cores`` when the session sets
    it, else ``N`` of a ``local[N]`` master (``local[*]``: this machine's CPUs), else 1
    (a cluster whose executors take what their workers have: not known here). Python
    workers reused between tasks (``spark.python.worker.reuse``, Spark's default) are
    required for more than 1: see :mod:`objectspace.spark.helpers`."""
    try:
        conf = spark.conf
        if str(conf.get("spark.python.worker.reuse", "true")).strip().lower() != "true":
            return 1
        cores = conf.get("spark.executor.cores", None)
        if cores:
            return max(1, int(cores))
        master = str(conf.get("spark.master", "") or "").strip()
    except Exception:  # a session that cannot say: one
        return 1
    if master.startswith("local[") and master.endswith("]"):
        threads = master[len("local[") : -1].split(",")[0].strip()
        if threads == "*":
            return os.cpu_count() or 1
        if threads.isdigit():
            return max(1, int(threads))
    return 1


_DESCRIPTION = "spark.job.description"


@contextmanager
def job_description(spark: Any, text: str) -> Iterator[None]:
    """Give the Spark jobs started inside the block the description ``text`` (the Spark
    UI's Jobs page shows it, and ``JobData.description`` in its REST API), then restore
    the one before.

    Classic: ``SparkContext.setJobDescription`` (a property of the calling thread).
    Spark Connect: the session's ``spark.job.description`` configuration, which the
    server gives the jobs of the session's operations."""
    if is_connect(spark):
        conf = spark.conf
        previous = conf.get(_DESCRIPTION, None)
        conf.set(_DESCRIPTION, text)
        try:
            yield
        finally:
            if previous is None:
                conf.unset(_DESCRIPTION)
            else:
                conf.set(_DESCRIPTION, previous)
        return
    context = spark.sparkContext
    previous = context.getLocalProperty(_DESCRIPTION)
    context.setJobDescription(text)
    try:
        yield
    finally:
        context.setLocalProperty(_DESCRIPTION, previous)
