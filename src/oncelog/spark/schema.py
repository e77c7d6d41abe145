"""Row schemas: what the source produces and what the sink accepts — those of Spark's Kafka
connector, so a pipeline written for it runs unchanged on ``format("oncelog")``.

Source rows: ``key binary, value binary, topic string, partition int, offset long,
timestamp timestamp, timestampType int`` and, with ``includeHeaders``, ``headers
array<struct<key: string, value: binary>>``. ``timestampType`` is Kafka's id: 0 CreateTime,
1 LogAppendTime, -1 none.

Sink columns: ``value`` (binary or string, required), ``key`` (binary or string), ``topic``
(string; the ``topic`` option overrides it), ``partition`` (int), ``headers`` (as above). Other
columns are an error, as in Spark, so a typo does not silently drop data.
"""

from __future__ import annotations

from typing import Any

SINK_COLUMNS = ("key", "value", "topic", "partition", "headers")


def source_schema(include_headers: bool) -> Any:
    """The source's ``StructType`` (built without a session: DDL parsing needs one)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def check_sink_schema(schema: Any, *, topic_option: str | None) -> None:
    """Raise ValueError if a DataFrame with ``schema`` cannot be written to the sink."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType

    by_name = {f.name.lower(): f.dataType for f in schema.fields}
    unknown = sorted(set(by_name) - set(SINK_COLUMNS))
    if unknown:
        raise ValueError(f"oncelog sink: unexpected columns {unknown}; the sink takes {list(SINK_COLUMNS)}")
    if "value" not in by_name:
        raise ValueError("oncelog sink: a 'value' column (binary or string) is required")
    for col in ("key", "value"):
        if col in by_name and not isinstance(by_name[col], (BinaryType, StringType)):
            raise ValueError(f"oncelog sink: column '{col}' must be binary or string, not {by_name[col].simpleString()}")
    if "topic" in by_name and not isinstance(by_name["topic"], StringType):
        raise ValueError(f"oncelog sink: column 'topic' must be a string, not {by_name['topic'].simpleString()}")
    if topic_option is None and "topic" not in by_name:
        raise ValueError("oncelog sink: set the 'topic' option or provide a 'topic' column")
    if "partition" in by_name and not isinstance(by_name["partition"], IntegerType):
        raise ValueError(f"oncelog sink: column 'partition' must be an int, not {by_name['partition'].simpleString()}")
    if "headers" in by_name and not isinstance(by_name["headers"], ArrayType):
        raise ValueError("oncelog sink: column 'headers' must be array<struct<key: string, value: binary>>")
