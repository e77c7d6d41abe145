"""The read path of diskless topics (issue 29 row 3, docs/DISKLESS.md §2.7): batches found by
offset through the coordinates, their bytes from the object store through the broker's bounded
read cache, served whole with their assigned base offsets — with real clients against a real
broker process, PostgreSQL and SeaweedFS.

* After a restart of the broker (its caches empty, its partitions recovered from the
  coordinates alone) confluent-kafka and kafka-python read everything from the object store,
  at the offsets the producer was told; producing continues at the right offsets.
* With a read cache far smaller than the data (``diskless.read.cache.bytes``), a consumer that
  reads from the start still gets every record, in order, once: misses are loaded in the
  background and the parked fetch is woken when they land.
* A batch whose bytes cannot be read (its object deleted behind the broker's back) fails the
  fetch of its partition with CORRUPT_MESSAGE (the data is gone: test_diskless_damage.py), never a
  crash or a hang: the other partition keeps serving.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg

import kafka_clients as kc
from dl_cluster import diskless_brokers, restart_hard
from oncelog.diskless.object_store import ObjectStore, ObjectStoreConfig


def _values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i:05d}-".encode() + b"x" * (i % 50) for i in range(n)]


def test_a_restarted_broker_reads_everything_from_the_object_store(pg_dsn: str, tmp_path: Path, seaweed) -> None:
    with diskless_brokers(pg_dsn, tmp_path, seaweed, prefix="r1") as (b,):
        kc.create_topic("confluent", b.bootstrap, "dl", 2, {"diskless.enable": "true"})
        vals = _values(400, "a")
        acked = kc.produce("confluent", b.bootstrap, "dl", [(i % 2, None, v) for i, v in enumerate(vals)],
                           extra={"linger.ms": 20})
        restart_hard(b)  # SIGKILL: nothing is flushed, every cache is gone
        for client in ("confluent", "kafka-python"):
            got = kc.consume(client, b.bootstrap, "dl", [0, 1], expected=400, timeout=60)
            assert sorted((r[0], r[1]) for r in got) == sorted(acked), client
            by_offset = {(r[0], r[1]): r[3] for r in got}
            for i, v in enumerate(vals):
                assert v in (by_offset.get((i % 2, o)) for o in range(200)), (client, i)
            for p in (0, 1):
                mine = [r[3] for r in sorted(got) if r[0] == p]
                assert mine == [v for i, v in enumerate(vals) if i % 2 == p], (client, p)
        more = kc.produce("confluent", b.bootstrap, "dl", [(0, None, b"after")])
        assert more == [(0, 200)]


def test_a_small_read_cache_still_serves_every_record_once(pg_dsn: str, tmp_path: Path, seaweed) -> None:
    with diskless_brokers(pg_dsn, tmp_path, seaweed, prefix="r2",
                          extra={"diskless.read.cache.bytes": "4096"}) as (b,):
        kc.create_topic("confluent", b.bootstrap, "dl", 1, {"diskless.enable": "true"})
        vals = _values(2000, "b")
        for start in range(0, 2000, 500):  # several objects
            kc.produce("confluent", b.bootstrap, "dl", [(0, None, v) for v in vals[start:start + 500]],
                       extra={"batch.size": 2000})
        got = kc.consume("confluent", b.bootstrap, "dl", [0], expected=2000, timeout=90, settle=1.0)
        assert [r[1] for r in got] == list(range(2000))
        assert [r[3] for r in got] == vals


def test_an_unreadable_object_fails_its_partition_only(pg_dsn: str, tmp_path: Path, seaweed) -> None:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    with diskless_brokers(pg_dsn, tmp_path, seaweed, prefix="r3") as (b,):
        kc.create_topic("confluent", b.bootstrap, "dl", 2, {"diskless.enable": "true"})
        kc.produce("confluent", b.bootstrap, "dl", [(0, None, b"lost")])
        kc.produce("confluent", b.bootstrap, "dl", [(1, None, b"kept")])
        with psycopg.connect(pg_dsn) as conn:
            key = conn.execute("SELECT o.object_key FROM oncelog_dl_batch b JOIN oncelog_partition p "
                               "ON p.id = b.partition_id JOIN oncelog_dl_object o ON o.id = b.object_id "
                               "WHERE p.topic = 'dl' AND p.partition = 0").fetchone()[0]
        store = ObjectStore(ObjectStoreConfig.from_properties(
            {"diskless.storage.url": f"s3://{seaweed.bucket}/r3", "diskless.storage.endpoint": seaweed.endpoint},
            environ=seaweed.env()))
        asyncio.run(store.delete([key]))
        restart_hard(b)  # the cache held it
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g", "enable.auto.commit": False,
                      "enable.partition.eof": False})
        try:
            c.assign([TopicPartition("dl", 0, 0), TopicPartition("dl", 1, 0)])
            got, errors = [], []
            for _ in range(100):  # bounded: ~20 s
                for m in c.consume(10, timeout=0.2):
                    if m.error() is not None:
                        errors.append(m.error())
                    else:
                        got.append((m.partition(), m.value()))
                if got and len(errors) >= 2:  # partition 1 served, partition 0 refused (twice: for good)
                    break
            assert got == [(1, b"kept")]
            assert errors and all(e.code() == KafkaError.INVALID_MSG for e in errors), errors  # CORRUPT_MESSAGE
        finally:
            c.close()
        assert b.proc is not None and b.proc.poll() is None, "the broker died"
        assert "dl-0 offsets 0..0 cannot be served (CORRUPT_MESSAGE)" in b.log_tail(200000)
