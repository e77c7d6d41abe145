"""DescribeProducers (61): the producers a partition led here remembers (KIP-664): id, epoch,
last sequence, last timestamp, the coordinator epoch of its last marker there, and the first
offset of its open transaction (-1: none). A partition of a known topic led by another broker
gets NOT_LEADER_OR_FOLLOWER, an unknown one UNKNOWN_TOPIC_OR_PARTITION; each its own code.
What ``kafka-transactions.sh describe-producers`` and ``find-hanging`` read."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.DESCRIBE_PRODUCERS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    m = Builder(API_KEY, request.api_version)
    topics = []
    g = _acl.gate(broker, client, API_KEY)
    for topic in request.body.topics:
        parts = []
        denied = _acl.denied(g, "topic", topic.name)  # ACLs (issue 18): READ on the topic
        for index in topic.partition_indexes:
            try:
                if denied is not None:
                    _acl.refuse(denied, client.principal, f"READ topic {topic.name}")
                part = broker.replicas.partition(topic.name, index)
            except KafkaError as exc:
                parts.append(m.PartitionResponse(partition_index=index, error_code=exc.code, error_message=str(exc),
                                                 active_producers=()))
                continue
            state = part.producers
            producers = tuple(
                m.ProducerState(producer_id=e.producer_id, producer_epoch=e.epoch, last_sequence=e.last_seq,
                                last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                                current_txn_start_offset=state.ongoing.get(pid, -1))
                for pid, e in sorted(state.entries.items())
            )
            parts.append(m.PartitionResponse(partition_index=index, error_code=ErrorCode.none, error_message=None,
                                             active_producers=producers))
        topics.append(m.TopicResponse(name=topic.name, partitions=tuple(parts)))
    return m.DescribeProducersResponse(topics=tuple(topics))
