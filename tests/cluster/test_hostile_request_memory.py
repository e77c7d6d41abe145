"""One bound on the request bytes all connections hold: ``queued.max.request.bytes``
(docs/RELIABILITY.md, "Fetch sizes, diskless damage and the request memory"; R22).

In cluster mode a connection's Produce requests are pipelined (up to 8 at once, each held until
its COMMIT: broker/pipelining.py), and each connection bounds what it queues, but nothing bounded
all connections together: 20 connections pipelining 8 Produce requests of 16 MB each, again and
again, took the broker's RSS from 52 MB to 2.2 GB (6.6 GB on the machine these figures come
from), and it kept most of it afterwards. Now every request's bytes come from one pool (100 MiB
by default, Kafka's memory pool for requests): while it is used up, connections stop reading and
wait in line, and the heap is trimmed once it drains. A bystander's ApiVersions round trips are
timed throughout.

One broker on the project's PostgreSQL; raw Produce frames through ``ProtocolClient``. ``make
test`` runs 10 connections x 8 x 4 MB once; the ``long`` version 20 x 8 x 16 MB twice, as found.
"""

from __future__ import annotations

import datetime
import os
import statistics
import threading
import time
from pathlib import Path

import pytest

from bystander import Bystander
from cluster_procs import brokers
from oncelog.client import ProtocolClient
from oncelog.protocol import apis, framing, records
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import make
from proc_memory import MIB, peak, reset_peak, rss

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TOPIC = "big"
PARTITIONS = 4
DEPTH = 8  # MAX_PIPELINED: what one connection may have handled at once
POOL = 100 * MIB  # queued.max.request.bytes' default


def _create(bootstrap: str) -> None:
    with ProtocolClient(bootstrap, timeout=60) as c:
        m = c.classes(apis.CREATE_TOPICS)
        res = c.request(apis.CREATE_TOPICS, make(m["CreateTopicsRequest"], topics=(make(
            m["CreatableTopic"], name=TOPIC, num_partitions=PARTITIONS, replication_factor=1, assignments=(),
            configs=(make(m["CreatableTopicConfig"], name="max.message.bytes", value=str(64 << 20)),)),),
            timeout=datetime.timedelta(seconds=30), validate_only=False))
        assert res.topics[0].error_code == ErrorCode.none, res
        mp = c.classes(apis.PRODUCE, 9)
        for p in range(PARTITIONS):  # until the partition is led here (NOT_LEADER_OR_FOLLOWER before)
            for _ in range(150):
                batch = records.build_batch([(None, b"warm", ())], timestamp_ms=int(time.time() * 1000))
                r = c.request(apis.PRODUCE, _produce(mp, p, batch), version=9)
                if r.responses[0].partition_responses[0].error_code == ErrorCode.none:
                    break
                time.sleep(0.2)
            else:
                raise AssertionError(f"{TOPIC}-{p} got no leader")


def _produce(m: dict, partition: int, batch: bytes):  # type: ignore[no-untyped-def]
    return make(m["ProduceRequest"], transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=120),
                topic_data=(make(m["TopicProduceData"], name=TOPIC, partition_data=(
                    make(m["PartitionProduceData"], index=partition, records=batch),)),))


#: ``copies``: how many times the pool's bytes may be in memory at once on their way to the store
#: (the frame, the batch handed to the group committer, its statement's parameters, the driver's
#: buffer); the larger the batches, the more of them one commit round carries at once
@pytest.mark.parametrize("connections, request_mb, rounds, copies", [
    pytest.param(10, 4, 1, 4, id="10x8x4MB"), pytest.param(20, 16, 2, 6, marks=pytest.mark.long, id="20x8x16MBx2")])
def test_pipelined_produce_on_many_connections_is_bounded_by_one_pool(pg_dsn: str, tmp_path: Path, connections: int,
                                                                      request_mb: int, rounds: int,
                                                                      copies: int) -> None:
    with brokers(pg_dsn, tmp_path, {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"},
                 nodes=(1,)) as (b,):
        _create(b.bootstrap)
        m = apis.message_module_classes(apis.PRODUCE, 9, False)
        batch = records.build_batch([(None, os.urandom(1 << 20), ())] * request_mb,
                                    timestamp_ms=int(time.time() * 1000))
        frames = [framing.encode_request(apis.PRODUCE, 9, i, "h", _produce(m, i % PARTITIONS, batch))
                  for i in range(DEPTH)]
        codes: list[int] = []
        failures: list[BaseException] = []

        def attacker() -> None:  # 8 requests sent at once, then their answers; ``rounds`` times
            try:
                with ProtocolClient(b.bootstrap, timeout=300) as c:
                    for _ in range(rounds):
                        for f in frames:
                            c.send_raw(f)
                        for _ in frames:
                            _, resp = framing.decode_response(apis.PRODUCE, 9, c.recv_frame())
                            codes.append(resp.responses[0].partition_responses[0].error_code)
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        pid = b.pid
        time.sleep(1.0)
        before = rss(pid)
        reset_peak(pid)
        with Bystander(b.bootstrap) as by:
            time.sleep(0.5)
            threads = [threading.Thread(target=attacker) for _ in range(connections)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=600)
            time.sleep(0.5)
        grew = peak(pid) - before
        assert not failures, failures[:3]
        assert codes == [ErrorCode.none] * (connections * DEPTH * rounds)
        held = connections * DEPTH * request_mb * MIB  # what the attack had in flight at once
        # the pool, one request over it, and what their bytes cost on the way to the store
        assert grew < copies * (POOL + request_mb * MIB) + 150 * MIB, (
            f"RSS peaked {grew / MIB:.0f} MB above its level with {held / MIB:.0f} MB of requests in flight")
        deadline = time.monotonic() + 10
        while rss(pid) - before > 100 * MIB and time.monotonic() < deadline:
            time.sleep(0.5)
        kept = rss(pid) - before
        assert kept < 100 * MIB, f"{kept / MIB:.0f} MB kept after the requests were answered"
        lat = sorted(by.latencies)
        assert lat and statistics.median(lat) < 0.25 and lat[-1] < 3.0, (
            f"bystander p50 {statistics.median(lat) * 1000:.0f} ms, max {lat[-1] * 1000:.0f} ms")
