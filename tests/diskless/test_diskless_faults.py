"""Object-store faults under a diskless topic (issue 29, docs/DISKLESS.md §2.10), with a real
broker process, a real PostgreSQL and a real SeaweedFS that the test SIGKILLs and restarts.

While the store is down the broker acknowledges nothing (an upload fails past
``diskless.storage.call.deadline.ms``, its batches fail with a retriable error, the partition is
rebuilt from the store); once it is back, an idempotent producer's retries land: every record
acknowledged once, in order, none lost, none duplicated."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import kafka_clients as kc
from dl_cluster import diskless_brokers


def test_the_store_down_stops_acknowledgements_and_loses_nothing(pg_dsn: str, tmp_path: Path, own_seaweed) -> None:
    from confluent_kafka import Producer

    with diskless_brokers(pg_dsn, tmp_path, own_seaweed, prefix="f1", extra={
            "diskless.storage.call.deadline.ms": "1500", "diskless.storage.request.timeout.ms": "500"}) as (b,):
        kc.create_topic("confluent", b.bootstrap, "dl", 1, {"diskless.enable": "true"})
        p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                      "delivery.timeout.ms": 120000, "message.timeout.ms": 120000})
        acked: list[tuple[float, int, bytes]] = []
        errors = []
        lock = threading.Lock()

        def cb(err, msg) -> None:  # type: ignore[no-untyped-def]
            with lock:
                if err is not None:
                    errors.append(err)
                else:
                    acked.append((time.monotonic(), msg.offset(), msg.value()))

        for i in range(50):
            p.produce("dl", f"before-{i}".encode(), partition=0, on_delivery=cb)
        assert p.flush(30) == 0 and len(acked) == 50
        own_seaweed.kill()
        down_at = time.monotonic()
        for i in range(200):
            p.produce("dl", f"during-{i}".encode(), partition=0, on_delivery=cb)
            p.poll(0.01)
        for _ in range(40):  # 4 s with the store down: nothing may be acknowledged
            p.poll(0.1)
        with lock:
            early = [a for a in acked if a[0] > down_at]
        assert early == [], f"{len(early)} record(s) acknowledged while the object store was down"
        own_seaweed.start()
        assert p.flush(90) == 0, "records still unacknowledged 90 s after the store came back"
        assert errors == []
        assert len(acked) == 250
        got = kc.consume("confluent", b.bootstrap, "dl", [0], expected=250, timeout=60, settle=1.0)
        values = [r[3] for r in got]
        want = [f"before-{i}".encode() for i in range(50)] + [f"during-{i}".encode() for i in range(200)]
        assert values == want  # none lost, none duplicated, in order
        assert sorted(o for _, o, _ in acked) == [r[1] for r in got]
        assert b.proc is not None and b.proc.poll() is None
