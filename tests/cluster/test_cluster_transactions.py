"""Transactions and groups across three brokers on one real PostgreSQL (issue 15, R8-R14, R19).

* One transaction writes to partitions led by all three brokers and commits consumer offsets
  to a group whose coordinator is another broker than the transaction's coordinator; committed
  transactions are read (read_committed) whole, aborted ones not at all, and the group's
  committed offset is the last committed transaction's — with confluent-kafka and kafka-python.
* A consumer group (subscribe, commit) works when its coordinator is not the bootstrap broker.
* The transactional copy of ``oncelog verify copy --cluster`` in small: copiers and a
  read_committed reader while brokers are SIGKILLed / SIGSTOPped and PostgreSQL restarts;
  0 anomalies (lost, duplicate, aborted read, order).

Every wait is bounded; all traffic is on 127.0.0.1.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest

import kafka_clients as kc
from oncelog.client import ProtocolClient
from cluster_procs import brokers, coordinator_node, partition_leaders, wait_spread
from oncelog.process import BrokerProcess
from oncelog.protocol import apis
from oncelog_tools.verify import copy
from txn_clients import TxnProducer

SMALL = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
         "offsets.topic.num.partitions": "6", "transaction.state.log.num.partitions": "6"}
PARTITIONS = 6


@pytest.fixture
def cluster(pg_dsn: str, tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    with brokers(pg_dsn, tmp_path, SMALL, (1, 2, 3)) as procs:
        yield procs


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_one_transaction_spans_three_brokers_and_a_remote_group_coordinator(cluster: list[BrokerProcess],
                                                                            client: str) -> None:
    bootstrap = ",".join(b.bootstrap for b in cluster)
    topic = f"spread-{client}"
    kc.create_topic("confluent", bootstrap, topic, PARTITIONS)
    kc.create_topic("confluent", bootstrap, "source", 1)
    wait_spread(bootstrap, topic)
    tid = f"txn-{client}"
    txn_node = coordinator_node(bootstrap, 1, tid)
    group = next(g for g in (f"group-{client}-{i}" for i in range(200)) if coordinator_node(bootstrap, 0, g) != txn_node)
    assert coordinator_node(bootstrap, 0, group) != txn_node

    from confluent_kafka import Consumer, TopicPartition

    group_consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    p = TxnProducer(client, bootstrap, tid)
    try:
        p.init()
        for i in range(6):
            p.begin()
            for part in range(PARTITIONS):
                p.send(topic, f"{i}-{part}".encode(), partition=part)
            p.send_offsets({("source", 0): 10 * (i + 1)}, group, group_consumer)
            if i % 3 == 2:
                p.abort()
            else:
                p.commit()
    finally:
        p.close()
        group_consumer.close()

    got = kc.consume("confluent", bootstrap, topic, list(range(PARTITIONS)), expected=4 * PARTITIONS,
                     isolation="read_committed", timeout=60, settle=1.0)
    values = sorted(v.decode() for _p, _o, _k, v in got if v is not None)
    assert values == sorted(f"{i}-{part}" for i in (0, 1, 3, 4) for part in range(PARTITIONS))

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = c.committed([TopicPartition("source", 0)], timeout=20)
    finally:
        c.close()
    assert committed[0].offset == 50  # transaction 4 committed, 5 aborted


def test_subscribed_group_commits_through_its_coordinator(cluster: list[BrokerProcess]) -> None:
    from confluent_kafka import Consumer

    bootstrap = ",".join(b.bootstrap for b in cluster)
    kc.create_topic("confluent", bootstrap, "events", 3)
    wait_spread(bootstrap, "events")
    kc.produce("confluent", bootstrap, "events", [(p, None, f"v{p}-{i}".encode()) for p in range(3) for i in range(20)])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    seen = 0
    try:
        c.subscribe(["events"])
        deadline = time.monotonic() + 60
        while seen < 60 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen += 1
        assert seen == 60
        c.commit(asynchronous=False)
    finally:
        c.close()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False})
    try:
        from confluent_kafka import TopicPartition

        committed = c.committed([TopicPartition("events", p) for p in range(3)], timeout=20)
    finally:
        c.close()
    assert [tp.offset for tp in committed] == [20, 20, 20]


def test_transactional_copy_under_cluster_faults(tmp_path: Path) -> None:
    """Copiers (confluent-kafka, sendOffsetsToTransaction, a third aborted) and a read_committed
    reader while the cluster suffers 5 faults (seeded: broker SIGKILLs, a SIGSTOP past the
    session, PostgreSQL restarts) and the copiers 2 SIGKILLs."""
    # paced (40 transactions per copier, 0.6 s apart: 24 s at least) so that every planned fault
    # lands while copying, however fast the copiers run between faults
    result = copy.run(tmp_path, records=6_000, partitions=3, broker_kills=5, copier_kills=2, seed=3, time_limit=300,
                      txn_records=50, txn_pause_ms=600, cluster=3)
    assert result.broker_kills == 5 and result.copier_kills == 2
    assert result.copied == 6_000
    assert result.anomalies == []


def _node_bootstrap(cluster: list[BrokerProcess], node: int) -> str:
    return next(b.bootstrap for b in cluster if b.node_id == node)


def test_a_batch_outside_the_transaction_is_refused_by_a_remote_coordinator(cluster: list[BrokerProcess]) -> None:
    """KIP-890 verification across brokers: a transactional batch for a partition the
    transaction never added, sent to its leader on another broker than the coordinator, is
    refused (INVALID_TXN_STATE) after the leader asked the coordinator (AddPartitionsToTxn v4
    verify_only); once the partition is added, the same batch is appended. TxnOffsetCommit for a
    group the transaction never added is refused the same way. Crafted requests."""
    import datetime

    from oncelog.protocol import records

    bootstrap = ",".join(b.bootstrap for b in cluster)
    kc.create_topic("confluent", bootstrap, "verified", PARTITIONS)
    wait_spread(bootstrap, "verified")
    leaders = partition_leaders(bootstrap, "verified")
    tid = "verify-me"
    coordinator = coordinator_node(bootstrap, 1, tid)
    part = next(p for p, node in leaders.items() if node != coordinator)

    coord = ProtocolClient(_node_bootstrap(cluster, coordinator))
    leader = ProtocolClient(_node_bootstrap(cluster, leaders[part]))
    try:
        v = coord.version_for(apis.INIT_PRODUCER_ID)
        init = coord.classes(apis.INIT_PRODUCER_ID, v)["InitProducerIdRequest"]
        kw = dict(transactional_id=tid, transaction_timeout=datetime.timedelta(seconds=60))
        if v >= 3:
            kw.update(producer_id=-1, producer_epoch=-1)
        resp = coord.request(apis.INIT_PRODUCER_ID, init(**kw), version=v)
        assert resp.error_code == 0
        pid, epoch = resp.producer_id, resp.producer_epoch
        batch = records.build_batch([(None, b"stray", ())], timestamp_ms=1, producer_id=pid, producer_epoch=epoch,
                                    base_sequence=0, transactional=True)

        def produce() -> int:
            m = leader.classes(apis.PRODUCE)
            req = m["ProduceRequest"](transactional_id=tid, acks=-1, timeout=datetime.timedelta(seconds=10),
                                      topic_data=(m["TopicProduceData"](name="verified", partition_data=(
                                          m["PartitionProduceData"](index=part, records=batch),)),))
            return int(leader.request(apis.PRODUCE, req).responses[0].partition_responses[0].error_code)

        assert produce() == 48  # INVALID_TXN_STATE: the coordinator on another broker said no
        add = coord.classes(apis.ADD_PARTITIONS_TO_TXN, 3)
        r = coord.request(apis.ADD_PARTITIONS_TO_TXN, add["AddPartitionsToTxnRequest"](
            v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(add["AddPartitionsToTxnTopic"](name="verified", partitions=(part,)),)), version=3)
        assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        assert produce() == 0
        # offsets of a group whose coordinator is another broker, without AddOffsetsToTxn: the
        # group coordinator asks the transaction coordinator and refuses them
        group = next(g for g in (f"verify-group-{i}" for i in range(200)) if coordinator_node(bootstrap, 0, g) != coordinator)
        gc = ProtocolClient(_node_bootstrap(cluster, coordinator_node(bootstrap, 0, group)))
        try:
            toc = gc.classes(apis.TXN_OFFSET_COMMIT, 3)
            r = gc.request(apis.TXN_OFFSET_COMMIT, toc["TxnOffsetCommitRequest"](
                transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1,
                member_id="", group_instance_id=None, topics=(toc["TxnOffsetCommitRequestTopic"](
                    name="verified", partitions=(toc["TxnOffsetCommitRequestPartition"](
                        partition_index=part, committed_offset=1, committed_leader_epoch=-1,
                        committed_metadata=""),)),)), version=3)
            assert r.topics[0].partitions[0].error_code == 48  # INVALID_TXN_STATE
        finally:
            gc.sock.close()
        end = coord.classes(apis.END_TXN, 3)["EndTxnRequest"]
        assert coord.request(apis.END_TXN, end(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                               committed=True), version=3).error_code == 0
    finally:
        coord.sock.close()
        leader.sock.close()
    got = kc.consume("confluent", bootstrap, "verified", [part], expected=1, isolation="read_committed", timeout=30)
    assert [v for _p, _o, _k, v in got] == [b"stray"]


def test_transactions_version_2_across_brokers(cluster: list[BrokerProcess]) -> None:
    """KIP-890 part 2 across brokers, crafted requests: a Produce v12 to a partition led by
    another broker than the coordinator is added to the transaction by its leader
    (AddPartitionsToTxn v4 without verify_only); TxnOffsetCommit v5 on a third broker adds the
    group's offsets partition the same way; EndTxn v5 bumps the epoch, markers everywhere carry
    it, and the previous transaction's late EndTxn and late produce are refused."""
    import datetime

    from oncelog.protocol import records

    bootstrap = ",".join(b.bootstrap for b in cluster)
    kc.create_topic("confluent", bootstrap, "tv2", PARTITIONS)
    wait_spread(bootstrap, "tv2")
    leaders = partition_leaders(bootstrap, "tv2")
    tid = "tv2-across"
    coordinator = coordinator_node(bootstrap, 1, tid)
    part = next(p for p, node in leaders.items() if node != coordinator)
    group = next(g for g in (f"tv2-group-{i}" for i in range(200)) if coordinator_node(bootstrap, 0, g) != coordinator)

    coord = ProtocolClient(_node_bootstrap(cluster, coordinator), transaction_version=2)
    leader = ProtocolClient(_node_bootstrap(cluster, leaders[part]), transaction_version=2)
    gc = ProtocolClient(_node_bootstrap(cluster, coordinator_node(bootstrap, 0, group)), transaction_version=2)
    seq: dict[int, int] = {}
    try:
        init = coord.classes(apis.INIT_PRODUCER_ID, 5)["InitProducerIdRequest"]
        resp = coord.request(apis.INIT_PRODUCER_ID, init(transactional_id=tid, producer_id=-1, producer_epoch=-1,
                                                         transaction_timeout=datetime.timedelta(seconds=60)), version=5)
        assert resp.error_code == 0
        pid, e = resp.producer_id, resp.producer_epoch

        def produce(value: bytes, epoch: int) -> int:
            batch = records.build_batch([(None, value, ())], timestamp_ms=1, producer_id=pid, producer_epoch=epoch,
                                        base_sequence=seq.get(epoch, 0), transactional=True)
            m = leader.classes(apis.PRODUCE, 12)
            req = m["ProduceRequest"](transactional_id=tid, acks=-1, timeout=datetime.timedelta(seconds=10),
                                      topic_data=(m["TopicProduceData"](name="tv2", partition_data=(
                                          m["PartitionProduceData"](index=part, records=batch),)),))
            code = int(leader.request(apis.PRODUCE, req, version=12).responses[0].partition_responses[0].error_code)
            if code == 0:
                seq[epoch] = seq.get(epoch, 0) + 1
            return code

        def end(commit: bool, epoch: int) -> tuple[int, int, int]:
            req = coord.classes(apis.END_TXN, 5)["EndTxnRequest"]
            r = coord.request(apis.END_TXN, req(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                committed=commit), version=5)
            return r.error_code, r.producer_id, r.producer_epoch

        assert produce(b"n", e) == 0  # no AddPartitionsToTxn: the leader on another broker adds it
        toc = gc.classes(apis.TXN_OFFSET_COMMIT, 5)
        r = gc.request(apis.TXN_OFFSET_COMMIT, toc["TxnOffsetCommitRequest"](
            transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=e, generation_id=-1,
            member_id="", group_instance_id=None, topics=(toc["TxnOffsetCommitRequestTopic"](
                name="tv2", partitions=(toc["TxnOffsetCommitRequestPartition"](
                    partition_index=part, committed_offset=1, committed_leader_epoch=-1,
                    committed_metadata=""),)),)), version=5)
        assert r.topics[0].partitions[0].error_code == 0  # no AddOffsetsToTxn either
        assert end(True, e) == (0, pid, e + 1)
        assert produce(b"n+1", e + 1) == 0
        assert end(True, e)[0] == 90  # the late EndTxn of N: PRODUCER_FENCED
        assert produce(b"late", e) == 47  # the late produce of N: INVALID_PRODUCER_EPOCH
        assert end(False, e + 1) == (0, pid, e + 2)
    finally:
        for c in (coord, leader, gc):
            c.sock.close()
    # One record is visible: N's. The read goes on for a second after it (N+1's aborted record
    # and the markers follow it at once), so a wrongly visible b"n+1" is caught; expecting 2
    # records here waited for the whole 30 s on every passing run.
    got = kc.consume("confluent", bootstrap, "tv2", [part], expected=1, isolation="read_committed", timeout=30,
                     settle=1.0)
    assert [v for _p, _o, _k, v in got] == [b"n"]
    from confluent_kafka import Consumer, TopicPartition as CTP

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        (tp,) = c.committed([CTP("tv2", part)], timeout=20)
        assert tp.offset == 1  # the offsets committed with N (the implicit add on the group's side)
    finally:
        c.close()


def test_tv2_a_batch_of_the_next_transaction_waits_for_the_last_ones_marker(cluster: list[BrokerProcess],
                                                                            pg_dsn: str) -> None:
    """KIP-890 part 2 across brokers, crafted requests: transaction N's COMMIT marker on a
    partition led by another broker than the coordinator cannot be written yet (a test
    transaction holds the partition's row in the store, so the marker's COMMIT waits and the
    coordinator gives up on it after MARKERS_TIMEOUT_S, to retry later); EndTxn v5 is answered
    all the same, with the bumped epoch. The producer's first batch of N+1 (the new epoch) on
    that partition must not go in while N is still open there: it would be appended into N's
    open transaction (N's marker, retried, then commits it with N, though N+1 never added the
    partition and may abort) or, after N's marker, open a transaction its coordinator does not
    know (a hanging transaction). The leader used to skip asking the coordinator whenever the
    producer had an open transaction on the partition, whatever its epoch; now it asks for a
    batch of another epoch, and the coordinator, still ending N, answers retriably
    (NOT_ENOUGH_REPLICAS). Once N is complete, N+1's batch goes in, and its abort hides it."""
    import datetime
    import threading

    import psycopg

    from oncelog.protocol import records

    bootstrap = ",".join(b.bootstrap for b in cluster)
    kc.create_topic("confluent", bootstrap, "tv2next", PARTITIONS)
    wait_spread(bootstrap, "tv2next")
    leaders = partition_leaders(bootstrap, "tv2next")
    tid = "tv2-next"
    coordinator = coordinator_node(bootstrap, 1, tid)
    part = next(p for p, node in leaders.items() if node != coordinator)

    coord = ProtocolClient(_node_bootstrap(cluster, coordinator), transaction_version=2, timeout=60)
    leader = ProtocolClient(_node_bootstrap(cluster, leaders[part]), transaction_version=2, timeout=60)
    try:
        init = coord.classes(apis.INIT_PRODUCER_ID, 5)["InitProducerIdRequest"]
        resp = coord.request(apis.INIT_PRODUCER_ID, init(transactional_id=tid, producer_id=-1, producer_epoch=-1,
                                                         transaction_timeout=datetime.timedelta(seconds=60)), version=5)
        assert resp.error_code == 0
        pid, e = resp.producer_id, resp.producer_epoch

        def produce(value: bytes, epoch: int) -> int:
            batch = records.build_batch([(None, value, ())], timestamp_ms=int(time.time() * 1000), producer_id=pid,
                                        producer_epoch=epoch, base_sequence=0, transactional=True)
            m = leader.classes(apis.PRODUCE, 12)
            req = m["ProduceRequest"](transactional_id=tid, acks=-1, timeout=datetime.timedelta(seconds=30),
                                      topic_data=(m["TopicProduceData"](name="tv2next", partition_data=(
                                          m["PartitionProduceData"](index=part, records=batch),)),))
            return int(leader.request(apis.PRODUCE, req, version=12).responses[0].partition_responses[0].error_code)

        def end(commit: bool, epoch: int) -> tuple[int, int, int]:
            req = coord.classes(apis.END_TXN, 5)["EndTxnRequest"]
            r = coord.request(apis.END_TXN, req(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                committed=commit), version=5)
            return r.error_code, r.producer_id, r.producer_epoch

        assert produce(b"n", e) == 0
        with psycopg.connect(pg_dsn) as lock:
            lock.execute("SELECT id FROM oncelog_partition WHERE topic = %s AND partition = %s FOR UPDATE",
                         ("tv2next", part))
            release = threading.Timer(12.0, lock.rollback)  # N's marker may go in after 12 s
            release.start()
            try:
                assert end(True, e) == (0, pid, e + 1)  # answered after the marker timed out (5 s)
                first = produce(b"n+1", e + 1)
            finally:
                release.join(30)
        assert first == 19, f"N+1's batch was answered {first} while N was still open on the partition"
        for _ in range(100):  # bounded: 20 s, until N's marker is retried and N is complete
            code = produce(b"n+1", e + 1)
            if code != 19:
                break
            time.sleep(0.2)
        assert code == 0
        assert end(False, e + 1) == (0, pid, e + 2)
    finally:
        coord.sock.close()
        leader.sock.close()
    got = kc.consume("confluent", bootstrap, "tv2next", [part], expected=1, isolation="read_committed", timeout=30,
                     settle=1.0)
    assert [v for _p, _o, _k, v in got] == [b"n"]
