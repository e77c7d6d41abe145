"""PySpark data source ``oncelog``: a Structured Streaming source and an exactly-once sink that
talk to any Kafka-compatible cluster through confluent-kafka (R23, R24). See docs/SPARK.md.

    from oncelog.spark import register
    register(spark)
    df = spark.readStream.format("oncelog").option("kafka.bootstrap.servers", bs) \\
        .option("subscribe", "orders").load()

Importing this package does not import PySpark; ``register`` and ``OncelogDataSource`` do.
"""

from __future__ import annotations

import logging
import os
from typing import Any


def _worker_logging() -> None:
    """Spark's Python workers configure no logging. With ``ONCELOG_SPARK_LOG=<level>`` in the
    environment (inherited by the JVM and its workers), the connector logs to stderr, which
    Spark passes on to the driver's console (local mode) or the executors' logs."""
    level = os.environ.get("ONCELOG_SPARK_LOG")
    logger = logging.getLogger("oncelog.spark")
    if not level or logger.handlers:
        return
    h = logging.StreamHandler()
    h.setFormatter(logging.Formatter("%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"))
    logger.addHandler(h)
    logger.setLevel(level.upper())


_worker_logging()


def register(spark: Any) -> None:
    """Register the ``oncelog`` format on a SparkSession."""
    from oncelog.spark.source import OncelogDataSource

    spark.dataSource.register(OncelogDataSource)


def __getattr__(name: str) -> Any:
    if name == "OncelogDataSource":
        from oncelog.spark.source import OncelogDataSource

        return OncelogDataSource
    raise AttributeError(name)


__all__ = ["OncelogDataSource", "register"]
