"""The write path of diskless topics (issue 29 row 2, docs/DISKLESS.md §2.3-2.5), against a real
broker process on a real PostgreSQL and a real SeaweedFS, with real clients.

* One object per commit interval holds the batches of every diskless partition the broker
  leads (several topics and partitions in one object); the object's layout (header, batches,
  footer) agrees with the coordinates in PostgreSQL; the batches in it are the producer's,
  whole, CRC intact, with their assigned offsets; no record byte is in PostgreSQL.
* Idempotence through the same Partition machinery: a duplicate batch is answered with its
  original offsets and written once; a sequence gap is refused (OUT_OF_ORDER_SEQUENCE_NUMBER).
* ``oncelog_dl_commit`` on the real PostgreSQL: a batch under a stale leader epoch or at a base
  offset other than the log end is refused and writes nothing; the others of the same commit
  are written.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path

import psycopg
import pytest

import kafka_clients as kc
from dl_cluster import diskless_brokers
from oncelog.client import ProtocolClient
from oncelog.diskless import layout
from oncelog.diskless.object_store import ObjectStore, ObjectStoreConfig
from oncelog.protocol import apis, records
from oncelog.protocol.messages import make


def _store(server, prefix: str) -> ObjectStore:
    return ObjectStore(ObjectStoreConfig.from_properties(
        {"diskless.storage.url": f"s3://{server.bucket}/{prefix}", "diskless.storage.endpoint": server.endpoint},
        environ=server.env()))


async def _objects(store: ObjectStore) -> dict[str, bytes]:
    out = {}
    async for info in store.list("v1/"):
        out[info.key] = await store.get_range(info.key, 0, info.size)
    return out


def test_one_object_per_interval_holds_batches_of_many_partitions(pg_dsn: str, tmp_path: Path, seaweed) -> None:
    with diskless_brokers(pg_dsn, tmp_path, seaweed, prefix="w1",
                          extra={"diskless.commit.interval.ms": "400"}) as (b,):
        for t in ("dla", "dlb"):
            kc.create_topic("confluent", b.bootstrap, t, 3, {"diskless.enable": "true"})
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "enable.idempotence": True})
        acked: list[tuple[str, int, int, bytes]] = []

        def cb(err, msg) -> None:  # type: ignore[no-untyped-def]
            assert err is None, err
            acked.append((msg.topic(), msg.partition(), msg.offset(), msg.value()))

        sent = 0
        for rnd in range(3):
            for t in ("dla", "dlb"):
                for part in range(3):
                    for i in range(20):
                        p.produce(t, f"{t}-{part}-{rnd}-{i}".encode(), partition=part, on_delivery=cb)
                        sent += 1
            p.poll(0)
            p.flush(30)
        assert len(acked) == sent

        with psycopg.connect(pg_dsn) as conn:
            in_pg = conn.execute("SELECT count(*) FROM oncelog_batch b JOIN oncelog_partition p ON p.id = b.partition_id "
                                 "WHERE p.topic IN ('dla', 'dlb')").fetchone()[0]
            coords = conn.execute(
                "SELECT p.topic, p.partition, b.partition_id, b.base_offset, b.last_offset, o.object_key, b.byte_offset, "
                "b.size, b.inline_data IS NULL, b.record_count FROM oncelog_dl_batch b JOIN oncelog_partition p "
                "ON p.id = b.partition_id JOIN oncelog_dl_object o ON o.id = b.object_id ORDER BY o.id, b.byte_offset"
            ).fetchall()
            n_objects = conn.execute("SELECT count(*) FROM oncelog_dl_object").fetchone()[0]
            ends = dict(((t, p), e) for t, p, e in conn.execute(
                "SELECT topic, partition, log_end_offset FROM oncelog_partition WHERE topic IN ('dla', 'dlb')"))
        assert in_pg == 0, "record batches of a diskless topic went into oncelog_batch"
        assert all(c[8] for c in coords), "a data batch kept inline in PostgreSQL"
        assert sum(c[9] for c in coords) == sent
        assert {k: v for k, v in ends.items()} == {(t, p): 60 for t in ("dla", "dlb") for p in range(3)}
        per_object: dict[str, set] = {}
        for c in coords:
            per_object.setdefault(c[5], set()).add((c[0], c[1]))
        assert n_objects == len(per_object) < len(coords), (n_objects, len(coords))
        assert max(len(v) for v in per_object.values()) >= 4, per_object  # many partitions, both topics, one object
        assert any({t for t, _ in v} == {"dla", "dlb"} for v in per_object.values())

        # the objects in the store agree with the coordinates, byte for byte
        objects = asyncio.run(_objects(_store(seaweed, "w1")))
        assert set(objects) == set(per_object)
        by_acked = {(t, part, off): v for t, part, off, v in acked}
        for key, body in objects.items():
            broker, _created, entries = layout.parse(body)
            assert broker == 1
            mine = [c for c in coords if c[5] == key]
            assert [(e.partition_id, e.byte_offset, e.size) for e in entries] == [(c[2], c[6], c[7]) for c in mine]
            for c in mine:
                batch = body[c[6]:c[6] + c[7]]
                assert records.valid_prefix_end(batch, verify_crc=True) == len(batch)
                h = records.parse_header(batch)
                assert (h.base_offset, h.last_offset) == (c[3], c[4])
                for rec in records.iter_records(batch):
                    assert by_acked[(c[0], c[1], rec.offset)] == rec.value


def _produce(c: ProtocolClient, topic: str, partition: int, batch: bytes) -> tuple[int, int]:
    m = c.classes(apis.PRODUCE, 9)
    req = m["ProduceRequest"](transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
                              topic_data=(m["TopicProduceData"](name=topic, partition_data=(
                                  m["PartitionProduceData"](index=partition, records=batch),)),))
    r = c.request(apis.PRODUCE, req, version=9)
    p = r.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def test_idempotence_on_a_diskless_partition(pg_dsn: str, tmp_path: Path, seaweed) -> None:
    with diskless_brokers(pg_dsn, tmp_path, seaweed, prefix="w2") as (b,):
        kc.create_topic("confluent", b.bootstrap, "dl", 1, {"diskless.enable": "true"})
        kc.produce("confluent", b.bootstrap, "dl", [(0, None, b"first")])  # the partition is led and open
        c = ProtocolClient(b.bootstrap)
        try:
            m = c.classes(apis.INIT_PRODUCER_ID, 4)
            init = c.request(apis.INIT_PRODUCER_ID, make(m["InitProducerIdRequest"], transactional_id=None,
                                                         transaction_timeout=datetime.timedelta(seconds=60),
                                                         producer_id=-1, producer_epoch=-1), version=4)
            assert init.error_code == 0
            now = int(time.time() * 1000)

            def batch(seq: int, n: int = 3) -> bytes:
                return records.build_batch([(None, f"s{seq + i}".encode(), ()) for i in range(n)], timestamp_ms=now,
                                           producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                                           base_sequence=seq)

            assert _produce(c, "dl", 0, batch(0)) == (0, 1)
            assert _produce(c, "dl", 0, batch(3)) == (0, 4)
            assert _produce(c, "dl", 0, batch(3)) == (0, 4)  # a duplicate: its original offsets
            assert _produce(c, "dl", 0, batch(0)) == (0, 1)  # within the last five batches
            assert _produce(c, "dl", 0, batch(9))[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
            assert _produce(c, "dl", 0, batch(6)) == (0, 7)
        finally:
            c.sock.close()
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute("SELECT base_offset, last_offset, base_sequence FROM oncelog_dl_batch b "
                                "JOIN oncelog_partition p ON p.id = b.partition_id WHERE p.topic = 'dl' "
                                "ORDER BY base_offset").fetchall()
        assert rows == [(0, 0, -1), (1, 3, 0), (4, 6, 3), (7, 9, 6)]
        got = kc.consume("confluent", b.bootstrap, "dl", [0], expected=10, timeout=30)
        assert [(r[1], r[3]) for r in got] == [(0, b"first")] + [(i + 1, f"s{i}".encode()) for i in range(9)]


_COMMIT = ("SELECT idx, status FROM oncelog_dl_commit(%s, 1, 100, %s::int8[], %s::int4[], %s::int8[], %s::int8[], "
           "%s::int4[], %s::int2[], %s::int8[], %s::int8[], %s::int8[], %s::int2[], %s::int4[], %s::bool[], "
           "%s::bool[], %s::int8[], %s::int4[], %s::bytea[], %s::int4[], %s::int8[])")


def test_the_commit_is_conditional_on_the_leader_epoch_and_the_log_end(pg_dsn: str) -> None:
    from oncelog.cluster import topics
    from oncelog.cluster.schema import ensure_schema

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        ensure_schema(conn)
        topics.create(conn, "dl", 2, {"diskless.enable": "true"})
        conn.execute("UPDATE oncelog_partition SET leader_broker = 1, leader_epoch = 3 WHERE topic = 'dl'")
        ids = [r[0] for r in conn.execute("SELECT id FROM oncelog_partition WHERE topic = 'dl' ORDER BY partition")]

        def commit(key, batches, drains=None):  # (pid, epoch, base, last); drains: outbox ids per batch
            drains = drains or [()] * len(batches)
            cols = [[b[0] for b in batches], [b[1] for b in batches], [b[2] for b in batches],
                    [b[3] for b in batches], [b[3] - b[2] + 1 for b in batches], [0] * len(batches),
                    [1] * len(batches), [2] * len(batches), [-1] * len(batches), [-1] * len(batches),
                    [-1] * len(batches), [False] * len(batches), [False] * len(batches),
                    [32 + 10 * i for i in range(len(batches))], [10] * len(batches), [None] * len(batches),
                    [len(d) for d in drains], [i for d in drains for i in d]]
            return [r[1] for r in conn.execute(_COMMIT, [key, *cols]).fetchall()]

        assert commit("v1/a", [(ids[0], 3, 0, 4), (ids[1], 3, 0, 0)]) == [0, 0]
        # stale epoch (fenced), wrong base (log end moved), and a good one in the same commit
        assert commit("v1/b", [(ids[0], 2, 5, 5), (ids[1], 3, 7, 7), (ids[0], 3, 5, 9)]) == [2, 3, 0]
        ends = [r[0] for r in conn.execute("SELECT log_end_offset FROM oncelog_partition WHERE topic = 'dl' "
                                           "ORDER BY partition")]
        assert ends == [10, 1]
        rows = conn.execute("SELECT partition_id, base_offset, o.object_key FROM oncelog_dl_batch b "
                            "JOIN oncelog_dl_object o ON o.id = b.object_id ORDER BY 1, 2").fetchall()
        assert rows == [(ids[0], 0, "v1/a"), (ids[0], 5, "v1/b"), (ids[1], 0, "v1/a")]
        # every batch refused: the object row stays, unreferenced (the collector's)
        assert commit("v1/c", [(ids[1], 9, 1, 1)]) == [2]
        assert conn.execute("SELECT count(*) FROM oncelog_dl_batch b JOIN oncelog_dl_object o ON o.id = b.object_id "
                            "WHERE o.object_key = 'v1/c'").fetchone()[0] == 0
        with pytest.raises(psycopg.errors.UniqueViolation):  # a key is committed once
            commit("v1/a", [(ids[1], 3, 1, 1)])
        # issue 31: outbox rows carried by a batch are deleted with its coordinates, all or none
        def pending(pid: int) -> int:
            conn.execute("INSERT INTO oncelog.outbox (partition_id, ts, key, value, headers, size) "
                         "VALUES (%s, 0, NULL, 'v', '[]', 1)", (pid,))
            return conn.execute("SELECT max(id) FROM oncelog.outbox").fetchone()[0]

        r1, r2, r3 = pending(ids[1]), pending(ids[1]), pending(ids[0])
        assert commit("v1/d", [(ids[1], 3, 1, 2), (ids[0], 3, 10, 10)], [(r1, r2), (r3, r3 + 1000)]) == [0, 4]
        assert [r[0] for r in conn.execute("SELECT id FROM oncelog.outbox ORDER BY id")] == [r3]  # r3's batch refused
        assert [r[0] for r in conn.execute("SELECT log_end_offset FROM oncelog_partition WHERE topic = 'dl' "
                                           "ORDER BY partition")] == [10, 3]
        assert commit("v1/e", [(ids[1], 3, 3, 3)], [(r1,)]) == [4]  # drained twice: refused, nothing written
        assert commit("v1/f", [(ids[0], 3, 10, 10)], [(r3,)]) == [0]
        assert conn.execute("SELECT count(*) FROM oncelog.outbox").fetchone()[0] == 0


@pytest.mark.parametrize("spaced", [False, True], ids=["back-to-back", "spaced"])
def test_one_idempotent_producer_gets_several_batches_of_a_partition_into_one_commit(
        pg_dsn: str, tmp_path: Path, seaweed, spaced: bool) -> None:
    """Issue 29, the pending layer (broker/partitions/pending_producers.py): an idempotent
    producer keeps five batches of one partition in flight (Java's and kafka-python's
    max.in.flight.requests.per.connection=5), here five Produce requests on one connection,
    written at once or (``spaced``) 30 ms apart, as a producer sends each batch when it is ready.
    Each continues the one before it, so all five go into the open object at once and are
    committed together: ONE object and ONE commit, where before the pending layer each waited
    for the previous one's commit (five objects, one per interval), and, spaced, before the
    server read a Produce that arrived while an earlier one waited (broker/network/server.py)
    each was read only after the previous one was answered. Then a retry of the third is
    answered with its original offsets; nothing is lost or doubled. (Objects close on a cadence:
    the five are sent right after the first record's answer, so the next close is most of the
    interval away.)"""
    from oncelog.protocol import framing

    with diskless_brokers(pg_dsn, tmp_path, seaweed, prefix="w4s" if spaced else "w4",
                          extra={"diskless.commit.interval.ms": "1500"}) as (b,):
        kc.create_topic("confluent", b.bootstrap, "dlpipe", 1, {"diskless.enable": "true"})
        kc.produce("confluent", b.bootstrap, "dlpipe", [(0, None, b"first")])  # the partition is led and open
        with ProtocolClient(b.bootstrap, timeout=60) as c:
            m = c.classes(apis.INIT_PRODUCER_ID, 4)
            init = c.request(apis.INIT_PRODUCER_ID, make(m["InitProducerIdRequest"], transactional_id=None,
                                                         transaction_timeout=datetime.timedelta(seconds=60),
                                                         producer_id=-1, producer_epoch=-1), version=4)
            assert init.error_code == 0
            now = int(time.time() * 1000)
            batches = [records.build_batch([(None, f"s{4 * i + j}".encode(), ()) for j in range(4)],
                                           timestamp_ms=now, producer_id=init.producer_id,
                                           producer_epoch=init.producer_epoch, base_sequence=4 * i)
                       for i in range(5)]
            pm = c.classes(apis.PRODUCE, 9)

            def frame(corr: int, batch: bytes) -> bytes:
                req = pm["ProduceRequest"](transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
                                           topic_data=(pm["TopicProduceData"](name="dlpipe", partition_data=(
                                               pm["PartitionProduceData"](index=0, records=batch),)),))
                return framing.encode_request(apis.PRODUCE, 9, corr, c.client_id, req)

            if spaced:
                for i, x in enumerate(batches):
                    c.send_raw(frame(100 + i, x))
                    time.sleep(0.03)
            else:
                c.send_raw(b"".join(frame(100 + i, x) for i, x in enumerate(batches)))
            answers = []
            for _ in batches:
                corr, resp = framing.decode_response(apis.PRODUCE, 9, c.recv_frame())
                p = resp.responses[0].partition_responses[0]
                answers.append((corr, p.error_code, p.base_offset))
            assert answers == [(100 + i, 0, 1 + 4 * i) for i in range(5)], answers
            assert _produce(c, "dlpipe", 0, batches[2]) == (0, 9)  # a retry: its original offsets
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute("SELECT base_offset, base_sequence, object_id FROM oncelog_dl_batch b "
                                "JOIN oncelog_partition p ON p.id = b.partition_id WHERE p.topic = 'dlpipe' "
                                "AND base_offset > 0 ORDER BY base_offset").fetchall()
        assert [(r[0], r[1]) for r in rows] == [(1 + 4 * i, 4 * i) for i in range(5)]
        assert len({r[2] for r in rows}) == 1, f"the five batches took {len({r[2] for r in rows})} objects"
        got = kc.consume("confluent", b.bootstrap, "dlpipe", [0], expected=21, timeout=30)
        assert [(r[1], r[3]) for r in got] == [(0, b"first")] + [(i + 1, f"s{i}".encode()) for i in range(20)]
