"""A transaction's Complete* record goes into ``__transaction_state`` with the partition's next
batch, not as an append of its own (transaction_coordinator.py, ``complete_unwritten``): the
coordinator's own records, read back from the log, on real partitions with a manual clock.

What must hold (R14, R19): the id may start its next transaction as soon as the markers are in;
no record of the id ever lands in the log before its Complete*; an idle id's Complete* is written
within COMPLETE_FLUSH_S, and at a stop; a coordinator killed before writing it finishes the
transaction again from the log's Prepare*, and the markers it sends again write nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Iterator

import pytest

from oncelog.broker.coordinators import transaction_coordinator as tc
from oncelog.broker.coordinators.transaction_coordinator import TXN_TOPIC
from oncelog.clock import ManualClock
from oncelog.coordinator.transaction import log as txnlog
from oncelog.coordinator.transaction.state import TxnState
from oncelog.protocol import records
from oncelog.protocol.errors import CoordinatorNotAvailable
from oncelog.types import TopicPartition
from txn_harness import TxnNode

ORDERS0 = TopicPartition("orders", 0)
INVENTORY0 = TopicPartition("inventory", 0)
S = TxnState


@pytest.fixture
def node(tmp_path: Path) -> Iterator[TxnNode]:
    n = TxnNode(tmp_path, ManualClock())
    yield n
    n.close()


def _log(node: TxnNode, tid: str) -> list[list[tuple[str, S | None]]]:
    """The batches of ``tid``'s __transaction_state partition, each as its (id, state) records."""
    part = node.rm.partition(TXN_TOPIC, node.real.partition_of(tid))
    data = part.log.read_batches(part.log_start_offset, 1 << 30, part.high_watermark)
    out = []
    for pos, h in records.iter_batches(data):
        batch = []
        for r in records.iter_records(data[pos:pos + h.size]):
            batch.append((txnlog.decode_key(r.key), None if r.value is None else txnlog.decode_value(r.value).state))
        out.append(batch)
    return out


def _commit_one(node: TxnNode, tid: str = "tx") -> tuple[int, int]:
    c = node.coord
    pid, epoch = c.init_producer_id(tid, 10_000)
    c.add_partitions(tid, pid, epoch, {ORDERS0, INVENTORY0})
    node.produce(pid, epoch, ORDERS0, b"a", tid)
    node.produce(pid, epoch, INVENTORY0, b"b", tid)
    c.end_txn(tid, pid, epoch, commit=True)
    return pid, epoch


def test_the_next_transaction_starts_at_once_and_its_first_batch_carries_the_complete(node: TxnNode) -> None:
    pid, epoch = _commit_one(node)
    assert node.coord.txns["tx"].state is S.COMPLETE_COMMIT  # in effect: EndTxn answered after the markers
    assert _log(node, "tx")[-1] == [("tx", S.PREPARE_COMMIT)]  # ... and not in the log yet
    assert node.committed_values(ORDERS0) == [b"a"] and node.committed_values(INVENTORY0) == [b"b"]

    node.coord.add_partitions("tx", pid, epoch, {ORDERS0})
    assert _log(node, "tx")[-1] == [("tx", S.COMPLETE_COMMIT), ("tx", S.ONGOING)]  # one append for both
    assert node.real.shard_of("tx").unwritten == []
    node.restart(crash=True)
    assert node.coord.txns["tx"].state is S.ONGOING


def test_an_idle_ids_complete_is_written_within_the_flush_delay(node: TxnNode, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tc, "COMPLETE_FLUSH_S", 0.05)
    _commit_one(node)
    assert _log(node, "tx")[-1] == [("tx", S.PREPARE_COMMIT)]
    node.loop.run_until_complete(asyncio.sleep(0.3))
    assert _log(node, "tx")[-1] == [("tx", S.COMPLETE_COMMIT)]
    assert node.real.shard_of("tx").unwritten == []
    before = {tp: node.rm.partition(*tp).high_watermark for tp in (ORDERS0, INVENTORY0)}
    node.restart(crash=True)
    assert node.coord.txns["tx"].state is S.COMPLETE_COMMIT
    assert {tp: node.rm.partition(*tp).high_watermark for tp in (ORDERS0, INVENTORY0)} == before


def test_a_stop_writes_it(node: TxnNode) -> None:
    _commit_one(node)
    node.restart()  # a stop: the coordinator's flush, as Broker.stop
    assert _log(node, "tx")[-1] == [("tx", S.COMPLETE_COMMIT)]


def test_killed_before_it_is_written_the_transaction_is_finished_again_and_nothing_is_marked_twice(node: TxnNode) -> None:
    pid, _epoch = _commit_one(node)
    ends = {tp: node.rm.partition(*tp).high_watermark for tp in (ORDERS0, INVENTORY0)}
    node.restart(crash=True)
    meta = node.coord.txns["tx"]
    assert meta.state is S.COMPLETE_COMMIT and meta.producer_id == pid
    assert {tp: node.rm.partition(*tp).high_watermark for tp in (ORDERS0, INVENTORY0)} == ends  # no second marker
    assert node.committed_values(ORDERS0) == [b"a"] and node.committed_values(INVENTORY0) == [b"b"]
    for tp in (ORDERS0, INVENTORY0):
        part = node.rm.partition(*tp)
        assert part.last_stable_offset == part.high_watermark


def test_aborts_and_timeouts_complete_the_same_way(node: TxnNode) -> None:
    c = node.coord
    pid, epoch = c.init_producer_id("tx", 1_000)
    c.add_partitions("tx", pid, epoch, {ORDERS0})
    node.produce(pid, epoch, ORDERS0, b"gone", "tx")
    node.clock.advance(2_000)
    assert c.abort_timed_out() == ["tx"]
    assert c.txns["tx"].state is S.COMPLETE_ABORT
    assert [st for _tid, st in _log(node, "tx")[-1]] != [S.COMPLETE_ABORT]
    new_pid, new_epoch = c.init_producer_id("tx", 1_000)  # the fenced producer's successor
    assert (new_pid, new_epoch) == (pid, epoch + 2)
    assert _log(node, "tx")[-1][0] == ("tx", S.COMPLETE_ABORT)
    assert node.committed_values(ORDERS0) == []


def test_a_batch_that_fails_keeps_the_complete_for_the_next(node: TxnNode) -> None:
    pid, epoch = _commit_one(node)
    node.fail_txn_log = True
    with pytest.raises(CoordinatorNotAvailable):
        node.coord.add_partitions("tx", pid, epoch, {ORDERS0})
    assert [rec.state for _t, rec in node.real.shard_of("tx").unwritten] == [S.COMPLETE_COMMIT]
    assert node.coord.txns["tx"].state is S.COMPLETE_COMMIT  # the failed add changed nothing
    node.fail_txn_log = False
    node.coord.add_partitions("tx", pid, epoch, {ORDERS0})
    assert _log(node, "tx")[-1] == [("tx", S.COMPLETE_COMMIT), ("tx", S.ONGOING)]
