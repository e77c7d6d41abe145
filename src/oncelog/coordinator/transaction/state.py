"""Transaction states and the one table of legal transitions between them (R11).

Everything that decides whether a transaction may move from one state to another lives here
(as Kafka's ``TransactionState.validPreviousStates``). ``check_transition`` raises a typed error
for an illegal move; reaching it from a client request means the coordinator let through a
request it should have answered with an error first, so the error is INVALID_TXN_STATE.

The numeric ids are the ones Kafka writes into ``__transaction_state`` records.

::

    Empty ──AddPartitions──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──markers──▶ CompleteCommit
      ▲                        │  └──EndTxn(abort)/timeout──▶ PrepareAbort ──markers──▶ CompleteAbort
      │                        └──InitProducerId (fence)──▶ PrepareEpochFence ──▶ PrepareAbort
      └──────────── InitProducerId / next AddPartitions from Complete* ───────────────────────┘
    Empty / Complete* ──transactional.id expiry──▶ Dead
"""

from __future__ import annotations

import enum

from oncelog.protocol.errors import InvalidTxnState


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return _KAFKA_NAMES[self]

    @property
    def is_complete(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def is_prepare(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def can_start_new(self) -> bool:
        """A new transaction (or an epoch bump) may start from this state."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


_KAFKA_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}

#: target state -> the states it may be entered from
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}


def is_valid_transition(current: TxnState, target: TxnState) -> bool:
    return current in VALID_PREVIOUS[target]


def check_transition(transactional_id: str, current: TxnState, target: TxnState) -> None:
    if not is_valid_transition(current, target):
        raise InvalidTxnState(
            f"transaction {transactional_id!r}: {current.kafka_name} -> {target.kafka_name} is not a legal transition"
        )
