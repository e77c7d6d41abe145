"""The transaction coordinator's remote side: the transaction coordinators on other brokers.

A partition's leader checks a transactional write with the coordinator of its transactional id
(KIP-890). When that coordinator is this broker the check is local (the shard); otherwise the
write is verified, or under transactions version 2 added, at the coordinator that has it. Where
that is is decided once, when the broker starts, by its membership:

* ``LocalOnly`` (the embedded broker): this broker coordinates every transactional id, so
  nothing is ever verified elsewhere;
* ``partitions/txn_verifier.RemoteVerifier`` (cluster mode): AddPartitionsToTxn v4 to the
  leader of the id's ``__transaction_state`` partition.

The transaction coordinator is handed one of them (``remote``) and never asks which.
"""

from __future__ import annotations

from typing import Protocol

from oncelog.protocol.errors import KafkaError, NotEnoughReplicas
from oncelog.types import TopicPartition

__all__ = ["LocalOnly", "TxnRemote"]


class TxnRemote(Protocol):
    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition, *,
                     retriable: type[KafkaError] = NotEnoughReplicas, add: bool = False) -> None:
        """Confirm with the coordinator of ``transactional_id`` (another broker) that ``tp`` is in
        the producer's ongoing transaction; with ``add`` (transactions version 2), ask it to add
        ``tp``. Raises the KafkaError its answer carries, ``retriable`` when it cannot answer now."""
        ...


class LocalOnly:
    """No coordinator elsewhere: a transactional id this broker does not serve has no coordinator
    now (on the single node: its partition is still loading)."""

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition, *,
                     retriable: type[KafkaError] = NotEnoughReplicas, add: bool = False) -> None:
        """Nothing to confirm (``add``: ``retriable``, the client tries again)."""
        if add:
            raise retriable(f"{tp}: the transaction coordinator of {transactional_id!r} is not here")
