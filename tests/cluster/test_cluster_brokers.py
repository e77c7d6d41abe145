"""Three broker processes on one real PostgreSQL (issue 15), with real clients.

A topic of 6 partitions is led by the three brokers (two each, checked with Metadata); a
confluent-kafka producer (acks=all, idempotent) writes 3,000 records and a consumer (assign)
reads every one back exactly once. Then one
broker is SIGKILLed: once its session expires (broker.session.timeout.ms=2000) its partitions
move to the two others with bumped leader epochs, the producer's next records are acknowledged,
and reading everything back finds every acknowledged record once and nothing else. kafka-python
and aiokafka do one produce/consume round on the cluster too. Every wait is bounded; all traffic
is on 127.0.0.1.
"""

from __future__ import annotations

import collections
import os
import signal
import time
from pathlib import Path
from typing import Iterator

import pytest

import kafka_clients as kc
from cluster_procs import brokers, read_from_start
from oncelog.process import BrokerProcess

TOPIC = "orders"
PARTITIONS = 6
SESSION = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400"}


@pytest.fixture
def cluster(pg_dsn: str, tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    with brokers(pg_dsn, tmp_path, SESSION, (1, 2, 3)) as procs:
        yield procs


def _bootstrap(brokers: list[BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers)


def _leaders(bootstrap: str, topic: str) -> tuple[dict[int, int], dict[int, tuple[str, int]]]:
    """partition -> leader id, and broker id -> (host, port), from a Metadata request."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    brokers = {b.id: (b.host, b.port) for b in md.brokers.values()}
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}, brokers
    return {p.id: p.leader for p in t.partitions.values()}, brokers


def _wait_leaders(bootstrap: str, ok, what: str, timeout: float = 30.0) -> dict[int, int]:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    leaders: dict[int, int] = {}
    for _ in range(int(timeout / 0.2) + 1):
        leaders, _brokers = _leaders(bootstrap, TOPIC)
        if ok(leaders):
            return leaders
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    raise AssertionError(f"{what} not reached in {timeout}s; leaders {leaders}")


class Producer:
    """A confluent-kafka producer (acks=all, idempotent) that records what was acknowledged."""

    def __init__(self, bootstrap: str, **extra: object) -> None:
        from confluent_kafka import Producer as CkProducer

        self.acked: list[tuple[int, int, bytes]] = []  # partition, offset, value
        self.errors: list[str] = []
        self.p = CkProducer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 60_000, "retry.backoff.ms": 50,
                             "topic.metadata.refresh.interval.ms": 1000, **extra})

    def _cb(self, err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))

    def send(self, items: list[tuple[int, bytes]], timeout: float = 60.0) -> None:
        for part, value in items:
            for _ in range(10_000):
                try:
                    self.p.produce(TOPIC, value=value, partition=part, on_delivery=self._cb)
                    break
                except BufferError:
                    self.p.poll(0.05)
            self.p.poll(0)
        left = self.p.flush(timeout)
        assert left == 0, f"{left} records not acknowledged in {timeout}s"
        assert not self.errors, self.errors[:5]


def _read_all(bootstrap: str, expected: int, timeout: float = 60.0, settle: float = 1.0) -> list[tuple[int, int, bytes]]:
    """Every record of TOPIC from the beginning (assign), until ``expected`` arrived and
    ``settle`` more seconds passed, or ``timeout``."""
    return read_from_start(bootstrap, TOPIC, PARTITIONS, lambda out: len(out) >= expected,
                           group="cluster-test-assign", timeout=timeout, settle=settle)


def _check_exactly_once(acked: list[tuple[int, int, bytes]], read: list[tuple[int, int, bytes]]) -> None:
    """Every acknowledged record read back once, at its acknowledged offset; nothing else."""
    dups = [v for v, n in collections.Counter(v for _p, _o, v in read).items() if n > 1]
    assert not dups, f"{len(dups)} duplicated values, e.g. {dups[:5]}"
    assert sorted(read) == sorted(acked), (f"read {len(read)} records, {len(acked)} acknowledged; missing "
                                           f"{sorted(set(acked) - set(read))[:5]}, extra {sorted(set(read) - set(acked))[:5]}")


def test_three_brokers_share_a_topic_and_a_sigkilled_leader_loses_nothing(cluster: list[BrokerProcess]) -> None:
    boot = _bootstrap(cluster)
    kc.create_topic("confluent", boot, TOPIC, PARTITIONS)
    leaders = _wait_leaders(boot, lambda ls: len(ls) == PARTITIONS and
                            sorted(collections.Counter(ls.values()).items()) == [(1, 2), (2, 2), (3, 2)],
                            "two partitions led by each broker")
    _, brokers = _leaders(boot, TOPIC)
    assert brokers == {n: ("127.0.0.1", b.port) for n, b in zip((1, 2, 3), cluster)}

    producer = Producer(boot)
    producer.send([(i % PARTITIONS, f"a{i}".encode()) for i in range(3000)])
    assert len(producer.acked) == 3000
    _check_exactly_once(producer.acked, _read_all(boot, 3000))

    victim = cluster[1]  # node 2
    moved = sorted(p for p, leader in leaders.items() if leader == 2)
    killed = time.monotonic()
    victim.kill()
    # The first record for a partition node 2 led is acknowledged once the partition moved.
    producer.send([(moved[0], b"first-after-kill")], timeout=60)
    failover_s = time.monotonic() - killed
    print(f"failover: SIGKILL -> first acknowledged produce on a moved partition {failover_s:.2f}s")
    after = _wait_leaders(boot, lambda ls: len(ls) == PARTITIONS and set(ls.values()) == {1, 3},
                          "node 2's partitions moved to nodes 1 and 3")
    assert all(after[p] == leaders[p] for p in leaders if leaders[p] != 2), "partitions of live brokers stayed"
    producer.send([(i % PARTITIONS, f"b{i}".encode()) for i in range(600)])
    assert len(producer.acked) == 3601
    _check_exactly_once(producer.acked, _read_all(_bootstrap([cluster[0], cluster[2]]), 3601))
    assert failover_s < 2.0 + 5.0 + 5.0, f"failover took {failover_s:.1f}s"


def test_a_leader_paused_past_its_session_loses_its_partitions_and_gets_them_back(cluster: list[BrokerProcess]) -> None:
    """SIGSTOP of a leader for longer than its session: its partitions move (epochs bumped) and
    are written by the others; after SIGCONT it finds its session ended, drops every leadership,
    registers again and gets its preferred partitions back. Nothing acknowledged is lost or
    duplicated, whatever the paused broker still had in its socket buffers."""
    boot = _bootstrap(cluster)
    kc.create_topic("confluent", boot, TOPIC, PARTITIONS)
    two_each = lambda ls: (len(ls) == PARTITIONS and  # noqa: E731
                           sorted(collections.Counter(ls.values()).items()) == [(1, 2), (2, 2), (3, 2)])
    before = _wait_leaders(boot, two_each, "two partitions led by each broker")
    producer = Producer(boot, **{"request.timeout.ms": 5000})
    producer.send([(i % PARTITIONS, f"a{i}".encode()) for i in range(600)])
    zombie = cluster[1]
    assert zombie.pid is not None
    os.kill(zombie.pid, signal.SIGSTOP)
    try:
        _wait_leaders(_bootstrap([cluster[0], cluster[2]]), lambda ls: set(ls.values()) == {1, 3},
                      "the paused broker's partitions moved")
        producer.send([(i % PARTITIONS, f"b{i}".encode()) for i in range(600)])
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
    after = _wait_leaders(boot, two_each, "the returning broker leads its preferred partitions again")
    assert after == before
    producer.send([(i % PARTITIONS, f"c{i}".encode()) for i in range(600)])
    assert len(producer.acked) == 1800
    _check_exactly_once(producer.acked, _read_all(boot, 1800))
    assert "dropping every leadership" in zombie.log_tail(200_000)


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_other_clients_produce_and_consume_across_the_cluster(cluster: list[BrokerProcess], client: str) -> None:
    boot = _bootstrap(cluster)
    kc.create_topic("confluent", boot, TOPIC, PARTITIONS)
    _wait_leaders(boot, lambda ls: len(ls) == PARTITIONS and set(ls.values()) == {1, 2, 3}, "leaders on all brokers")
    items = [(i % PARTITIONS, None, f"{client}-{i}".encode()) for i in range(300)]
    acked = kc.produce(client, boot, TOPIC, items, timeout=60)
    assert len(acked) == 300
    read = kc.consume(client, boot, TOPIC, list(range(PARTITIONS)), expected=300, timeout=60, settle=0.5)
    assert sorted(v for _p, _o, _k, v in read) == sorted(v for _p, _k, v in items)
    assert sorted((p, o) for p, o, _k, _v in read) == sorted(acked)


def test_a_broker_refuses_what_it_does_not_lead_and_describes_the_whole_cluster(cluster: list[BrokerProcess]) -> None:
    """Crafted requests: Produce and Fetch at a broker that does not lead the partition get
    NOT_LEADER_OR_FOLLOWER, at its leader they work; Metadata v12 and DescribeCluster at any
    broker name all three brokers and each partition's leader with its epoch; FindCoordinator
    names the leader of the key's internal partition, which alone answers a transactional
    InitProducerId (the others: NOT_COORDINATOR)."""
    import datetime
    import uuid

    from oncelog.client import ProtocolClient
    from oncelog.protocol import apis, records
    from oncelog.protocol.messages import make

    boot = _bootstrap(cluster)
    kc.create_topic("confluent", boot, TOPIC, PARTITIONS)
    leaders = _wait_leaders(boot, lambda ls: len(ls) == PARTITIONS and set(ls.values()) == {1, 2, 3}, "leaders")
    part = min(p for p, leader in leaders.items() if leader == 1)
    by_node = {n: b for n, b in zip((1, 2, 3), cluster)}

    def produce(node: int) -> tuple[int, int]:
        batch = records.build_batch([(None, b"crafted", ())], timestamp_ms=int(time.time() * 1000))
        with ProtocolClient(by_node[node].bootstrap) as c:
            m = c.classes(apis.PRODUCE, 9)
            req = m["ProduceRequest"](transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
                                      topic_data=(m["TopicProduceData"](name=TOPIC, partition_data=(
                                          m["PartitionProduceData"](index=part, records=batch),)),))
            r = c.request(apis.PRODUCE, req, version=9).responses[0].partition_responses[0]
        return r.error_code, r.base_offset

    def fetch(node: int) -> tuple[int, int, int]:
        with ProtocolClient(by_node[node].bootstrap) as c:
            m = c.classes(apis.FETCH, 11)
            req = m["FetchRequest"](
                replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=0, max_bytes=1 << 20,
                isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
                topics=(m["FetchTopic"](topic=TOPIC, partitions=(m["FetchPartition"](
                    partition=part, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                    partition_max_bytes=1 << 20),)),))
            r = c.request(apis.FETCH, req, version=11).responses[0].partitions[0]
        return r.error_code, r.high_watermark, len(bytes(r.records or b""))

    not_leader, unknown = 6, 3

    def settled(call, passing: tuple[int, ...]):  # type: ignore[no-untyped-def]
        """``call()`` once the broker's view has caught up: each broker learns of the new topic
        and of its leaderships at its next poll (at most 500 ms); until then it answers
        ``passing`` codes (UNKNOWN_TOPIC_OR_PARTITION, as a Kafka broker whose metadata is
        behind; NOT_LEADER_OR_FOLLOWER before the leader opened the partition)."""
        for _ in range(50):
            out = call()
            if out[0] not in passing:
                return out
            time.sleep(0.1)
        return out

    assert settled(lambda: produce(2), (unknown,))[0] == not_leader
    assert settled(lambda: fetch(3), (unknown,))[0] == not_leader
    assert settled(lambda: produce(1), (unknown, not_leader)) == (0, 0)
    code, hw, size = fetch(1)
    assert (code, hw) == (0, 1) and size > 0

    with ProtocolClient(by_node[3].bootstrap) as c:
        m = c.classes(apis.METADATA, 12)
        md = c.request(apis.METADATA, make(m["MetadataRequest"], topics=(make(
            m["MetadataRequestTopic"], topic_id=uuid.UUID(int=0), name=TOPIC),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False), version=12)
        assert sorted((b.node_id, b.port) for b in md.brokers) == sorted((n, b.port) for n, b in by_node.items())
        got = {p.partition_index: (p.leader_id, p.leader_epoch) for p in md.topics[0].partitions}
        assert {p: leader for p, (leader, _e) in got.items()} == leaders
        assert all(epoch >= 0 for _l, epoch in got.values())
        m = c.classes(apis.DESCRIBE_CLUSTER, 0)
        dc = c.request(apis.DESCRIBE_CLUSTER, make(m["DescribeClusterRequest"],
                                                   include_cluster_authorized_operations=False), version=0)
        assert sorted(b.broker_id for b in dc.brokers) == [1, 2, 3]
        m = c.classes(apis.FIND_COORDINATOR, 3)
        fc = c.request(apis.FIND_COORDINATOR, make(m["FindCoordinatorRequest"], key="g", key_type=0), version=3)
        assert fc.error_code == 0 and fc.node_id in (1, 2, 3)  # the leader of g's __consumer_offsets partition
        fc = c.request(apis.FIND_COORDINATOR, make(m["FindCoordinatorRequest"], key="tx", key_type=1), version=3)
        assert fc.error_code == 0
        txn_coordinator = fc.node_id
        m = c.classes(apis.INIT_PRODUCER_ID, 4)
        for node, expected in ((n, 0 if n == txn_coordinator else 16) for n in (1, 2, 3)):  # 16: NOT_COORDINATOR
            with ProtocolClient(by_node[node].bootstrap) as at:
                ip = at.request(apis.INIT_PRODUCER_ID, make(m["InitProducerIdRequest"], transactional_id="tx",
                                                            transaction_timeout=datetime.timedelta(seconds=10),
                                                            producer_id=-1, producer_epoch=-1), version=4)
                assert ip.error_code == expected, (node, txn_coordinator, ip)
        ids = {c.request(apis.INIT_PRODUCER_ID, make(m["InitProducerIdRequest"], transactional_id=None,
                                                     transaction_timeout=datetime.timedelta(seconds=10),
                                                     producer_id=-1, producer_epoch=-1), version=4).producer_id
               for _ in range(3)}
        assert len(ids) == 3 and min(ids) >= 1000
    with ProtocolClient(by_node[1].bootstrap) as c:  # another broker never hands out the same ids
        other = c.request(apis.INIT_PRODUCER_ID, make(m["InitProducerIdRequest"], transactional_id=None,
                                                      transaction_timeout=datetime.timedelta(seconds=10),
                                                      producer_id=-1, producer_epoch=-1), version=4).producer_id
        assert other >= 1000 and other not in ids


def test_a_postgresql_restart_loses_nothing_acknowledged(cluster: list[BrokerProcess], pg_server) -> None:
    """PostgreSQL stops (immediate: a crash) under three brokers and comes back: the brokers
    acknowledge nothing meanwhile, then reconnect, rebuild what they lead from the store and
    go on; every acknowledged record is read back once."""
    boot = _bootstrap(cluster)
    kc.create_topic("confluent", boot, TOPIC, PARTITIONS)
    _wait_leaders(boot, lambda ls: len(ls) == PARTITIONS and set(ls.values()) == {1, 2, 3}, "leaders on all brokers")
    producer = Producer(boot, **{"request.timeout.ms": 5000})
    producer.send([(i % PARTITIONS, f"a{i}".encode()) for i in range(600)])
    pg_server.stop("immediate")
    try:
        for i in range(300):  # queued while the store is down: acknowledged only after it is back
            producer.p.produce(TOPIC, value=f"b{i}".encode(), partition=i % PARTITIONS, on_delivery=producer._cb)
        producer.p.poll(1.0)
        time.sleep(1.0)
        producer.p.poll(0)
        assert len(producer.acked) == 600, "acknowledged while the store was down"
    finally:
        pg_server.start()
    producer.send([(i % PARTITIONS, f"c{i}".encode()) for i in range(300)], timeout=60)
    assert len(producer.acked) == 1200
    _wait_leaders(boot, lambda ls: len(ls) == PARTITIONS and set(ls.values()) == {1, 2, 3}, "leaders on all brokers")
    _check_exactly_once(producer.acked, _read_all(boot, 1200))
