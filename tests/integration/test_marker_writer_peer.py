"""A transaction coordinator never takes a peer's word that a partition is gone (issue 15).

Found by the 20-minute cluster run of 2026-11-24: a broker that had just been restarted
answered WriteTxnMarkers with UNKNOWN_TOPIC_OR_PARTITION before its first view of the store,
the coordinator read that as "the topic was deleted, nothing to mark" and completed the abort
without the marker, and the producer's offsets stayed pending on ``__consumer_offsets`` for
ever (its copier hung on OffsetFetch, UNSTABLE_OFFSET_COMMIT). Now:

* ``ClusterMarkerWriter`` retries (NOT_LEADER_OR_FOLLOWER) when a peer says UNKNOWN_TOPIC while
  the coordinator's own view has the partition; only its own view may say it is gone;
* a cluster broker that has not applied its first view answers NOT_LEADER_OR_FOLLOWER, never
  UNKNOWN_TOPIC_OR_PARTITION (``ReplicaManager.awaiting_metadata``).

The peer here is a real broker process (embedded) that does not know the topic, as the starting
broker did not.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.partitions.markers import ClusterMarkerWriter
from oncelog.broker.membership.peer_client import PeerClients
from oncelog.broker.partitions.replica_manager import ReplicaManager, TopicMeta
from oncelog.clock import SystemClock
from oncelog.cluster.leadership import Leadership
from oncelog.cluster.membership import BrokerInfo
from oncelog.cluster.topics import TopicInfo
from oncelog.cluster.view import ClusterView
from oncelog.coordinator.transaction.shard import MarkerJob
from oncelog.protocol.errors import NotLeaderOrFollower, UnknownTopicOrPartition
from oncelog.types import TopicPartition

TP = TopicPartition("output", 2)  # a topic the peer (a fresh embedded broker) does not have


def _view(host: str, port: int, *, with_topic: bool) -> ClusterView:
    brokers = (BrokerInfo(1, "127.0.0.1", 1, None, 1, True), BrokerInfo(2, host, port, None, 1, True))
    if not with_topic:
        return ClusterView(brokers, {}, {})
    return ClusterView(brokers, {TP.topic: TopicInfo(TP.topic, uuid.uuid4(), 6)},
                       {TP: Leadership(7, TP.topic, TP.partition, 2, 47, 0, 4208)})


def test_a_peer_that_does_not_know_the_topic_does_not_complete_the_marker(broker, tmp_path: Path) -> None:
    host, port = broker.bootstrap.rsplit(":", 1)
    job = MarkerJob("verify-copier-2", 2000, 23, False, 5, frozenset({TP}))
    replicas = ReplicaManager(BrokerConfig(data_dir=tmp_path / "coordinator", node_id=1), SystemClock())

    async def write(with_topic: bool) -> None:
        view = _view(host, int(port), with_topic=with_topic)
        peers = PeerClients(1, lambda node: (host, int(port)) if node == 2 else None)
        try:
            await ClusterMarkerWriter(1, replicas, None, lambda: view, peers).write(job, TP, 0)
        finally:
            peers.close()

    # the coordinator's view has the partition: the peer's UNKNOWN_TOPIC is retried, not "done"
    with pytest.raises(NotLeaderOrFollower):
        asyncio.run(write(with_topic=True))
    # the coordinator's view has no such topic any more: deleted, nothing left to mark
    with pytest.raises(UnknownTopicOrPartition):
        asyncio.run(write(with_topic=False))


def test_a_cluster_broker_before_its_first_view_calls_no_partition_unknown(tmp_path: Path) -> None:
    rm = ReplicaManager(BrokerConfig(data_dir=tmp_path, node_id=2), SystemClock())
    rm.awaiting_metadata = True  # as ClusterParts.open leaves it
    with pytest.raises(NotLeaderOrFollower):
        rm.partition(TP.topic, TP.partition)
    rm.set_topics([TopicMeta(TP.topic, uuid.uuid4(), 6)])
    with pytest.raises(NotLeaderOrFollower):  # known, led elsewhere
        rm.partition(TP.topic, TP.partition)
    with pytest.raises(UnknownTopicOrPartition):  # now it may say so
        rm.partition("never-created", 0)
