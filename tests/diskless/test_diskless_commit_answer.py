"""A commit whose answer is lost (issue 29, docs/DISKLESS.md §2.5): the object writer
(diskless/writer.py) with a real SeaweedFS and a real PostgreSQL reached through the loopback
fault proxy (tests/faultproxy.py), which holds PostgreSQL's answers and then cuts the connection.

* The statement committed, its answer never arrived: the writer asks the store on a new
  connection which batches are there and acknowledges them (no duplicate on retry, no loss).
* The statement never reached the server (the request held, then the connection cut): nothing
  was written, and the append fails with a retriable error that does not claim an unknown
  outcome."""

from __future__ import annotations

import asyncio
import time

import psycopg

from faultproxy import FaultProxy
from oncelog.cluster import topics
from oncelog.cluster.errors import StoreUnavailable
from oncelog.cluster.schema import ensure_schema
from oncelog.diskless.cache import ByteCache
from oncelog.diskless.object_store import ObjectStore
from oncelog.diskless.writer import ObjectWriter
from oncelog.protocol import records
from oncelog.storage.engines.diskless.log import ObjectAppend


def _setup(pg_dsn: str) -> int:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        ensure_schema(conn)
        topics.create(conn, "dl", 1, {"diskless.enable": "true"})
        conn.execute("UPDATE oncelog_partition SET leader_broker = 1, leader_epoch = 0 WHERE topic = 'dl'")
        return conn.execute("SELECT id FROM oncelog_partition WHERE topic = 'dl'").fetchone()[0]


def _request(pid: int, base: int) -> ObjectAppend:
    batch = records.build_batch([(None, f"v{base}".encode(), ())], timestamp_ms=int(time.time() * 1000))
    data = records.with_base_offset(batch, base, 0)
    h = records.parse_header(data)
    return ObjectAppend(pid, "dl-0", 0, base, base, h.max_timestamp, -1, -1, -1, False, False, data)


def _via(proxy: FaultProxy, dsn: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info.update(host="127.0.0.1", port=proxy.port)
    return psycopg.conninfo.make_conninfo(**info)


def _committed(pg_dsn: str, pid: int) -> list[int]:
    with psycopg.connect(pg_dsn) as conn:
        return [r[0] for r in conn.execute("SELECT base_offset FROM oncelog_dl_batch WHERE partition_id = %s "
                                           "ORDER BY 1", (pid,))]


def test_a_lost_commit_answer_is_resolved_by_asking_the_store(pg_dsn: str, seaweed, make_config) -> None:
    pid = _setup(pg_dsn)
    port = psycopg.conninfo.conninfo_to_dict(pg_dsn)["port"]
    with FaultProxy(int(port)) as proxy:
        dsn = _via(proxy, pg_dsn)

        async def scenario() -> None:
            store = ObjectStore(make_config(seaweed))
            writer = ObjectWriter(store, lambda: psycopg.connect(dsn, autocommit=True, connect_timeout=10),
                                  ByteCache(store, 1 << 20), broker_id=1, interval_s=0.05)
            writer.start(asyncio.get_running_loop())
            try:
                # answered late: the first connection's every answer is held 3 s
                proxy.set_mode("slow-answer", delay_s=3.0, count=1)
                r = _request(pid, 0)
                writer.submit(r)
                deadline = time.monotonic() + 30
                while await asyncio.to_thread(_committed, pg_dsn, pid) != [0]:  # committed, answer still held
                    assert time.monotonic() < deadline, "the commit never landed"
                    await asyncio.sleep(0.05)
                proxy.set_mode("pass")  # cut: the answer is lost
                await asyncio.wait_for(asyncio.wrap_future(r.future), 30)  # acknowledged all the same
                assert writer.stats.resolved == 1

                # the request held, then cut: nothing reached the server
                proxy.set_mode("delay", delay_s=3.0, count=1)
                r = _request(pid, 1)
                writer.submit(r)
                await asyncio.sleep(1.0)
                proxy.set_mode("pass")
                try:
                    await asyncio.wait_for(asyncio.wrap_future(r.future), 30)
                    raise AssertionError("an append whose statement never reached the store was acknowledged")
                except StoreUnavailable as exc:
                    assert not exc.outcome_unknown, exc
                assert await asyncio.to_thread(_committed, pg_dsn, pid) == [0]
            finally:
                await writer.close()

        asyncio.run(scenario())
