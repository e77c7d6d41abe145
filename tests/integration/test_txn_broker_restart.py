"""A transaction in flight across a SIGKILL and restart of the broker, through confluent-kafka
(R7, R13, R17, R19; issue 13): after the restart the broker answers every request a
transactional producer makes next — AddOffsetsToTxn, FindCoordinator for the group,
TxnOffsetCommit, the retried Produce requests, EndTxn — so the producer finishes its
transaction, and read_committed readers see its records and offsets once.

Issue 13 asked whether a Spark task's stall after a broker restart was the broker's doing. It
was not: with librdkafka's default ``metadata.recovery.strategy=rebootstrap``, the client
decommissions the broker handle its group-coordinator cache points at when its only broker goes
down, and its next ``send_offsets_to_transaction`` waits for that handle forever without sending
anything (librdkafka #5511, #5456). These tests use ``metadata.recovery.strategy=none`` — what the
Spark connector configures — so that what they check is the broker's side.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any, Callable

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.integration]

#: Every client call after the restart must return within this (it takes ~0.1-2 s here).
CALL_BOUND_S = 20.0
MOMENTS = ("idle", "after_produce", "after_offsets")


def _bounded(what: str, fn: Callable[[], Any]) -> Any:
    """``fn()`` on a daemon thread; fails the test if it has not returned within CALL_BOUND_S."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(_capture(fn)), daemon=True)
    t.start()
    t.join(CALL_BOUND_S)
    assert out, f"{what} did not return within {CALL_BOUND_S:.0f}s after the broker's restart"
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def _capture(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except BaseException as exc:
        return exc


def _group_metadata(bs: str, group: str) -> Any:
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        return c.consumer_group_metadata()
    finally:
        c.close()


def _read_committed(bs: str, topic: str, partitions: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bs, "group.id": "reader", "isolation.level": "read_committed",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    out: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + 30
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"reading {topic} timed out"
            for m in c.consume(1000, timeout=0.2):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                        continue
                    raise RuntimeError(m.error())
                at_end.discard(m.partition())
                out.append(m.value())
    finally:
        c.close()
    return out


def _committed(bs: str, group: str, tps: list[TopicPartition]) -> dict[tuple[str, int], int]:
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        return {(tp.topic, tp.partition): tp.offset for tp in c.committed(tps, timeout=20)}
    finally:
        c.close()


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("moment", MOMENTS)
def test_a_transaction_in_flight_survives_a_broker_restart(broker, moment: str, seed: int) -> None:
    rng = random.Random(seed)
    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic("out", 2, 1), NewTopic("in", 2, 1)], operation_timeout=10).values():
        f.result(timeout=30)
    marker_md, input_md = _group_metadata(bs, "marker"), _group_metadata(bs, "input")
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"restart-{moment}-{seed}", "linger.ms": 5,
                  "metadata.recovery.strategy": "none", "reconnect.backoff.max.ms": 1000})
    p.init_transactions(30)
    # One whole transaction first: the producer has found both group coordinators and caches them.
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("out", 0, 1)], marker_md, 30)
    p.produce("out", b"first", partition=0)
    p.send_offsets_to_transaction([TopicPartition("in", 0, 10)], input_md, 30)
    p.commit_transaction(30)

    n = rng.randint(100, 3000)
    if moment != "idle":
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition("out", 0, 2)], marker_md, 30)
        for i in range(n):
            p.produce("out", f"second-{i}".encode(), partition=i % 2)
        if moment == "after_offsets":
            p.send_offsets_to_transaction([TopicPartition("in", 0, 20)], input_md, 30)
    broker.kill()
    time.sleep(rng.uniform(0.2, 1.5))
    broker.start()
    t0 = time.monotonic()
    if moment == "idle":
        _bounded("begin_transaction", p.begin_transaction)
        _bounded("send_offsets_to_transaction (marker)",
                 lambda: p.send_offsets_to_transaction([TopicPartition("out", 0, 2)], marker_md, 30))
        for i in range(n):
            p.produce("out", f"second-{i}".encode(), partition=i % 2)
    if moment != "after_offsets":
        _bounded("send_offsets_to_transaction (input)",
                 lambda: p.send_offsets_to_transaction([TopicPartition("in", 0, 20)], input_md, 30))
    _bounded("commit_transaction", lambda: p.commit_transaction(30))
    print(f"{moment} seed {seed}: {n} records committed {time.monotonic() - t0:.1f}s after the restart")

    got = _read_committed(bs, "out", 2)
    assert sorted(got) == sorted([b"first"] + [f"second-{i}".encode() for i in range(n)])
    assert _committed(bs, "marker", [TopicPartition("out", 0)]) == {("out", 0): 2}
    assert _committed(bs, "input", [TopicPartition("in", 0)]) == {("in", 0): 20}
