"""Writing transaction markers (R14): the transaction coordinator's one way to reach a partition.

``MarkerWriter`` is the interface; ``LocalMarkerWriter`` appends the COMMIT/ABORT control batch
to a partition of this broker (``Partition.append_marker``: idempotent, refuses a zombie
coordinator's older epoch). In a cluster the same job goes to the partition's leader as a
WriteTxnMarkers request, which the leader turns into the same append.
"""

from __future__ import annotations

from typing import Protocol

from oncelog.broker.replica_manager import ReplicaManager
from oncelog.coordinator.transaction.shard import MarkerJob
from oncelog.types import TopicPartition


class MarkerWriter(Protocol):
    async def write(self, job: MarkerJob, tp: TopicPartition, now_ms: int) -> None:
        """Write ``job``'s marker on ``tp`` (timestamped ``now_ms``). Raises
        UnknownTopicOrPartition when the partition is gone (nothing left to mark), another
        KafkaError when it should be retried."""
        ...


class LocalMarkerWriter:
    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    async def write(self, job: MarkerJob, tp: TopicPartition, now_ms: int) -> None:
        part = self.replicas.partition(tp.topic, tp.partition)
        part.append_marker(job.producer_id, job.producer_epoch, job.commit, job.coordinator_epoch, now_ms)
