"""Two-phase commit (KIP-939) in the transaction coordinator, on real partitions with a manual
clock (issue 17, section 3): the 2PC rows of the transition table, the kept transaction's record
in ``__transaction_state``, InitProducerId(enable_2pc, keep_prepared_txn), the exemption from
the timeout, and a prepared transaction completed by a new producer instance — commit and abort,
across a reload of the coordinator, a second crash, and the end of the epochs."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.clock import ManualClock
from oncelog.coordinator.transaction import log as txnlog
from oncelog.coordinator.transaction import rules
from oncelog.coordinator.transaction.rules import RULES, TWO_PC_KEPT, TWO_PC_ONGOING, Request, check_transition
from oncelog.coordinator.transaction.state import TxnState
from oncelog.admin.transactions import TWO_PC_TIMEOUT_MS, Description, Producer, hanging_reason
from oncelog.broker.coordinators import two_phase_commit
from oncelog.protocol.errors import (
    ConcurrentTransactions,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTxnState,
    ProducerFenced,
    TransactionalIdAuthorizationFailed,
)
from oncelog.types import TopicPartition
from txn_harness import TxnNode

ORDERS0 = TopicPartition("orders", 0)
INVENTORY0 = TopicPartition("inventory", 0)
MAX_TIMEOUT_MS = 60_000


@pytest.fixture
def node(tmp_path: Path) -> Iterator[TxnNode]:
    n = TxnNode(tmp_path, ManualClock(), max_timeout_ms=MAX_TIMEOUT_MS)
    yield n
    n.close()


def prepare(node: TxnNode, tid: str = "tx", values: tuple[bytes, bytes] = (b"order-1", b"reserve-1")) -> tuple[int, int]:
    """A 2PC producer's transaction, written and flushed ("prepared" in KIP-939's terms)."""
    pid, epoch = node.coord.initialize(tid, 10_000, enable_2pc=True)[:2]
    node.coord.add_partitions(tid, pid, epoch, {ORDERS0, INVENTORY0})
    node.produce(pid, epoch, ORDERS0, values[0], tid)
    node.produce(pid, epoch, INVENTORY0, values[1], tid)
    return pid, epoch


# -- the table ------------------------------------------------------------------------------------


def test_two_pc_rows_differ_from_ongoing_only_where_kip939_says() -> None:
    ongoing = RULES[TxnState.ONGOING]
    assert {r for r in Request if TWO_PC_ONGOING[r] != ongoing[r]} == {Request.INIT_KEEP, Request.TIMEOUT}
    assert TWO_PC_ONGOING[Request.TIMEOUT].target is None and TWO_PC_ONGOING[Request.TIMEOUT].error is None
    assert TWO_PC_ONGOING[Request.INIT_KEEP].target is TxnState.ONGOING
    assert ongoing[Request.INIT_KEEP].error is InvalidTxnState  # a transaction not begun with 2PC is not kept
    assert {r for r in Request if TWO_PC_KEPT[r] != TWO_PC_ONGOING[r]} == {Request.ADD, Request.PRODUCE,
                                                                           Request.TXN_OFFSETS}
    assert all(TWO_PC_KEPT[r].error is InvalidTxnState for r in (Request.ADD, Request.PRODUCE, Request.TXN_OFFSETS))
    # a kept transaction ends only by EndTxn, or by an InitProducerId that does not keep it (it is aborted)
    assert TWO_PC_KEPT[Request.COMMIT].target is TxnState.PREPARE_COMMIT
    assert TWO_PC_KEPT[Request.ABORT].target is TxnState.PREPARE_ABORT
    assert TWO_PC_KEPT[Request.INIT].target is TxnState.PREPARE_EPOCH_FENCE
    # after the outcome is written, keep_prepared_txn stays in it, so a repeated EndTxn learns the truth
    assert RULES[TxnState.COMPLETE_COMMIT][Request.INIT_KEEP].target is TxnState.COMPLETE_COMMIT
    assert RULES[TxnState.COMPLETE_ABORT][Request.INIT_KEEP].target is TxnState.COMPLETE_ABORT


@given(st.sampled_from(list(TxnState)), st.booleans(), st.booleans(), st.sampled_from(list(Request)))
def test_every_cell_of_every_row_is_a_legal_move(state: TxnState, two_pc: bool, kept: bool, request: Request) -> None:
    cell = rules.row(state, two_pc=two_pc, kept=kept)[request]
    if cell.target is not None:
        check_transition("t", state, cell.target)  # VALID_PREVIOUS is derived from every row


# -- the record --------------------------------------------------------------------------------------


def test_kept_pair_and_2pc_timeout_round_trip_through_the_log_value() -> None:
    rec = txnlog.TxnRecord(7, 7, 12, 11, txnlog.TWO_PC_TIMEOUT_MS, TxnState.ONGOING, frozenset({ORDERS0}), 5, 9,
                           kept_producer_id=7, kept_producer_epoch=11)
    back = txnlog.decode_value(txnlog.encode_value(rec))
    assert back == rec and back.is_2pc and back.kept
    plain = txnlog.TxnRecord(7, 7, 12, 11, 10_000, TxnState.ONGOING, frozenset({ORDERS0}), 5, 9)
    assert not plain.kept and not plain.is_2pc
    # without a kept pair the value is byte for byte what it was before KIP-939 (two tags)
    assert len(txnlog.encode_value(rec)) == len(txnlog.encode_value(plain)) + 2 * 2 + 8 + 2
    assert txnlog.decode_value(txnlog.encode_value(plain)) == plain


# -- InitProducerId(enable_2pc) ------------------------------------------------------------------------


def test_enable_2pc_sets_no_timeout_and_ignores_the_requested_one(node: TxnNode) -> None:
    node.coord.initialize("tx", 10 * MAX_TIMEOUT_MS, enable_2pc=True)  # above the max: not checked with 2PC
    assert node.coord.txns["tx"].timeout_ms == txnlog.TWO_PC_TIMEOUT_MS
    node.coord.initialize("tx", 10_000)  # the next instance without 2PC: an ordinary timeout again
    assert node.coord.txns["tx"].timeout_ms == 10_000 and not node.coord.txns["tx"].is_2pc


def test_2pc_transaction_outlives_the_timeout_and_an_ordinary_one_does_not(node: TxnNode) -> None:
    prepare(node, "tx")
    pid, epoch = node.coord.initialize("plain", 10_000)[:2]
    node.coord.add_partitions("plain", pid, epoch, {ORDERS0})
    node.produce(pid, epoch, ORDERS0, b"plain", "plain")
    node.clock.advance(MAX_TIMEOUT_MS * 100)
    assert node.coord.abort_timed_out() == ["plain"]
    assert node.coord.txns["tx"].state is TxnState.ONGOING
    assert node.restart() >= 2  # reloaded: still 2PC, still exempt
    node.clock.advance(MAX_TIMEOUT_MS * 100)
    assert node.coord.abort_timed_out() == []
    assert node.coord.txns["tx"].state is TxnState.ONGOING and node.coord.txns["tx"].is_2pc


def test_2pc_exemption_is_the_table_not_just_a_long_timeout(node: TxnNode) -> None:
    """Kafka's 2PC timeout is Int.MaxValue ms (24.8 days); past it the 2PC row still says no."""
    pid, epoch = prepare(node)
    node.clock.advance(txnlog.TWO_PC_TIMEOUT_MS + 1_000)
    assert node.coord.abort_timed_out() == []
    node.coord.end_txn("tx", pid, epoch, commit=True)
    assert node.committed_values(ORDERS0) == [b"order-1"]


# -- keep_prepared_txn ------------------------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
@pytest.mark.parametrize("reload", [False, True])
def test_new_instance_keeps_and_completes_the_prepared_transaction(node: TxnNode, commit: bool, reload: bool) -> None:
    pid, epoch = prepare(node)
    if reload:
        node.restart()  # the coordinator fails over between prepare and recovery
    answer = node.coord.initialize("tx", 10_000, enable_2pc=True, keep_prepared=True)
    assert tuple(answer) == (pid, epoch + 1, pid, epoch)
    meta = node.coord.txns["tx"]
    assert meta.state is TxnState.ONGOING and meta.kept and meta.partitions == {ORDERS0, INVENTORY0}
    assert node.committed_values(ORDERS0) == []  # still prepared: nothing visible
    if reload:
        node.restart()  # and again between recovery and completion: the kept pair is in the log
        assert node.coord.txns["tx"].kept_producer_epoch == epoch
    # the crashed instance is fenced; the new one may only complete the transaction
    with pytest.raises(InvalidProducerEpoch):
        node.produce(pid, epoch, ORDERS0, b"zombie")
    with pytest.raises(ProducerFenced):
        node.coord.end_txn("tx", pid, epoch, commit=True)
    with pytest.raises(InvalidTxnState):
        node.produce(pid, epoch + 1, ORDERS0, b"more")
    with pytest.raises(InvalidTxnState):
        node.coord.add_partitions("tx", pid, epoch + 1, {TopicPartition("orders", 1)})
    node.coord.end_txn("tx", pid, epoch + 1, commit=commit)
    meta = node.coord.txns["tx"]
    assert meta.state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT) and not meta.kept
    want = ([b"order-1"], [b"reserve-1"]) if commit else ([], [])
    assert (node.committed_values(ORDERS0), node.committed_values(INVENTORY0)) == want
    part = node.rm.partition("orders", 0)
    assert part.last_stable_offset == part.high_watermark
    # the new instance goes on with its own transactions (the marker carried its epoch already)
    node.coord.add_partitions("tx", pid, epoch + 1, {ORDERS0})
    node.produce(pid, epoch + 1, ORDERS0, b"next")
    node.coord.end_txn("tx", pid, epoch + 1, commit=True)
    assert node.committed_values(ORDERS0) == want[0] + [b"next"]


def test_a_second_crash_keeps_the_original_pair(node: TxnNode) -> None:
    pid, epoch = prepare(node)
    node.coord.initialize("tx", 10_000, enable_2pc=True, keep_prepared=True)
    answer = node.coord.initialize("tx", 10_000, enable_2pc=True, keep_prepared=True)
    assert tuple(answer) == (pid, epoch + 2, pid, epoch)
    with pytest.raises(ProducerFenced):
        node.coord.end_txn("tx", pid, epoch + 1, commit=True)  # the first recovering instance is fenced too
    node.coord.end_txn("tx", pid, epoch + 2, commit=True)
    assert node.committed_values(ORDERS0) == [b"order-1"]


def test_keep_when_the_epochs_run_out_moves_the_client_to_a_new_producer_id(node: TxnNode) -> None:
    pid, _ = node.coord.initialize("tx", 10_000, enable_2pc=True)[:2]
    node.write_record("tx", TxnState.EMPTY, producer_epoch=32766)
    node.coord.add_partitions("tx", pid, 32766, {ORDERS0})
    node.produce(pid, 32766, ORDERS0, b"last-epoch")
    new_pid, new_epoch, kept_pid, kept_epoch = node.coord.initialize("tx", 10_000, enable_2pc=True, keep_prepared=True)
    assert (new_epoch, kept_pid, kept_epoch) == (0, pid, 32766) and new_pid != pid
    node.coord.end_txn("tx", new_pid, 0, commit=True)  # markers go to the kept producer id
    assert node.committed_values(ORDERS0) == [b"last-epoch"]
    part = node.rm.partition("orders", 0)
    assert part.last_stable_offset == part.high_watermark


def test_init_without_keep_aborts_a_kept_transaction(node: TxnNode) -> None:
    """The KIP's forceTerminateTransaction: InitProducerId(keep_prepared_txn=false)."""
    pid, epoch = prepare(node)
    node.coord.initialize("tx", 10_000, enable_2pc=True, keep_prepared=True)
    with pytest.raises(ConcurrentTransactions):
        node.coord.initialize("tx", 10_000, enable_2pc=True)
    assert node.coord.txns["tx"].state is TxnState.COMPLETE_ABORT and not node.coord.txns["tx"].kept
    assert node.committed_values(ORDERS0) == []
    part = node.rm.partition("orders", 0)
    assert part.last_stable_offset == part.high_watermark


@pytest.mark.parametrize("commit", [True, False])
def test_after_the_outcome_a_repeated_end_txn_is_told_the_truth(node: TxnNode, commit: bool) -> None:
    """The external coordinator decided, the new instance completed, then it crashed before it
    could record that: the next instance keeps (nothing is ongoing) and repeats the decision."""
    pid, epoch = prepare(node)
    node.coord.end_txn("tx", pid, epoch, commit=commit)
    answer = node.coord.initialize("tx", 10_000, enable_2pc=True, keep_prepared=True)
    assert tuple(answer) == (pid, epoch + 1, -1, -1)
    assert node.coord.txns["tx"].state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    node.coord.end_txn("tx", pid, epoch + 1, commit=commit)  # the same decision: success
    with pytest.raises(InvalidTxnState):
        node.coord.end_txn("tx", pid, epoch + 1, commit=not commit)  # the other one: refused


def test_keep_with_nothing_ongoing_answers_minus_one(node: TxnNode) -> None:
    pid, epoch = node.coord.initialize("tx", 10_000, enable_2pc=True)[:2]
    assert tuple(node.coord.initialize("tx", 10_000, enable_2pc=True, keep_prepared=True)) == (pid, epoch + 1, -1, -1)


def test_keep_refusals(node: TxnNode) -> None:
    with pytest.raises(InvalidRequest, match="keep_prepared_txn"):
        node.coord.initialize("tx", 10_000, keep_prepared=True)  # without enable_2pc
    pid, epoch = node.coord.initialize("plain", 10_000)[:2]
    node.coord.add_partitions("plain", pid, epoch, {ORDERS0})
    with pytest.raises(InvalidTxnState, match="not begun with 2PC"):
        node.coord.initialize("plain", 10_000, enable_2pc=True, keep_prepared=True)
    assert node.coord.txns["plain"].state is TxnState.ONGOING and node.coord.txns["plain"].producer_epoch == epoch


# -- the broker's permission ----------------------------------------------------------------------------


def test_switch_and_permission() -> None:
    with pytest.raises(TransactionalIdAuthorizationFailed, match="transaction.two.phase.commit.enable=false"):
        two_phase_commit.check_2pc_allowed(False, True, "User:ANONYMOUS", "tx")
    two_phase_commit.check_2pc_allowed(True, True, "User:alice", "db-1")
    with pytest.raises(TransactionalIdAuthorizationFailed, match="User:alice may not use two-phase commit"):
        two_phase_commit.check_2pc_allowed(True, False, "User:alice", "spark-1")


# -- find-hanging ---------------------------------------------------------------------------------------


def test_find_hanging_leaves_a_waiting_or_kept_2pc_transaction_alone() -> None:
    now = 10 * 24 * 3600 * 1000
    p = Producer("t", 0, producer_id=7, producer_epoch=3, last_sequence=0, last_timestamp=1_000,
                 coordinator_epoch=0, current_txn_start_offset=42)

    def desc(timeout_ms: int, epoch: int) -> Description:
        return Description("tx", 1, "Ongoing", 7, epoch, timeout_ms, 1_000, (("t", 0),))

    assert txnlog.TWO_PC_TIMEOUT_MS == TWO_PC_TIMEOUT_MS
    assert hanging_reason(p, desc(TWO_PC_TIMEOUT_MS, 3), now) is None  # days old, waiting for its decision
    assert hanging_reason(p, desc(TWO_PC_TIMEOUT_MS, 5), now) is None  # kept: two recoveries bumped the epoch
    assert "longer than the maximum" in (hanging_reason(p, desc(60_000, 3), now) or "")
    assert "has epoch 5" in (hanging_reason(p, desc(60_000, 5), now) or "")
    assert "has epoch 2" in (hanging_reason(p, desc(TWO_PC_TIMEOUT_MS, 2), now) or "")  # data newer than the coordinator


# -- a random walk with 2PC: a model of what read_committed readers must see ------------------------------

WALK = st.lists(st.sampled_from(["init", "init_2pc", "keep", "add", "produce", "commit", "abort", "tick", "restart"]),
                min_size=1, max_size=25)
REFUSED = (ConcurrentTransactions, InvalidTxnState, InvalidProducerIdMapping, ProducerFenced, InvalidProducerEpoch)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=WALK)
def test_random_walk_with_two_phase_commit(tmp_path_factory, ops: list[str]) -> None:
    """Any sequence of 2PC and ordinary requests, timeouts and coordinator reloads: the reloaded
    state equals the live one, a 2PC transaction is never aborted by the timeout, keep answers
    the pair the transaction was written with, and read_committed sees exactly what was committed."""
    node = TxnNode(tmp_path_factory.mktemp("walk2pc"), ManualClock(), max_timeout_ms=MAX_TIMEOUT_MS)
    committed: list[bytes] = []
    pending: list[bytes] = []
    pid = epoch = -1
    token: tuple[int, int] | None = None  # (pid, epoch) the open transaction was written with
    two_pc = False
    values = itertools.count()
    try:
        for op in ["init", *ops]:
            c = node.coord
            try:
                if op in ("init", "init_2pc"):
                    try:
                        pid, epoch = c.initialize("tx", 10_000, enable_2pc=op == "init_2pc")[:2]
                        two_pc = op == "init_2pc"
                    finally:
                        pending, token = [], None  # whatever was open is aborted
                elif op == "keep":
                    answer = c.initialize("tx", 10_000, enable_2pc=True, keep_prepared=True)
                    assert tuple(answer[2:]) == (token if token is not None else (-1, -1))
                    pid, epoch = answer[:2]
                    two_pc = True
                elif op == "add":
                    c.add_partitions("tx", pid, epoch, {ORDERS0})
                    token = token or (pid, epoch)
                elif op == "produce":
                    value = f"v{next(values)}".encode()
                    node.produce(pid, epoch, ORDERS0, value)
                    pending.append(value)
                elif op in ("commit", "abort"):
                    c.end_txn("tx", pid, epoch, commit=op == "commit")
                    if op == "commit":
                        committed.extend(pending)
                    pending, token = [], None
                elif op == "tick":
                    node.clock.advance(6_000)
                    if c.abort_timed_out():
                        assert not two_pc
                        pending, token = [], None
                elif op == "restart":
                    before = {tid: dataclasses.replace(m, pending=None).record() for tid, m in c.txns.items()}
                    node.restart()
                    assert {tid: m.record() for tid, m in node.coord.txns.items()} == before
            except REFUSED:
                if op == "keep":
                    assert token is not None and not two_pc  # only an ordinary open transaction is not kept
            assert node.committed_values(ORDERS0) == committed
            meta = node.coord.txns["tx"]
            part = node.rm.partition(*ORDERS0)
            if meta.state is not TxnState.ONGOING:
                assert part.last_stable_offset == part.high_watermark and token is None
    finally:
        node.close()
