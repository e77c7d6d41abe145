"""``python -m bench.outbox [--brokers 1] [--seconds 8] [--writers 4] [--per-txn 10] [--size 100] [--repeat 3]``

The database outbox (issue 31, docs/DATABASE.md) measured, next to the same application written
with a hand-made outbox table and a relay. One PostgreSQL server (``oncelog.testing.pgserver``:
fsync and synchronous_commit on) and ``--brokers`` ``oncelog broker --store …`` processes on a
fresh database, a topic of 6 partitions. The application: ``--writers`` threads, each in a loop
of transactions that insert one row of their own and send ``--per-txn`` records of ``--size``
bytes, keyed, then COMMIT, for ``--seconds``.

* ``oncelog``: the records are sent with ``oncelog.send`` in the transaction; the brokers drain
  them. records/s = records committed / (time from the first COMMIT until the pending table is
  empty), i.e. until every record is in the log.
* ``oncelog-many``: the same with ``oncelog.db.send_many`` (the transaction's records in one
  pipeline: one round trip, still one ``oncelog.send`` call each).
* ``relay``: the records go to the application's own table ``app_outbox`` in the transaction; one
  relay thread polls it (``SELECT … ORDER BY id LIMIT 500``), produces with an idempotent acks=all
  confluent-kafka producer, waits for delivery, then deletes the rows (at-least-once: a relay
  crash between delivery and delete sends them again). Same measure.

Commit-to-visible latency: a probe thread commits one single-record transaction every 20 ms
during the load (and in an idle run: ``idle``); a read_committed confluent-kafka consumer
assigned to every partition notes when each probe arrives; latency = arrival − return of COMMIT,
p50/p99 over the probes. All clocks are this process's monotonic clock.

``--diskless``: the topic is a diskless topic (issue 29, docs/DISKLESS.md) on a SeaweedFS server
on loopback (``oncelog.testing.seaweedfs``), the brokers' other diskless settings at their
defaults: the drained batches go through the object writer (one object per
``diskless.commit.interval.ms``), whose commit deletes the rows.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

from bench.common import drop_database, median_range, pg_and_workdir, stop_brokers


def _consumer(bootstrap: str, topic: str, partitions: int, seen: dict[bytes, float], stop: threading.Event) -> None:
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-probe", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "fetch.wait.max.ms": 10, "enable.partition.eof": False})
    c.assign([TopicPartition(topic, p, OFFSET_END) for p in range(partitions)])
    try:
        while not stop.is_set():
            for m in c.consume(num_messages=10_000, timeout=0.05):
                if m.error() is None and m.value() is not None and m.value().startswith(b"probe-"):
                    seen[m.value()] = time.monotonic()
    finally:
        c.close()


def run(pg, brokers: int, mode: str, seconds: float, writers: int, per_txn: int, size: int, work: Path,  # type: ignore[no-untyped-def]
        rep: int, weed=None) -> dict:
    """One measurement; ``weed``: a started SeaweedServer, for a diskless topic on it (None: the
    PostgreSQL engine)."""
    import psycopg
    from confluent_kafka import Producer

    from bench.systems import create_topic_admin, wait_leaders
    from oncelog import db as odb
    from oncelog.process import BrokerProcess

    name = f"outbox_{mode}_{rep}_{time.time_ns()}"
    dsn = pg.create_database(name)
    overrides = {} if weed is None else {"diskless.storage.url": f"s3://{weed.bucket}/{name}",
                                         "diskless.storage.endpoint": weed.endpoint}
    procs = [BrokerProcess(work / f"{name}-b{n}", node_id=n, store=dsn, log_path=work / f"{name}-b{n}.log",
                           overrides=overrides, env=None if weed is None else weed.env())
             for n in range(1, brokers + 1)]
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        for b in procs:
            b.start(timeout=60)
        bootstrap = ",".join(b.bootstrap for b in procs)
        topic = "bench"
        create_topic_admin(bootstrap, topic, 6, None if weed is None else {"diskless.enable": "true"})
        wait_leaders(bootstrap, topic, 6)
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CREATE TABLE ledger (id bigserial PRIMARY KEY, note text)")
            c.execute("CREATE TABLE app_outbox (id bigserial PRIMARY KEY, key bytea, value bytea)")
            c.execute("INSERT INTO oncelog_acl VALUES (2, %s, 3, 'User:*', '*', 4, 3)", (topic,))
        seen: dict[bytes, float] = {}
        committed: dict[bytes, float] = {}
        cons = threading.Thread(target=_consumer, args=(bootstrap, topic, 6, seen, stop), daemon=True)
        cons.start()
        time.sleep(2.0)  # the consumer is assigned and at the end
        payload = b"x" * size
        counts = [0] * writers
        load_end = time.monotonic() + (seconds if mode != "idle" else 0)

        def send(conn, key: bytes, value: bytes) -> None:  # type: ignore[no-untyped-def]
            if mode == "relay":
                conn.execute("INSERT INTO app_outbox (key, value) VALUES (%s, %s)", (key, value))
            else:
                odb.send(conn, topic, value, key=key)

        def writer(w: int) -> None:
            with psycopg.connect(dsn) as conn:
                n = 0
                while time.monotonic() < load_end:
                    with conn.transaction():
                        conn.execute("INSERT INTO ledger (note) VALUES ('w')")
                        if mode == "oncelog-many":
                            odb.send_many(conn, topic, [(payload, f"w{w}-{n}-{j}".encode()) for j in range(per_txn)])
                        else:
                            for j in range(per_txn):
                                send(conn, f"w{w}-{n}-{j}".encode(), payload)
                    n += 1
                    counts[w] += per_txn

        def probe() -> None:
            with psycopg.connect(dsn) as conn:
                end = time.monotonic() + max(seconds, 5.0)
                i = 0
                while time.monotonic() < end:
                    v = f"probe-{i}".encode()
                    with conn.transaction():
                        send(conn, v, v)
                    committed[v] = time.monotonic()
                    i += 1
                    time.sleep(0.02)

        def relay() -> None:
            p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                          "linger.ms": 5, "partitioner": "murmur2_random"})
            with psycopg.connect(dsn, autocommit=True) as conn:
                while not stop.is_set():
                    rows = conn.execute("SELECT id, key, value FROM app_outbox ORDER BY id LIMIT 500").fetchall()
                    if not rows:
                        time.sleep(0.005)
                        continue
                    for _id, k, v in rows:
                        p.produce(topic, key=bytes(k), value=bytes(v))
                    assert p.flush(60) == 0
                    conn.execute("DELETE FROM app_outbox WHERE id = ANY(%s)", ([r[0] for r in rows],))

        if mode == "relay":
            threads.append(threading.Thread(target=relay, daemon=True))
        threads += [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(writers if mode != "idle" else 0)]
        threads.append(threading.Thread(target=probe, daemon=True))
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads[1:] if mode == "relay" else threads:
            t.join(seconds + 120)
        table = "app_outbox" if mode == "relay" else "oncelog.outbox"
        with psycopg.connect(dsn, autocommit=True) as c:
            deadline = time.monotonic() + 300
            while c.execute(f"SELECT count(*) FROM {table}").fetchone()[0] and time.monotonic() < deadline:
                time.sleep(0.01)
        t1 = time.monotonic()
        time.sleep(1.0)
        lat = sorted((seen[v] - t) * 1000 for v, t in committed.items() if v in seen)
        lost = sum(1 for v in committed if v not in seen)
        total = sum(counts) + len(committed)
        return {"mode": mode, "records": total, "records_per_s": total / (t1 - t0),
                "app_records_per_s": sum(counts) / seconds if mode != "idle" else 0.0,
                "drain_lag_s": max(0.0, t1 - load_end) if mode != "idle" else 0.0,
                "p50_ms": statistics.median(lat) if lat else float("nan"),
                "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else float("nan"),
                "probes": len(committed), "probes_unseen": lost}
    finally:
        stop.set()
        stop_brokers(procs)
        drop_database(pg, name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.outbox", description=__doc__.split("\n\n")[1])
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--per-txn", type=int, default=10)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--modes", nargs="+", default=["idle", "oncelog", "oncelog-many", "relay"])
    ap.add_argument("--diskless", action="store_true", help="a diskless topic on a loopback SeaweedFS")
    args = ap.parse_args(argv)
    import psutil

    load0 = psutil.getloadavg()[0]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results: list[dict] = []
    with pg_and_workdir("oncelog-outbox-") as (pg, work):
        weed = None
        if args.diskless:
            from oncelog.testing.seaweedfs import SeaweedServer

            weed = SeaweedServer(work / "weed").start()
        try:
            for rep in range(args.repeat):
                for mode in args.modes:
                    r = run(pg, args.brokers, mode, args.seconds, args.writers, args.per_txn, args.size, work, rep,
                            weed)
                    results.append(r)
                    print(f"rep {rep} {mode}: {r}", file=sys.stderr, flush=True)
        finally:
            if weed is not None:
                weed.close()
    print(f"Measured {started} by `python -m bench.outbox --brokers {args.brokers} --seconds {args.seconds:g} "
          f"--writers {args.writers} --per-txn {args.per_txn} --size {args.size} --repeat {args.repeat}"
          f"{' --diskless' if args.diskless else ''} --modes {' '.join(args.modes)}`: "
          f"PostgreSQL 15, the broker(s) and the application on one shared 2-core machine (load average "
          f"{load0:.1f} before, {psutil.getloadavg()[0]:.1f} after); median of {args.repeat} (min–max).\n")
    print("| application | records/s through the outbox | records/s committed by the application | "
          "backlog drained after the load (s) | commit-to-visible p50 ms | p99 ms | probes unseen |")
    print("|---|---|---|---|---|---|---|")
    labels = {"idle": "oncelog.send, idle (probes only)", "oncelog": "oncelog.send under load",
              "oncelog-many": "oncelog.db.send_many (one pipeline per transaction) under load",
              "relay": "own outbox table + relay (confluent-kafka idempotent), under load"}
    for mode in args.modes:
        rs = [r for r in results if r["mode"] == mode]

        def cell(k: str, fmt: str) -> str:
            return median_range([r[k] for r in rs], fmt)

        rate = cell("records_per_s", "{:,.0f}") if mode != "idle" else "–"
        app = cell("app_records_per_s", "{:,.0f}") if mode != "idle" else "–"
        lag = cell("drain_lag_s", "{:.1f}") if mode != "idle" else "–"
        print(f"| {labels[mode]} | {rate} | {app} | {lag} | {cell('p50_ms', '{:.0f}')} | {cell('p99_ms', '{:.0f}')} | "
              f"{sum(r['probes_unseen'] for r in rs)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
