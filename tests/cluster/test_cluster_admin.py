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
from oncelog.process import BrokerProcess
from oncelog.protocol.errors import ErrorCode

SMALL = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
         "offsets.topic.num.partitions": "4", "transaction.state.log.num.partitions": "4"}


@pytest.fixture
def cluster(pg_dsn: str, tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    brokers = [BrokerProcess(tmp_path / f"broker{n}", node_id=n, store=pg_dsn, overrides=SMALL) for n in (1, 2)]
    try:
        for b in brokers:
            b.start(timeout=60)
        yield brokers
    finally:
        for b in brokers:
            try:
                b.stop(timeout=30)
            except Exception:
                b.kill()


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
