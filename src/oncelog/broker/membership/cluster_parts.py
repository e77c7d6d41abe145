"""The store-side parts a cluster-mode broker owns (issue 15), opened and closed together: the
reader connection of the event loop (partition reads, producer id blocks), the opener
connection (partition recovery, on the leader tracker's opener thread), the compactor
connection (compaction passes, in a thread, one at a time: broker.py ``_compact``; the leader tracker gives it to the engines it builds), the group committers
(``store.commit.connections`` writer threads, each partition on one of them: storage/engines/postgres/commit_pool.py), and the leader tracker that uses them.

Closing order: the tracker's partitions first (nothing new is submitted; the opener thread
finishes), then the committer (it writes what is queued, then stops), then the connections.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from oncelog.broker.membership.cluster_member import connector
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.partitions.leader_tracker import LeaderTracker
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.cluster.connection import StoreConnection
from oncelog.diskless.parts import DisklessParts
from oncelog.storage.engines.postgres.commit_pool import CommitterPool
from oncelog.types import TopicPartition

__all__ = ["ClusterParts"]


@dataclass
class ClusterParts:
    reader: StoreConnection
    opener: StoreConnection
    compactor: StoreConnection
    committer: CommitterPool
    tracker: LeaderTracker
    diskless: "DisklessParts | None" = None

    @classmethod
    def open(cls, dsn: str, config: BrokerConfig, replicas: ReplicaManager,
             on_lead: Callable[[TopicPartition, int], None], on_resign: Callable[[TopicPartition], None]
             ) -> "ClusterParts":
        """``on_lead`` / ``on_resign``: told of every internal partition this broker starts /
        stops leading (the coordinators; leader_tracker.py)."""
        connect = connector(dsn)
        reader = StoreConnection(connect, f"node {config.node_id} reads")
        opener = StoreConnection(connect, f"node {config.node_id} opens partitions")
        compactor = StoreConnection(connect, f"node {config.node_id} compacts")
        committer = CommitterPool(connect, config.store_commit_connections,
                                  name=f"oncelog-group-commit-{config.node_id}").start()
        try:
            # issue 29: diskless topics' writer, read cache and collector (diskless/parts.py)
            diskless = DisklessParts.open(config, connect)
        except BaseException:
            for part in (committer, opener, compactor, reader):
                part.close()
            raise
        replicas.awaiting_metadata = True  # until the tracker applies the first view
        tracker = LeaderTracker(config, replicas, reader, committer, opener, compactor, diskless=diskless,
                                on_lead=on_lead, on_resign=on_resign)
        return cls(reader, opener, compactor, committer, tracker, diskless)

    def close(self) -> None:
        self.tracker.close_all()
        if self.diskless is not None:
            self.diskless.close()
        self.committer.close()
        self.opener.close()
        self.compactor.close()
        self.reader.close()
