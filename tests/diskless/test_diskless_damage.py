"""Damaged diskless objects (docs/DISKLESS.md, "Damaged objects"; R22): an object corrupted,
cut short or deleted in the bucket, or the bucket deleted, behind the broker's back. A real
cluster-mode broker on PostgreSQL and SeaweedFS, a real confluent-kafka consumer (CRC checks off,
its default), and the object store written by the test the way an outside hand would.

Before: the corrupted record was served (no CRC check on diskless reads) and confluent-kafka
delivered the altered value; a missing or short object made the partition answer a retriable
KAFKA_STORAGE_ERROR for ever, which clients retry silently (0 records, no error). Now every batch
a read loads is checked (length, magic, CRC32C); a batch that fails, or that its object (or
bucket) no longer holds, is never served: CORRUPT_MESSAGE for its offsets (a consume error in
librdkafka), one log line naming the partition and offsets, and /metrics counts it by kind. The
batches before it are served, and a consumer that seeks past it reads on.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

import kafka_clients as kc
from dl_cluster import diskless_brokers, restart_hard
from oncelog.diskless.object_store import ObjectStore, ObjectStoreConfig
from oncelog.process import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CORRUPT_MESSAGE = 2  # librdkafka's INVALID_MSG
ROUNDS = 3


def _store(server, prefix: str) -> ObjectStore:
    return ObjectStore(ObjectStoreConfig.from_properties(
        {"diskless.storage.url": f"s3://{server.bucket}/{prefix}", "diskless.storage.endpoint": server.endpoint,
         "diskless.storage.call.deadline.ms": "5000"}, environ=server.env()))


def _batches(dsn: str, topic: str, partition: int) -> list[tuple[int, int, str, int, int]]:
    """(base offset, last offset, object key, byte offset, size) of the partition's batches."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT b.base_offset, b.last_offset, o.object_key, b.byte_offset, b.size FROM oncelog_dl_batch b "
            "JOIN oncelog_partition p ON p.id = b.partition_id JOIN oncelog_dl_object o ON o.id = b.object_id "
            "WHERE p.topic = %s AND p.partition = %s ORDER BY b.base_offset", (topic, partition)).fetchall()


async def _rewrite(store: ObjectStore, key: str, change) -> None:  # type: ignore[no-untyped-def]
    """Replace object ``key`` by ``change(its bytes)`` (None: delete it), as an outside hand would."""
    (size,) = [o.size async for o in store.list(key) if o.key == key]
    data = await store.get_range(key, 0, size)
    await store.delete([key])
    new = change(data)
    if new is not None:
        assert await store.put_if_absent(key, new)


def _read(bootstrap: str, topic: str, partition: int, start: int, until: int, timeout: float = 30.0
          ) -> tuple[list[tuple[int, bytes]], list[tuple[int, int]]]:
    """What a confluent-kafka consumer assigned at ``start`` reads until offset ``until - 1`` or
    three consume errors or ``timeout``: (offset, value) records and (offset, code) errors."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g{partition}-{start}", "enable.auto.commit": False,
                  "enable.partition.eof": False, "fetch.error.backoff.ms": 100})
    got: list[tuple[int, bytes]] = []
    errors: list[tuple[int, int]] = []
    try:
        c.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(errors) < 3 and not (got and got[-1][0] >= until - 1):
            for m in c.consume(100, timeout=0.2):
                if m.error() is not None:
                    errors.append((m.offset(), m.error().code()))
                else:
                    got.append((m.offset(), m.value()))
    finally:
        c.close()
    return got, errors


def _scrape(address: str) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, s.labels.get("kind", "")): s.value for fam in text_string_to_metric_families(text)
            for s in fam.samples if s.name == "oncelog_diskless_damaged_batches_total"}


def _values(partition: int, rnd: int) -> list[bytes]:
    return [b"p%d-r%d-%03d-" % (partition, rnd, i) + b"v" * 200 for i in range(20)]


def test_corrupted_truncated_and_deleted_objects_are_refused_never_served(pg_dsn: str, tmp_path: Path,
                                                                        seaweed) -> None:
    """Partition 0: a byte of a record value flipped in its second object; 1: its second object
    cut in the middle of its last batch; 2: its second object deleted; 3: untouched."""
    address = f"127.0.0.1:{free_port()}"
    with diskless_brokers(pg_dsn, tmp_path, seaweed, prefix="dmg", extra={"metrics.listen": address}) as (b,):
        kc.create_topic("confluent", b.bootstrap, "dl", 4, {"diskless.enable": "true"})
        for rnd in range(ROUNDS):  # each produce call lands in objects of its own
            for p in range(4):
                kc.produce("confluent", b.bootstrap, "dl", [(p, None, v) for v in _values(p, rnd)])
        coords = {p: _batches(pg_dsn, "dl", p) for p in range(4)}
        store = _store(seaweed, "dmg")
        damaged: dict[int, tuple[int, int]] = {}  # partition -> its damaged offsets (first, last)
        for p, change in ((0, "flip"), (1, "cut"), (2, "delete")):
            keys = list(dict.fromkeys(k for _, _, k, _, _ in coords[p]))
            assert len(keys) == ROUNDS, coords[p]  # one object per round
            key = keys[1]
            mine = [c for c in coords[p] if c[2] == key]
            if change == "flip":  # the last byte of the first batch's last record value: still a valid record
                _, _, _, off, size = mine[0]
                damaged[p] = (mine[0][0], mine[0][1])
                asyncio.run(_rewrite(store, key, lambda d, at=off + size - 2: d[:at] + bytes([d[at] ^ 1]) + d[at + 1:]))
            elif change == "cut":
                _, _, _, off, size = mine[-1]
                damaged[p] = (mine[-1][0], mine[-1][1])
                asyncio.run(_rewrite(store, key, lambda d, at=off + size // 2: d[:at]))
            else:
                damaged[p] = (mine[0][0], mine[-1][1])
                asyncio.run(_rewrite(store, key, lambda d: None))
        restart_hard(b)  # the writer's cache held every batch

        ends = {p: coords[p][-1][1] + 1 for p in range(4)}
        for p in (0, 1, 2):
            first, last = damaged[p]
            got, errors = _read(b.bootstrap, "dl", p, 0, ends[p])
            served = dict(got)
            assert all(o < first for o in served), f"partition {p}: offsets past the damage were served: {sorted(served)}"
            assert sorted(served) == list(range(first)), f"partition {p}: the records before the damage: {sorted(served)}"
            assert errors and all(code == CORRUPT_MESSAGE for _, code in errors), f"partition {p}: {errors}"
            assert {o for o, _ in errors} == {first}, errors
            # a consumer that seeks past the damage reads on
            after, errors = _read(b.bootstrap, "dl", p, last + 1, ends[p])
            assert [o for o, _ in after] == list(range(last + 1, ends[p])) and not errors, (p, errors)
        all_values = [v for p in range(4) for r in range(ROUNDS) for v in _values(p, r)]
        got, errors = _read(b.bootstrap, "dl", 3, 0, ends[3])
        assert [v for _, v in got] == [v for r in range(ROUNDS) for v in _values(3, r)] and not errors
        assert b.proc is not None and b.proc.poll() is None, "the broker died"
        counts: dict[tuple[str, str], float] = {}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # an answer is reused for a second
            counts = _scrape(address)
            if all(counts.get(("oncelog_diskless_damaged_batches_total", k), 0) >= 1
                   for k in ("corrupt", "truncated", "missing")):
                break
            time.sleep(0.5)
        for kind in ("corrupt", "truncated", "missing"):
            assert counts.get(("oncelog_diskless_damaged_batches_total", kind), 0) >= 1, (kind, counts)
    text = b.log_path.read_text()
    for p in (0, 1, 2):
        first, last = damaged[p]
        assert f"dl-{p} offsets {first}..{last} cannot be served (CORRUPT_MESSAGE)" in text, p
    assert "CRC32C mismatch" in text and "ends at byte" in text and "not found" in text
    assert len(set(all_values)) == len(all_values)


def _delete_bucket(server) -> None:  # type: ignore[no-untyped-def]
    """``s3.bucket.delete`` through ``weed shell`` (the bucket and every object in it)."""
    out = subprocess.run(
        [str(server.weed), "shell", f"-master=127.0.0.1:{server.master_port}.{server.master_grpc}",
         f"-filer=127.0.0.1:{server.filer_port}.{server.filer_grpc}"],
        input=f"s3.bucket.delete -name {server.bucket}\n", capture_output=True, text=True, timeout=30,
        cwd=server.base, env={"PATH": "/usr/bin:/bin", "HOME": str(server.base)})
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_deleted_bucket_is_a_clear_error_to_consumers(pg_dsn: str, tmp_path: Path, own_seaweed) -> None:
    """The bucket deleted under a running broker: a consumer of what it held gets CORRUPT_MESSAGE
    (before: 0 records and no error, for ever). (What a produce meets then is the store's: S3
    refuses a PUT to a deleted bucket, SeaweedFS creates the bucket again.)"""
    with diskless_brokers(pg_dsn, tmp_path, own_seaweed, prefix="gone") as (b,):
        kc.create_topic("confluent", b.bootstrap, "dl", 1, {"diskless.enable": "true"})
        kc.produce("confluent", b.bootstrap, "dl", [(0, None, v) for v in _values(0, 0)])
        restart_hard(b)
        _delete_bucket(own_seaweed)
        got, errors = _read(b.bootstrap, "dl", 0, 0, 20)
        assert not got and errors and all(code == CORRUPT_MESSAGE for _, code in errors), (got, errors)
        assert b.proc is not None and b.proc.poll() is None, "the broker died"
    assert "dl-0 offsets 0.." in b.log_path.read_text() and "cannot be served (CORRUPT_MESSAGE)" in b.log_path.read_text()
