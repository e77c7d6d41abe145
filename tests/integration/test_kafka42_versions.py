"""Kafka 4.2's request versions (issue 30, R3, R13, R22): a client pinned to ``api_version=(4, 2)``
sends the versions of Kafka 4.2's table whatever ApiVersions says (kafka-python 3.0 does, as its
own integration suite and many applications pin it). Before issue 30 oncelog closed the
connection on FindCoordinator v6, so init_transactions never completed and groups never formed.

Here: kafka-python pinned to (4, 2) produces, consumes in a group, commits, runs a
consume-transform-produce transaction and describes its group; kafka-python unpinned infers the
broker's version from ApiVersions and finds every API of 4.2's table it uses at 4.2's version or
higher; and Produce v13 (topics by id) is answered by id.
"""

from __future__ import annotations

import datetime
import time
import uuid

import pytest

from oncelog.client import ProtocolClient
from oncelog.protocol import apis, records
from oncelog.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration

PINNED = (4, 2)


def _consume(consumer, want: int, deadline_s: float = 60.0) -> list:  # type: ignore[no-untyped-def]
    got: list = []
    deadline = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            got.extend(batch)
    return got


def test_kafka_python_pinned_to_4_2_groups_and_transactions(broker) -> None:  # type: ignore[no-untyped-def]
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.structs import OffsetAndMetadata

    bs = broker.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bs, api_version=PINNED, request_timeout_ms=20_000)
    try:
        admin.create_topics([NewTopic("in42", 2, 1), NewTopic("out42", 1, 1)])
        producer = KafkaProducer(bootstrap_servers=bs, api_version=PINNED, max_block_ms=30_000)
        for i in range(10):
            producer.send("in42", key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
        producer.flush(timeout=30)
        producer.close()

        consumer = KafkaConsumer("in42", bootstrap_servers=bs, group_id="g42", api_version=PINNED,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 isolation_level="read_committed", consumer_timeout_ms=30_000)
        try:
            got = _consume(consumer, 10)
            assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(10))

            # consume-transform-produce: the input offsets commit with the output records
            txn = KafkaProducer(bootstrap_servers=bs, api_version=PINNED, transactional_id="tx42",
                                max_block_ms=30_000)
            try:
                txn.init_transactions()
                txn.begin_transaction()
                for r in got:
                    txn.send("out42", key=r.key, value=r.value.upper())
                offsets = {TopicPartition("in42", p): OffsetAndMetadata(5, "", -1) for p in (0, 1)}
                txn.send_offsets_to_transaction(offsets, consumer.group_metadata())
                txn.commit_transaction()
            finally:
                txn.close()
            assert consumer.committed(TopicPartition("in42", 0)) == 5
            assert consumer.committed(TopicPartition("in42", 1)) == 5
            # and a plain commit by the group member (OffsetCommit at the pinned table's version)
            consumer.commit({TopicPartition("in42", 1): OffsetAndMetadata(4, "", -1)})
            assert consumer.committed(TopicPartition("in42", 1)) == 4

            described = admin.describe_groups(["g42"])["g42"]  # DescribeGroups v6
            assert described["group_state"] == "Stable" and len(described["members"]) == 1, described
        finally:
            consumer.close()

        reader = KafkaConsumer("out42", bootstrap_servers=bs, api_version=PINNED, auto_offset_reset="earliest",
                               isolation_level="read_committed", enable_auto_commit=False)
        try:
            out = _consume(reader, 10)
            assert sorted(r.value for r in out) == sorted(b"V%d" % i for i in range(10))
        finally:
            reader.close()
    finally:
        admin.close()


def test_kafka_python_infers_a_version_whose_table_oncelog_serves(broker) -> None:  # type: ignore[no-untyped-def]
    """kafka-python's own inference (``infer_broker_version_from_api_versions`` on this broker's
    ApiVersions answer): at least 4.2, and every API of Kafka 4.2's table that oncelog serves is
    advertised up to 4.2's version, so a client pinned to 4.2 sends nothing oncelog refuses."""
    from kafka.admin import KafkaAdminClient
    from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)  # unpinned: infers from ApiVersions
    try:
        inferred = admin._client.check_version()
        advertised = admin._manager.broker_version_data.api_versions
    finally:
        admin.close()
    assert inferred >= PINNED
    assert advertised == apis.advertised(apis.SUPPORTED_VERSIONS)
    short = {k: (advertised[k], v) for k, v in BROKER_API_VERSIONS[PINNED].items()
             if k in advertised and advertised[k][1] < v[1]}
    assert short == {}, f"advertised below Kafka 4.2 (ours, 4.2's): {short}"


def test_produce_v13_names_topics_by_id(broker) -> None:  # type: ignore[no-untyped-def]
    """Produce v13 (KIP-516): the topic by its id, answered by the same id; an unknown id is
    UNKNOWN_TOPIC_ID on each of its partitions; the record lands in the topic named by the id."""
    from confluent_kafka import Consumer
    from kafka_clients import create_topic

    create_topic("confluent", broker.bootstrap, "byid", 1)
    with ProtocolClient(broker.bootstrap) as c:
        m = c.classes(apis.METADATA, 12)
        md = c.request(apis.METADATA, m["MetadataRequest"](
            topics=(m["MetadataRequestTopic"](name="byid", topic_id=None),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False), version=12)
        topic_id = md.topics[0].topic_id
        assert topic_id is not None and topic_id.int != 0
        unknown = uuid.uuid4()
        batch = records.build_batch([(b"k", b"by-id", ())], timestamp_ms=int(time.time() * 1000))
        p = c.classes(apis.PRODUCE, 13)
        res = c.request(apis.PRODUCE, p["ProduceRequest"](
            transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
            topic_data=tuple(
                p["TopicProduceData"](topic_id=tid, partition_data=(p["PartitionProduceData"](index=0, records=batch),))
                for tid in (topic_id, unknown))), version=13)
        known, missing = res.responses
        assert known.topic_id == topic_id and missing.topic_id == unknown
        assert (known.partition_responses[0].error_code, known.partition_responses[0].base_offset) == (ErrorCode.none, 0)
        assert missing.partition_responses[0].error_code == ErrorCode.unknown_topic_id
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "byid-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe(["byid"])
        deadline = time.monotonic() + 30
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error():
                msg = None
        assert msg is not None and msg.value() == b"by-id" and msg.key() == b"k"
    finally:
        consumer.close()
