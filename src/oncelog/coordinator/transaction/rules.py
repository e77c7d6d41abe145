"""What every request does in every transaction state: the one table (R11).

``RULES[state][request]`` is the authority. The shard (shard.py) looks the cell up and does what
it says; no if-chain decides a transition anywhere else. The few conditions a cell cannot
express — who is asking (producer id and epoch: fencing, R9), what is asked (a partition not
added, a timeout out of range, a retried InitProducerId, KIP-360) — are checked by the shard
*before* the table, and are listed in its docstring.

A ``Cell`` says:

* ``target``: the state the transaction moves to (its record is appended before the answer), or
  None to stay;
* ``error``: the error the request is answered with (None: success). A cell can move *and*
  refuse: InitProducerId on an Ongoing transaction fences the previous producer instance (epoch
  bumped, PrepareEpochFence), its transaction is aborted, and the new instance is told
  CONCURRENT_TRANSACTIONS, so it retries and gets the next epoch;
* ``markers``: write the COMMIT/ABORT markers of this Prepare* transaction (after its record).

Requests: the client's (INIT InitProducerId, INIT_KEEP InitProducerId with keep_prepared_txn
(KIP-939), ADD AddPartitionsToTxn/AddOffsetsToTxn, COMMIT and
ABORT EndTxn, PRODUCE a transactional batch, TXN_OFFSETS TxnOffsetCommit) and the coordinator's
own (TIMEOUT the timeout scan, EXPIRE transactional.id expiry, ADVANCE the next step of a
transaction left between states, MARKERS_WRITTEN every marker of a Prepare* is in).

Two-phase commit (KIP-939) adds two rows that stand for Ongoing when the transaction is one of a
producer that enabled 2PC (``TWO_PC_ONGOING``), and when it is, besides, a *prepared* transaction
kept for a new producer instance by InitProducerId(keep_prepared_txn) (``TWO_PC_KEPT``). The
state written to the log is Ongoing for all three (Kafka's state ids); ``row`` picks the row
from the transaction's record (its 2PC timeout, its kept producer id and epoch):

* ``TWO_PC_ONGOING``: TIMEOUT does nothing (2PC transactions never time out); INIT_KEEP keeps
  the transaction: the epoch the client gets is bumped (earlier instances are fenced), the
  transaction, its partitions and its data stay, and the answer names the (producer id, epoch)
  it was written with;
* ``TWO_PC_KEPT``: as ``TWO_PC_ONGOING``, but the transaction is prepared: it takes no more
  partitions, data or offsets (INVALID_TXN_STATE); only COMMIT or ABORT (or an InitProducerId
  without keep_prepared_txn, which aborts it) end it.

INIT_KEEP on a transaction not begun with 2PC is refused (INVALID_TXN_STATE: nobody promised to
keep it, and the timeout may take it); on Complete* it bumps the epoch and *stays* Complete*, so
that the EndTxn an external coordinator repeats after a crash is answered with the truth: success
when the transaction ended the way it asks, INVALID_TXN_STATE when it ended the other way.

``VALID_PREVIOUS`` (Kafka's ``TransactionState.validPreviousStates``) is derived from the table,
and ``TxnMetadata.prepare`` refuses any move it does not list: a second guard, never a second
source of truth.

::

    Empty ──ADD──▶ Ongoing ──COMMIT──▶ PrepareCommit ──MARKERS_WRITTEN──▶ CompleteCommit
      ▲               │ └──ABORT────▶ PrepareAbort ───MARKERS_WRITTEN──▶ CompleteAbort
      │               └──INIT / TIMEOUT──▶ PrepareEpochFence ──ADVANCE──▶ PrepareAbort
      └──── INIT / ADD from Empty or Complete* ────────────────────────────────────┘
    Empty / Complete* ──EXPIRE──▶ Dead
    Ongoing (2PC) ──INIT_KEEP──▶ Ongoing (2PC, kept) ──INIT_KEEP──▶ Ongoing (2PC, kept) ──COMMIT/ABORT──▶ …
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from oncelog.coordinator.transaction.state import TxnState
from oncelog.protocol.errors import ConcurrentTransactions, InvalidTxnState, KafkaError

__all__ = ["Cell", "Request", "RULES", "TWO_PC_KEPT", "TWO_PC_ONGOING", "VALID_PREVIOUS", "check_transition",
           "is_valid_transition", "row"]


class Request(enum.Enum):
    INIT = "init"
    INIT_KEEP = "init_keep"
    ADD = "add"
    COMMIT = "commit"
    ABORT = "abort"
    PRODUCE = "produce"
    TXN_OFFSETS = "txn_offsets"
    TIMEOUT = "timeout"
    EXPIRE = "expire"
    ADVANCE = "advance"
    MARKERS_WRITTEN = "markers_written"


@dataclass(frozen=True, slots=True)
class Cell:
    target: TxnState | None = None
    error: type[KafkaError] | None = None
    markers: bool = False

    def __repr__(self) -> str:
        parts = []
        if self.target is not None:
            parts.append(f"-> {self.target.kafka_name}")
        if self.markers:
            parts.append("write markers")
        parts.append("ok" if self.error is None else self.error.__name__)
        return ", ".join(parts)


OK = Cell()  # answered with success, nothing changes (also: an internal request with nothing to do)


def to(target: TxnState, *, answer: type[KafkaError] | None = None, markers: bool = False) -> Cell:
    return Cell(target, answer, markers)


def refuse(error: type[KafkaError]) -> Cell:
    return Cell(None, error)


S, R = TxnState, Request
BUSY = refuse(ConcurrentTransactions)  # a move is under way: the client retries
WRONG = refuse(InvalidTxnState)  # the request makes no sense in this state

RULES: dict[TxnState, dict[Request, Cell]] = {
    S.EMPTY: {
        R.INIT: to(S.EMPTY), R.INIT_KEEP: to(S.EMPTY), R.ADD: to(S.ONGOING), R.COMMIT: WRONG, R.ABORT: WRONG, R.PRODUCE: WRONG,
        R.TXN_OFFSETS: WRONG, R.TIMEOUT: OK, R.EXPIRE: to(S.DEAD), R.ADVANCE: OK, R.MARKERS_WRITTEN: OK,
    },
    S.ONGOING: {
        R.INIT: to(S.PREPARE_EPOCH_FENCE, answer=ConcurrentTransactions), R.INIT_KEEP: WRONG, R.ADD: to(S.ONGOING),
        R.COMMIT: to(S.PREPARE_COMMIT, markers=True), R.ABORT: to(S.PREPARE_ABORT, markers=True), R.PRODUCE: OK,
        R.TXN_OFFSETS: OK, R.TIMEOUT: to(S.PREPARE_EPOCH_FENCE), R.EXPIRE: OK, R.ADVANCE: OK, R.MARKERS_WRITTEN: OK,
    },
    S.PREPARE_COMMIT: {
        R.INIT: BUSY, R.INIT_KEEP: BUSY, R.ADD: BUSY, R.COMMIT: BUSY, R.ABORT: WRONG, R.PRODUCE: WRONG, R.TXN_OFFSETS: WRONG,
        R.TIMEOUT: OK, R.EXPIRE: OK, R.ADVANCE: Cell(markers=True), R.MARKERS_WRITTEN: to(S.COMPLETE_COMMIT),
    },
    S.PREPARE_ABORT: {
        R.INIT: BUSY, R.INIT_KEEP: BUSY, R.ADD: BUSY, R.COMMIT: WRONG, R.ABORT: BUSY, R.PRODUCE: WRONG, R.TXN_OFFSETS: WRONG,
        R.TIMEOUT: OK, R.EXPIRE: OK, R.ADVANCE: Cell(markers=True), R.MARKERS_WRITTEN: to(S.COMPLETE_ABORT),
    },
    S.COMPLETE_COMMIT: {
        R.INIT: to(S.EMPTY), R.INIT_KEEP: to(S.COMPLETE_COMMIT), R.ADD: to(S.ONGOING), R.COMMIT: OK, R.ABORT: WRONG, R.PRODUCE: WRONG,
        R.TXN_OFFSETS: WRONG, R.TIMEOUT: OK, R.EXPIRE: to(S.DEAD), R.ADVANCE: OK, R.MARKERS_WRITTEN: OK,
    },
    S.COMPLETE_ABORT: {
        R.INIT: to(S.EMPTY), R.INIT_KEEP: to(S.COMPLETE_ABORT), R.ADD: to(S.ONGOING), R.COMMIT: WRONG, R.ABORT: OK, R.PRODUCE: WRONG,
        R.TXN_OFFSETS: WRONG, R.TIMEOUT: OK, R.EXPIRE: to(S.DEAD), R.ADVANCE: OK, R.MARKERS_WRITTEN: OK,
    },
    S.PREPARE_EPOCH_FENCE: {
        R.INIT: BUSY, R.INIT_KEEP: BUSY, R.ADD: BUSY, R.COMMIT: BUSY, R.ABORT: BUSY, R.PRODUCE: WRONG, R.TXN_OFFSETS: WRONG,
        R.TIMEOUT: OK, R.EXPIRE: OK, R.ADVANCE: to(S.PREPARE_ABORT, markers=True), R.MARKERS_WRITTEN: OK,
    },
    S.DEAD: {  # an expired id: InitProducerId starts it afresh (shard.py); anything else does not know it
        R.INIT: to(S.EMPTY), R.INIT_KEEP: to(S.EMPTY), R.ADD: WRONG, R.COMMIT: WRONG, R.ABORT: WRONG, R.PRODUCE: WRONG,
        R.TXN_OFFSETS: WRONG, R.TIMEOUT: OK, R.EXPIRE: OK, R.ADVANCE: OK, R.MARKERS_WRITTEN: OK,
    },
}

#: Ongoing, for a transaction of a producer that enabled two-phase commit (KIP-939).
TWO_PC_ONGOING: dict[Request, Cell] = {
    **RULES[S.ONGOING],
    R.INIT_KEEP: to(S.ONGOING),  # keep it for the new instance: epoch bumped, the kept (id, epoch) answered
    R.TIMEOUT: OK,  # never aborted on timeout: only its producer (EndTxn) or an InitProducerId ends it
}
#: Ongoing, 2PC, and prepared: kept across a new producer instance by INIT_KEEP.
TWO_PC_KEPT: dict[Request, Cell] = {
    **TWO_PC_ONGOING,
    R.ADD: WRONG, R.PRODUCE: WRONG, R.TXN_OFFSETS: WRONG,  # a prepared transaction's content is final
}
assert all(set(r) == set(Request) for r in (*RULES.values(), TWO_PC_ONGOING, TWO_PC_KEPT)) and set(RULES) == set(TxnState)


def row(state: TxnState, *, two_pc: bool = False, kept: bool = False) -> dict[Request, Cell]:
    """The row of a transaction in ``state``: the 2PC rows stand for Ongoing when the
    transaction is one of a 2PC producer (``two_pc``) and when it is kept (``kept``)."""
    if state is S.ONGOING and two_pc:
        return TWO_PC_KEPT if kept else TWO_PC_ONGOING
    return RULES[state]


_ROWS: list[tuple[TxnState, dict[Request, Cell]]] = [
    *RULES.items(), (S.ONGOING, TWO_PC_ONGOING), (S.ONGOING, TWO_PC_KEPT)
]

#: target state -> the states it may be entered from (derived from every row).
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    target: frozenset(state for state, cells in _ROWS for cell in cells.values() if cell.target is target)
    for target in TxnState
}


def is_valid_transition(current: TxnState, target: TxnState) -> bool:
    return current in VALID_PREVIOUS[target]


def check_transition(transactional_id: str, current: TxnState, target: TxnState) -> None:
    """Raises InvalidTxnState for a move the table does not allow (a bug if it ever fires: the
    shard only moves as a cell says)."""
    if not is_valid_transition(current, target):
        raise InvalidTxnState(
            f"transaction {transactional_id!r}: {current.kafka_name} -> {target.kafka_name} is not a legal transition"
        )
