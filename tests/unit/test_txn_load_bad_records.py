"""Loading ``__transaction_state`` never stops on a bad record (R22, with R8/R19 for what must
survive): a record or a whole batch the transaction coordinator cannot decode is logged with its
topic-partition and offset and skipped, and every valid transactional id before and after it
loads as it was written. Driven on real partitions in a temporary data directory."""

from __future__ import annotations

import dataclasses
import logging
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bad_batches
from oncelog.broker.coordinators.transaction_coordinator import TXN_TOPIC
from oncelog.coordinator.transaction import log as txnlog
from oncelog.coordinator.transaction.state import TxnState
from oncelog.protocol import records
from oncelog.protocol.errors import CoordinatorNotAvailable
from oncelog.types import TopicPartition
from txn_harness import TxnNode
from appends import completed

PARTITIONS = 3
ORDERS0 = TopicPartition("orders", 0)


class Node(TxnNode):
    """Storage plus a transaction coordinator, restartable; ``fail_txn_log`` makes appends to
    ``__transaction_state`` fail (a full disk)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, partitions=PARTITIONS, topics={"orders": 1})

    def committed_txn(self, tid: str) -> tuple[int, int]:
        pid, epoch = self.coord.init_producer_id(tid, 10_000)
        self.coord.add_partitions(tid, pid, epoch, {ORDERS0})
        self.coord.end_txn(tid, pid, epoch, commit=True)
        return pid, epoch

    def append_raw(self, p: int, batch: bytes) -> int:
        """Append a batch to ``__transaction_state-p`` as the storage API takes it (what a client
        could get in before Produce refused internal topics). Returns its base offset."""
        return completed(self.rm.partition(TXN_TOPIC, p).append_internal(batch, self.clock.now_ms())).base_offset


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def _valid_value() -> bytes:
    rec = txnlog.TxnRecord(4000, -1, 3, 2, 10_000, TxnState.COMPLETE_COMMIT, frozenset({ORDERS0}), 5, 6)
    return txnlog.encode_value(rec)


def _key(tid: str, version: int = 0) -> bytes:
    data = tid.encode()
    return struct.pack(">hh", version, len(data)) + data


def _with_state(value: bytes, state: int) -> bytes:
    buf = bytearray(value)
    buf[2 + 8 + 2 + 4] = state  # version, producer id, epoch, timeout, then the status byte
    return bytes(buf)


BAD_RECORDS = {
    "garbage key and value": (b"k", b"v"),
    "garbage value": (_key("x"), b"v"),
    "truncated value": (_key("x"), _valid_value()[:-5]),
    "value with trailing bytes": (_key("x"), _valid_value() + b"\x00\x01"),
    "unknown key version": (_key("x", version=9), _valid_value()),
    "key string runs past the key": (struct.pack(">hh", 0, 50) + b"x", _valid_value()),
    "unknown value version": (_key("x"), struct.pack(">h", 9) + _valid_value()[2:]),
    "unknown transaction state": (_key("x"), _with_state(_valid_value(), 42)),
    "null key": (None, _valid_value()),
}


def _skip_lines(caplog: pytest.LogCaptureFixture, tp: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if tp in r.getMessage() and r.levelno >= logging.WARNING]


@pytest.mark.parametrize("name", list(BAD_RECORDS))
def test_a_record_that_does_not_decode_is_logged_and_skipped(node: Node, caplog: pytest.LogCaptureFixture, name: str) -> None:
    """R22: one undecodable record between valid ones: the broker loads the rest; the skip is
    logged once with topic-partition and offset; the record it replaced applies nothing."""
    key, value = BAD_RECORDS[name]
    before = node.committed_txn("before")
    p = node.coord.partition_of("before")
    bad = node.append_raw(p, records.build_batch([(key, value, [])], timestamp_ms=node.clock.now_ms()))
    after = node.committed_txn("after")
    caplog.set_level(logging.INFO)
    assert node.restart() == 2
    assert set(node.coord.txns) == {"before", "after"}
    for tid, (pid, epoch) in (("before", before), ("after", after)):
        meta = node.coord.txns[tid]
        assert (meta.producer_id, meta.producer_epoch, meta.state) == (pid, epoch, TxnState.COMPLETE_COMMIT)
    lines = [m for m in _skip_lines(caplog, f"{TXN_TOPIC}-{p}") if f"offset {bad}" in m]
    assert len(lines) == 1, caplog.text
    # the coordinator still works for the ids it loaded and for new ones
    pid, epoch = node.coord.init_producer_id("before", 10_000)
    assert (pid, epoch) == (before[0], before[1] + 1)
    node.committed_txn("new")


def test_good_records_of_a_batch_around_a_bad_one_still_apply(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    """A batch holding [valid, garbage, valid]: the valid records apply, the garbage one is
    skipped with its own offset."""
    good = [(txnlog.encode_key(t), _valid_value(), []) for t in ("a", "b")]
    batch = records.build_batch([good[0], (b"k", b"v", []), good[1]], timestamp_ms=node.clock.now_ms())
    base = node.append_raw(0, batch)
    caplog.set_level(logging.INFO)
    assert node.restart() == 2
    assert node.coord.txns["a"].producer_id == node.coord.txns["b"].producer_id == 4000
    assert len([m for m in _skip_lines(caplog, f"{TXN_TOPIC}-0") if f"offset {base + 1}" in m]) == 1


BAD_BATCHES = {
    "record count larger than the records": lambda b: bad_batches.with_records_count(b, 5),
    "payload does not decompress (gzip)": bad_batches.with_garbage_compression,
    "payload does not decompress (zstd)": lambda b: bad_batches.with_garbage_compression(b, records.COMPRESSION_ZSTD),
    "last record cut short": bad_batches.with_truncated_record,
}


@pytest.mark.parametrize("name", list(BAD_BATCHES))
def test_a_batch_whose_records_do_not_parse_is_logged_and_skipped(node: Node, caplog: pytest.LogCaptureFixture, name: str) -> None:
    """R22: a batch with a sound header but records that do not parse or decompress
    (``iter_records`` raises CorruptMessage) is skipped whole, logged with its offsets."""
    before = node.committed_txn("before")
    p = node.coord.partition_of("before")
    valid = records.build_batch([(txnlog.encode_key("x"), _valid_value(), []), (txnlog.encode_key("y"), _valid_value(), [])],
                                timestamp_ms=node.clock.now_ms())
    bad = node.append_raw(p, BAD_BATCHES[name](valid))
    caplog.set_level(logging.INFO)
    assert node.restart() == 1
    assert node.coord.txns["before"].producer_epoch == before[1]
    assert len([m for m in _skip_lines(caplog, f"{TXN_TOPIC}-{p}") if f"offset {bad}" in m]) == 1, caplog.text


def test_a_control_batch_in_the_transaction_log_is_skipped(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    """A transaction marker has no place in ``__transaction_state`` (only a client's
    transactional writes could put one there): skipped and logged, nothing else changes."""
    node.committed_txn("before")
    p = node.coord.partition_of("before")
    marker = records.build_control_batch(commit=True, producer_id=7, producer_epoch=0, coordinator_epoch=0,
                                         timestamp_ms=node.clock.now_ms())
    off = node.append_raw(p, marker)
    caplog.set_level(logging.INFO)
    assert node.restart() == 1
    assert len([m for m in _skip_lines(caplog, f"{TXN_TOPIC}-{p}") if f"offset {off}" in m]) == 1, caplog.text


def test_many_bad_records_are_summarised_not_logged_one_by_one(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    """A partition full of garbage cannot flood the log: the first few skips get a line each,
    the rest one summary line with their count and offsets."""
    for i in range(10):
        node.append_raw(0, records.build_batch([(b"k%d" % j, b"v", []) for j in range(50)], timestamp_ms=node.clock.now_ms()))
    caplog.set_level(logging.INFO)
    assert node.restart() == 0
    lines = _skip_lines(caplog, f"{TXN_TOPIC}-0")
    assert 2 <= len(lines) <= 13, lines
    assert any("500" in m and "offsets 0" in m and "499" in m for m in lines), lines
    # one total line per load, whatever rate limit applies to the per-partition ones
    assert node.coord.skipped_on_load == {0: 500}
    assert any(m.startswith("transaction coordinator: 500 unreadable") and f"{TXN_TOPIC}-0 (500)" in m for m in lines), lines


def test_load_finishes_what_it_can_when_the_transaction_log_cannot_be_written(node: Node) -> None:
    """A transaction left in PrepareCommit is finished on load (R19); if the transaction log
    cannot be written at that moment (full disk), the broker still starts: the markers are
    written and the transaction is complete, its CompleteCommit record kept until the log takes
    it (the periodic retry), and nothing new starts for the id meanwhile."""
    c = node.coord
    pid, epoch = c.init_producer_id("tx", 10_000)
    c.add_partitions("tx", pid, epoch, {ORDERS0})
    p = c.partition_of("tx")
    prepared = dataclasses.replace(c.txns["tx"].record(), state=TxnState.PREPARE_COMMIT)
    node.append_raw(p, records.build_batch([(txnlog.encode_key("tx"), txnlog.encode_value(prepared), [])],
                                           timestamp_ms=node.clock.now_ms()))
    node.fail_txn_log = True
    node.restart()
    shard = node.real.shard_of("tx")
    assert node.coord.txns["tx"].state is TxnState.COMPLETE_COMMIT
    assert [(tid, rec.state) for tid, rec in shard.unwritten] == [("tx", TxnState.COMPLETE_COMMIT)]
    assert node.coord.retry_unfinished() == 0  # the log still refuses: kept
    assert len(shard.unwritten) == 1
    with pytest.raises(CoordinatorNotAvailable):  # the next transaction needs the log too
        node.coord.add_partitions("tx", pid, epoch, {ORDERS0})
    assert len(shard.unwritten) == 1 and node.coord.txns["tx"].state is TxnState.COMPLETE_COMMIT
    node.fail_txn_log = False
    assert node.coord.retry_unfinished() == 0
    assert shard.unwritten == []
    node.restart(crash=True)  # from the log alone
    assert node.coord.txns["tx"].state is TxnState.COMPLETE_COMMIT


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_arbitrary_bytes_raise_only_value_error(data: bytes) -> None:
    """The decoders' contract: malformed input raises ValueError (TxnLogFormatError), never a
    reader's own exception type, so the loader can tell 'bad record' from 'bug'."""
    for decode in (txnlog.decode_key, txnlog.decode_value):
        try:
            decode(data)
        except txnlog.TxnLogFormatError:
            pass
