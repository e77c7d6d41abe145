"""The admin APIs of issue 16 in cluster mode (two brokers on one real PostgreSQL):
CreatePartitions grows a topic in the store (its row and the new partition rows in one
transaction, then a rebalance gives them leaders) and clients use the new partitions at once;
DescribeLogDirs lists the partitions each broker leads; ElectLeaders(preferred) answers per
partition; ListOffsets MAX_TIMESTAMP finds the record inside its batch on the PostgreSQL engine.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest

import kafka_clients as kc
from cluster_procs import brokers
from oncelog.process import BrokerProcess
from oncelog.protocol.errors import ErrorCode

SMALL = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
         "offsets.topic.num.partitions": "4", "transaction.state.log.num.partitions": "4"}


@pytest.fixture
def cluster(pg_dsn: str, tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    with brokers(pg_dsn, tmp_path, SMALL, (1, 2)) as procs:
        yield procs


def _leaders(admin, topic: str) -> dict[int, int]:  # type: ignore[no-untyped-def]
    md = admin.list_topics(topic, timeout=10)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def test_create_partitions_in_cluster_mode(cluster: list[BrokerProcess]) -> None:
    from confluent_kafka import ElectionType, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewPartitions, OffsetSpec
    from kafka.admin import KafkaAdminClient

    bootstrap = ",".join(b.bootstrap for b in cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    kc.create_topic("confluent", bootstrap, "grow", 2)
    admin.create_partitions([NewPartitions("grow", 4)], validate_only=True)["grow"].result(20)
    assert len(_leaders(admin, "grow")) == 2
    admin.create_partitions([NewPartitions("grow", 4)])["grow"].result(20)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        leaders = _leaders(admin, "grow")
        if len(leaders) == 4 and all(v >= 0 for v in leaders.values()):
            break
        time.sleep(0.2)
    assert len(leaders) == 4 and set(leaders.values()) == {1, 2}, leaders
    with pytest.raises(KafkaException) as exc:
        admin.create_partitions([NewPartitions("grow", 3)])["grow"].result(20)
    assert exc.value.args[0].code() == ErrorCode.invalid_partitions

    # the new partitions take records; MAX_TIMESTAMP finds the record inside its batch (PostgreSQL engine)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "batch.num.messages": 3})
    for ts in (1000, 3000, 2000):
        p.produce("grow", b"v", partition=3, timestamp=ts)
    assert p.flush(20) == 0
    tp = TopicPartition("grow", 3)
    got = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(20)
    assert (got.offset, got.timestamp) == (1, 3000)
    assert len(kc.consume("confluent", bootstrap, "grow", [3], expected=3, timeout=30)) == 3

    # every broker lists the partitions it leads
    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        listed: dict[int, set[int]] = {}
        for answer in kadmin.describe_log_dirs({"grow": [0, 1, 2, 3]}):
            for d in answer["log_dirs"]:
                for t in d["topics"]:
                    listed[answer["broker"]] = {q["partition_index"] for q in t["partitions"]}
        assert sorted(q for s in listed.values() for q in s) == [0, 1, 2, 3], listed
        assert listed == {b: {q for q, lead in _leaders(admin, "grow").items() if lead == b} for b in listed}
    finally:
        kadmin.close()

    elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("grow", 0)]).result(20)
    (err,) = elected.values()
    assert err is not None and err.name() == "ELECTION_NOT_NEEDED"


def test_fetch_v16_names_the_current_leader(cluster: list[BrokerProcess]) -> None:
    """KIP-951: a Fetch v16+ sent to a broker that does not lead the partition answers
    NOT_LEADER_OR_FOLLOWER with the leader it knows and that leader's endpoint."""
    import datetime
    import uuid

    from confluent_kafka.admin import AdminClient

    from oncelog.client import ProtocolClient
    from oncelog.protocol import apis

    bootstrap = ",".join(b.bootstrap for b in cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    kc.create_topic("confluent", bootstrap, "moved", 2)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        leaders = _leaders(admin, "moved")
        if set(leaders.values()) == {1, 2}:
            break
        time.sleep(0.2)
    partition = next(p for p, lead in leaders.items() if lead == 2)
    with ProtocolClient(cluster[0].bootstrap) as c:
        m = c.classes(apis.METADATA, 12)
        md = c.request(apis.METADATA, m["MetadataRequest"](
            topics=(m["MetadataRequestTopic"](topic_id=uuid.UUID(int=0), name="moved"),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False), version=12)
        topic_id = md.topics[0].topic_id
        m = c.classes(apis.FETCH, 16)
        res = c.request(apis.FETCH, m["FetchRequest"](
            max_wait=datetime.timedelta(milliseconds=10), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
            topics=(m["FetchTopic"](topic_id=topic_id, partitions=(m["FetchPartition"](
                partition=partition, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1 << 20),)),)), version=16)
    (answer,) = res.responses[0].partitions
    assert answer.error_code == ErrorCode.not_leader_or_follower
    assert answer.current_leader.leader_id == 2 and answer.current_leader.leader_epoch >= 0
    assert [(n.node_id, f"{n.host}:{n.port}") for n in res.node_endpoints] == [(2, cluster[1].bootstrap)]


def test_delete_topics_in_cluster_mode(cluster: list[BrokerProcess], pg_dsn: str) -> None:
    """DeleteTopics through one broker removes the topic from the store (its rows and batches):
    neither broker lists it any more, its leaders stop serving it, and a topic created again
    under the name is new (another topic id) and empty, and works."""
    import psycopg
    from confluent_kafka.admin import AdminClient

    bootstrap = ",".join(b.bootstrap for b in cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    kc.create_topic("confluent", bootstrap, "gone", 2)
    deadline = time.monotonic() + 20
    while set(_leaders(admin, "gone").values()) != {1, 2} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert set(_leaders(admin, "gone").values()) == {1, 2}
    kc.produce("confluent", bootstrap, "gone", [(i % 2, None, b"old-%d" % i) for i in range(20)])
    first_id = admin.describe_topics(_topic_collection("gone"))["gone"].result(20).topic_id

    from confluent_kafka import Producer

    open_txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "on-gone"})
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    open_txn.produce("gone", b"in-flight", partition=0)
    assert open_txn.flush(20) == 0

    only_b2 = AdminClient({"bootstrap.servers": cluster[1].bootstrap})
    only_b2.delete_topics(["gone"], operation_timeout=20)["gone"].result(30)
    # the transaction's coordinator finds the partition gone (its own view): nothing left to
    # mark there, the abort completes instead of retrying for ever
    open_txn.abort_transaction(30)
    for b in cluster:  # every broker's view loses it (notification, or the next poll)
        one = AdminClient({"bootstrap.servers": b.bootstrap})
        deadline = time.monotonic() + 15
        while "gone" in one.list_topics(timeout=10).topics and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "gone" not in one.list_topics(timeout=10).topics, f"broker {b.node_id} still lists it"
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM oncelog_partition WHERE topic = 'gone'").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM oncelog_batch b WHERE NOT EXISTS "
                            "(SELECT 1 FROM oncelog_partition p WHERE p.id = b.partition_id)").fetchone() == (0,)

    kc.create_topic("confluent", bootstrap, "gone", 2)
    deadline = time.monotonic() + 20
    while set(_leaders(admin, "gone").values()) != {1, 2} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert admin.describe_topics(_topic_collection("gone"))["gone"].result(20).topic_id != first_id
    kc.produce("confluent", bootstrap, "gone", [(i % 2, None, b"new-%d" % i) for i in range(10)])
    got = kc.consume("confluent", bootstrap, "gone", [0, 1], expected=10, timeout=30, settle=1.0)
    assert sorted(v for *_, v in got) == sorted(b"new-%d" % i for i in range(10))
    for b in cluster:
        assert "Traceback" not in b.log_tail(500_000), b.log_tail(5000)


def _topic_collection(name: str):  # type: ignore[no-untyped-def]
    from confluent_kafka import TopicCollection

    return TopicCollection([name])
