"""Shared by the handlers that describe the cluster or create topics (Metadata, DescribeCluster,
CreateTopics): in cluster mode (issue 15) the live brokers as registered in the store, from the
broker's latest view (broker/membership/cluster_member.py), and topics created in the store; embedded, this
broker alone and its local topics.

The controller id names the live broker with the lowest node id: there is no controller (any
broker rebalances, under a lock in the store), but clients expect one live broker there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from oncelog.broker.context import BrokerContext
from oncelog.broker.partitions.replica_manager import NewTopic, TopicMeta
from oncelog.diskless import topic_rules
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.types import TopicPartition


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int
    rack: str | None


def nodes(broker: BrokerContext) -> list[Node]:
    if broker.cluster is None:
        return [Node(broker.node_id, broker.advertised_host, broker.advertised_port, None)]
    return [Node(b.node_id, *b.endpoint(broker.listener_name), b.rack) for b in broker.cluster.view.brokers]


def partition_leader(broker: BrokerContext, tp: TopicPartition) -> tuple[ErrorCode, int, int]:
    """(error, leader, leader epoch) of a partition of a known topic: this broker and epoch 0
    when embedded; in cluster mode those of the broker's view (LEADER_NOT_AVAILABLE, leader -1,
    epoch -1 while it has no live leader). The store keeps the data, so the leader is the one
    replica and the ISR."""
    if broker.cluster is None:
        return ErrorCode.none, broker.node_id, 0
    leader, epoch = broker.cluster.view.leader(tp)
    if leader < 0:
        return ErrorCode.leader_not_available, -1, -1
    return ErrorCode.none, leader, max(epoch, 0)


def controller_id(broker: BrokerContext) -> int:
    if broker.cluster is None:
        return broker.node_id
    live = broker.cluster.view.live_ids
    return min(live) if live else -1


async def create_topics(broker: BrokerContext, new: Sequence[NewTopic], *,
                        validate_only: bool = False) -> list[TopicMeta | KafkaError]:
    """Create topics (CreateTopics, Metadata auto-creation): one result per request, in order.
    Embedded: ``ReplicaManager.create_topics``. In cluster mode each topic is validated as
    embedded (a replication factor up to the number of live brokers is accepted: the store
    keeps the data, there are no replicas to place) and created in the store, then leaders are
    given by a rebalance and the broker's view is refreshed."""
    rm = broker.replicas
    if broker.cluster is None:
        refused: dict[int, KafkaError] = {}
        for i, t in enumerate(new):  # issue 29: diskless topics need cluster mode
            try:
                topic_rules.check_new_topic(t.name, t.configs, cluster_mode=False, storage_url=None,
                                            internal=t.internal)
            except KafkaError as exc:
                refused[i] = exc
        if not refused:
            return rm.create_topics(new, validate_only=validate_only)
        made = iter(rm.create_topics([t for i, t in enumerate(new) if i not in refused], validate_only=validate_only))
        return [refused[i] if i in refused else next(made) for i in range(len(new))]
    max_rf = max(1, len(broker.cluster.view.brokers))
    checked: list[TopicMeta | KafkaError] = []
    for t in new:
        try:
            meta = rm.validate_new_topic(t, max_rf)
            topic_rules.check_new_topic(t.name, meta.configs, cluster_mode=True,
                                        storage_url=broker.config.diskless_storage_url, internal=t.internal)
            checked.append(meta)
        except KafkaError as exc:
            checked.append(exc)
    if validate_only:
        return checked
    return await broker.cluster.create_topics(checked)
