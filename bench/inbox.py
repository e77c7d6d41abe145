"""``python -m bench.inbox [--brokers 1] [--seconds 8] [--writers 4] [--partitions 1] [--repeat 3]``

The database inbox (issue 31, docs/DATABASE.md) measured, next to the same application storing
its offsets in a table of its own and next to one committing them to Kafka after its database
COMMIT. One PostgreSQL server (``oncelog.testing.pgserver``: fsync and synchronous_commit on),
``--brokers`` ``oncelog broker --store …`` processes on a fresh database, a topic of 6
partitions. The application: ``--writers`` threads, each in a loop of transactions that insert
one row of their own and commit the next offset of ``--partitions`` partitions for a group of
their own (a consumer that assigns its partitions itself: generation -1), for ``--seconds``.

* ``inbox``: ``oncelog.db.commit_offsets`` in the transaction (one ``oncelog.commit_offsets``
  call per partition, one pipeline). commits/s = transactions committed / second.
* ``own-table``: an ``INSERT … ON CONFLICT DO UPDATE`` into the application's own offsets table
  in the transaction (atomic too, but invisible to Kafka tools and to the group coordinator).
* ``kafka-after``: the row in the transaction, then, after COMMIT, a synchronous Kafka
  OffsetCommit (confluent-kafka ``commit(offsets, asynchronous=False)``): not atomic (a crash
  between the two reprocesses), one extra round trip to the coordinator per transaction.

Commit-to-visible latency (``inbox`` and ``idle``, a run with the probes only): a probe thread
commits the next offset of a group of its own every 20 ms; after COMMIT returns it asks the
coordinator (a connected kafka-python admin client, OffsetFetch) until the answer carries the
new offset (``fetch``), then polls the store until the pending row has been drained into
``__consumer_offsets`` (``drained``). p50/p99 over the probes; all times are this process's
monotonic clock.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

from bench.common import cpu_seconds, drop_database, median_range, pg_and_workdir, stop_brokers

PROBE_EVERY_S = 0.02


def _pct(vs: list[float], q: float) -> float:
    if not vs:
        return float("nan")
    vs = sorted(vs)
    return vs[min(len(vs) - 1, int(q * len(vs)))]


def run(pg, brokers: int, mode: str, seconds: float, writers: int, partitions: int, work: Path,  # type: ignore[no-untyped-def]
        rep: int) -> dict:
    import psycopg
    from kafka.admin import KafkaAdminClient

    from bench.systems import create_topic_admin, wait_leaders
    from oncelog import db as odb
    from oncelog.process import BrokerProcess

    name = f"inbox_{mode.replace('-', '_')}_{rep}_{time.time_ns()}"
    dsn = pg.create_database(name)
    procs = [BrokerProcess(work / f"{name}-b{n}", node_id=n, store=dsn, log_path=work / f"{name}-b{n}.log")
             for n in range(1, brokers + 1)]
    stop = threading.Event()
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []
    try:
        for b in procs:
            b.start(timeout=60)
        bootstrap = ",".join(b.bootstrap for b in procs)
        topic = "bench"
        create_topic_admin(bootstrap, topic, 6)
        wait_leaders(bootstrap, topic, 6)
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CREATE TABLE processed (id bigserial PRIMARY KEY, note text)")
            c.execute("CREATE TABLE app_offsets (grp text, topic text, partition int, next_offset bigint, "
                      "PRIMARY KEY (grp, topic, partition))")
            c.execute("INSERT INTO oncelog_acl VALUES (3, '*', 3, 'User:*', '*', 3, 3)")
            c.execute("INSERT INTO oncelog_acl VALUES (2, %s, 3, 'User:*', '*', 3, 3)", (topic,))
        counts = [0] * writers
        load_end = time.monotonic() + (seconds if mode != "idle" else 0)

        def writer(w: int) -> None:
            consumer = None
            try:
                if mode == "kafka-after":
                    from confluent_kafka import Consumer, TopicPartition

                    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"w{w}", "enable.auto.commit": False})
                parts = [(w + i) % 6 for i in range(partitions)]
                with psycopg.connect(dsn) as conn:
                    n = 0
                    while time.monotonic() < load_end and not stop.is_set():
                        n += 1
                        with conn.transaction():
                            conn.execute("INSERT INTO processed (note) VALUES ('w')")
                            if mode == "inbox":
                                odb.commit_offsets(conn, f"w{w}", {(topic, p): n for p in parts})
                            elif mode == "own-table":
                                with conn.cursor() as cur:
                                    cur.executemany("INSERT INTO app_offsets VALUES (%s, %s, %s, %s) ON CONFLICT "
                                                    "(grp, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset",
                                                    [(f"w{w}", topic, p, n) for p in parts])
                        if consumer is not None:
                            consumer.commit(offsets=[TopicPartition(topic, p, n) for p in parts], asynchronous=False)
                        counts[w] += 1
            except BaseException as exc:  # noqa: BLE001 - reported
                errors.append(exc)
            finally:
                if consumer is not None:
                    consumer.close()

        fetch_ms: list[float] = []
        drain_ms: list[float] = []
        unseen = [0]

        def probe() -> None:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap)
            try:
                with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn, autocommit=True) as owner:
                    for _ in range(150):  # the coordinator may still be loading right after the start
                        try:
                            admin.list_group_offsets({"probe": None})
                            break
                        except Exception:  # noqa: BLE001 - NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS
                            time.sleep(0.2)
                    k = 0
                    end = time.monotonic() + (seconds if mode != "idle" else 5.0)
                    while time.monotonic() < end and not stop.is_set():
                        k += 1
                        with conn.transaction():
                            odb.commit_offsets(conn, "probe", {(topic, 0): k})
                        t0 = time.monotonic()
                        seen = False
                        while time.monotonic() - t0 < 5.0:
                            got = admin.list_group_offsets({"probe": None})["probe"]
                            if any(om.offset == k for om in got.values()):
                                seen = True
                                break
                        if not seen:
                            unseen[0] += 1
                            continue
                        fetch_ms.append((time.monotonic() - t0) * 1000)
                        while time.monotonic() - t0 < 5.0:
                            if owner.execute("SELECT NOT EXISTS (SELECT 1 FROM oncelog.inbox WHERE group_id = 'probe' "
                                             "AND next_offset = %s)", (k,)).fetchone()[0]:
                                drain_ms.append((time.monotonic() - t0) * 1000)
                                break
                            time.sleep(0.0005)
                        time.sleep(PROBE_EVERY_S)
            except BaseException as exc:  # noqa: BLE001 - reported
                errors.append(exc)
            finally:
                admin.close()

        import psutil

        broker_procs = [psutil.Process(b.pid) for b in procs if b.pid is not None]
        cpu0 = cpu_seconds(broker_procs)
        started = time.monotonic()
        if mode != "idle":
            threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
        if mode in ("inbox", "idle"):
            threads.append(threading.Thread(target=probe))
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 120)
        elapsed = max(1e-9, min(time.monotonic(), load_end) - started) if mode != "idle" else 1.0
        broker_cpu = cpu_seconds(broker_procs) - cpu0
        if errors:
            raise errors[0]
        with psycopg.connect(dsn, autocommit=True) as c:
            left = 0
            if c.execute("SELECT to_regclass('oncelog.inbox') IS NOT NULL").fetchone()[0]:  # else: code without it
                deadline = time.monotonic() + 60
                while c.execute("SELECT count(*) FROM oncelog.inbox").fetchone()[0] and time.monotonic() < deadline:
                    time.sleep(0.05)
                left = c.execute("SELECT count(*) FROM oncelog.inbox").fetchone()[0]
        return {"mode": mode, "commits_per_s": sum(counts) / elapsed if mode != "idle" else 0.0,
                "broker_cpu_ms_per_txn": broker_cpu * 1000 / sum(counts) if sum(counts) else float("nan"),
                "fetch_p50_ms": _pct(fetch_ms, 0.5), "fetch_p99_ms": _pct(fetch_ms, 0.99),
                "drain_p50_ms": _pct(drain_ms, 0.5), "drain_p99_ms": _pct(drain_ms, 0.99),
                "probes": len(fetch_ms), "probes_unseen": unseen[0], "left_pending": left}
    finally:
        stop.set()
        stop_brokers(procs)
        drop_database(pg, name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.inbox", description=__doc__.split("\n\n")[1])
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=1, help="offsets committed per transaction")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--modes", nargs="+", default=["idle", "inbox", "own-table", "kafka-after"])
    args = ap.parse_args(argv)
    import psutil

    load0 = psutil.getloadavg()[0]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results: list[dict] = []
    with pg_and_workdir("oncelog-inbox-") as (pg, work):
        for rep in range(args.repeat):
            for mode in args.modes:
                r = run(pg, args.brokers, mode, args.seconds, args.writers, args.partitions, work, rep)
                results.append(r)
                print(f"rep {rep} {mode}: {r}", file=sys.stderr, flush=True)
    print(f"Measured {started} by `python -m bench.inbox --brokers {args.brokers} --seconds {args.seconds:g} "
          f"--writers {args.writers} --partitions {args.partitions} --repeat {args.repeat}`: PostgreSQL 15, the "
          f"broker(s) and the application on one shared 2-core machine (load average {load0:.1f} before, "
          f"{psutil.getloadavg()[0]:.1f} after); median of {args.repeat} (min–max).\n")
    print("| application | transactions/s (row + offsets) | broker CPU ms per transaction | "
          "commit → OffsetFetch p50 ms | p99 ms | commit → in __consumer_offsets p50 ms | p99 ms | probes unseen |")
    print("|---|---|---|---|---|---|---|---|")
    labels = {"idle": "oncelog.commit_offsets, idle (probes only)", "inbox": "oncelog.commit_offsets under load",
              "own-table": "own offsets table (INSERT … ON CONFLICT), under load",
              "kafka-after": "row, COMMIT, then Kafka OffsetCommit (not atomic), under load"}
    for mode in args.modes:
        rs = [r for r in results if r["mode"] == mode]

        def cell(k: str, fmt: str) -> str:
            vs = [r[k] for r in rs if r[k] == r[k]]  # not NaN
            return median_range(vs, fmt) if vs else "–"

        rate = cell("commits_per_s", "{:,.0f}") if mode != "idle" else "–"
        print(f"| {labels[mode]} | {rate} | {cell('broker_cpu_ms_per_txn', '{:.2f}')} | {cell('fetch_p50_ms', '{:.1f}')} | {cell('fetch_p99_ms', '{:.1f}')} | "
              f"{cell('drain_p50_ms', '{:.0f}')} | {cell('drain_p99_ms', '{:.0f}')} | "
              f"{sum(r['probes_unseen'] for r in rs)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
