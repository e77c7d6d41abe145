"""``python -m bench.diskless [--seconds S] [--size BYTES] [--intervals 100 250] [--rate R]``

Diskless topics (issue 29) next to the PostgreSQL engine, same run, same machine: one
PostgreSQL server (``oncelog.testing.pgserver``, fsync on), one SeaweedFS (``tests/seaweedfs.py``:
the test server, so this script needs the ``test`` extra) and, per configuration, one fresh
``oncelog broker --store …`` on a fresh database; a topic of 6 partitions. Configurations: the
PostgreSQL engine, then a diskless topic at each ``--intervals`` commit interval.

Per configuration:

* throughput: one confluent-kafka idempotent producer (acks=all, linger 5 ms;
  ``bench.clients.produce_timed``) for ``--seconds``: acknowledged records/s and payload MB/s;
  PostgreSQL WAL bytes per payload byte (``pg_stat_wal``, server-wide: nothing else writes on
  this server) and COMMITs/s (``pg_stat_database.xact_commit``: every transaction of the
  brokers' database, heartbeats and reads included); object PUTs/s and PUTs per payload MB
  (``oncelog_dl_object`` rows written in the window: one PUT each);
* produce latency: a second producer at a fixed ``--rate`` records/s (not saturated) for
  ``--seconds``; the time from ``produce()`` to its delivery report, p50 / p99 (ms).
* produce latency by client (a second table; ``--no-clients`` leaves it out): the same rate with
  a confluent-kafka producer without idempotence (acks=all, max.in.flight.requests.per.connection=5:
  with librdkafka's default of 1,000,000 it sends a request per partition every linger.ms, more
  than the broker's 8 pipelined Produce requests per connection answer in a commit interval, and
  its queue grows without end) and an idempotent kafka-python producer (five requests in flight,
  but one batch per partition: it mutes a partition while its batch is in flight). librdkafka's idempotent
  producer keeps one request in flight per partition once five of its messages are in flight
  there (docs/PERFORMANCE.md), so it shows less of what the broker's pending layer (issue 29,
  broker/partitions/pending_producers.py) does for a producer that pipelines its batches.

Run by hand; the numbers go to docs/DISKLESS.md (with the machine and its load).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from bench.common import drop_database, pg_and_workdir, stop_brokers

PARTITIONS = 6


def _snapshot(conn, db: str) -> dict:  # type: ignore[no-untyped-def]
    commits = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (db,)).fetchone()[0]
    wal = int(conn.execute("SELECT wal_bytes FROM pg_stat_wal").fetchone()[0])
    try:
        objects = conn.execute("SELECT count(*) FROM oncelog_dl_object").fetchone()[0]
    except Exception:  # noqa: BLE001 - before the schema exists
        objects = 0
    return {"commits": commits, "wal": wal, "objects": objects}


def _latency(bootstrap: str, topic: str, seconds: float, rate: int, size: int,
             idempotent: bool = True) -> tuple[float, float]:
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": idempotent, "acks": "all", "linger.ms": 5}
    if not idempotent:  # Java's window (librdkafka's default, 1,000,000, sends a request per linger.ms)
        conf["max.in.flight.requests.per.connection"] = 5
    p = Producer(conf)
    lat: list[float] = []
    errors: list[str] = []
    value = b"x" * size

    def cb(err, _msg, sent: float) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))
        else:
            lat.append(time.monotonic() - sent)

    start = time.monotonic()
    n = 0
    while time.monotonic() < start + seconds:
        due = start + n / rate
        now = time.monotonic()
        if now < due:
            p.poll(min(due - now, 0.01))
            continue
        t = time.monotonic()
        p.produce(topic, value, partition=n % PARTITIONS, on_delivery=lambda e, m, t=t: cb(e, m, t))
        n += 1
        p.poll(0)
    p.flush(60)
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first: {errors[0]}")
    lat.sort()
    return statistics.median(lat) * 1000, lat[int(len(lat) * 0.99) - 1] * 1000


def _latency_kafka_python(bootstrap: str, topic: str, seconds: float, rate: int, size: int) -> tuple[float, float]:
    """``_latency`` with an idempotent kafka-python producer (five requests in flight per
    connection; but, idempotent, it mutes a partition while one of its batches is in flight:
    ``guarantee_message_order``). ``batch_size`` as librdkafka's default (1,000,000), else its
    16 KiB batches carry fewer records per commit interval than 500 rec/s put on a partition and
    its queue grows."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=5,
                      max_in_flight_requests_per_connection=5, batch_size=1_000_000)
    lat: list[float] = []
    errors: list[str] = []
    value = b"x" * size
    start = time.monotonic()
    n = 0
    try:
        while time.monotonic() < start + seconds:
            due = start + n / rate
            now = time.monotonic()
            if now < due:
                time.sleep(min(due - now, 0.01))
                continue
            t = time.monotonic()
            fut = p.send(topic, value, partition=n % PARTITIONS)
            fut.add_callback(lambda _md, t=t: lat.append(time.monotonic() - t))
            fut.add_errback(lambda e: errors.append(str(e)))
            n += 1
        p.flush(60)
    finally:
        p.close(10)
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first: {errors[0]}")
    lat.sort()
    return statistics.median(lat) * 1000, lat[int(len(lat) * 0.99) - 1] * 1000


def measure(pg, seaweed, work: Path, engine: str, interval_ms: int, seconds: float, size: int,  # type: ignore[no-untyped-def]
            rate: int, by_client: bool = False) -> dict:
    import psycopg

    from bench import clients
    from bench.systems import wait_leaders
    from confluent_kafka.admin import AdminClient, NewTopic
    from oncelog.process import BrokerProcess

    db = f"dl_{engine}_{interval_ms}_{time.time_ns()}"
    dsn = pg.create_database(db)
    props = {"diskless.storage.url": f"s3://{seaweed.bucket}/{db}", "diskless.storage.endpoint": seaweed.endpoint,
             "diskless.commit.interval.ms": str(interval_ms)}
    b = BrokerProcess(work / db, node_id=1, store=dsn, overrides=props, env=seaweed.env(),
                      log_path=work / f"{db}.log")
    stats = psycopg.connect(pg.dsn(db), autocommit=True, connect_timeout=10)
    try:
        b.start(timeout=60)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        configs = {"diskless.enable": "true"} if engine == "diskless" else {}
        admin.create_topics([NewTopic("load", PARTITIONS, 1, config=configs)],
                            operation_timeout=30)["load"].result(timeout=60)
        wait_leaders(b.bootstrap, "load", PARTITIONS)
        clients.produce_timed(b.bootstrap, "load", 1.0, size, "idempotent", partitions=PARTITIONS)  # warm-up
        s0 = _snapshot(stats, db)
        t0 = time.monotonic()
        rate_acked = clients.produce_timed(b.bootstrap, "load", seconds, size, "idempotent", partitions=PARTITIONS)
        el = time.monotonic() - t0
        s1 = _snapshot(stats, db)
        payload = rate_acked * seconds * size
        p50, p99 = _latency(b.bootstrap, "load", seconds, rate, size)
        puts = s1["objects"] - s0["objects"]
        more = {}
        if by_client:
            more["plain_p50_ms"], more["plain_p99_ms"] = _latency(b.bootstrap, "load", seconds, rate, size,
                                                                  idempotent=False)
            more["kpy_p50_ms"], more["kpy_p99_ms"] = _latency_kafka_python(b.bootstrap, "load", seconds, rate, size)
        return {**more, "engine": engine, "interval_ms": interval_ms if engine == "diskless" else None, "size": size,
                "records_per_s": rate_acked, "payload_mb_per_s": rate_acked * size / 1e6,
                "wal_bytes_per_payload_byte": (s1["wal"] - s0["wal"]) / payload if payload else 0.0,
                "commits_per_s": (s1["commits"] - s0["commits"]) / el,
                "puts_per_s": puts / el, "puts_per_payload_mb": puts / (payload / 1e6) if payload else 0.0,
                "latency_rate": rate, "produce_p50_ms": p50, "produce_p99_ms": p99}
    finally:
        stats.close()
        stop_brokers([b])
        drop_database(pg, db)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rate", type=int, default=500, help="records/s of the latency producer")
    ap.add_argument("--intervals", type=int, nargs="+", default=[100, 250])
    ap.add_argument("--no-clients", dest="clients", action="store_false",
                    help="leave out the produce latency by client")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import seaweedfs

    server = seaweedfs.SeaweedServer()
    server.start()
    rows = []
    try:
        with pg_and_workdir("oncelog-bench-diskless-") as (pg, work):
            rows.append(measure(pg, server, work, "postgres", 250, args.seconds, args.size, args.rate, args.clients))
            for iv in args.intervals:
                rows.append(measure(pg, server, work, "diskless", iv, args.seconds, args.size, args.rate,
                                    args.clients))
    finally:
        server.close()
    print("| engine | records/s | payload MB/s | WAL bytes / payload byte | COMMITs/s | PUTs/s | PUTs / payload MB "
          "| produce p50 / p99 (ms) at %d rec/s |" % args.rate)
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        name = "PostgreSQL" if r["engine"] == "postgres" else f"diskless, {r['interval_ms']} ms"
        print(f"| {name} | {r['records_per_s']:,.0f} | {r['payload_mb_per_s']:.1f} | "
              f"{r['wal_bytes_per_payload_byte']:.3f} | {r['commits_per_s']:,.0f} | {r['puts_per_s']:.1f} | "
              f"{r['puts_per_payload_mb']:.2f} | {r['produce_p50_ms']:.0f} / {r['produce_p99_ms']:.0f} |")
    if args.clients:
        print()
        print("| engine | produce p50 / p99 (ms) at %d rec/s: confluent-kafka idempotent | confluent-kafka "
              "acks=all, not idempotent, 5 in flight | kafka-python idempotent |" % args.rate)
        print("|---|---|---|---|")
        for r in rows:
            name = "PostgreSQL" if r["engine"] == "postgres" else f"diskless, {r['interval_ms']} ms"
            print(f"| {name} | {r['produce_p50_ms']:.0f} / {r['produce_p99_ms']:.0f} | "
                  f"{r['plain_p50_ms']:.0f} / {r['plain_p99_ms']:.0f} | {r['kpy_p50_ms']:.0f} / {r['kpy_p99_ms']:.0f} |")
    print(json.dumps(rows), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
