"""DescribeTopicPartitions (75, KIP-966): topics and their partitions, paged (v0).

What Metadata tells of a topic (id, internal flag, each partition's leader, epoch, replicas and
ISR; eligible leader replicas are empty: there are none), in pages as Kafka's
``DescribeTopicPartitionsRequestHandler``: the requested topics (an empty list: every topic) in
name order, starting at the request's ``cursor`` (that topic, from that partition), at most
``response_partition_limit`` partitions (capped at MAX_PARTITIONS_PER_RESPONSE, Kafka's
``max.request.partition.size.limit`` default); when more remain, ``next_cursor`` names the
next topic and partition. A cursor topic that is not in an explicit topic list (or a negative
cursor partition) is an INVALID_REQUEST carried by every requested topic, as Kafka's error
response does. A topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION
(nothing is auto-created). Topic authorized operations: those allowed (all without an authorizer; _acl.py). ACLs (issue 18): DESCRIBE on each topic, unnamed ones left out.
"""

from __future__ import annotations

import uuid
from typing import Any

from oncelog.acl.model import ResourceType
from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl, _cluster
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder
from oncelog.types import TopicPartition

API_KEY = apis.DESCRIBE_TOPIC_PARTITIONS
MAX_PARTITIONS_PER_RESPONSE = 2000


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    rm = broker.replicas
    cursor = req.cursor
    explicit = bool(req.topics)
    names = sorted({t.name for t in req.topics}) if explicit else sorted(rm.topics)
    g = _acl.gate(broker, client, API_KEY)
    refused: set[str] = set()  # ACLs (issue 18): DESCRIBE on the topic; unnamed ones are left out
    if g is not None:
        refused = {n for n in names if not g.allowed("topic", n)}
        if not explicit:
            names = [n for n in names if n not in refused]
    if cursor is not None:
        bad = None
        if cursor.partition_index < 0:
            bad = f"cursor partition index {cursor.partition_index} is negative"
        elif explicit and cursor.topic_name not in names:
            bad = f"The cursor topic name {cursor.topic_name} is not in the topic list"
        if bad is not None:  # as Kafka's getErrorResponse: every requested topic carries the error
            return m.DescribeTopicPartitionsResponse(topics=tuple(
                m.DescribeTopicPartitionsResponseTopic(
                    error_code=ErrorCode.invalid_request, name=t.name, topic_id=uuid.UUID(int=0), is_internal=False,
                    partitions=(), topic_authorized_operations=_acl.NOT_REQUESTED)
                for t in req.topics), next_cursor=None)
        names = [n for n in names if n >= cursor.topic_name]
    limit = req.response_partition_limit
    remaining = MAX_PARTITIONS_PER_RESPONSE if limit <= 0 else min(limit, MAX_PARTITIONS_PER_RESPONSE)
    topics: list[Any] = []
    next_cursor = None
    for i, name in enumerate(names):
        meta = rm.topics.get(name)
        if name in refused:
            topics.append(m.DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.topic_authorization_failed, name=name, topic_id=uuid.UUID(int=0),
                is_internal=False, partitions=(), topic_authorized_operations=_acl.NOT_REQUESTED))
            continue
        ops = _acl.TOPIC if g is None else g.operations(ResourceType.TOPIC, name)
        if meta is None:
            topics.append(m.DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.unknown_topic_or_partition, name=name, topic_id=uuid.UUID(int=0),
                is_internal=False, partitions=(), topic_authorized_operations=ops))
            continue
        if remaining == 0:
            next_cursor = m.Cursor(topic_name=name, partition_index=0)
            break
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        end = min(meta.num_partitions, start + remaining)
        parts = []
        for p in range(start, end):
            code, leader, epoch = _cluster.partition_leader(broker, TopicPartition(name, p))
            replicas = (leader,) if leader >= 0 else ()
            parts.append(m.DescribeTopicPartitionsResponsePartition(
                error_code=code, partition_index=p, leader_id=leader, leader_epoch=epoch, replica_nodes=replicas,
                isr_nodes=replicas, eligible_leader_replicas=(), last_known_elr=(), offline_replicas=()))
        remaining -= len(parts)
        topics.append(m.DescribeTopicPartitionsResponseTopic(
            error_code=ErrorCode.none, name=name, topic_id=meta.topic_id, is_internal=meta.internal,
            partitions=tuple(parts), topic_authorized_operations=ops))
        if end < meta.num_partitions:
            next_cursor = m.Cursor(topic_name=name, partition_index=end)
            break
    return m.DescribeTopicPartitionsResponse(topics=tuple(topics), next_cursor=next_cursor)
