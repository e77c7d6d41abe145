"""The state of one transactional.id, and its prepare -> append -> replay transitions.

``TxnMetadata`` changes only through ``apply(record)``: the shard *prepares* a ``TxnRecord``
(the complete next state, checked against the transition table and marked pending), the runtime
appends it to ``__transaction_state``, and only then does the shard's ``replay`` apply it and
clear ``pending`` (or ``abandon`` clear it, if the append failed). Loading the log on start
applies the same records through the same ``replay``. While a record is pending, every other
request for this transactional.id is answered CONCURRENT_TRANSACTIONS (R11).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from oncelog.coordinator.transaction.log import TWO_PC_TIMEOUT_MS, TxnRecord
from oncelog.coordinator.transaction.rules import check_transition
from oncelog.coordinator.transaction.state import TxnState
from oncelog.protocol.errors import ConcurrentTransactions
from oncelog.types import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, ProducerEpoch, ProducerId, TopicPartition, TransactionalId

MAX_EPOCH = 32767


@dataclass
class TxnMetadata:
    transactional_id: TransactionalId
    producer_id: ProducerId = NO_PRODUCER_ID
    last_producer_id: ProducerId = NO_PRODUCER_ID
    producer_epoch: ProducerEpoch = NO_PRODUCER_EPOCH
    last_producer_epoch: ProducerEpoch = NO_PRODUCER_EPOCH
    timeout_ms: int = 60_000
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    start_ms: int = -1
    last_update_ms: int = -1
    kept_producer_id: ProducerId = NO_PRODUCER_ID
    kept_producer_epoch: ProducerEpoch = NO_PRODUCER_EPOCH
    pending: TxnRecord | None = None

    @property
    def is_2pc(self) -> bool:
        """Two-phase commit is enabled for this id (KIP-939; log.TWO_PC_TIMEOUT_MS)."""
        return self.timeout_ms == TWO_PC_TIMEOUT_MS

    @property
    def kept(self) -> bool:
        """The transaction is a prepared one kept for a new producer instance (keep_prepared_txn)."""
        return self.kept_producer_id >= 0

    def record(self) -> TxnRecord:
        return TxnRecord(
            self.producer_id,
            self.last_producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            self.state,
            self.partitions,
            self.start_ms,
            self.last_update_ms,
            self.kept_producer_id,
            self.kept_producer_epoch,
        )

    def apply(self, rec: TxnRecord) -> None:
        self.producer_id = rec.producer_id
        self.last_producer_id = rec.last_producer_id
        self.producer_epoch = rec.producer_epoch
        self.last_producer_epoch = rec.last_producer_epoch
        self.timeout_ms = rec.timeout_ms
        self.state = rec.state
        self.partitions = rec.partitions
        self.start_ms = rec.start_ms
        self.last_update_ms = rec.last_update_ms
        self.kept_producer_id = rec.kept_producer_id
        self.kept_producer_epoch = rec.kept_producer_epoch

    def prepare(self, target: TxnState, now_ms: int, **changes: object) -> TxnRecord:
        """The next state, checked and marked pending. Raises ConcurrentTransactions when a
        transition is already pending, InvalidTxnState when the move is illegal."""
        if self.pending is not None:
            raise ConcurrentTransactions(
                f"transaction {self.transactional_id!r} is completing a move to {self.pending.state.kafka_name}"
            )
        check_transition(self.transactional_id, self.state, target)
        base = self.record()
        fields = {f: getattr(base, f) for f in TxnRecord.__slots__}
        fields.update(changes)
        fields["state"] = target
        fields["last_update_ms"] = now_ms
        rec = TxnRecord(**fields)  # type: ignore[arg-type]
        self.pending = rec
        return rec
