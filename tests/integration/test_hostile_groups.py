"""Hostile clients against the group APIs (R22): the consumer rebalance protocol (KIP-848) and
the topic-id versions of OffsetCommit/OffsetFetch. Each test sends what a client that follows no
rules sends — raw frames through ``ProtocolClient`` — and checks Kafka's answer, what the broker
keeps, and (where the harm was latency) a bystander's round trips."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest

from kafka_clients import create_topic
from oncelog.client import ProtocolClient
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration
#: These tests measure how fast the broker answers: no spare broker starts next to them (conftest.py).
START_SPARE_BROKER_DURING_TESTS = False

MS = datetime.timedelta(milliseconds=1)
ZERO = uuid.UUID(int=0)


def _topic_id(c: ProtocolClient, name: str) -> uuid.UUID:
    m = c.classes(apis.METADATA, 12)
    md = c.request(apis.METADATA, m["MetadataRequest"](
        topics=(m["MetadataRequestTopic"](name=name, topic_id=None),), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False), version=12)
    return md.topics[0].topic_id


def _commit_v10(c: ProtocolClient, group: str, offsets: list[tuple[uuid.UUID, int, int]]) -> dict[Any, ErrorCode]:
    m = c.classes(apis.OFFSET_COMMIT, 10)
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for tid, p, off in offsets:
        by_topic.setdefault(tid, []).append(m["OffsetCommitRequestPartition"](
            partition_index=p, committed_offset=off, committed_leader_epoch=-1, committed_metadata=""))
    res = c.request(apis.OFFSET_COMMIT, m["OffsetCommitRequest"](
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=tuple(m["OffsetCommitRequestTopic"](topic_id=tid, partitions=tuple(ps)) for tid, ps in by_topic.items())),
        version=10)
    return {(t.topic_id or ZERO, p.partition_index): p.error_code for t in res.topics for p in t.partitions}


def _fetch_v10(c: ProtocolClient, group: str, asked: list[tuple[uuid.UUID, int]]) -> dict[Any, tuple[int, ErrorCode]]:
    m = c.classes(apis.OFFSET_FETCH, 10)
    by_topic: dict[uuid.UUID, list[int]] = {}
    for tid, p in asked:
        by_topic.setdefault(tid, []).append(p)
    res = c.request(apis.OFFSET_FETCH, m["OffsetFetchRequest"](require_stable=False, groups=(m["OffsetFetchRequestGroup"](
        group_id=group, member_id=None, member_epoch=-1,
        topics=tuple(m["OffsetFetchRequestTopics"](topic_id=tid, partition_indexes=tuple(ps))
                     for tid, ps in by_topic.items())),)), version=10)
    (g,) = res.groups
    assert g.error_code == ErrorCode.none, g
    return {(t.topic_id or ZERO, p.partition_index): (p.committed_offset, p.error_code) for t in g.topics for p in t.partitions}


def test_offset_commit_and_fetch_v10_with_the_all_zero_topic_id_answer_unknown_topic_id(broker) -> None:  # type: ignore[no-untyped-def]
    """The all-zero topic id names no topic: UNKNOWN_TOPIC_ID for its partitions, as Kafka 4.2
    answers, while the rest of the request is served. Before: kio reads that id as None, the
    handler raised (a `bug:` traceback), the answer was empty and the valid commit next to it
    was dropped."""
    create_topic("confluent", broker.bootstrap, "zid", 2)
    with ProtocolClient(broker.bootstrap) as c:
        tid = _topic_id(c, "zid")
        assert tid is not None and tid.int
        committed = _commit_v10(c, "g-zero", [(tid, 0, 7), (ZERO, 0, 9), (ZERO, 1, 9)])
        assert committed == {(tid, 0): ErrorCode.none, (ZERO, 0): ErrorCode.unknown_topic_id,
                             (ZERO, 1): ErrorCode.unknown_topic_id}
        fetched = _fetch_v10(c, "g-zero", [(tid, 0), (ZERO, 0)])
        assert fetched == {(tid, 0): (7, ErrorCode.none), (ZERO, 0): (-1, ErrorCode.unknown_topic_id)}
    assert "bug:" not in broker.log_tail(10**7)
