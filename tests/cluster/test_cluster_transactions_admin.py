"""Transaction introspection across three brokers on one real PostgreSQL (issue 17).

An open transaction whose coordinator is broker A writes to a partition led by broker B; the
tools start from broker C (the third). ``list`` asks every broker and finds it at A;
``describe`` goes to A (another broker answers NOT_COORDINATOR); ``producers`` of the partition
asks B and shows the open transaction's start offset; ``find-hanging`` finds nothing (the
coordinator knows it). The CLI runs in a subprocess, as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

import kafka_clients as kc
from oncelog.admin.transactions import TransactionsAdmin
from oncelog.client import ProtocolClient
from cluster_procs import brokers, coordinator_node, partition_leaders, wait_spread
from oncelog.process import BrokerProcess
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode

SMALL = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
         "offsets.topic.num.partitions": "6", "transaction.state.log.num.partitions": "6"}
TOPIC = "intro"


@pytest.fixture
def cluster(pg_dsn: str, tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    with brokers(pg_dsn, tmp_path, SMALL, (1, 2, 3)) as procs:
        yield procs


def test_list_describe_and_producers_reach_the_right_brokers(cluster: list[BrokerProcess]) -> None:
    from confluent_kafka import Producer

    bootstrap = ",".join(b.bootstrap for b in cluster)
    by_node = {b.node_id: b for b in cluster}
    kc.create_topic("confluent", bootstrap, TOPIC, 3)
    wait_spread(bootstrap, TOPIC)
    leaders = partition_leaders(bootstrap, TOPIC)
    tid = "intro-txn"
    coordinator = coordinator_node(bootstrap, 1, tid)
    partition = next(p for p, n in leaders.items() if n != coordinator)
    leader = leaders[partition]
    (third,) = set(by_node) - {coordinator, leader}
    start_at = by_node[third].bootstrap

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0,
                  "transaction.timeout.ms": 600_000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(TOPIC, b"open", partition=partition)
    assert p.flush(30) == 0
    try:
        with TransactionsAdmin(start_at) as a:
            listed, problems = a.list()
            assert problems == {}
            (row,) = [r for r in listed if r.transactional_id == tid]
            assert (row.state, row.coordinator_id) == ("Ongoing", coordinator)

            d = a.describe(tid)
            assert d.coordinator_id == coordinator and d.state == "Ongoing" and d.partitions == ((TOPIC, partition),)

            producers, errors = a.producers(TOPIC, partition)
            assert errors == {}
            (open_txn,) = [x for x in producers if x.producer_id == d.producer_id]
            assert open_txn.current_txn_start_offset == 0 and open_txn.producer_epoch == d.producer_epoch
            assert a.find_hanging(0, topic=TOPIC) == ([], {})

        with ProtocolClient(by_node[leader].bootstrap) as c:  # not the coordinator of tid
            m = c.classes(apis.DESCRIBE_TRANSACTIONS, 0)
            r = c.request(apis.DESCRIBE_TRANSACTIONS, m["DescribeTransactionsRequest"](transactional_ids=(tid,)),
                          version=0)
            assert r.transaction_states[0].error_code == ErrorCode.not_coordinator
        with ProtocolClient(by_node[coordinator].bootstrap) as c:  # not the leader of the partition
            m = c.classes(apis.DESCRIBE_PRODUCERS, 0)
            r = c.request(apis.DESCRIBE_PRODUCERS, m["DescribeProducersRequest"](topics=(
                m["TopicRequest"](name=TOPIC, partition_indexes=(partition,)),)), version=0)
            assert r.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower

        out = subprocess.run([sys.executable, "-m", "oncelog", "transactions", "list", "--bootstrap-server",
                              start_at, "--json"], capture_output=True, text=True, timeout=60, env=dict(os.environ))
        assert out.returncode == 0, out.stderr
        rows = json.loads(out.stdout)["transactions"]
        assert {"transactional_id": tid, "producer_id": d.producer_id, "state": "Ongoing",
                "coordinator_id": coordinator} in rows
    finally:
        p.abort_transaction(30)
