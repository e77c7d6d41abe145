"""Issue 26: requests that are well framed but ask for what the broker must refuse (R22) — a
Metadata v10/v11 topic without a name, a request with millions of entries, a record timestamp far
from now, a long group id — each gets Kafka's answer, and the broker's log stays short."""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest

from kafka_clients import create_topic, produce
from oncelog.client import ProtocolClient
from oncelog.protocol import apis, messages
from oncelog.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration


def _metadata_v10_11(version: int, topics: list[tuple[str | None, uuid.UUID]]) -> object:
    m = messages.Builder(apis.METADATA, version, response=False)
    return m.MetadataRequest(
        topics=tuple(m.MetadataRequestTopic(name=n, topic_id=i) for n, i in topics),
        allow_auto_topic_creation=True, include_topic_authorized_operations=False,
        include_cluster_authorized_operations=False)


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_v11_null_topic_name_is_refused_as_kafka_does(broker, version: int) -> None:
    """Row 3. Before: the null name reached the response encoder outside the handler boundary
    (TypeError, no answer, ~1.5 KB of asyncio traceback per request past the log limiter). Now:
    Kafka's answer (KafkaApis: InvalidRequestException, MetadataRequest.getErrorResponse): every
    named topic INVALID_REQUEST, the null name as ""; a topic id (served from v12) likewise."""
    some_id = uuid.uuid4()
    log_before = len(broker.log_tail(10**9))
    with ProtocolClient(broker.bootstrap) as c:
        for _ in range(200):  # bounded: a client repeating it must not fill the log
            resp = c.request(apis.METADATA, _metadata_v10_11(version, [("a-topic", uuid.UUID(int=0)), (None, uuid.UUID(int=0))]),
                             version=version)
            assert [(t.name, t.error_code) for t in resp.topics] == [
                ("a-topic", ErrorCode.invalid_request), ("", ErrorCode.invalid_request)]
        resp = c.request(apis.METADATA, _metadata_v10_11(version, [("by-id", some_id)]), version=version)
        assert [(t.name, t.error_code) for t in resp.topics] == [("by-id", ErrorCode.invalid_request)]
        # a well-formed v10/v11 request is still served (the check does not refuse names with a zero id)
        resp = c.request(apis.METADATA, _metadata_v10_11(version, [("fine-topic", uuid.UUID(int=0))]), version=version)
        assert [(t.name, t.error_code) for t in resp.topics] == [("fine-topic", ErrorCode.none)]
    time.sleep(0.3)
    log = broker.log_tail(10**9)[log_before:]
    assert "Traceback" not in log
    assert log.count("refused Metadata") <= 12, log[-3000:]  # the log limiter: a burst of 10 per window
    assert len(log) < 8000, log[-3000:]


# -- row 13: long group ids -------------------------------------------------------------------


def test_a_group_id_of_a_thousand_characters_works_and_survives_a_restart(broker) -> None:
    """Row 13. Before: FindCoordinator answered INVALID_GROUP_ID to any group id over 255
    characters (and so did JoinGroup, OffsetCommit, TxnOffsetCommit, ...). Kafka accepts any
    non-empty id. Now: a confluent-kafka consumer joins, consumes and commits under a
    1,000-character id (multi-byte characters included), a transactional producer commits offsets
    for a second long id (AddOffsetsToTxn + TxnOffsetCommit), and both are read back after a hard
    restart (the ids are in ``__consumer_offsets`` keys)."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    topic = "long-groups"
    create_topic("confluent", broker.bootstrap, topic, 1)
    produce("confluent", broker.bootstrap, topic, [(0, None, b"v%d" % i) for i in range(5)])
    group = "g" * 900 + "ü€" * 50  # 1,000 characters, 1,150 UTF-8 bytes
    txn_group = "t" * 5000
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    try:
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())
        assert len(got) == 5
        c.commit(asynchronous=False)
    finally:
        c.close()
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "long-group-txn"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"in-txn", partition=0)
    meta = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": txn_group})
    try:
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 3)], meta.consumer_group_metadata(), 30)
    finally:
        meta.close()
    p.commit_transaction(30)
    broker.restart(hard=True)
    for g, expected in ((group, 5), (txn_group, 3)):
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": g})
        try:
            for _ in range(20):  # the coordinator may still be loading right after the restart
                try:
                    committed = c.committed([TopicPartition(topic, 0)], timeout=10)
                    break
                except KafkaException:
                    time.sleep(0.5)
            assert [tp.offset for tp in committed] == [expected], g[:20]
        finally:
            c.close()
