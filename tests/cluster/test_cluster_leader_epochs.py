"""Leader epochs in cluster mode (issue 15, KIP-320).

The PostgreSQL engine stamps its leader epoch into every batch (and the ``leader_epoch``
column), so OffsetForLeaderEpoch is answered from the batches: an older epoch ends where the
first batch of a greater epoch starts. Then three brokers: after a leader is SIGKILLed and its
partition moves, the new leader answers OffsetForLeaderEpoch with the new epoch and the old
epoch's end, a Fetch naming the old epoch gets FENCED_LEADER_EPOCH, and a confluent-kafka
consumer keeps consuming across the move (librdkafka validates its position with
OffsetForLeaderEpoch at the new leader).
"""

from __future__ import annotations

import logging
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

import kafka_clients as kc
from cluster_store import Store
from epoch_requests import FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, fetch, list_offsets, offset_for_leader_epoch
from oncelog.client import ProtocolClient
from oncelog.cluster import schema
from cluster_procs import brokers
from oncelog.process import BrokerProcess
from oncelog.protocol import apis
from oncelog.protocol import records as R
from oncelog.protocol.messages import make
from oncelog.storage.leader_epochs import end_offset_for_epoch

TOPIC = "epochs"
SESSION = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400"}


def _append(log, n: int = 2) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    buf = R.build_batch([(None, b"v", ())] * n, timestamp_ms=1_000)
    return log.append(buf, R.parse_header(buf), 0)


def test_the_pg_engine_answers_end_offsets_from_its_batches(pg_dsn) -> None:
    """Epoch 0 writes [0, 4), epoch 1 nothing, epoch 2 [4, 6), epoch 3 leads with nothing yet."""
    a, b = Store(pg_dsn, broker_id=1), Store(pg_dsn, broker_id=2)
    try:
        schema.ensure_schema(a.conn)  # idempotent with the epoch index
        e0 = a.lead(TOPIC)
        _append(e0), _append(e0)
        b.lead(TOPIC)  # epoch 1: no batch
        e2 = a.lead(TOPIC)
        _append(e2)
        e3 = b.lead(TOPIC)
        assert [e0.leader_epoch, e2.leader_epoch, e3.leader_epoch] == [0, 2, 3]
        stamped = [h.partition_leader_epoch for h in e3.iter_headers(0)]
        assert stamped == [0, 0, 2]
        assert e3.epoch_bounds(1) == (0, 4) and e3.epoch_bounds(2) == (2, None) and e3.epoch_bounds(-2) == (None, 0)
        answers = {ep: end_offset_for_epoch(ep, e3.leader_epoch, e3.log_end_offset, e3.epoch_bounds)
                   for ep in (-1, 0, 1, 2, 3, 4)}
        assert answers == {-1: (-1, -1), 0: (0, 4), 1: (0, 4), 2: (2, 6), 3: (3, 6), 4: (-1, -1)}
        assert [e3.epoch_at(o) for o in (0, 3, 4, 5, 6)] == [0, 0, 2, 2, 3]
        idx = a.conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'oncelog_batch_epoch'").fetchone()
        assert idx is not None and "(partition_id, leader_epoch, base_offset)" in idx[0]
    finally:
        a.close()
        b.close()


@pytest.fixture
def cluster(pg_dsn: str, tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    with brokers(pg_dsn, tmp_path, SESSION, (1, 2, 3)) as procs:
        yield procs


def _leaders(bootstrap: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader, leader epoch) from a Metadata v12 answer of the first broker of
    ``bootstrap``; {} while unknown."""
    try:
        with ProtocolClient(bootstrap.split(",")[0], timeout=5) as c:
            m = c.classes(apis.METADATA, 12)
            md = c.request(apis.METADATA, make(m["MetadataRequest"], topics=(make(
                m["MetadataRequestTopic"], topic_id=uuid.UUID(int=0), name=TOPIC),), allow_auto_topic_creation=False,
                include_topic_authorized_operations=False), version=12)
    except OSError:
        return {}
    if not md.topics or md.topics[0].error_code:
        return {}
    return {p.partition_index: (p.leader_id, p.leader_epoch) for p in md.topics[0].partitions}


def _wait(predicate, what: str, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout}s")
        time.sleep(0.2)


@pytest.mark.timeout(240)
def test_after_a_leader_moves_the_new_leader_answers_new_epochs_and_fences_old_ones(cluster) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    by_node = {n: br for n, br in zip((1, 2, 3), cluster)}
    boot = ",".join(br.bootstrap for br in cluster)
    kc.create_topic("confluent", boot, TOPIC, 3)
    leaders = _wait(lambda: (ls := _leaders(boot)) and len(ls) == 3 and {l for l, _e in ls.values()} == {1, 2, 3}
                    and ls, "three leaders")
    old_leader, old_epoch = leaders[0]
    # the leader has opened the partition once it accepts a produce
    kc.produce("confluent", boot, TOPIC, [(0, None, b"a%d" % i) for i in range(50)])
    at_old = by_node[old_leader].bootstrap
    assert offset_for_leader_epoch(at_old, TOPIC, 0, old_epoch, current_leader_epoch=old_epoch) == (0, old_epoch, 50)
    assert list_offsets(at_old, TOPIC, 0, -1, current_leader_epoch=old_epoch) == (0, 50, old_epoch)

    lines: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("rdkafka.epochs-cluster")
    logger.addHandler(Catch())
    logger.setLevel(logging.DEBUG)
    c = Consumer({"bootstrap.servers": boot, "group.id": "epochs-assign", "enable.auto.commit": False,
                  "enable.partition.eof": False, "topic.metadata.refresh.interval.ms": 1000,
                  "debug": "protocol,fetch,consumer"}, logger=logger)
    c.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    got: list[tuple[int, bytes, int]] = []

    def take(n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            for msg in c.consume(num_messages=1000, timeout=0.2):
                err = msg.error()
                if err is not None:
                    assert err.retriable() or err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                                                             KafkaError._RESOLVE), f"consumer error: {err}"
                    continue
                got.append((msg.offset(), msg.value(), msg.leader_epoch()))

    try:
        take(50, 60)
        assert [o for o, _v, _e in got] == list(range(50)) and {e for _o, _v, e in got} == {old_epoch}

        os.kill(by_node[old_leader].pid, signal.SIGKILL)
        survivors = ",".join(br.bootstrap for n, br in by_node.items() if n != old_leader)
        new_leader, new_epoch = _wait(lambda: (ls := _leaders(survivors)) and ls.get(0, (-1, -1))[0] not in
                                      (-1, old_leader) and ls[0], "partition 0 moved", timeout=60)
        assert new_epoch > old_epoch
        kc.produce("confluent", survivors, TOPIC, [(0, None, b"b%d" % i) for i in range(50)])
        at_new = by_node[new_leader].bootstrap
        # the new epoch ends at the log end; the old one where the new one's first batch starts
        assert offset_for_leader_epoch(at_new, TOPIC, 0, new_epoch, current_leader_epoch=new_epoch) == (
            0, new_epoch, 100)
        assert offset_for_leader_epoch(at_new, TOPIC, 0, old_epoch, current_leader_epoch=new_epoch) == (
            0, old_epoch, 50)
        assert offset_for_leader_epoch(at_new, TOPIC, 0, new_epoch + 1) == (0, -1, -1)
        assert offset_for_leader_epoch(at_new, TOPIC, 0, new_epoch, current_leader_epoch=old_epoch)[0] == \
            FENCED_LEADER_EPOCH
        # Fetch and ListOffsets with the old epoch are fenced, with a future one unknown
        assert fetch(at_new, TOPIC, 0, current_leader_epoch=old_epoch)[0] == FENCED_LEADER_EPOCH
        assert fetch(at_new, TOPIC, 0, current_leader_epoch=new_epoch + 1)[0] == UNKNOWN_LEADER_EPOCH
        code, hw, size = fetch(at_new, TOPIC, 0, current_leader_epoch=new_epoch)
        assert (code, hw) == (0, 100) and size > 0
        assert list_offsets(at_new, TOPIC, 0, -1, current_leader_epoch=old_epoch)[0] == FENCED_LEADER_EPOCH
        assert list_offsets(at_new, TOPIC, 0, -1, current_leader_epoch=new_epoch) == (0, 100, new_epoch)
        assert list_offsets(at_new, TOPIC, 0, -2, current_leader_epoch=new_epoch) == (0, 0, old_epoch)

        take(100, 90)
    finally:
        c.close()
    assert [o for o, _v, _e in got] == list(range(100)), "each record once, in order"
    assert [v for _o, v, _e in got] == [b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(50)]
    assert {e for _o, _v, e in got[50:]} == {new_epoch}
    # librdkafka validated its position (epoch old_epoch) at the new leader, and was answered
    assert any("Received OffsetForLeaderEpochResponse" in line for line in lines), \
        [line for line in lines if "OffsetForLeaderEpoch" in line or "epoch" in line.lower()][:20]
