"""PySpark data source ``oncelog``: a Structured Streaming source and an exactly-once sink that
talk to any Kafka-compatible cluster through confluent-kafka (R23, R24). See docs/SPARK.md.

    from oncelog.spark import register
    register(spark)
    df = spark.readStream.format("oncelog").option("kafka.bootstrap.servers", bs) \\
        .option("subscribe", "orders").load()

Importing this package does not import PySpark; ``register`` and ``OncelogDataSource`` do.
"""

from __future__ import annotations

from typing import Any


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
