"""Transactional produce verification across brokers (issue 15; Kafka 3.6+'s KIP-890 part 1).

A partition's leader must not append a transactional batch to a transaction its coordinator does
not know: a producer's late or stray batch would open a transaction nobody ends, and hold every
read_committed consumer at the LSO (a "hanging transaction"). When this broker coordinates the
transactional id the check is local (``TransactionCoordinator.verify_produce``, every batch).
When another broker does, the leader asks it with AddPartitionsToTxn v4, ``verify_only``, as
Kafka's brokers do, for the first batch of the producer's transaction on the partition only (a
later batch finds the transaction open in the partition's producer state). The group
coordinator verifies every TxnOffsetCommit the same way (its ``__consumer_offsets`` partition
must be in the transaction: AddOffsetsToTxn added it), so a zombie producer's late offsets are
refused before they become pending offsets no marker will settle.

Errors a producer cannot act on are translated as Kafka's leader translates them: the
coordinator moving, loading or unreachable becomes NOT_ENOUGH_REPLICAS (retriable: the producer
retries the batch); INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH / PRODUCER_FENCED pass through.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError, NotEnoughReplicas, error_for
from oncelog.protocol.messages import Builder
from oncelog.types import TopicPartition
from oncelog.internal_topics import TXN_TOPIC
from oncelog.broker.partitions.peers import PeerRequests

if TYPE_CHECKING:
    from oncelog.cluster.view import ClusterView

__all__ = ["RemoteVerifier", "VERIFY_VERSION"]

#: AddPartitionsToTxn version of broker-to-broker verification (v4: batched, verify_only)
VERIFY_VERSION = 4
VERIFY_TIMEOUT_S = 5.0
#: coordinator-side answers that mean "ask again later": the producer is told NOT_ENOUGH_REPLICAS
_RETRIABLE = frozenset({
    ErrorCode.coordinator_not_available, ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
    ErrorCode.concurrent_transactions, ErrorCode.request_timed_out, ErrorCode.not_leader_or_follower,
    ErrorCode.network_exception, ErrorCode.unknown_server_error,
})


class RemoteVerifier:
    """``coordinator_partition(tid)``: the ``__transaction_state`` partition of a transactional
    id; ``view()``: the broker's latest cluster view (who leads that partition)."""

    def __init__(self, view: Callable[[], "ClusterView"], peers: PeerRequests,
                 coordinator_partition: Callable[[str], int]) -> None:
        self.view = view
        self.peers = peers
        self.coordinator_partition = coordinator_partition

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition, *,
                     retriable: type[KafkaError] = NotEnoughReplicas, add: bool = False) -> None:
        """Raises the KafkaError the answer for ``tp`` carries when the coordinator does not
        confirm that ``tp`` is in the producer's ongoing transaction; ``retriable`` (default
        NOT_ENOUGH_REPLICAS, what a producer retries) when the coordinator cannot answer now.
        ``add`` (transactions version 2: a Produce v12+ or TxnOffsetCommit v5+): ask the
        coordinator to add ``tp`` rather than only check it (``verify_only`` false)."""
        leader, _ = self.view().leader(TopicPartition(TXN_TOPIC, self.coordinator_partition(transactional_id)))
        if leader < 0:
            raise retriable(f"{tp}: the transaction coordinator of {transactional_id!r} has no live broker")
        m = Builder(apis.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, response=False)
        body = m.AddPartitionsToTxnRequest(transactions=(m.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=not add, topics=(m.AddPartitionsToTxnTopic(name=tp.topic, partitions=(tp.partition,)),),
        ),))
        try:
            resp = await self.peers.request(leader, apis.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, body,
                                            timeout_s=VERIFY_TIMEOUT_S)
        except KafkaError as exc:
            raise retriable(f"{tp}: cannot verify the transaction at node {leader}: {exc}") from None
        code = ErrorCode(resp.error_code)
        if code == ErrorCode.none:
            code = ErrorCode(resp.results_by_transaction[0].topic_results[0].results_by_partition[0].partition_error_code)
        if code == ErrorCode.none:
            return
        if code in _RETRIABLE:
            raise retriable(f"{tp}: verification at node {leader}: {code.name}")
        raise error_for(code, f"{tp}: transaction {transactional_id!r} verification at node {leader}")
