"""``python -m bench --cluster-load [--brokers 1 3] [--seconds S] [--repeat N] [--sizes 100 1024] [--mode plain]``
(also ``python -m bench.cluster_load``)

What cluster mode (issue 15) asks of its PostgreSQL, measured under the produce scenario: one
PostgreSQL server (``oncelog.testing.pgserver``: fsync and synchronous_commit on) and 1 or 3
``oncelog broker --store …`` processes on a fresh database; one confluent-kafka producer
(acks=all, idempotent unless ``--mode plain``, linger 5 ms; ``bench.clients.produce_timed``) sends records round-robin to
a topic of 6 partitions for ``--seconds``. Over exactly that window:

* acknowledged records/s and payload MB/s;
* database COMMITs/s: ``pg_stat_database.xact_commit`` of the brokers' database (every
  transaction: the group commits, and also heartbeats, polls and reads);
* WAL bytes/s, WAL records/s and WAL fsyncs/s: ``pg_stat_wal`` (server-wide; nothing else
  writes on this server);
* connections per broker: ``pg_stat_activity`` rows of the database, matched to the brokers by
  their client port (psutil);
* CPU seconds per second of the brokers (all), of every PostgreSQL process (the postmaster and
  its children) and of this client process (the producer): where the 2 cores went.

Each configuration runs ``--repeat`` times; the median is reported (min–max in brackets).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import psutil

from bench.common import cpu_seconds, drop_database, median_range, pg_and_workdir, pg_processes, stop_brokers


def _snapshot(conn, db: str) -> dict:  # type: ignore[no-untyped-def]
    commits, rollbacks = conn.execute(
        "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = %s", (db,)).fetchone()
    wal_bytes, wal_records, wal_sync, wal_write = conn.execute(
        "SELECT wal_bytes, wal_records, wal_sync, wal_write FROM pg_stat_wal").fetchone()
    lsn = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0]
    return {"commits": commits, "rollbacks": rollbacks, "wal_bytes": int(wal_bytes), "wal_records": wal_records,
            "wal_sync": wal_sync, "wal_write": wal_write, "lsn": int(lsn)}


def _connections(conn, db: str, brokers) -> dict[str, int]:  # type: ignore[no-untyped-def]
    ports = {}
    for b in brokers:
        try:
            for c in psutil.Process(b.pid).net_connections(kind="tcp"):
                if c.raddr and c.raddr.port:
                    ports[c.laddr.port] = b.node_id
        except psutil.Error:
            pass
    out: dict[str, int] = {}
    for (port,) in conn.execute("SELECT client_port FROM pg_stat_activity WHERE datname = %s", (db,)).fetchall():
        key = f"broker {ports[port]}" if port in ports else "other"
        out[key] = out.get(key, 0) + 1
    return out


def measure(pg, brokers: int, size: int, seconds: float, work: Path, rep: int,  # type: ignore[no-untyped-def]
            mode: str = "idempotent") -> dict:
    import psycopg

    from bench import clients
    from bench.systems import create_topic_admin, wait_leaders
    from oncelog.process import BrokerProcess

    db = f"load_{brokers}_{size}_{rep}_{time.time_ns()}"
    dsn = pg.create_database(db)
    procs = [BrokerProcess(work / f"{db}-b{n}", node_id=n, store=dsn, log_path=work / f"{db}-b{n}.log")
             for n in range(1, brokers + 1)]
    stats = psycopg.connect(pg.dsn(db), autocommit=True, connect_timeout=10)
    try:
        for b in procs:
            b.start(timeout=60)
        bootstrap = ",".join(b.bootstrap for b in procs)
        topic = "load"
        create_topic_admin(bootstrap, topic, 6)
        wait_leaders(bootstrap, topic, 6)
        clients.produce_timed(bootstrap, topic, 1.0, size, mode, partitions=6)  # warm-up
        bprocs = [psutil.Process(b.pid) for b in procs]
        pprocs = pg_processes(pg)
        me = psutil.Process()
        s0, b0, p0, c0 = _snapshot(stats, db), cpu_seconds(bprocs), cpu_seconds(pprocs), cpu_seconds([me])
        t0 = time.monotonic()
        conns_during: dict[str, int] = {}
        rate = clients.produce_timed(bootstrap, topic, seconds, size, mode, partitions=6)
        t1 = time.monotonic()
        s1, b1, p1, c1 = _snapshot(stats, db), cpu_seconds(bprocs), cpu_seconds(pg_processes(pg)), cpu_seconds([me])
        conns_during = _connections(stats, db, procs)
        conns_during.pop("other", None)  # this measuring connection
        el = t1 - t0
        records = rate * seconds  # produce_timed's rate is over its own window (== seconds)
        commits = s1["commits"] - s0["commits"]
        return {
            "brokers": brokers, "size": size, "mode": mode, "seconds": el,
            "records_per_s": rate, "payload_mb_per_s": rate * size / 1e6,
            "commits_per_s": commits / el,
            "records_per_commit": records / commits if commits else 0.0,
            "wal_bytes_per_s": (s1["wal_bytes"] - s0["wal_bytes"]) / el,
            "lsn_bytes_per_s": (s1["lsn"] - s0["lsn"]) / el,
            "wal_records_per_s": (s1["wal_records"] - s0["wal_records"]) / el,
            "wal_fsyncs_per_s": (s1["wal_sync"] - s0["wal_sync"]) / el,
            "wal_bytes_per_payload_byte": (s1["wal_bytes"] - s0["wal_bytes"]) / (records * size) if records else 0.0,
            "connections_per_broker": conns_during,
            "cpu_brokers": (b1 - b0) / el, "cpu_postgres": (p1 - p0) / el, "cpu_client": (c1 - c0) / el,
        }
    finally:
        stats.close()
        stop_brokers(procs)
        drop_database(pg, db)


KEYS = [("records_per_s", "records/s", "{:,.0f}"), ("payload_mb_per_s", "payload MB/s", "{:.1f}"),
        ("commits_per_s", "COMMITs/s", "{:,.0f}"), ("records_per_commit", "records/COMMIT", "{:,.0f}"),
        ("wal_bytes_per_s", "WAL MB/s", "{:.2f}"), ("wal_fsyncs_per_s", "WAL fsyncs/s", "{:,.0f}"),
        ("wal_bytes_per_payload_byte", "WAL bytes/payload byte", "{:.2f}"),
        ("cpu_brokers", "CPU brokers (cores)", "{:.2f}"), ("cpu_postgres", "CPU PostgreSQL (cores)", "{:.2f}"),
        ("cpu_client", "CPU client (cores)", "{:.2f}")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench --cluster-load", description=__doc__.split("\n\n")[1])
    ap.add_argument("--brokers", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1024])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mode", choices=("idempotent", "plain"), default="idempotent", help="the producer's mode")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    load0 = psutil.getloadavg()[0]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results: list[dict] = []
    with pg_and_workdir("oncelog-load-") as (pg, work):
        for rep in range(args.repeat):
            for size in args.sizes:
                for n in args.brokers:
                    r = measure(pg, n, size, args.seconds, work, rep, args.mode)
                    results.append(r)
                    print(f"rep {rep} {n} broker(s) {size} B: " + ", ".join(
                        f"{label} {fmt.format(r[k] / (1e6 if k == 'wal_bytes_per_s' else 1))}" for k, label, fmt in KEYS)
                        + f", connections {r['connections_per_broker']}", file=sys.stderr, flush=True)
    print(f"Measured {started} by `python -m bench --cluster-load --seconds {args.seconds:g} --repeat {args.repeat}`: "
          f"PostgreSQL 15 and the brokers and the client on one 2-core machine, shared (load average "
          f"{load0:.1f} before, {psutil.getloadavg()[0]:.1f} after); one {args.mode} acks=all producer, 6 partitions; "
          f"median of {args.repeat} (min–max).\n")
    cols = [(n, s) for s in args.sizes for n in args.brokers]
    print("| measure | " + " | ".join(f"{n} broker{'s' if n > 1 else ''}, {s} B" for n, s in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for k, label, fmt in KEYS:
        cells = []
        for n, s in cols:
            vs = [r[k] for r in results if r["brokers"] == n and r["size"] == s]
            cells.append(median_range(vs, fmt, 1e6 if k == "wal_bytes_per_s" else 1.0))
        print(f"| {label} | " + " | ".join(cells) + " |")
    conns = []
    for n, s in cols:
        last = [r for r in results if r["brokers"] == n and r["size"] == s][-1]["connections_per_broker"]
        conns.append(", ".join(f"{v}" for _, v in sorted(last.items())))
    print("| PostgreSQL connections per broker | " + " | ".join(conns) + " |")
    if args.json:
        args.json.write_text(json.dumps({"started": started, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
