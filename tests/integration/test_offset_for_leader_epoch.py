"""Leader epochs on the embedded broker (issue 15, KIP-320): OffsetForLeaderEpoch (23) v2..v4,
and the current_leader_epoch checks of Fetch and ListOffsets, with crafted requests; then a
confluent-kafka consumer with committed offsets (which carry a leader epoch) restarts and
resumes where it committed. The embedded broker's leader epoch is always 0."""

from __future__ import annotations

import logging
import time

import pytest

import kafka_clients as kc
from epoch_requests import (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION, fetch,
                            list_offsets, offset_for_leader_epoch)
from oncelog.client import ProtocolClient
from oncelog.protocol import apis

TOPIC = "epochs"


def test_offset_for_leader_epoch_is_advertised_and_answers_epoch_zero(broker) -> None:
    kc.create_topic("confluent", broker.bootstrap, TOPIC, 2)
    kc.produce("confluent", broker.bootstrap, TOPIC, [(0, None, b"v%d" % i) for i in range(10)])
    with ProtocolClient(broker.bootstrap) as c:
        assert c.versions[apis.OFFSET_FOR_LEADER_EPOCH] == (2, 4)
    b = broker.bootstrap
    for version in (2, 3, 4):
        for replica_id in ((-1, -2) if version >= 3 else (-1,)):
            # the current epoch ends at the log end offset; the empty partition's at 0
            assert offset_for_leader_epoch(b, TOPIC, 0, 0, version=version, replica_id=replica_id) == (0, 0, 10)
            assert offset_for_leader_epoch(b, TOPIC, 1, 0, version=version, replica_id=replica_id) == (0, 0, 0)
        # an epoch above the current one, or -1: UNDEFINED, no error (as Kafka)
        assert offset_for_leader_epoch(b, TOPIC, 0, 1, version=version) == (0, -1, -1)
        assert offset_for_leader_epoch(b, TOPIC, 0, -1, version=version) == (0, -1, -1)
        # current_leader_epoch: -1 and 0 pass, newer is UNKNOWN, older (only -2 here) FENCED
        assert offset_for_leader_epoch(b, TOPIC, 0, 0, current_leader_epoch=0, version=version) == (0, 0, 10)
        assert offset_for_leader_epoch(b, TOPIC, 0, 0, current_leader_epoch=3, version=version) == (
            UNKNOWN_LEADER_EPOCH, -1, -1)
        assert offset_for_leader_epoch(b, TOPIC, 0, 0, current_leader_epoch=-2, version=version) == (
            FENCED_LEADER_EPOCH, -1, -1)
        assert offset_for_leader_epoch(b, "no-such-topic", 0, 0, version=version)[0] == UNKNOWN_TOPIC_OR_PARTITION
        assert offset_for_leader_epoch(b, TOPIC, 7, 0, version=version)[0] == UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_and_list_offsets_check_the_current_leader_epoch(broker) -> None:
    b = broker.bootstrap
    kc.create_topic("confluent", b, TOPIC, 1)
    kc.produce("confluent", b, TOPIC, [(0, None, b"v%d" % i) for i in range(5)])
    for version in (9, 11, 12):
        code, hw, size = fetch(b, TOPIC, 0, current_leader_epoch=0, version=version)
        assert (code, hw) == (0, 5) and size > 0
        assert fetch(b, TOPIC, 0, current_leader_epoch=-1, version=version)[0] == 0
        code, _hw, size = fetch(b, TOPIC, 0, current_leader_epoch=1, version=version)
        assert (code, size) == (UNKNOWN_LEADER_EPOCH, 0)
        assert fetch(b, TOPIC, 0, current_leader_epoch=-2, version=version)[0] == FENCED_LEADER_EPOCH
    # before v9 there is no current_leader_epoch: nothing to check
    assert fetch(b, TOPIC, 0, version=8)[0] == 0
    for version in (4, 7):
        assert list_offsets(b, TOPIC, 0, -1, current_leader_epoch=0, version=version) == (0, 5, 0)
        assert list_offsets(b, TOPIC, 0, -2, current_leader_epoch=-1, version=version) == (0, 0, 0)
        assert list_offsets(b, TOPIC, 0, -1, current_leader_epoch=2, version=version) == (UNKNOWN_LEADER_EPOCH, -1, -1)
        assert list_offsets(b, TOPIC, 0, -1, current_leader_epoch=-2, version=version) == (FENCED_LEADER_EPOCH, -1, -1)
    assert list_offsets(b, TOPIC, 0, -1, version=1)[:2] == (0, 5)


def _group_consumer(bootstrap: str, group: str, log_lines: list[str]):  # type: ignore[no-untyped-def]
    from confluent_kafka import Consumer

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            log_lines.append(record.getMessage())

    logger = logging.getLogger(f"rdkafka.{group}.{len(log_lines)}")
    logger.addHandler(Catch())
    logger.setLevel(logging.DEBUG)
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "debug": "protocol,consumer,feature",
                     "enable.partition.eof": False}, logger=logger)


def _take(c, n: int, timeout: float = 60.0) -> list:  # type: ignore[no-untyped-def]
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        for m in c.consume(num_messages=n - len(out), timeout=0.5):
            assert m.error() is None, m.error()
            out.append(m)
    return out


@pytest.mark.timeout(180)
def test_a_confluent_consumer_resumes_at_its_committed_offset_with_epochs_advertised(broker) -> None:
    """Committed offsets carry the leader epoch of the record consumed (0); a new consumer of the
    group starts from them (librdkafka may validate them with OffsetForLeaderEpoch), and reads
    on from there with no error and no record twice."""
    from confluent_kafka import TopicPartition

    b = broker.bootstrap
    kc.create_topic("confluent", b, TOPIC, 1)
    kc.produce("confluent", b, TOPIC, [(0, None, b"a%d" % i) for i in range(20)])
    lines: list[str] = []
    c = _group_consumer(b, "epoch-group", lines)
    c.subscribe([TOPIC])
    first = _take(c, 12)
    assert [m.offset() for m in first[:12]] == list(range(12))
    assert first[11].leader_epoch() == 0
    c.commit(message=first[11], asynchronous=False)
    committed = c.committed([TopicPartition(TOPIC, 0)], timeout=10)[0]
    assert (committed.offset, committed.leader_epoch) == (12, 0)
    c.close()

    kc.produce("confluent", b, TOPIC, [(0, None, b"b%d" % i) for i in range(5)])
    c = _group_consumer(b, "epoch-group", lines)
    c.subscribe([TOPIC])
    rest = _take(c, 13)
    c.close()
    assert [m.offset() for m in rest] == list(range(12, 25))
    assert [m.value() for m in rest] == [b"a%d" % i for i in range(12, 20)] + [b"b%d" % i for i in range(5)]
    # librdkafka saw OffsetForLeaderEpoch advertised (its ApiVersions dump lists every API)
    assert any("OffsetForLeaderEpoch" in line for line in lines), lines[:20]
