"""The object writer's backpressure (issue 29, ``diskless.buffer.max.bytes``, docs/DISKLESS.md §2.3
item 6), on a real broker process, PostgreSQL and SeaweedFS, with a real client.

With a bound of 64 KiB and a producer pushing 3 MB at once into a diskless topic of three
partitions (not idempotent, so librdkafka keeps many requests in flight: the server reads eight
Produce requests of a connection at once, about 768 KiB, per interval), the writer never holds
more than the bound (plus one batch): every object it writes is that small (without the bound,
one interval gathers what eight requests carry); the batches that waited for room are answered
later, and every record is delivered once, in order, per partition.
"""

from __future__ import annotations

from pathlib import Path

import psycopg

import kafka_clients as kc
from dl_cluster import diskless_brokers

BOUND = 64 << 10
BATCH = 32 << 10


def test_the_writer_holds_at_most_its_bound_and_loses_nothing(pg_dsn: str, tmp_path: Path, seaweed) -> None:
    with diskless_brokers(pg_dsn, tmp_path, seaweed, prefix="bp1",
                          extra={"diskless.commit.interval.ms": "250",
                                 "diskless.buffer.max.bytes": str(BOUND)}) as (b,):
        kc.create_topic("confluent", b.bootstrap, "dlbp", 3, {"diskless.enable": "true"})
        kc.produce("confluent", b.bootstrap, "dlbp", [(p, None, b"warm") for p in range(3)])
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": False, "acks": "all",
                      "linger.ms": 20, "batch.size": BATCH, "message.timeout.ms": 120_000, "retries": 0})
        acked: dict[int, list[tuple[int, bytes]]] = {0: [], 1: [], 2: []}
        errors: list[str] = []

        def cb(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(str(err))
            else:
                acked[msg.partition()].append((msg.offset(), msg.value()))

        n = 3000
        for i in range(n):
            p.produce("dlbp", b"%06d" % i + b"x" * 1000, partition=i % 3, on_delivery=cb)
            p.poll(0)
        assert p.flush(120) == 0
        assert errors == []
        assert sum(len(v) for v in acked.values()) == n
        with psycopg.connect(pg_dsn) as conn:
            sizes = [r[0] for r in conn.execute("SELECT size FROM oncelog_dl_object").fetchall()]
        assert len(sizes) >= 3_000_000 // (BOUND + BATCH + 4096)
        assert max(sizes) <= BOUND + BATCH + 4096, f"an object of {max(sizes)} bytes: past the writer's bound"
        assert max(sizes) > BOUND // 2, f"objects of at most {max(sizes)} bytes: the bound was never reached"
        got = kc.consume("confluent", b.bootstrap, "dlbp", [0, 1, 2], expected=n + 3, timeout=60)
        per: dict[int, list[int]] = {0: [], 1: [], 2: []}
        for partition, offset, _key, value in [(r[0], r[1], r[2], r[3]) for r in got]:
            if value != b"warm":
                per[partition].append(int(value[:6]))
        for part in range(3):
            assert per[part] == list(range(part, n, 3)), "lost, doubled or out of order"
            assert [o for o, _v in acked[part]] == list(range(1, n // 3 + 1))
