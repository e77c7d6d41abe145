"""Helpers for the Spark tests: topics, producing, reading back with a real consumer.

Everything here uses confluent-kafka as an application would; every loop is bounded in time.
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

Record = tuple[str, int, int, bytes | None, bytes | None]  # topic, partition, offset, key, value


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()], operation_timeout=10)
    for f in futs.values():
        f.result(timeout=30)


def produce(bootstrap: str, topic: str, items: Iterable[tuple[int, bytes | None, bytes]], headers: bool = False) -> int:
    """Produce (partition, key, value) items with an idempotent producer; returns the count."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    errors: list[Any] = []
    n = 0
    for part, key, value in items:
        kw: dict[str, Any] = {"partition": part, "key": key, "value": value}
        if headers:
            kw["headers"] = [("n", str(n).encode()), ("empty", b"")]
        while True:
            try:
                p.produce(topic, on_delivery=lambda e, m: errors.append(e) if e else None, **kw)
                break
            except BufferError:
                p.poll(0.05)
        n += 1
    assert p.flush(60) == 0, "records not delivered"
    assert not errors, errors[:3]
    return n


def latest_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "oncelog-test-offsets"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in range(partitions)}
    finally:
        c.close()


def read_all(bootstrap: str, topic: str, partitions: int, *, isolation: str = "read_committed", timeout: float = 60.0) -> list[Record]:
    """Every record of ``topic`` up to the end offsets seen at the start, read with
    ``isolation``; stops at end-of-partition on every partition (bounded by ``timeout``)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "oncelog-test-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    out: list[Record] = []
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"read_all({topic}) timed out; {len(out)} records, at end: {at_end}"
            for m in c.consume(num_messages=10000, timeout=0.2):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                        continue
                    raise RuntimeError(m.error())
                at_end.discard(m.partition())
                out.append((m.topic(), m.partition(), m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return out


def items(n: int, partitions: int, tag: str) -> list[tuple[int, bytes, bytes]]:
    return [(i % partitions, f"k{i}".encode(), f"{tag}-{i:07d}".encode()) for i in range(n)]


def stream(spark: Any, bootstrap: str, **options: str) -> Any:
    r = spark.readStream.format("oncelog").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def run_available_now(
    df: Any, checkpoint: str, *, fmt: str = "collect", into: list | None = None, timeout: float = 180.0, **options: str
) -> Any:
    """Run ``df`` to a sink with Trigger.AvailableNow until it stops; returns the query.

    ``fmt="collect"`` appends ``(batch_id, row)`` for every row to ``into`` (foreachBatch in the
    driver; restartable from the checkpoint, unlike the memory sink)."""
    w = df.writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)
    if fmt == "collect":
        assert into is not None
        w = w.foreachBatch(lambda batch, batch_id: into.extend((batch_id, r) for r in batch.collect()))
    else:
        w = w.format(fmt)
    for k, v in options.items():
        w = w.option(k, v)
    q = w.start()
    finished = q.awaitTermination(timeout)
    if not finished:
        q.stop()
        raise AssertionError(f"query on {checkpoint} did not finish in {timeout}s")
    if q.exception() is not None:
        raise AssertionError(f"query on {checkpoint} failed: {q.exception()}")
    return q


def batches_with_data(query: Any) -> int:
    return sum(1 for p in query.recentProgress if p["numInputRows"] > 0)


def txn_producer(bootstrap: str, transactional_id: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5})
    p.init_transactions(30)
    return p


def produce_in_txn(p: Producer, topic: str, items: Iterable[tuple[int, bytes | None, bytes]], *, end: str | None) -> None:
    """One transaction of ``items``; ``end`` is 'commit', 'abort' or None (left open, flushed)."""
    p.begin_transaction()
    for part, key, value in items:
        p.produce(topic, partition=part, key=key, value=value)
    p.flush(30)
    if end == "commit":
        p.commit_transaction(30)
    elif end == "abort":
        p.abort_transaction(30)


def group_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """Committed offsets of ``group`` (stable: pending transactional offsets are waited for)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], require_stable=True, request_timeout=10)
    got = res[group].result(timeout=20)
    return {(tp.topic, tp.partition): tp.offset for tp in got.topic_partitions or [] if tp.offset >= 0}


def run_expect_failure(df: Any, checkpoint: str, *, fmt: str, timeout: float = 180.0, **options: str) -> str:
    """Run a query that must fail; returns the failure's text."""
    w = df.writeStream.format(fmt).option("checkpointLocation", checkpoint).trigger(availableNow=True)
    for k, v in options.items():
        w = w.option(k, v)
    q = w.start()
    try:
        q.awaitTermination(timeout)
    except Exception as exc:  # StreamingQueryException
        return str(exc)
    if q.isActive:
        q.stop()
        raise AssertionError(f"query on {checkpoint} neither failed nor finished in {timeout}s")
    raise AssertionError(f"query on {checkpoint} finished without the expected failure")
