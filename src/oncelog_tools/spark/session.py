"""A SparkSession for oncelog's own jobs: loopback only, quiet, the data source registered.

The demo pipeline, the benchmarks and the Spark tests all need the same thing: a driver that
binds and advertises 127.0.0.1 only (nothing leaves the machine), Python workers running this
interpreter, no web UI or console progress bars, reused Python workers, and the ``oncelog``
format registered. ``loopback_session`` is that, with each caller's own settings on top.
"""

from __future__ import annotations

import os
import sys
from typing import Any

HOST = "127.0.0.1"


def loopback_session(master: str, app_name: str, *, shuffle_partitions: int = 2, log_level: str = "ERROR",
                     conf: dict[str, str] | None = None) -> Any:
    """Get or create the SparkSession on ``master`` (``local[…]`` or a ``spark://`` URL) and
    register the oncelog data source. ``conf`` is applied last and wins. Environment variables a
    caller set before (PYSPARK_PYTHON, PYSPARK_DRIVER_PYTHON, SPARK_LOCAL_IP) are kept."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", HOST)
    from pyspark.sql import SparkSession

    from oncelog.spark import register

    settings = {
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.worker.reuse": "true",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        **(conf or {}),
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    return spark
