"""The ``oncelog`` data source: the one class Spark registers (``spark.dataSource.register``).

It only parses options and hands out readers and writers; all work is in ``reader``/``fetch``
(source) and ``writer``/``exactly_once`` (sink). Spark pickles this object to other processes,
so it holds nothing but the options mapping.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

from oncelog.spark.options import SinkOptions, SourceOptions
from oncelog.spark.schema import source_schema


class OncelogDataSource(DataSource):
    """``spark.readStream.format("oncelog")`` / ``df.writeStream.format("oncelog")``, with the
    options of Spark's Kafka connector (see docs/SPARK.md)."""

    @classmethod
    def name(cls) -> str:
        return "oncelog"

    def schema(self) -> Any:
        opts = {str(k).lower(): str(v) for k, v in self.options.items()}
        include = opts.get("includeheaders", "false").strip().lower() == "true"
        return source_schema(include)

    def reader(self, schema: Any) -> DataSourceReader:
        from oncelog.spark.reader import OncelogBatchReader

        return OncelogBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        from oncelog.spark.reader import OncelogStreamReader

        return OncelogStreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        from oncelog.spark.writer import OncelogBatchWriter

        return OncelogBatchWriter(SinkOptions.parse(self.options), schema)

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        from oncelog.spark.writer import OncelogStreamWriter

        return OncelogStreamWriter(SinkOptions.parse(self.options), schema)
