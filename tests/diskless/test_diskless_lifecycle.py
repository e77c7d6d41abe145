"""Lifecycle of diskless data (issue 29 row 5, docs/DISKLESS.md §2.8), against a real broker
process on a real PostgreSQL and a real SeaweedFS, driven by a real client.

Retention (retention.ms), DeleteRecords (AdminClient.delete_records) and topic deletion remove
coordinates; the collector then deletes, after its grace period, every object no coordinate
points into, and the orphans — objects uploaded but never committed (here put in the bucket
behind the broker's back, as a broker killed between upload and commit leaves them) — older than
the grace; a young orphan and every object still referenced stay, and the surviving topic is
still read whole."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psycopg

import kafka_clients as kc
from dl_cluster import diskless_brokers
from oncelog.diskless import layout
from oncelog.diskless.object_store import ObjectStore, ObjectStoreConfig

GRACE_MS = 3000


def _store(server, prefix: str) -> ObjectStore:
    return ObjectStore(ObjectStoreConfig.from_properties(
        {"diskless.storage.url": f"s3://{server.bucket}/{prefix}", "diskless.storage.endpoint": server.endpoint},
        environ=server.env()))


async def _keys(store: ObjectStore) -> set[str]:
    return {info.key async for info in store.list("v1/")}


def _produce_at(bootstrap: str, topic: str, partition: int, values: list[bytes], ts_ms: int | None = None) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    errors = []
    for v in values:
        kw = {"timestamp": ts_ms} if ts_ms is not None else {}
        p.produce(topic, v, partition=partition, on_delivery=lambda e, m: errors.append(e) if e else None, **kw)
        p.flush(30)  # one batch each
    assert p.flush(30) == 0 and not errors, errors


def test_retention_delete_records_topic_deletion_and_the_collector(pg_dsn: str, tmp_path: Path, seaweed) -> None:
    store = _store(seaweed, "l1")
    with diskless_brokers(pg_dsn, tmp_path, seaweed, prefix="l1", extra={
            "diskless.gc.interval.ms": "500", "diskless.gc.grace.ms": str(GRACE_MS),
            "log.retention.check.interval.ms": "500"}) as (b,):
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        kc.create_topic("confluent", b.bootstrap, "keep", 1, {"diskless.enable": "true"})
        kc.create_topic("confluent", b.bootstrap, "gone", 2, {"diskless.enable": "true"})
        kc.create_topic("confluent", b.bootstrap, "trim", 1, {"diskless.enable": "true"})
        kc.create_topic("confluent", b.bootstrap, "aged", 1, {"diskless.enable": "true", "retention.ms": "60000"})
        _produce_at(b.bootstrap, "keep", 0, [f"k{i}".encode() for i in range(3)])
        for part in (0, 1):
            _produce_at(b.bootstrap, "gone", part, [b"g0", b"g1"])
        _produce_at(b.bootstrap, "trim", 0, [b"t0", b"t1", b"t2"])
        old = int(time.time() * 1000) - 3_600_000
        _produce_at(b.bootstrap, "aged", 0, [b"a0", b"a1"], ts_ms=old)  # past retention.ms at once
        _produce_at(b.bootstrap, "aged", 0, [b"a2"])  # the newest batch: never deleted

        now = int(time.time() * 1000)
        old_orphan = layout.new_key(9, "deadbeef", now)  # as a broker names it at upload; then killed
        young_orphan = layout.new_key(9, "deadbeef", now + 600_000)  # stays younger than the grace
        asyncio.run(store.put_if_absent(old_orphan, b"uploaded, never committed"))
        asyncio.run(store.put_if_absent(young_orphan, b"its commit may still come"))

        res = admin.delete_records([TopicPartition("trim", 0, 2)])
        for f in (res.values() if isinstance(res, dict) else [res]):
            f.result(timeout=30)
        admin.delete_topics(["gone"], operation_timeout=30)["gone"].result(timeout=30)

        def state():
            with psycopg.connect(pg_dsn) as conn:
                referenced = {r[0] for r in conn.execute(
                    "SELECT DISTINCT o.object_key FROM oncelog_dl_batch b JOIN oncelog_dl_object o "
                    "ON o.id = b.object_id")}
                rows = {r[0] for r in conn.execute("SELECT object_key FROM oncelog_dl_object")}
                coords = dict(((t, p), (s, n)) for t, p, s, n in conn.execute(
                    "SELECT p.topic, p.partition, min(b.base_offset), count(*) FROM oncelog_dl_batch b "
                    "JOIN oncelog_partition p ON p.id = b.partition_id GROUP BY 1, 2"))
            return referenced, rows, coords, asyncio.run(_keys(store))

        deadline = time.monotonic() + 60
        while True:
            referenced, rows, coords, keys = state()
            if keys == referenced | {young_orphan} and rows == referenced and coords.get(("aged", 0), (0,))[0] == 2:
                break
            assert time.monotonic() < deadline, (sorted(keys), sorted(referenced), sorted(rows), coords)
            time.sleep(0.5)
        assert ("gone", 0) not in coords and ("gone", 1) not in coords  # topic deletion
        assert coords[("trim", 0)] == (2, 1)  # DeleteRecords: the batches below offset 2 are gone
        assert coords[("aged", 0)] == (2, 1)  # retention: never the newest batch
        assert coords[("keep", 0)] == (0, 3)
        assert old_orphan not in keys
        got = kc.consume("confluent", b.bootstrap, "keep", [0], expected=3, timeout=30)
        assert [r[3] for r in got] == [b"k0", b"k1", b"k2"]
        got = kc.consume("confluent", b.bootstrap, "trim", [0], expected=1, timeout=30, settle=0.5)
        assert [(r[1], r[3]) for r in got] == [(2, b"t2")]
