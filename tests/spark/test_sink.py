"""The ``oncelog`` sink in at-least-once mode (the mode Spark's own Kafka sink has; here an
opt-in, ``delivery.guarantee=at_least_once``), batch and streaming, on a real local Spark and a
real broker. Column handling is the same in both modes."""

from __future__ import annotations

from collections import Counter

import pytest

from sparkutil import create_topics, items, produce, read_all, run_available_now, stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ALO = {"delivery.guarantee": "at_least_once"}


def test_batch_write_of_a_dataframe_lands_in_the_topic(spark, broker) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"out": 3})
    rows = [(f"k{i}", f"v{i:05d}".encode()) for i in range(5000)]
    df = spark.createDataFrame(rows, "key string, value binary").repartition(2)
    df.write.format("oncelog").option("kafka.bootstrap.servers", bs).option("topic", "out").options(**ALO).mode("append").save()

    got = read_all(bs, "out", 3)
    assert Counter((k, v) for *_, k, v in got) == Counter((k.encode(), v) for k, v in rows)
    # Same key, same partition: the client's default partitioner was used.
    part_of: dict[bytes, int] = {}
    for _t, p, _o, k, _v in got:
        assert part_of.setdefault(k, p) == p


def test_topic_partition_and_headers_columns(spark, broker) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"ca": 2, "cb": 2})
    data = [("ca" if i % 2 else "cb", i % 2, None if i % 3 == 0 else f"k{i}", f"v{i}", [("h", f"{i}".encode())]) for i in range(100)]
    df = spark.createDataFrame(data, "topic string, partition int, key string, value string, headers array<struct<key: string, value: binary>>")
    df.write.format("oncelog").option("kafka.bootstrap.servers", bs).options(**ALO).mode("append").save()

    back = (
        spark.read.format("oncelog").option("kafka.bootstrap.servers", bs).option("subscribe", "ca,cb")
        .option("includeHeaders", "true").load().collect()
    )
    assert len(back) == 100
    want = {(t, p, k, v, h[0][1]) for t, p, k, v, h in data}
    got = {
        (r["topic"], r["partition"], None if r["key"] is None else bytes(r["key"]).decode(), bytes(r["value"]).decode(),
         bytes(r["headers"][0]["value"]))
        for r in back
    }
    assert got == want


def test_sink_rejects_unknown_columns_and_missing_topic(spark, broker) -> None:
    df = spark.createDataFrame([("a", "b")], "value string, extra string")
    with pytest.raises(Exception, match="unexpected columns"):
        df.write.format("oncelog").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", "x").options(**ALO).mode("append").save()
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="topic"):
        df.write.format("oncelog").option("kafka.bootstrap.servers", broker.bootstrap).options(**ALO).mode("append").save()


def test_streaming_pipeline_topic_to_topic_at_least_once(spark, broker, tmp_path) -> None:
    """source -> transform -> sink, the shape of the demo pipeline, in at-least-once mode: in a
    run without failures the output is exactly the transformed input."""
    bs = broker.bootstrap
    create_topics(bs, {"in": 2, "out": 2})
    src = items(2000, 2, "p")
    produce(bs, "in", src)
    df = stream(spark, bs, subscribe="in", startingOffsets="earliest", maxOffsetsPerTrigger="700")
    out = df.selectExpr("key", "concat(value, cast('!' as binary)) as value")
    run_available_now(out, str(tmp_path / "ckpt"), fmt="oncelog", **{"kafka.bootstrap.servers": bs, "topic": "out", **ALO})
    got = read_all(bs, "out", 2)
    assert Counter(v for *_, v in got) == Counter(v + b"!" for _, _, v in src)
