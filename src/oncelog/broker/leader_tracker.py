"""Cluster mode (issue 15): open the partitions this broker leads, close the ones it lost.

Theory of operation. ``apply(view, may_lead)`` is called on the event loop with every view of
the store (broker/cluster_member.py). The partitions this broker should lead are those whose row
names it as leader, and none when ``may_lead`` is False (its session surely ended, or it may
have). Then, in this order:

1. the topics the broker knows (``ReplicaManager.topics``) become the store's, so Produce and
   Fetch tell a partition led elsewhere (NOT_LEADER_OR_FOLLOWER) from an unknown one; a topic
   whose configs changed in the store (AlterConfigs through any broker) gets them, applied live
   to its open partitions;
2. every open partition that is not to be led any more, or whose leader epoch is not the
   store's, or whose engine stopped after a failed append (``PgPartitionLog.failed``: the store
   may hold batches the leader never applied) is closed and removed: from then on requests for
   it get NOT_LEADER_OR_FOLLOWER, and parked fetches wake up;
3. every partition to lead that is not open is opened: its row is read again (the view may be
   older than this broker's own last commits), and if it still names this broker under the
   same epoch, ``Partition.recover`` rebuilds the producer state, LSO and aborted index from
   the store alone (the local directory is only a cache and is emptied first, so a snapshot of
   an earlier term can never be trusted by mistake). A partition that fails to open is logged
   and tried again at the next view.

4. the coordinators hear of every internal partition opened (``on_lead(tp, leader_epoch)``: the
   group or transaction coordinator loads its shard) and closed (``on_resign(tp)``).

Invariant: a partition is open here only under the epoch the store had when it was opened;
appends under that epoch are refused by the store once it moves (fencing), so opening and
closing late is never unsafe, only slow. Recovery and reads run on the event loop with the
broker's reader connection (one query per page of headers); see docs/CLUSTER.md.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Callable

from oncelog.broker import topic_config
from oncelog.broker.config import BrokerConfig
from oncelog.broker.partition import Partition
from oncelog.broker.replica_manager import INTERNAL_TOPICS, ReplicaManager, TopicMeta
from oncelog.cluster import leadership
from oncelog.cluster.connection import StoreConnection
from oncelog.cluster.group_commit import GroupCommitter
from oncelog.cluster.pg_log import PgPartitionLog
from oncelog.cluster.view import ClusterView
from oncelog.protocol.errors import KafkaError
from oncelog.types import TopicPartition

__all__ = ["LeaderTracker"]

log = logging.getLogger(__name__)


class LeaderTracker:
    """See the module docstring. Single-threaded: the event loop only."""

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, reader: StoreConnection,
                 committer: GroupCommitter) -> None:
        self.node_id = config.node_id
        self.config = config
        self.replicas = replicas
        self.reader = reader
        self.committer = committer
        self.cache_dir = Path(config.data_dir) / "cluster-cache"
        #: told of every internal partition this broker starts / stops leading (the coordinators)
        self.on_lead: Callable[[TopicPartition, int], None] = lambda tp, epoch: None
        self.on_resign: Callable[[TopicPartition], None] = lambda tp: None

    def apply(self, view: ClusterView, may_lead: bool) -> None:
        self._set_topics(view)
        wanted = view.led_by(self.node_id) if may_lead else {}
        parts = self.replicas.partitions
        for tp, part in list(parts.items()):
            row = wanted.get(tp)
            plog = part.log
            assert isinstance(plog, PgPartitionLog)
            if row is None or row.leader_epoch != plog.leader_epoch or plog.failed is not None:
                why = ("not led here any more" if row is None else
                       f"epoch {plog.leader_epoch} -> {row.leader_epoch}" if row.leader_epoch != plog.leader_epoch else
                       f"append failed: {plog.failed}")
                self._close(tp, part, why)
        for tp, row in wanted.items():
            if tp not in parts:
                self._open(tp, row.partition_id)

    def close_all(self) -> None:
        for tp, part in list(self.replicas.partitions.items()):
            self._close(tp, part, "broker stopping")

    def _set_topics(self, view: ClusterView) -> None:
        old = self.replicas.topics
        metas = []
        reconfigured = []
        for name, info in view.topics.items():
            meta = old.get(name)
            if meta is None or meta.topic_id != info.topic_id or meta.num_partitions != info.partitions:
                configs = topic_config.usable_topic_configs(self.config, name, dict(info.configs))
                meta = TopicMeta(name, info.topic_id, info.partitions, configs, name in INTERNAL_TOPICS)
            elif dict(info.configs) != (meta.store_configs if meta.store_configs is not None else meta.configs):
                # AlterConfigs through any broker: the same topic with other configs, applied live
                meta.configs = topic_config.usable_topic_configs(self.config, name, dict(info.configs))
                reconfigured.append(meta)
            meta.store_configs = dict(info.configs)
            metas.append(meta)
        if len(metas) != len(old) or any(old.get(m.name) is not m for m in metas):
            self.replicas.set_topics(metas)
        if reconfigured:
            self.replicas.refresh_log_configs(reconfigured)
            log.info("node %d: configs of %s changed", self.node_id, ", ".join(m.name for m in reconfigured))

    def _close(self, tp: TopicPartition, part: Partition, why: str) -> None:
        self.replicas.partitions.pop(tp, None)
        if tp.topic in INTERNAL_TOPICS:
            self.on_resign(tp)
        try:
            part.close()  # wakes parked fetches; the engine holds no resource of its own
        except (OSError, KafkaError) as exc:
            log.warning("closing %s: %s", tp, exc)
        log.info("node %d stopped leading %s (%s)", self.node_id, tp, why)

    def _open(self, tp: TopicPartition, partition_id: int) -> None:
        meta = self.replicas.topics.get(tp.topic)
        if meta is None:
            return
        try:
            row = leadership.current(self.reader.raw(), partition_id)
            if row is None or row.leader_broker != self.node_id:
                return  # moved since the view was read
            cfg = self.replicas.log_config(meta)
            plog = PgPartitionLog(self.reader, self.committer, row, cfg)
            path = self.cache_dir / f"{tp.topic}-{tp.partition}"
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True, exist_ok=True)
            part = Partition.recover(tp, plog, path, cfg)
        except Exception as exc:  # KafkaError, OSError, or a psycopg error of leadership.current
            self.reader.drop()  # a failed query may leave the connection unusable
            log.warning("node %d could not take the lead of %s (retried at the next view): %s", self.node_id, tp, exc)
            return
        self.replicas.partitions[tp] = part
        log.info("node %d leads %s, leader epoch %d, offsets [%d, %d)", self.node_id, tp, row.leader_epoch,
                 plog.log_start_offset, plog.log_end_offset)
        if tp.topic in INTERNAL_TOPICS:
            self.on_lead(tp, row.leader_epoch)
