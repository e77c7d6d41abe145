"""Writing transaction markers (R14): the transaction coordinator's one way to reach a partition.

``MarkerWriter`` is the interface. ``write_local`` is the one place a marker is appended: the
COMMIT/ABORT control batch on a partition this broker leads (``Partition.append_marker``:
idempotent; refuses an older producer epoch and an older coordinator epoch, so a zombie
coordinator's late marker cannot close the producer's next transaction), and, on
``__consumer_offsets``, the group coordinator told that the producer's pending offsets are
committed or dropped (R13). ``LocalMarkerWriter`` calls it for every partition (one broker);
``ClusterMarkerWriter`` calls it for the partitions this broker leads and sends the others to
their leader as WriteTxnMarkers (27), whose handler calls it there (handlers/write_txn_markers.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.coordinator.transaction.shard import MarkerJob
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, NotLeaderOrFollower, UnknownTopicOrPartition, error_for
from oncelog.protocol.messages import Builder
from oncelog.types import TopicPartition

if TYPE_CHECKING:
    from oncelog.broker.membership.peer_client import PeerClients
    from oncelog.broker.coordinators.group_coordinator import GroupCoordinator
    from oncelog.cluster.view import ClusterView

OFFSETS_TOPIC = "__consumer_offsets"
#: WriteTxnMarkers version sent between brokers (v1: Kafka 4.x's lowest; v2 adds the TV field)
MARKERS_VERSION = 1
#: how long a coordinator waits for a peer's WriteTxnMarkers answer before retrying later
MARKERS_TIMEOUT_S = 5.0


class MarkerWriter(Protocol):
    async def write(self, job: MarkerJob, tp: TopicPartition, now_ms: int) -> None:
        """Write ``job``'s marker on ``tp`` (timestamped ``now_ms``). Raises
        UnknownTopicOrPartition when the partition is gone (nothing left to mark), another
        KafkaError when it should be retried."""
        ...


async def write_local(replicas: ReplicaManager, groups: "GroupCoordinator | None", producer_id: int,
                      producer_epoch: int, commit: bool, coordinator_epoch: int, tp: TopicPartition,
                      now_ms: int) -> None:
    """Append one marker on a partition this broker leads (see the module docstring). Raises
    NotLeaderOrFollower / UnknownTopicOrPartition, InvalidProducerEpoch,
    TransactionCoordinatorFenced, or the storage's error."""
    part = replicas.partition(tp.topic, tp.partition)
    await part.append_marker(producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
    if tp.topic == OFFSETS_TOPIC and groups is not None:
        groups.complete_transaction(tp.partition, producer_id, commit)


class LocalMarkerWriter:
    """Every partition is this broker's (the embedded single node)."""

    def __init__(self, replicas: ReplicaManager, groups: "GroupCoordinator | None" = None) -> None:
        self.replicas = replicas
        self.groups = groups

    async def write(self, job: MarkerJob, tp: TopicPartition, now_ms: int) -> None:
        await write_local(self.replicas, self.groups, job.producer_id, job.producer_epoch, job.commit,
                          job.coordinator_epoch, tp, now_ms)


class ClusterMarkerWriter(LocalMarkerWriter):
    """Cluster mode: a partition led here is written here, any other goes to its leader (as the
    cluster view names it) as WriteTxnMarkers. A partition without a live leader, a peer that
    does not answer in MARKERS_TIMEOUT_S or answers NOT_LEADER_OR_FOLLOWER raise a retriable
    error: the coordinator retries that partition later, the others are not held up. A peer's
    UNKNOWN_TOPIC_OR_PARTITION is retried too while this broker's view has the partition: the
    coordinator alone decides that a partition is gone (deleted), from its view."""

    def __init__(self, node_id: int, replicas: ReplicaManager, groups: "GroupCoordinator | None",
                 view: Callable[[], "ClusterView"], peers: PeerClients) -> None:
        super().__init__(replicas, groups)
        self.node_id = node_id
        self.view = view
        self.peers = peers

    async def write(self, job: MarkerJob, tp: TopicPartition, now_ms: int) -> None:
        if tp in self.replicas.partitions:
            await super().write(job, tp, now_ms)
            return
        if not self._exists(tp):
            raise UnknownTopicOrPartition(f"{tp} is not in the cluster any more (deleted); nothing left to mark")
        leader, _ = self.view().leader(tp)
        if leader < 0 or leader == self.node_id:  # no live leader, or it is us and not open yet
            raise NotLeaderOrFollower(f"{tp} has no leader ready (view: {leader}); marker retried later")
        m = Builder(apis.WRITE_TXN_MARKERS, MARKERS_VERSION, response=False)
        body = m.WriteTxnMarkersRequest(markers=(m.WritableTxnMarker(
            producer_id=job.producer_id, producer_epoch=job.producer_epoch, transaction_result=job.commit,
            topics=(m.WritableTxnMarkerTopic(name=tp.topic, partition_indexes=(tp.partition,)),),
            coordinator_epoch=job.coordinator_epoch,
        ),))
        resp = await self.peers.request(leader, apis.WRITE_TXN_MARKERS, MARKERS_VERSION, body,
                                        timeout_s=MARKERS_TIMEOUT_S)
        code = ErrorCode(resp.markers[0].topics[0].partitions[0].error_code)
        if code == ErrorCode.unknown_topic_or_partition and self._exists(tp):
            # The peer does not know the topic (yet: a broker that has just started answers so
            # until its first view of the store). Only the coordinator's own view may say the
            # partition is gone; taking the peer's word for it would complete the transaction
            # without this marker and leave it open on the partition for ever.
            raise NotLeaderOrFollower(f"node {leader} does not know {tp} (yet); marker retried later")
        if code != ErrorCode.none:
            raise error_for(code, f"node {leader} refused the marker on {tp}")

    def _exists(self, tp: TopicPartition) -> bool:
        info = self.view().topics.get(tp.topic)
        return info is not None and 0 <= tp.partition < info.partitions
