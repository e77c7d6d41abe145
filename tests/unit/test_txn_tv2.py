"""Transactions version 2 (KIP-890 part 2) in the transaction coordinator's core, driven on real
partitions with a manual clock (txn_harness.TxnNode): the epoch bump at every end, the fencing of
the previous transaction's late EndTxn and late produce (KAFKA-17754), retries, the epoch
overflow to a new producer id, and the records that carry all of it across a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from oncelog.clock import ManualClock
from oncelog.coordinator.transaction import log as txnlog
from oncelog.coordinator.transaction.metadata import MAX_EPOCH
from oncelog.coordinator.transaction.rules import RULES, Request
from oncelog.coordinator.transaction.state import TxnState
from oncelog.protocol.errors import InvalidProducerEpoch, InvalidProducerIdMapping, InvalidTxnState, ProducerFenced
from oncelog.types import TopicPartition
from txn_harness import TxnNode

ORDERS0 = TopicPartition("orders", 0)
INVENTORY0 = TopicPartition("inventory", 0)
V2 = (Request.COMMIT_V2, Request.ABORT_V2, Request.COMMIT_RETRY_V2, Request.ABORT_RETRY_V2)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[TxnNode]:
    n = TxnNode(tmp_path, ManualClock())
    yield n
    n.close()


def _epoch_on(node: TxnNode, tp: TopicPartition, pid: int) -> int:
    return node.rm.partition(*tp).producers.entries[pid].epoch


# -- the table ---------------------------------------------------------------------------------------


def test_only_an_ongoing_transaction_ends_with_a_bump() -> None:
    bumps = {(state, req) for state, row in RULES.items() for req, cell in row.items() if cell.bump}
    assert bumps == {(TxnState.ONGOING, Request.COMMIT_V2), (TxnState.ONGOING, Request.ABORT_V2)}
    for req in (Request.COMMIT_V2, Request.ABORT_V2):
        assert RULES[TxnState.ONGOING][req].markers


def test_the_previous_epoch_on_an_ongoing_transaction_is_fenced_by_the_table() -> None:
    """The KAFKA-17754 cell: a retry-shaped EndTxn (the epoch before the last bump) finding the
    *next* transaction Ongoing is the previous transaction's late EndTxn."""
    for req in (Request.COMMIT_RETRY_V2, Request.ABORT_RETRY_V2):
        assert RULES[TxnState.ONGOING][req].error is ProducerFenced
        assert RULES[TxnState.ONGOING][req].target is None
    assert RULES[TxnState.COMPLETE_COMMIT][Request.COMMIT_RETRY_V2].error is None
    assert RULES[TxnState.COMPLETE_ABORT][Request.ABORT_RETRY_V2].error is None
    assert RULES[TxnState.COMPLETE_COMMIT][Request.ABORT_RETRY_V2].error is InvalidTxnState
    for state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        assert RULES[state][Request.COMMIT_V2].error is ProducerFenced  # an EndTxn for a transaction never begun


def test_tv1_rows_are_unchanged_by_tv2() -> None:
    """EndTxn up to v4 keeps its cells: no bump anywhere, a retried commit of a committed one is OK."""
    assert not any(RULES[s][r].bump for s in TxnState for r in Request if r not in V2)
    assert RULES[TxnState.COMPLETE_COMMIT][Request.COMMIT].error is None
    assert RULES[TxnState.ONGOING][Request.COMMIT].target is TxnState.PREPARE_COMMIT


# -- the epoch bump at every end ------------------------------------------------------------------


def test_every_end_bumps_the_epoch_and_the_markers_carry_it(node: TxnNode) -> None:
    c = node.coord
    pid, e0 = c.init_producer_id("tx", 10_000)
    node.produce(pid, e0, ORDERS0, b"a", v2=True)  # no AddPartitionsToTxn: the leader adds it
    node.produce(pid, e0, INVENTORY0, b"b", v2=True)
    meta = c.txns["tx"]
    assert meta.state is TxnState.ONGOING and meta.partitions == {ORDERS0, INVENTORY0} and meta.client_version == 2
    assert c.end_txn("tx", pid, e0, True, v2=True) == (pid, e0 + 1)
    assert meta.state is TxnState.COMPLETE_COMMIT and meta.producer_epoch == e0 + 1
    assert _epoch_on(node, ORDERS0, pid) == e0 + 1 and _epoch_on(node, INVENTORY0, pid) == e0 + 1
    assert node.committed_values(ORDERS0) == [b"a"]
    node.produce(pid, e0 + 1, ORDERS0, b"c", v2=True)
    assert c.end_txn("tx", pid, e0 + 1, False, v2=True) == (pid, e0 + 2)
    assert meta.state is TxnState.COMPLETE_ABORT
    assert node.committed_values(ORDERS0) == [b"a"]


def test_a_retried_end_txn_gets_the_same_answer_and_writes_nothing(node: TxnNode) -> None:
    c = node.coord
    pid, e0 = c.init_producer_id("tx", 10_000)
    node.produce(pid, e0, ORDERS0, b"a", v2=True)
    assert c.end_txn("tx", pid, e0, True, v2=True) == (pid, e0 + 1)
    end = node.rm.partition(*ORDERS0).log.log_end_offset
    assert c.end_txn("tx", pid, e0, True, v2=True) == (pid, e0 + 1)  # the client's retry
    assert node.rm.partition(*ORDERS0).log.log_end_offset == end
    with pytest.raises(InvalidTxnState):
        c.end_txn("tx", pid, e0, False, v2=True)  # a "retry" asking the other outcome
    with pytest.raises(ProducerFenced):
        c.end_txn("tx", pid, e0 + 1, True, v2=True)  # the new epoch, no transaction begun


def test_retry_while_markers_are_pending_finishes_them(node: TxnNode) -> None:
    c = node.coord
    pid, e0 = c.init_producer_id("tx", 10_000)
    node.produce(pid, e0, ORDERS0, b"a", v2=True)
    node.produce(pid, e0, INVENTORY0, b"b", v2=True)
    node.fail_markers = {INVENTORY0}
    assert c.end_txn("tx", pid, e0, True, v2=True) == (pid, e0 + 1)  # the outcome is fixed
    assert c.txns["tx"].state is TxnState.PREPARE_COMMIT
    node.fail_markers = set()
    assert c.end_txn("tx", pid, e0, True, v2=True) == (pid, e0 + 1)
    assert c.txns["tx"].state is TxnState.COMPLETE_COMMIT
    assert node.committed_values(INVENTORY0) == [b"b"]


# -- KAFKA-17754: the previous transaction's late requests -----------------------------------------


def test_late_end_txn_of_the_previous_transaction_is_fenced(node: TxnNode) -> None:
    """Transaction N commits (the client retried its EndTxn); N+1 begins and writes; then N's
    first, delayed EndTxn(commit) arrives. Under TV2 it carries N's epoch: fenced, and N+1's
    records stay uncommitted until N+1 itself ends."""
    c = node.coord
    pid, e = c.init_producer_id("tx", 10_000)
    node.produce(pid, e, ORDERS0, b"n", v2=True)
    assert c.end_txn("tx", pid, e, True, v2=True) == (pid, e + 1)
    node.produce(pid, e + 1, ORDERS0, b"n+1 first", v2=True)
    with pytest.raises(ProducerFenced):
        c.end_txn("tx", pid, e, True, v2=True)  # the late one
    meta = c.txns["tx"]
    assert meta.state is TxnState.ONGOING and meta.producer_epoch == e + 1
    assert node.committed_values(ORDERS0) == [b"n"]
    node.produce(pid, e + 1, INVENTORY0, b"n+1 second", v2=True)
    assert c.end_txn("tx", pid, e + 1, False, v2=True) == (pid, e + 2)  # N+1 aborts, whole
    assert node.committed_values(ORDERS0) == [b"n"] and node.committed_values(INVENTORY0) == []


def test_late_produce_of_the_previous_transaction_is_refused(node: TxnNode) -> None:
    c = node.coord
    pid, e = c.init_producer_id("tx", 10_000)
    node.produce(pid, e, ORDERS0, b"n", v2=True)
    c.end_txn("tx", pid, e, True, v2=True)
    node.produce(pid, e + 1, INVENTORY0, b"n+1", v2=True)
    with pytest.raises(InvalidProducerEpoch):  # at the coordinator: an ended transaction's write
        node.produce(pid, e, ORDERS0, b"late", v2=True)
    with pytest.raises(InvalidProducerEpoch):  # and at the partition: the marker raised its epoch
        node.rm.partition(*ORDERS0).producers.check(_header(pid, e, 1))
    assert c.txns["tx"].partitions == {INVENTORY0}


def _header(pid: int, epoch: int, seq: int):  # type: ignore[no-untyped-def]
    from oncelog.protocol import records

    batch = records.build_batch([(None, b"x", [])], timestamp_ms=0, producer_id=pid, producer_epoch=epoch,
                                base_sequence=seq, transactional=True)
    return records.validate_produce_batch(batch, 1 << 20)


def test_timeout_abort_of_a_tv2_transaction_fences_the_client(node: TxnNode) -> None:
    """The coordinator's own abort (timeout) bumps once and records no TV2 end, so the client's
    abort with its old epoch is PRODUCER_FENCED, as on Kafka 4.0."""
    c = node.coord
    pid, e = c.init_producer_id("tx", 1_000)
    node.produce(pid, e, ORDERS0, b"slow", v2=True)
    node.clock.advance(2_000)
    assert c.abort_timed_out() == ["tx"]
    assert c.txns["tx"].state is TxnState.COMPLETE_ABORT and c.txns["tx"].producer_epoch == e + 1
    with pytest.raises(ProducerFenced):
        c.end_txn("tx", pid, e, False, v2=True)


def test_an_old_instance_after_init_is_fenced_not_taken_for_a_retry(node: TxnNode) -> None:
    c = node.coord
    pid, e = c.init_producer_id("tx", 10_000)
    node.produce(pid, e, ORDERS0, b"n", v2=True)
    c.end_txn("tx", pid, e, True, v2=True)
    pid2, e2 = c.init_producer_id("tx", 10_000)  # a new instance: epoch e + 2
    assert (pid2, e2) == (pid, e + 2)
    with pytest.raises(ProducerFenced):
        c.end_txn("tx", pid, e + 1, True, v2=True)


# -- epoch overflow ----------------------------------------------------------------------------------


def _at_epoch(node: TxnNode, epoch: int) -> int:
    pid, _ = node.coord.init_producer_id("tx", 10_000)
    node.write_record("tx", TxnState.EMPTY, producer_epoch=epoch, last_producer_epoch=epoch - 1)
    return pid


def test_end_at_the_last_epoch_moves_to_a_new_producer_id(node: TxnNode) -> None:
    c = node.coord
    pid = _at_epoch(node, MAX_EPOCH - 1)
    node.produce(pid, MAX_EPOCH - 1, ORDERS0, b"last", v2=True)
    new_pid, epoch = c.end_txn("tx", pid, MAX_EPOCH - 1, True, v2=True)
    assert new_pid != pid and epoch == 0
    meta = c.txns["tx"]
    assert (meta.producer_id, meta.producer_epoch, meta.last_producer_id, meta.next_producer_id) == (new_pid, 0, pid, -1)
    assert _epoch_on(node, ORDERS0, pid) == MAX_EPOCH  # the marker: 32767, the coordinator's own epoch
    assert node.committed_values(ORDERS0) == [b"last"]
    assert c.end_txn("tx", pid, MAX_EPOCH - 1, True, v2=True) == (new_pid, 0)  # retry across the overflow
    node.produce(new_pid, 0, ORDERS0, b"next", v2=True)
    with pytest.raises(InvalidProducerIdMapping):
        node.produce(pid, MAX_EPOCH - 1, ORDERS0, b"late", v2=True)
    assert c.end_txn("tx", new_pid, 0, True, v2=True) == (new_pid, 1)
    assert node.committed_values(ORDERS0) == [b"last", b"next"]


def test_overflow_left_in_prepare_completes_after_restart(node: TxnNode) -> None:
    c = node.coord
    pid = _at_epoch(node, MAX_EPOCH - 1)
    node.produce(pid, MAX_EPOCH - 1, ORDERS0, b"o", v2=True)
    node.produce(pid, MAX_EPOCH - 1, INVENTORY0, b"i", v2=True)
    node.fail_markers = {INVENTORY0}
    new_pid, _ = c.end_txn("tx", pid, MAX_EPOCH - 1, True, v2=True)
    meta = c.txns["tx"]
    assert meta.state is TxnState.PREPARE_COMMIT and meta.next_producer_id == new_pid and meta.client_version == 2
    node.fail_markers = set()
    node.restart()
    meta = node.coord.txns["tx"]
    assert meta.state is TxnState.COMPLETE_COMMIT
    assert (meta.producer_id, meta.producer_epoch, meta.next_producer_id) == (new_pid, 0, -1)
    assert node.committed_values(INVENTORY0) == [b"i"]


def test_restart_keeps_the_client_version_and_the_fence(node: TxnNode) -> None:
    c = node.coord
    pid, e = c.init_producer_id("tx", 10_000)
    node.produce(pid, e, ORDERS0, b"n", v2=True)
    c.end_txn("tx", pid, e, True, v2=True)
    node.produce(pid, e + 1, ORDERS0, b"n+1", v2=True)
    node.restart()
    c = node.coord
    assert c.txns["tx"].client_version == 2
    with pytest.raises(ProducerFenced):
        c.end_txn("tx", pid, e, True, v2=True)
    assert c.end_txn("tx", pid, e + 1, True, v2=True) == (pid, e + 2)


# -- the record --------------------------------------------------------------------------------------


def test_record_carries_next_producer_id_and_client_version() -> None:
    rec = txnlog.TxnRecord(4000, 4000, 32767, 32766, 10_000, TxnState.PREPARE_COMMIT, frozenset({ORDERS0}), 5, 6,
                           next_producer_id=5000, client_version=2)
    assert txnlog.decode_value(txnlog.encode_value(rec)) == rec


def test_tv1_record_bytes_are_unchanged() -> None:
    """Defaults are left out, as Kafka leaves out tagged fields at their default: a TV1 record is
    the bytes it was before TV2 (tags 0 and 100 only)."""
    rec = txnlog.TxnRecord(4000, -1, 3, 2, 10_000, TxnState.COMPLETE_COMMIT, frozenset({ORDERS0}), 5, 6)
    data = txnlog.encode_value(rec)
    assert data.endswith(b"\x02\x00\x08" + (-1).to_bytes(8, "big", signed=True) + b"\x64\x02\x00\x02")
    assert txnlog.decode_value(data) == rec
