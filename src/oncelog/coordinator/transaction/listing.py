"""Which transactions a coordinator lists (ListTransactions, 66) and how one is described
(DescribeTransactions, 65). Pure: the handlers pass the coordinator's metadata and ``now``.

The filters are Kafka's (``TransactionStateManager.listTransactionStates``): a transaction is
listed when it is not Dead, its producer id is among ``producer_ids`` (if any are given), its
state's Kafka name is among ``states`` (if any are given; names are matched exactly, as Kafka
does, and names no state has are reported back as unknown), it has run longer than
``min_duration_ms`` (if >= 0; measured from its start time, -1 for a transaction never
started, as Kafka's) and its transactional id matches ``pattern`` whole (v2, KIP-1152).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from oncelog.coordinator.transaction.metadata import TxnMetadata
from oncelog.coordinator.transaction.state import TxnState
from oncelog.protocol.errors import ErrorCode, error_for

#: Kafka's state name -> state
STATE_BY_NAME: dict[str, TxnState] = {s.kafka_name: s for s in TxnState}

@dataclass(frozen=True, slots=True)
class ListFilter:
    states: tuple[str, ...] = ()
    producer_ids: tuple[int, ...] = ()
    min_duration_ms: int = -1
    pattern: str | None = None

    def unknown_states(self) -> tuple[str, ...]:
        """The state names no transaction state has (the answer's ``unknown_state_filters``)."""
        return tuple(s for s in self.states if s not in STATE_BY_NAME)

    def compiled(self) -> "re.Pattern[str] | None":
        """The pattern, compiled; None when absent or empty. Raises the KafkaError
        INVALID_REGULAR_EXPRESSION for a pattern that does not compile."""
        if not self.pattern:
            return None
        try:
            return re.compile(self.pattern)
        except re.error as exc:
            raise error_for(ErrorCode.invalid_regular_expression,
                            f"transactional id pattern {self.pattern!r}: {exc}") from None

    def matches(self, meta: TxnMetadata, now_ms: int, pattern: "re.Pattern[str] | None" = None) -> bool:
        if meta.state == TxnState.DEAD:
            return False
        if self.producer_ids and meta.producer_id not in self.producer_ids:
            return False
        if self.states and meta.state.kafka_name not in self.states:
            return False
        if self.min_duration_ms >= 0 and now_ms - meta.start_ms <= self.min_duration_ms:
            return False
        if pattern is not None and pattern.fullmatch(meta.transactional_id) is None:
            return False
        return True


def listed(txns: Iterable[TxnMetadata], flt: ListFilter, now_ms: int) -> list[TxnMetadata]:
    """The transactions ``flt`` keeps, by transactional id. Raises INVALID_REGULAR_EXPRESSION."""
    pattern = flt.compiled()
    return sorted((m for m in txns if flt.matches(m, now_ms, pattern)), key=lambda m: m.transactional_id)


#: the states in which a transaction has partitions (Kafka clears them when it completes)
ACTIVE_STATES = frozenset({TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT,
                           TxnState.PREPARE_EPOCH_FENCE})


def partitions_by_topic(meta: TxnMetadata) -> dict[str, list[int]]:
    """The partitions of the transaction in progress, topic -> sorted partition indexes; none
    once it is complete (oncelog's metadata keeps the last ones; Kafka's answer does not)."""
    out: dict[str, list[int]] = {}
    if meta.state not in ACTIVE_STATES:
        return out
    for tp in sorted(meta.partitions):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out
