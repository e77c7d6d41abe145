"""What a broker knows of the cluster: one consistent read of the store's metadata.

``load(conn)`` reads, in ONE repeatable-read transaction (so the three parts agree with each
other), the live brokers (as registered: node id, host, port, rack), every topic, every
partition's leader and leader epoch, and the dynamic broker configs. A ``ClusterView`` is an immutable snapshot: the broker
answers Metadata, DescribeCluster and FindCoordinator from the latest one and opens or closes
the partitions it leads from it (broker/partitions/leader_tracker.py). A view is at most one poll interval
old; safety never rests on it (appends are fenced by the leader epoch in the store).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from oncelog.cluster import broker_configs as store_broker_configs
from oncelog.cluster import topics as store_topics
from oncelog.cluster.leadership import Leadership, leaders
from oncelog.cluster.membership import BrokerInfo, live_brokers
from oncelog.types import TopicPartition

__all__ = ["ClusterView", "load"]


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Live brokers by node id, topics by name, partitions' rows by topic-partition."""

    brokers: tuple[BrokerInfo, ...] = ()
    topics: dict[str, store_topics.TopicInfo] = field(default_factory=dict)
    partitions: dict[TopicPartition, Leadership] = field(default_factory=dict)
    #: dynamic broker configs by resource: "" the cluster default, "<node id>" a broker's own
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def live_ids(self) -> tuple[int, ...]:
        return tuple(b.node_id for b in self.brokers)

    def broker(self, node_id: int) -> BrokerInfo | None:
        return next((b for b in self.brokers if b.node_id == node_id), None)

    def led_by(self, node_id: int) -> dict[TopicPartition, Leadership]:
        """The partitions whose row names ``node_id`` as leader."""
        return {tp: row for tp, row in self.partitions.items() if row.leader_broker == node_id}

    def leader(self, tp: TopicPartition) -> tuple[int, int]:
        """(leader node id, leader epoch) of ``tp``; leader -1 when it has none or its leader is
        not live (as far as this view knows)."""
        row = self.partitions.get(tp)
        if row is None or row.leader_broker not in self.live_ids:
            return -1, -1 if row is None else row.leader_epoch
        return row.leader_broker, row.leader_epoch


def load(conn: Any) -> ClusterView:
    """One consistent snapshot of the store's metadata (commits nothing; read only)."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        brokers = tuple(live_brokers(conn))
        tops = {t.name: t for t in store_topics.list_all(conn)}
        rows = {TopicPartition(r.topic, r.partition): r for r in leaders(conn)}
        configs = store_broker_configs.load_all(conn)
    return ClusterView(brokers, tops, rows, configs)
