"""Registry-framed Avro in a Spark pipeline (docs/SPARK.md "Avro with the schema registry"):
records written by confluent-kafka's AvroSerializer are read by the ``oncelog`` source as typed
columns (``from_confluent_avro``), transformed, and written to another topic as registry-framed
Avro (``to_confluent_avro``) by the exactly-once sink in a streaming query; the output, read
with read_committed and confluent-kafka's AvroDeserializer, holds every record exactly once."""

from __future__ import annotations

import json

import pytest

from sparkutil import create_topics, read_all, run_available_now, stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]

USER = json.dumps({"type": "record", "name": "User", "namespace": "t", "fields": [
    {"name": "name", "type": "string"}, {"name": "age", "type": "int"},
    {"name": "email", "type": ["null", "string"], "default": None}]})


def test_avro_records_are_columns_and_are_written_exactly_once(spark, broker_factory, tmp_path) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from pyspark.sql import types as T
    from pyspark.sql.functions import col, struct

    from oncelog.process import free_port
    from oncelog.spark.avro import from_confluent_avro, to_confluent_avro

    address = f"127.0.0.1:{free_port()}"
    b = broker_factory(overrides={"schema.registry.listen": address})
    url, bs = f"http://{address}", b.bootstrap
    create_topics(bs, {"people": 2, "adults": 2})
    sr = SchemaRegistryClient({"url": url})
    ser = AvroSerializer(sr, USER)
    people = [{"name": f"p{i}", "age": 10 + i, "email": None if i % 3 else f"p{i}@x"} for i in range(40)]
    p = Producer({"bootstrap.servers": bs})
    for i, person in enumerate(people):
        p.produce("people", ser(person, SerializationContext("people", MessageField.VALUE)), partition=i % 2)
    assert p.flush(30) == 0

    # a streaming pipeline: typed columns in, registry-framed Avro out, exactly once
    adults = (stream(spark, bs, subscribe="people", startingOffsets="earliest")
              .select(from_confluent_avro("value", url, USER).alias("u")).select("u.*")
              .where(col("age") >= 30).withColumn("age", col("age") + 1))
    assert [(f.name, f.dataType) for f in adults.schema.fields] == [  # the source's rows as typed columns
        ("name", T.StringType()), ("age", T.IntegerType()), ("email", T.StringType())]
    out = adults.select(to_confluent_avro(struct("name", "age", "email"), url, "adults-value", USER).alias("value"))
    ckpt = str(tmp_path / "ckpt")
    run_available_now(out, ckpt, fmt="oncelog", **{"kafka.bootstrap.servers": bs, "topic": "adults"})

    de = AvroDeserializer(sr)
    got = [de(v, SerializationContext("adults", MessageField.VALUE)) for *_, v in read_all(bs, "adults", 2)]
    want = [{**x, "age": x["age"] + 1} for x in people if x["age"] >= 30]
    assert sorted(got, key=lambda x: x["name"]) == sorted(want, key=lambda x: x["name"])
    assert sr.get_latest_version("adults-value").schema.schema_type == "AVRO"
