"""Garbage in the internal topics never keeps the broker from starting (R22; R3, R8, R13, R19
for what must survive).

A real broker serves a committed transaction (confluent-kafka) and a consumer group's offset
commit; it is stopped; batches a client could have written before Produce refused internal
topics are appended to the very partitions that hold that state, through the storage API: a
plain record ``key=b"k", value=b"v"``, a valid key with a garbage value, a record of an unknown
key version, a batch whose payload does not decompress. Before, the transaction coordinator's
replay raised BufferUnderflow and the broker never started again.

The broker must start, log each skipped record with its topic-partition and offset, and real
clients must find everything valid as it was: the transactional id goes on (its epoch is bumped,
a new transaction commits), both committed transactions are visible to read_committed, and the
group's committed offset is there and can be moved.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

import bad_batches
from kafka_clients import consume, create_topic
from oncelog.coordinator.placement import partition_for
from oncelog.process import BrokerProcess
from oncelog.protocol import records
from oncelog.storage.config import LogConfig
from oncelog.storage.engines.local.log import PartitionLog
from txn_clients import TxnProducer

pytestmark = pytest.mark.integration

TXN_ID = "garbage-survivor"
GROUP = "garbage-group"
INTERNAL_PARTITIONS = 50


def _append_raw(part_dir: Path, batches: list[bytes]) -> list[int]:
    """Append ``batches`` to a stopped broker's partition directory; returns their base offsets."""
    plog = PartitionLog.open(part_dir, LogConfig(), int(time.time() * 1000))
    try:
        return [plog.append(b, records.parse_header(b), int(time.time() * 1000))[0] for b in batches]
    finally:
        plog.close()


def _garbage_batches(valid_key: bytes) -> list[bytes]:
    now = int(time.time() * 1000)
    return [
        records.build_batch([(b"k", b"v", ())], timestamp_ms=now),
        records.build_batch([(valid_key, b"v", ())], timestamp_ms=now),
        records.build_batch([(struct.pack(">h", 77) + valid_key[2:], b"\x00\x01", ())], timestamp_ms=now),
        bad_batches.with_garbage_compression(records.build_batch([(b"k", b"v", ())] * 4, timestamp_ms=now)),
    ]


def _log_when(b: BrokerProcess, text: str, count: int, timeout: float = 30.0) -> str:
    """The broker's log once ``text`` appears in it ``count`` times (bounded wait)."""
    deadline = time.monotonic() + timeout
    while True:
        log_text = b.log_path.read_text(errors="replace")
        if log_text.count(text) >= count or time.monotonic() > deadline:
            return log_text
        time.sleep(0.1)


def _committed(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        [tp] = c.committed([TopicPartition(topic, 0)], timeout=30)
        return tp.offset
    finally:
        c.close()


def _commit(bootstrap: str, topic: str, offset: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def _transaction(bootstrap: str, value: bytes) -> None:
    p = TxnProducer("confluent", bootstrap, TXN_ID)
    try:
        p.init()
        p.begin()
        p.send("orders", value, partition=0)
        p.commit()
    finally:
        p.close()


def test_garbage_in_transaction_and_offsets_logs_is_skipped_and_state_survives(broker_factory) -> None:
    b: BrokerProcess = broker_factory()
    create_topic("confluent", b.bootstrap, "orders", 1)
    _transaction(b.bootstrap, b"before the garbage")
    _commit(b.bootstrap, "orders", 5)
    assert _committed(b.bootstrap, "orders") == 5
    b.stop()

    txn_p = partition_for(TXN_ID, INTERNAL_PARTITIONS)
    group_p = partition_for(GROUP, INTERNAL_PARTITIONS)
    txn_key = struct.pack(">hh", 0, len(TXN_ID)) + TXN_ID.encode()
    group_key = struct.pack(">hh", 2, len(GROUP)) + GROUP.encode()
    txn_bad = _append_raw(b.data_dir / f"__transaction_state-{txn_p}", _garbage_batches(txn_key))
    group_bad = _append_raw(b.data_dir / f"__consumer_offsets-{group_p}", _garbage_batches(group_key))

    b.start()  # before: BufferUnderflow in the transaction coordinator's replay, exit 1
    assert _committed(b.bootstrap, "orders") == 5, "the group's committed offset survives"
    log_text = _log_when(b, "group coordinator loaded", 2)  # __consumer_offsets loads in the background
    for topic, p, offsets in (("__transaction_state", txn_p, txn_bad), ("__consumer_offsets", group_p, group_bad)):
        for off in offsets:
            lines = [ln for ln in log_text.splitlines() if f"{topic}-{p}: " in ln and f"at offset {off} skipped" in ln]
            assert len(lines) == 1, f"{topic}-{p} offset {off}:\n{log_text[-4000:]}"

    _commit(b.bootstrap, "orders", 7)
    assert _committed(b.bootstrap, "orders") == 7
    _transaction(b.bootstrap, b"after the garbage")  # the transactional id goes on, fenced and bumped
    got = consume("confluent", b.bootstrap, "orders", [0], expected=2, isolation="read_committed", timeout=60, settle=0.5)
    assert [v for _p, _o, _k, v in got] == [b"before the garbage", b"after the garbage"]

    b.stop()
    b.start()  # and again: the garbage is still there, skipped again, state intact
    assert _committed(b.bootstrap, "orders") == 7
