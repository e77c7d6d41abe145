"""The object writer's cadence and its uploads in flight (docs/DISKLESS.md §2.3 items 2-3), on a
real PostgreSQL and a real SeaweedFS (through the HTTP-aware fault proxy where the store must be
slow), and the low-latency profile (``diskless.commit.interval.ms=50``) through a broker process
with librdkafka.

* Objects close on a cadence: a batch that joins the open object 0.8 interval after the last
  close waits 0.2 interval for its object, not a whole interval (when objects closed one
  interval after their first batch, a client whose next request waits for the previous answer
  waited interval + upload + commit per round).
* Uploads are not limited in number (only by ``diskless.buffer.max.bytes``): with each PUT taking
  1 s and a batch every 0.2 s, every answer comes within about one interval plus one upload; with
  two uploads at a time the answers fell further behind with every object.
* The low-latency profile: at 50 ms, an idempotent librdkafka producer's records are all
  acknowledged, none twice, and the broker closes at most one object per interval (the PUT bound).

The latency figures themselves come from ``python -m bench.diskless_latency``, not from here:
these tests check the mechanisms with bounds a loaded 2-core machine keeps.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psycopg

import kafka_clients as kc
from dl_cluster import diskless_brokers
from oncelog.cluster import topics
from oncelog.cluster.schema import ensure_schema
from oncelog.diskless.cache import ByteCache
from oncelog.diskless.object_store import ObjectStore
from oncelog.diskless.writer import ObjectWriter
from oncelog.protocol import records
from oncelog.storage.engines.diskless.log import ObjectAppend
from oncelog.testing.s3_fault_proxy import S3FaultProxy


def _setup(pg_dsn: str, topic: str) -> int:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        ensure_schema(conn)
        topics.create(conn, topic, 1, {"diskless.enable": "true"})
        conn.execute("UPDATE oncelog_partition SET leader_broker = 1, leader_epoch = 0 WHERE topic = %s", (topic,))
        return conn.execute("SELECT id FROM oncelog_partition WHERE topic = %s", (topic,)).fetchone()[0]


def _request(pid: int, topic: str, base: int) -> ObjectAppend:
    batch = records.build_batch([(None, f"v{base}".encode(), ())], timestamp_ms=int(time.time() * 1000))
    data = records.with_base_offset(batch, base, 0)
    h = records.parse_header(data)
    return ObjectAppend(pid, f"{topic}-0", 0, base, base, h.max_timestamp, -1, -1, -1, False, False, data)


def _writer(pg_dsn: str, store: ObjectStore, interval_s: float) -> ObjectWriter:
    return ObjectWriter(store, lambda: psycopg.connect(pg_dsn, autocommit=True, connect_timeout=10),
                        ByteCache(store, 1 << 20), broker_id=1, interval_s=interval_s)


async def _done(req: ObjectAppend, timeout: float = 30.0) -> float:
    """When ``req`` was answered (loop clock); raises its error."""
    await asyncio.wait_for(asyncio.wrap_future(req.future), timeout)
    return asyncio.get_running_loop().time()


def test_objects_close_on_a_cadence_not_one_interval_after_their_first_batch(pg_dsn: str, seaweed,
                                                                              make_config) -> None:
    pid = _setup(pg_dsn, "cad")
    interval = 1.0

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        writer = _writer(pg_dsn, ObjectStore(make_config(seaweed)), interval).start(loop)
        try:
            # where the cadence's ticks are: the first batch's object closed at t0 + its wait
            t0 = loop.time()
            first = _request(pid, "cad", 0)
            writer.submit(first)
            await _done(first)
            tick = t0 + writer.stats.phase_s["close"]
            assert writer.stats.phase_s["close"] <= interval + 0.3, writer.stats.phase_s

            # a batch 0.8 interval after that tick waits 0.2 interval for its object to close
            await asyncio.sleep(max(0.0, tick + 0.8 * interval - loop.time()))
            waited = writer.stats.phase_s["close"]
            second = _request(pid, "cad", 1)
            t1 = loop.time()
            writer.submit(second)
            answered = await _done(second)
            close_wait = writer.stats.phase_s["close"] - waited
            assert close_wait <= 0.45 * interval, (
                f"the batch waited {close_wait:.3f} s for its object to close: objects close one interval after "
                "their first batch, not on the cadence")
            # and so its answer came well within one interval (it came after interval + upload + commit)
            assert answered - t1 < 0.9 * interval, answered - t1
            assert writer.stats.objects == 2
        finally:
            await writer.close()

    asyncio.run(scenario())


def test_uploads_overlap_so_a_slow_store_delays_each_answer_by_one_upload(pg_dsn: str, seaweed,
                                                                          make_config) -> None:
    pid = _setup(pg_dsn, "ovl")
    interval, put_s, n = 0.2, 1.0, 8
    with S3FaultProxy(seaweed.s3_port) as proxy:
        proxy.set_fault("delay", delay_s=(put_s, put_s), ops=("PUT",))

        async def scenario() -> None:
            loop = asyncio.get_running_loop()
            writer = _writer(pg_dsn, ObjectStore(make_config(seaweed, endpoint=proxy.endpoint)), interval).start(loop)
            try:
                reqs, sent = [], []
                for i in range(n):  # one batch per interval: each its own object
                    r = _request(pid, "ovl", i)
                    sent.append(loop.time())
                    writer.submit(r)
                    reqs.append(r)
                    await asyncio.sleep(interval)
                answered = [await _done(r, 60) for r in reqs]
                waits = [a - s for a, s in zip(answered, sent)]
                # each: up to one interval in the open object, one (slow) upload, one commit
                assert max(waits) < interval + put_s + 0.8, (
                    f"answers after {[round(w, 2) for w in waits]} s: uploads queue behind each other")
                assert answered == sorted(answered), "commits out of object order"
                assert writer.stats.objects >= n - 2, writer.stats
                assert proxy.counts["delay"] >= writer.stats.objects
            finally:
                await writer.close()

        asyncio.run(scenario())
    with psycopg.connect(pg_dsn) as conn:
        got = [r[0] for r in conn.execute("SELECT base_offset FROM oncelog_dl_batch WHERE partition_id = %s "
                                          "ORDER BY 1", (pid,))]
    assert got == list(range(n))


def test_the_low_latency_profile_acknowledges_everything_within_the_put_bound(pg_dsn: str, tmp_path: Path,
                                                                              seaweed) -> None:
    """``diskless.commit.interval.ms=50`` (docs/DISKLESS.md "The low-latency profile"): records of
    an idempotent librdkafka producer over 6 partitions, acknowledged once each, in order; the
    broker closed at most one object per 50 ms (one more per interval it straddled)."""
    from confluent_kafka import Producer

    with diskless_brokers(pg_dsn, tmp_path, seaweed, prefix="ll",
                          extra={"diskless.commit.interval.ms": "50"}) as (b,):
        kc.create_topic("confluent", b.bootstrap, "dlfast", 6, {"diskless.enable": "true"})
        kc.produce("confluent", b.bootstrap, "dlfast", [(p, None, b"warm") for p in range(6)])
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            objects0 = conn.execute("SELECT count(*) FROM oncelog_dl_object").fetchone()[0]
        p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True})
        acked: dict[int, list[int]] = {i: [] for i in range(6)}
        errors: list[str] = []

        def cb(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(str(err))
            else:
                acked[msg.partition()].append(msg.offset())

        n, seconds = 600, 2.0
        start = time.monotonic()
        for i in range(n):  # 300 records/s, paced
            while time.monotonic() < start + i * seconds / n:
                p.poll(0.002)
            p.produce("dlfast", b"%05d" % i + b"x" * 1000, partition=i % 6, on_delivery=cb)
        assert p.flush(60) == 0
        elapsed = time.monotonic() - start
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            objects = conn.execute("SELECT count(*) FROM oncelog_dl_object").fetchone()[0] - objects0
        assert errors == []
        assert all(acked[i] == list(range(1, n // 6 + 1)) for i in range(6)), "lost, doubled or out of order"
        assert 0 < objects <= elapsed / 0.05 + 2, f"{objects} objects in {elapsed:.2f} s: past one per interval"


def _pipelined_produce(pg_dsn: str, tmp_path: Path, seaweed, prefix: str, extra: dict[str, str], n: int) -> int:
    """``n`` Produce requests (one non-idempotent batch each) written at once on one connection to a
    diskless partition, right after an answer (so the next close is most of an interval away):
    answered in order, each batch once; returns how many objects they took."""
    import datetime

    from oncelog.client import ProtocolClient
    from oncelog.protocol import apis, framing

    with diskless_brokers(pg_dsn, tmp_path, seaweed, prefix=prefix,
                          extra={"diskless.commit.interval.ms": "1500", **extra}) as (b,):
        kc.create_topic("confluent", b.bootstrap, "dlmany", 1, {"diskless.enable": "true"})
        kc.produce("confluent", b.bootstrap, "dlmany", [(0, None, b"first")])
        with ProtocolClient(b.bootstrap, timeout=60) as c:
            pm = c.classes(apis.PRODUCE, 9)

            def frame(i: int) -> bytes:
                batch = records.build_batch([(None, b"r%d" % i, ())], timestamp_ms=int(time.time() * 1000))
                req = pm["ProduceRequest"](transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
                                           topic_data=(pm["TopicProduceData"](name="dlmany", partition_data=(
                                               pm["PartitionProduceData"](index=0, records=batch),)),))
                return framing.encode_request(apis.PRODUCE, 9, 1000 + i, c.client_id, req)

            c.send_raw(b"".join(frame(i) for i in range(n)))
            answers = []
            for _ in range(n):
                corr, resp = framing.decode_response(apis.PRODUCE, 9, c.recv_frame())
                p = resp.responses[0].partition_responses[0]
                answers.append((corr, p.error_code, p.base_offset))
        assert answers == [(1000 + i, 0, 1 + i) for i in range(n)], answers[:12]
        with psycopg.connect(pg_dsn) as conn:
            return conn.execute("SELECT count(DISTINCT object_id) FROM oncelog_dl_batch b JOIN oncelog_partition p "
                                "ON p.id = b.partition_id WHERE p.topic = 'dlmany' AND base_offset > 0").fetchone()[0]


def test_a_connection_s_pipelined_produce_requests_all_join_the_open_object(pg_dsn: str, tmp_path: Path,
                                                                            seaweed) -> None:
    """A client that sends a Produce per partition every few milliseconds (librdkafka without
    idempotence keeps a million in flight) has them all read as they come and put in the open
    object: 60 requests written at once take one object (two if a tick falls among them), where
    eight per connection were read per commit (eight objects)."""
    objects = _pipelined_produce(pg_dsn, tmp_path, seaweed, "pl1", {}, 60)
    assert objects <= 2, f"60 pipelined Produce requests took {objects} objects"


def test_pipelined_produce_requests_past_eight_are_bounded_by_the_request_memory(pg_dsn: str, tmp_path: Path,
                                                                                 seaweed) -> None:
    """Each pipelined request past a connection's eighth takes ``PIPELINED_CHARGE`` bytes of the
    request memory (``queued.max.request.bytes``): with 64 KiB, about sixteen are handled at once,
    so 60 take several commits; every one is answered, in order."""
    objects = _pipelined_produce(pg_dsn, tmp_path, seaweed, "pl2", {"queued.max.request.bytes": "65536"}, 60)
    assert objects >= 3, f"60 pipelined Produce requests took {objects} objects within a 64 KiB request memory"
