"""Exactly-once with the consumer rebalance protocol (KIP-848 with KIP-447, issue 30, R13):
transactional consume-transform-produce workers (confluent-kafka, ``group.protocol=consumer``,
``send_offsets_to_transaction`` with the consumer's group metadata, so TxnOffsetCommit carries
the member id and epoch) whose partitions move while they work — a third worker joins, then one
of the first two leaves — write every input record exactly once to the output, read
read_committed. A worker whose transaction fails aborts it and rewinds to the committed offsets,
as a KIP-447 application does. A zombie (a worker stalled past its rebalance timeout while its
partitions moved) has its TxnOffsetCommit refused (UNKNOWN_MEMBER_ID: it was removed; a stale
epoch of a member still in the group is ILLEGAL_GENERATION) and cannot commit its transaction.
Every wait is bounded; traffic on 127.0.0.1.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kafka_clients import create_topic, produce

pytestmark = pytest.mark.integration

FAST = {"group.consumer.heartbeat.interval.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "500"}
IN, OUT, GROUP = "eos848-in", "eos848-out", "g-eos848"
IN_PARTITIONS, RECORDS = 6, 900


class _Worker:
    """One consume-transform-produce worker: a consumer of the group and a transactional
    producer; ``step`` is one transaction over at most a few records."""

    def __init__(self, bootstrap: str, name: str, consumer: dict[str, str] | None = None) -> None:
        from confluent_kafka import Consumer, Producer

        self.name = name
        self.committed = 0  # records of committed transactions
        self.aborted = 0  # transactions aborted (stale epoch, lost partitions)
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False,
                           "isolation.level": "read_committed", **(consumer or {})})
        self.c.subscribe([IN])
        self.p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"eos848-{name}", "linger.ms": 5})
        self.p.init_transactions(30)

    def step(self) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        msgs = [m for m in self.c.consume(num_messages=4, timeout=0.1) if not m.error()]
        if not msgs:
            return
        self.p.begin_transaction()
        ends: dict[int, int] = {}
        for m in msgs:
            self.p.produce(OUT, value=b"out:" + m.value())
            ends[m.partition()] = m.offset() + 1
        try:
            self.p.send_offsets_to_transaction([TopicPartition(IN, p, o) for p, o in ends.items()],
                                               self.c.consumer_group_metadata(), 30)
            self.p.commit_transaction(30)
            self.committed += len(msgs)
        except KafkaException as exc:
            err = exc.args[0]
            if err.fatal() or not (err.txn_requires_abort() or err.retriable()):
                raise
            self.p.abort_transaction(30)
            self.aborted += 1
            self._rewind(list(ends))

    def _rewind(self, partitions: list[int]) -> None:
        """Back to the committed offsets of the partitions the aborted transaction read (those
        still assigned; the others' new owner starts from the committed offsets anyway)."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        mine = {tp.partition for tp in self.c.assignment()}
        for tp in self.c.committed([TopicPartition(IN, p) for p in partitions if p in mine], timeout=30):
            try:
                self.c.seek(TopicPartition(IN, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
            except Exception:  # revoked meanwhile: nothing to rewind here
                pass

    def assigned(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def close(self) -> None:
        self.c.close()
        self.p.flush(10)


def _read_committed(bootstrap: str) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos848-reader", "isolation.level": "read_committed",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    parts = c.list_topics(OUT, timeout=10).topics[OUT].partitions
    c.assign([TopicPartition(OUT, p, OFFSET_BEGINNING) for p in parts])
    out: list[bytes] = []
    eof: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(eof) < len(parts) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    eof.add(m.partition())
                continue
            out.append(m.value())
    finally:
        c.close()
    assert len(eof) == len(parts), "the output was not read to its end in time"
    return out


def test_consume_transform_produce_is_exactly_once_while_partitions_move(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory("kip848-eos", FAST)
    create_topic("confluent", b.bootstrap, IN, IN_PARTITIONS)
    create_topic("confluent", b.bootstrap, OUT, 3)
    inputs = [b"r%d" % i for i in range(RECORDS)]
    produce("confluent", b.bootstrap, IN, [(i % IN_PARTITIONS, None, v) for i, v in enumerate(inputs)])
    workers = [_Worker(b.bootstrap, "a"), _Worker(b.bootstrap, "b")]
    gone: list[_Worker] = []
    moves: list[tuple[str, tuple[frozenset[int], ...]]] = []

    def run(until: Any, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for w in workers:
                w.step()
            shape = tuple(frozenset(w.assigned()) for w in workers)
            if not moves or moves[-1][1] != shape:
                moves.append((what, shape))
            if until():
                return
        raise AssertionError(f"timed out after {timeout}s waiting for {what}: {moves[-3:]}")

    def done() -> int:
        return sum(w.committed for w in workers + gone)

    try:
        run(lambda: done() >= RECORDS // 4 and all(w.assigned() for w in workers), 90, "two workers to share")
        workers.append(_Worker(b.bootstrap, "c"))
        run(lambda: all(w.assigned() for w in workers), 90, "the third worker to take a share")
        assert done() < RECORDS // 2, "the partitions moved only after most of the work (make the workers slower)"
        run(lambda: done() >= RECORDS // 2, 90, "half of the records")
        leaving = workers.pop(0)
        leaving.close()
        gone.append(leaving)
        run(lambda: sum(len(w.assigned()) for w in workers) == IN_PARTITIONS, 90,
            "the leaver's partitions to move to the others")
        assert done() < RECORDS, "the partitions moved only after all of the work (make the workers slower)"
        run(lambda: done() >= RECORDS, 120, "the two remaining workers to finish")
        idle = time.monotonic() + 3  # nothing more may come out
        while time.monotonic() < idle:
            for w in workers:
                w.step()
    finally:
        for w in workers:
            w.close()
    out = _read_committed(b.bootstrap)
    expected = sorted(b"out:" + v for v in inputs)
    extra = len(out) - len(set(out))
    assert extra == 0, f"{extra} records written twice; partition moves: {moves}"
    assert sorted(out) == expected, f"{len(set(expected) - set(out))} records missing"
    print(f"partition moves: {len(moves)}; aborted transactions: {sum(w.aborted for w in workers + gone)}")


def test_a_zombie_whose_partitions_moved_cannot_commit_its_transaction(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """KIP-447 under KIP-848: worker ``x`` reads records and opens a transaction, then stalls
    (no poll) while ``y`` joins; ``x`` cannot acknowledge the revocation, its rebalance timeout
    (max.poll.interval.ms) removes it and ``y`` takes every partition and processes the records
    again from the committed offsets. The zombie's send_offsets_to_transaction with its old group
    metadata is then refused and its transaction aborted: the output holds every record once."""
    from confluent_kafka import KafkaException, Producer, TopicPartition

    b = broker_factory("kip848-zombie", FAST)
    create_topic("confluent", b.bootstrap, IN, IN_PARTITIONS)
    create_topic("confluent", b.bootstrap, OUT, 3)
    inputs = [b"z%d" % i for i in range(120)]
    produce("confluent", b.bootstrap, IN, [(i % IN_PARTITIONS, None, v) for i, v in enumerate(inputs)])
    x = _Worker(b.bootstrap, "x", {"max.poll.interval.ms": "4000"})
    y = None
    try:
        end = time.monotonic() + 60
        msgs: list[Any] = []
        while not msgs and time.monotonic() < end:
            msgs = [m for m in x.c.consume(num_messages=10, timeout=0.2) if not m.error()]
        assert msgs, "x read nothing"
        x.p.begin_transaction()
        for m in msgs:
            x.p.produce(OUT, value=b"out:" + m.value())
        meta = x.c.consumer_group_metadata()
        ends = {m.partition(): m.offset() + 1 for m in msgs}
        y = _Worker(b.bootstrap, "y")
        end = time.monotonic() + 90  # x stalls (no poll) while y works
        while time.monotonic() < end and not (y.committed >= len(inputs) and len(y.assigned()) == IN_PARTITIONS):
            y.step()
        assert len(y.assigned()) == IN_PARTITIONS and y.committed >= len(inputs), \
            f"y did not take over x's partitions: {sorted(y.assigned())}, {y.committed} records"
        refused: list[str] = []
        try:
            x.p.send_offsets_to_transaction([TopicPartition(IN, p, o) for p, o in ends.items()], meta, 30)
            x.p.commit_transaction(30)
        except KafkaException as exc:
            refused.append(str(exc))
            err = exc.args[0]
            if err.txn_requires_abort():
                x.p.abort_transaction(30)
            else:  # fatal: a new instance of the transactional id aborts the open transaction
                Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "eos848-x"}).init_transactions(30)
        assert refused, "the zombie committed its transaction after its partitions moved"
    finally:
        for w in (x, y):
            if w is not None:
                w.close()
    out = _read_committed(b.bootstrap)
    assert sorted(out) == sorted(b"out:" + v for v in inputs), f"{len(out)} records out, {len(set(out))} distinct"
    print(f"zombie refused: {refused[0]}")
