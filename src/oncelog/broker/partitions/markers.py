"""Writing transaction markers (R14): the transaction coordinator's one way to reach a partition.

``MarkerWriter`` is the interface. ``write_local`` is the one place a marker is appended: the
COMMIT/ABORT control batch on a partition this broker leads (``Partition.append_marker``:
idempotent; refuses an older producer epoch and an older coordinator epoch, so a zombie
coordinator's late marker cannot close the producer's next transaction), and, on
``__consumer_offsets``, the group coordinator told that the producer's pending offsets are
committed or dropped (R13). ``LocalMarkerWriter`` calls it for every partition (one broker);
``ClusterMarkerWriter`` calls it for the partitions this broker leads and sends the others to
their leader as WriteTxnMarkers (27), whose handler calls it there (handlers/write_txn_markers.py).

``write_all`` writes one job's markers on many partitions at once: every local marker takes its
place in its producer's line at the call (so they share one group-commit round), and the
partitions one peer leads go in ONE WriteTxnMarkers request to that peer (issue 28: a request
per partition made a transaction over k partitions of one peer cost k requests, and the peer,
which handles one connection's requests in order, k COMMITs one after the other).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Callable, Protocol

from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.coordinator.transaction.shard import MarkerJob
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError, NotLeaderOrFollower, UnknownTopicOrPartition, error_for
from oncelog.protocol.messages import Builder
from oncelog.types import TopicPartition
from oncelog.internal_topics import OFFSETS_TOPIC
from oncelog.broker.partitions.peers import PeerRequests

if TYPE_CHECKING:
    from oncelog.cluster.view import ClusterView

#: WriteTxnMarkers version sent between brokers (v1: Kafka 4.x's lowest; v2 adds the TV field)
MARKERS_VERSION = 1
#: how long a coordinator waits for a peer's WriteTxnMarkers answer before retrying later
MARKERS_TIMEOUT_S = 5.0


class TransactionOffsets(Protocol):
    """What a marker on ``__consumer_offsets`` needs of the group coordinator
    (``GroupCoordinator``): the producer's pending offsets there committed or dropped (R13)."""

    def complete_transaction(self, offsets_partition: int, producer_id: int, commit: bool,
                             producer_epoch: int | None = None) -> None: ...


class MarkerWriter(Protocol):
    async def write(self, job: MarkerJob, tp: TopicPartition, now_ms: int) -> None:
        """Write ``job``'s marker on ``tp`` (timestamped ``now_ms``). Raises
        UnknownTopicOrPartition when the partition is gone (nothing left to mark), another
        KafkaError when it should be retried."""
        ...

    async def write_all(self, job: MarkerJob, tps: Sequence[TopicPartition], now_ms: int) -> list[KafkaError | None]:
        """``write`` for every partition of ``tps`` at once: one outcome per partition, in the
        order of ``tps`` (None: written; else the error ``write`` would raise). Never raises a
        KafkaError itself."""
        ...


async def write_local(replicas: ReplicaManager, groups: "TransactionOffsets | None", producer_id: int,
                      producer_epoch: int, commit: bool, coordinator_epoch: int, tp: TopicPartition,
                      now_ms: int) -> None:
    """Append one marker on a partition this broker leads (see the module docstring). Raises
    NotLeaderOrFollower / UnknownTopicOrPartition, InvalidProducerEpoch,
    TransactionCoordinatorFenced, or the storage's error."""
    await begin_local(replicas, groups, producer_id, producer_epoch, commit, coordinator_epoch, tp, now_ms)


def begin_local(replicas: ReplicaManager, groups: "TransactionOffsets | None", producer_id: int,
                producer_epoch: int, commit: bool, coordinator_epoch: int, tp: TopicPartition,
                now_ms: int) -> Awaitable[None]:
    """``write_local`` in two steps: the marker takes its place in its producer's line on ``tp``
    now, at the call (``Partition.append_marker``; the checks that need no I/O raise here);
    await the result for it to be durable. On ``__consumer_offsets`` the group coordinator is
    told once it is (R13), whether or not the result is awaited. Callers
    that begin several markers before awaiting any have them written in the same group-commit
    round."""
    part = replicas.partition(tp.topic, tp.partition)
    appended = part.append_marker(producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
    if tp.topic != OFFSETS_TOPIC or groups is None:
        return appended  # type: ignore[return-value]

    async def settle() -> None:
        await appended
        groups.complete_transaction(tp.partition, producer_id, commit)

    # a task: the group coordinator is told once the marker is durable even if the caller stops
    # waiting (its failure is then retrieved here: the coordinator retries the marker anyway)
    task = asyncio.ensure_future(settle())
    task.add_done_callback(_retrieve)
    return task


def _retrieve(task: "asyncio.Future[None]") -> None:
    if not task.cancelled():
        task.exception()


async def _outcomes(writes: Sequence[Awaitable[None]]) -> list[KafkaError | None]:
    """Await ``writes`` together; a KafkaError is that write's outcome, anything else a bug (raised)."""
    done = await asyncio.gather(*writes, return_exceptions=True)
    for out in done:
        if isinstance(out, BaseException) and not isinstance(out, KafkaError):
            raise out
    return [out if isinstance(out, KafkaError) else None for out in done]  # type: ignore[misc]


class LocalMarkerWriter:
    """Every partition is this broker's (the embedded single node)."""

    def __init__(self, replicas: ReplicaManager, groups: "TransactionOffsets | None" = None) -> None:
        self.replicas = replicas
        self.groups = groups

    async def write(self, job: MarkerJob, tp: TopicPartition, now_ms: int) -> None:
        await write_local(self.replicas, self.groups, job.producer_id, job.producer_epoch, job.commit,
                          job.coordinator_epoch, tp, now_ms)

    async def write_all(self, job: MarkerJob, tps: Sequence[TopicPartition], now_ms: int) -> list[KafkaError | None]:
        return await _outcomes([self.write(job, tp, now_ms) for tp in tps])


class ClusterMarkerWriter(LocalMarkerWriter):
    """Cluster mode: a partition led here is written here, any other goes to its leader (as the
    cluster view names it) as WriteTxnMarkers. A partition without a live leader, a peer that
    does not answer in MARKERS_TIMEOUT_S or answers NOT_LEADER_OR_FOLLOWER raise a retriable
    error: the coordinator retries that partition later, the others are not held up (a peer's
    partitions share one request, so a peer that does not answer fails all of them). A peer's
    UNKNOWN_TOPIC_OR_PARTITION is retried too while this broker's view has the partition: the
    coordinator alone decides that a partition is gone (deleted), from its view."""

    def __init__(self, node_id: int, replicas: ReplicaManager, groups: "TransactionOffsets | None",
                 view: Callable[[], "ClusterView"], peers: PeerRequests) -> None:
        super().__init__(replicas, groups)
        self.node_id = node_id
        self.view = view
        self.peers = peers

    async def write(self, job: MarkerJob, tp: TopicPartition, now_ms: int) -> None:
        (out,) = await self.write_all(job, (tp,), now_ms)
        if out is not None:
            raise out

    async def write_all(self, job: MarkerJob, tps: Sequence[TopicPartition], now_ms: int) -> list[KafkaError | None]:
        """The partitions led here are written here; those a peer leads go to it, all of one
        peer in one WriteTxnMarkers request; everything at once."""
        outcomes: list[KafkaError | None] = [None] * len(tps)
        writes: list[Awaitable[None]] = []
        slots: list[list[int]] = []  # the indexes of tps each write answers for
        by_leader: dict[int, list[int]] = {}
        for i, tp in enumerate(tps):
            if tp in self.replicas.partitions:
                writes.append(LocalMarkerWriter.write(self, job, tp, now_ms))
                slots.append([i])
            elif not self._exists(tp):
                outcomes[i] = UnknownTopicOrPartition(f"{tp} is not in the cluster any more (deleted); nothing left to mark")
            else:
                leader, _ = self.view().leader(tp)
                if leader < 0 or leader == self.node_id:  # no live leader, or it is us and not open yet
                    outcomes[i] = NotLeaderOrFollower(f"{tp} has no leader ready (view: {leader}); marker retried later")
                else:
                    by_leader.setdefault(leader, []).append(i)
        for leader, idxs in by_leader.items():
            writes.append(self._send(job, leader, [tps[i] for i in idxs], now_ms, outcomes, idxs))
            slots.append(idxs)
        for idxs, out in zip(slots, await _outcomes(writes)):
            if out is not None:  # a local write failed, or the request to a peer failed as a whole
                for i in idxs:
                    outcomes[i] = out
        return outcomes

    async def _send(self, job: MarkerJob, leader: int, tps: list[TopicPartition], now_ms: int,
                    outcomes: list[KafkaError | None], idxs: list[int]) -> None:
        """One WriteTxnMarkers request to ``leader`` for ``tps``; each partition's outcome goes
        to ``outcomes[idxs[k]]``. Raises the request's error (every partition's outcome then)."""
        m = Builder(apis.WRITE_TXN_MARKERS, MARKERS_VERSION, response=False)
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        body = m.WriteTxnMarkersRequest(markers=(m.WritableTxnMarker(
            producer_id=job.producer_id, producer_epoch=job.producer_epoch, transaction_result=job.commit,
            topics=tuple(m.WritableTxnMarkerTopic(name=name, partition_indexes=tuple(parts))
                         for name, parts in topics.items()),
            coordinator_epoch=job.coordinator_epoch,
        ),))
        resp = await self.peers.request(leader, apis.WRITE_TXN_MARKERS, MARKERS_VERSION, body,
                                        timeout_s=MARKERS_TIMEOUT_S)
        codes: dict[TopicPartition, ErrorCode] = {}
        for result in resp.markers:
            for topic in result.topics:
                for part in topic.partitions:
                    codes[TopicPartition(topic.name, part.partition_index)] = ErrorCode(part.error_code)
        for i, tp in zip(idxs, tps):
            code = codes.get(tp)
            if code is None:
                outcomes[i] = NotLeaderOrFollower(f"node {leader} did not answer for the marker on {tp}; retried later")
            elif code == ErrorCode.unknown_topic_or_partition and self._exists(tp):
                # The peer does not know the topic (yet: a broker that has just started answers so
                # until its first view of the store). Only the coordinator's own view may say the
                # partition is gone; taking the peer's word for it would complete the transaction
                # without this marker and leave it open on the partition for ever.
                outcomes[i] = NotLeaderOrFollower(f"node {leader} does not know {tp} (yet); marker retried later")
            elif code != ErrorCode.none:
                outcomes[i] = error_for(code, f"node {leader} refused the marker on {tp}")

    def _exists(self, tp: TopicPartition) -> bool:
        info = self.view().topics.get(tp.topic)
        return info is not None and 0 <= tp.partition < info.partitions
