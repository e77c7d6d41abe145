"""One local SparkSession (local[2]) for the whole test session, with the ``oncelog`` format
registered. Starting Spark costs 6-20 s here, so every Spark test shares it; each test uses its
own broker (the ``broker`` fixture), topics and checkpoint directories.

Spark needs Java and PySpark; in CI a missing one is an error, never a skip.
"""

from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator:
    # Workers must run this venv's interpreter (the one with oncelog and confluent-kafka), and
    # Spark must listen on loopback only.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from oncelog.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("oncelog-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
