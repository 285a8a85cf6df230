"""A local Spark session set up for objectspace."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["local_session"]


def local_session(master: str = "local[2]", app_name: str = "objectspace", **conf: str) -> Any:
    """A SparkSession for local runs and tests, whose Python workers use this interpreter
    (so they import the same objectspace), with small shuffles and no UI."""
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.pyspark.python", sys.executable)
    )
    for name, value in conf.items():
        builder = builder.config(name.replace("__", "."), value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
