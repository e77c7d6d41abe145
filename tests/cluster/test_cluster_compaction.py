"""Compaction of ``__consumer_offsets`` in cluster mode (issue 15; storage/engines/postgres/log.py
``compact``): offsets committed over and over for a few keys shrink to about one row each in
PostgreSQL, and after the group coordinator is killed the broker that takes the partition over
loads the last committed offsets from the compacted log (a real client asks)."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg

from cluster_procs import brokers
from cluster_store import wait_until
from oncelog.cluster import leadership

SETTINGS = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
            "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
            "log.cleaner.backoff.ms": "1000"}
COMMITS = 300
PARTS = 3


def _offsets_partition(conn) -> leadership.Leadership:
    (row,) = [r for r in leadership.leaders(conn) if r.topic == "__consumer_offsets"]
    return row


def _rows(conn, partition_id: int) -> tuple[int, int]:
    n, size = conn.execute("SELECT count(*), coalesce(sum(size), 0) FROM oncelog_batch WHERE partition_id = %s",
                           (partition_id,)).fetchone()
    return int(n), int(size)


def _committed(bootstrap: str, group: str) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return [tp.offset for tp in c.committed([TopicPartition("src", p) for p in range(PARTS)], timeout=30)]
    finally:
        c.close()


def test_consumer_offsets_are_compacted_and_survive_a_coordinator_failover(pg_dsn: str, tmp_path: Path) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    with brokers(pg_dsn, tmp_path, SETTINGS, nodes=(1, 2)) as procs, psycopg.connect(pg_dsn, autocommit=True) as conn:
        boot = ",".join(b.bootstrap for b in procs)
        admin = AdminClient({"bootstrap.servers": boot})
        for f in admin.create_topics([NewTopic("src", PARTS, 1)]).values():
            f.result(30)
        c = Consumer({"bootstrap.servers": boot, "group.id": "g", "enable.auto.commit": False})
        try:
            for i in range(1, COMMITS + 1):
                c.commit(offsets=[TopicPartition("src", p, i * 10 + p) for p in range(PARTS)], asynchronous=False)
        finally:
            c.close()
        row = _offsets_partition(conn)
        written = _rows(conn, row.partition_id)  # compaction may have begun meanwhile
        end = conn.execute("SELECT log_end_offset FROM oncelog_partition WHERE id = %s",
                           (row.partition_id,)).fetchone()[0]
        assert end >= COMMITS * PARTS
        took = wait_until(lambda: _rows(conn, row.partition_id)[0] <= 10, timeout_s=60,
                          what="__consumer_offsets compacted")
        after = _rows(conn, row.partition_id)
        print(f"\nFIGURE __consumer_offsets: {end} records in {COMMITS} commits; rows/bytes seen after the commits "
              f"{written[0]}/{written[1]}, after compaction {after[0]}/{after[1]} ({took:.1f}s)")
        assert _committed(boot, "g") == [COMMITS * 10 + p for p in range(PARTS)]

        victim = next(b for b in procs if b.node_id == row.leader_broker)
        survivor = next(b for b in procs if b is not victim)
        victim.kill()
        wait_until(lambda: _offsets_partition(conn).leader_broker == survivor.node_id, timeout_s=30,
                   what="__consumer_offsets taken over")
        deadline = time.monotonic() + 30
        got: list[int] = []
        while time.monotonic() < deadline:
            try:
                got = _committed(survivor.bootstrap, "g")
            except Exception:  # noqa: BLE001 - the coordinator is still loading: ask again
                got = []
            if got == [COMMITS * 10 + p for p in range(PARTS)]:
                break
            time.sleep(0.5)
        assert got == [COMMITS * 10 + p for p in range(PARTS)], got
