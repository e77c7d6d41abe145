"""Transactions on diskless topics (issue 29 row 4, docs/DISKLESS.md §2.6), with real clients
against two real broker processes on a real PostgreSQL and a real SeaweedFS.

One transaction spans a diskless topic (two partitions, led by both brokers), a
PostgreSQL-engine topic and consumer offsets (TxnOffsetCommit); of six transactions the third
and sixth abort. read_committed consumers see exactly the committed transactions' records on
both topics, the group's committed offset is the last committed transaction's, and a
read_uncommitted consumer sees the aborted records too (they are in the object store; the
aborted index filters them). Markers of diskless partitions are control batches kept inline in
the coordinates (no object). An open transaction holds read_committed back (LSO) on the diskless
topic until it commits. After both brokers are SIGKILLed and restarted, the leaders rebuilt from
the coordinates alone still filter the aborted transactions. With confluent-kafka, kafka-python
and aiokafka."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

import kafka_clients as kc
from dl_cluster import diskless_brokers, restart_hard
from txn_clients import TxnProducer


def _wait_spread(bootstrap: str, topic: str, nodes: int) -> None:
    import time

    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _ in range(150):  # bounded: 30 s
        md = admin.list_topics(topic, timeout=10).topics[topic]
        if md.error is None and len({p.leader for p in md.partitions.values()}) == nodes:
            return
        time.sleep(0.2)
    raise AssertionError(f"{topic}'s leaders did not spread over {nodes} brokers")


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_transactions_span_a_diskless_topic_a_postgres_topic_and_offsets(pg_dsn: str, tmp_path: Path, seaweed,
                                                                         client: str) -> None:
    from confluent_kafka import Consumer, TopicPartition

    with diskless_brokers(pg_dsn, tmp_path, seaweed, nodes=(1, 2), prefix=f"t-{client}") as procs:
        bootstrap = ",".join(b.bootstrap for b in procs)
        kc.create_topic("confluent", bootstrap, "dl", 2, {"diskless.enable": "true"})
        kc.create_topic("confluent", bootstrap, "pg", 1)
        kc.create_topic("confluent", bootstrap, "source", 1)
        _wait_spread(bootstrap, "dl", 2)
        group = f"copy-{client}"
        group_consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        p = TxnProducer(client, bootstrap, f"txn-{client}")
        try:
            p.init()
            for i in range(6):
                p.begin()
                for part in range(2):
                    for j in range(3):
                        p.send("dl", f"{i}-{part}-{j}".encode(), partition=part)
                p.send("pg", f"{i}-pg".encode(), partition=0)
                p.send_offsets({("source", 0): 10 * (i + 1)}, group, group_consumer)
                if i % 3 == 2:
                    p.flush()  # on the brokers before the abort (a client purges what it still holds)
                    p.abort()
                else:
                    p.commit()
            # an open transaction holds read_committed back on the diskless topic
            p.begin()
            p.send("dl", b"open-0", partition=0)
            p.send("dl", b"open-1", partition=1)
            p.flush()
            committed = sorted(f"{i}-{part}-{j}" for i in (0, 1, 3, 4) for part in range(2) for j in range(3))
            got = kc.consume("confluent", bootstrap, "dl", [0, 1], expected=len(committed),
                             isolation="read_committed", timeout=60, settle=1.5)
            assert sorted(v.decode() for *_, v in got) == committed
            p.commit()
        finally:
            p.close()
            group_consumer.close()

        def check() -> None:
            want = sorted(committed + ["open-0", "open-1"])
            got = kc.consume("confluent", bootstrap, "dl", [0, 1], expected=len(want), isolation="read_committed",
                             timeout=60, settle=1.0)
            assert sorted(v.decode() for *_, v in got) == want
            got = kc.consume("confluent", bootstrap, "pg", [0], expected=4, isolation="read_committed",
                             timeout=60, settle=0.5)
            assert [v.decode() for *_, v in got] == [f"{i}-pg" for i in (0, 1, 3, 4)]
            everything = kc.consume("confluent", bootstrap, "dl", [0, 1], expected=6 * 6 + 2, timeout=60, settle=0.5)
            assert len(everything) == 38  # the aborted records are there
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
            try:
                assert c.committed([TopicPartition("source", 0)], timeout=20)[0].offset == 50
            finally:
                c.close()

        check()
        with psycopg.connect(pg_dsn) as conn:
            markers = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE object_id IS NULL AND inline_data IS NOT NULL) "
                "FROM oncelog_dl_batch b JOIN oncelog_partition p ON p.id = b.partition_id "
                "WHERE p.topic = 'dl' AND is_control").fetchone()
        assert markers[0] == 2 * 7 and markers[1] == markers[0]  # one marker per partition per transaction
        if client == "confluent":
            for b in procs:
                b.kill()
            for b in procs:
                restart_hard(b)
            check()
