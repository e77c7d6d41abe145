"""Shared by the handlers that describe the cluster or create topics (Metadata, DescribeCluster,
CreateTopics, CreatePartitions, ...): the brokers, a partition's leader, the controller id and
topic creation, as the membership (issue 27, broker/membership/) answers them: this broker alone
and its local topics when embedded; in cluster mode the live brokers as registered in the store,
from the broker's latest view, and topics created in the store.
"""

from __future__ import annotations

from typing import Sequence

from oncelog.broker.context import BrokerContext
from oncelog.broker.membership import Node
from oncelog.broker.partitions.replica_manager import NewTopic, TopicMeta
from oncelog.internal_topics import INTERNAL_TOPICS
from oncelog.protocol.errors import ErrorCode, InvalidRequest, KafkaError
from oncelog.types import TopicPartition

__all__ = ["Node", "controller_id", "create_topics", "nodes", "nodes_or_self", "partition_leader"]


def nodes(broker: BrokerContext) -> list[Node]:
    """The live brokers, each with its address on the listener the request came on."""
    return broker.metadata.nodes(broker.listener_name)


def nodes_or_self(broker: BrokerContext) -> list[Node]:
    """``nodes``, never none (Metadata's brokers). In cluster mode a view can name no live
    broker: after a store outage every session has ended, and a broker's first poll after it
    may come before its heartbeat registers it again. This broker is then answered alone (its
    partitions' leaders are unknown meanwhile), because librdkafka drops every broker that a
    Metadata answer leaves out, its bootstrap brokers included, and a client told of none has
    nowhere left to ask."""
    return nodes(broker) or [Node(broker.config.node_id, broker.advertised_host, broker.advertised_port, None)]


def partition_leader(broker: BrokerContext, tp: TopicPartition) -> tuple[ErrorCode, int, int]:
    """(error, leader, leader epoch) of a partition of a known topic (LEADER_NOT_AVAILABLE,
    leader -1, epoch -1 while it has no live leader). The leader is the one replica and the ISR."""
    leader, epoch = broker.metadata.leader(tp)
    if leader < 0:
        return ErrorCode.leader_not_available, -1, -1
    return ErrorCode.none, leader, max(epoch, 0)


def controller_id(broker: BrokerContext) -> int:
    return broker.metadata.controller_id()


#: names no client may create: the internal topics (the broker creates each, compacted and marked
#: internal, when its coordinator first needs it) and KRaft's metadata log
RESERVED_TOPICS = (*INTERNAL_TOPICS, "__cluster_metadata")


async def create_topics(broker: BrokerContext, new: Sequence[NewTopic], *,
                        validate_only: bool = False) -> list[TopicMeta | KafkaError]:
    """Create topics (CreateTopics, Metadata auto-creation): one result per request, in order
    (``TopicStore.create``). A reserved name is INVALID_REQUEST, Kafka's answer for its
    metadata log ("Creation of internal topic ... is prohibited."), here for every internal
    topic: a client's topic of that name would be read as a coordinator's state."""
    refused = {i: InvalidRequest(f"Creation of internal topic {t.name} is prohibited.")
               for i, t in enumerate(new) if t.name in RESERVED_TOPICS and not t.internal}
    if not refused:
        return await broker.topics.create(new, validate_only=validate_only)
    made = iter(await broker.topics.create([t for i, t in enumerate(new) if i not in refused],
                                           validate_only=validate_only) if len(refused) < len(new) else [])
    return [refused[i] if i in refused else next(made) for i in range(len(new))]
