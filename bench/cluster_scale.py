"""``python -m bench --cluster-scale [--brokers 1 3] [--producers 2] [--txn-producers 1] [--consumers 1]
[--partitions 6] [--seconds 8] [--no-embedded]`` (also ``python -m bench.cluster_scale``; issue 28)

Does cluster mode scale with brokers? One PostgreSQL server (``oncelog.testing.pgserver``: fsync
and synchronous_commit on) and B ``oncelog broker --store …`` processes on a fresh database per
configuration, plus one embedded broker (no store) as the reference. In every configuration the
same load runs at once, each client in its own process (so the clients' CPU is theirs alone):

* N confluent-kafka producers: idempotent, acks=all, linger 5 ms, 1 MB batches, 100-byte records
  sent round-robin to the P partitions of topic ``load`` (``bench.clients.producer``);
* M transactional producers committing 100 records over 4 partitions of topic ``txn``, back to
  back (each transaction timed from ``begin_transaction`` to the return of ``commit_transaction``);
* K read_committed consumers reading ``load`` from its start (assigned, no group).

Over one window of ``--seconds`` (after every client is connected and has written once):
acknowledged produce records/s, committed transactions/s and their p50/p99, consumed records/s;
CPU seconds per second of each broker and of its busiest thread (by name), of the clients (all
worker processes) and of their librdkafka broker threads (``rdk:broker*``: where a client that
spins on a slow answer burns its CPU, broker/pipelining.py), of PostgreSQL (the postmaster and
its children); database COMMITs/s (``pg_stat_database.xact_commit``), WAL MB/s
(``pg_current_wal_lsn`` delta) and WAL fsyncs/s (``pg_stat_wal``). Derived: records per
broker-CPU-second, records per COMMIT, client CPU microseconds per produced record, and B=b/B=1.

On a small shared machine the absolute figures mean little: compare the relative ones, and the
configurations of one run (they run one after the other, the load average is printed).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from bench.common import cpu_seconds, drop_database, pg_and_workdir, pg_processes, stop_brokers

RECORD = 100
TXN_RECORDS = 100
TXN_PARTITIONS = 4


# -- the client processes (spawned: librdkafka must not cross a fork) ------------------------------

def _rdk_cpu() -> float:
    """CPU seconds of this process's librdkafka broker threads so far."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if not f.read().startswith("rdk:broker"):
                    continue
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            pass
    return total


def _worker(kind: str, bootstrap: str, topic: str, partitions: int, t_start: float, seconds: float,
            q: Any) -> None:
    """One client: wait for ``t_start`` (wall clock), work for ``seconds``, put its report."""
    from bench import clients

    try:
        if kind == "produce":
            out = _produce(clients, bootstrap, topic, partitions, t_start, seconds)
        elif kind == "txn":
            out = _transactions(clients, bootstrap, topic, t_start, seconds)
        else:
            out = _consume(clients, bootstrap, topic, partitions, t_start, seconds)
        q.put((kind, out))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the run
        q.put((kind, {"error": f"{type(exc).__name__}: {exc}"}))


def _produce(clients: Any, bootstrap: str, topic: str, partitions: int, t_start: float, seconds: float) -> dict:
    p = clients.producer(bootstrap, "idempotent")
    cb = clients._Failures()
    value = b"x" * RECORD
    clients._put(p, topic, value, 0, cb, time.monotonic() + 60)
    if p.flush(60):
        raise TimeoutError("warm-up record not acknowledged")
    time.sleep(max(0.0, t_start - time.time()))
    rdk0 = _rdk_cpu()
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        clients._put(p, topic, value, i % partitions, cb, end + 120)
        i += 1
        if i % 1000 == 0:
            p.poll(0)
    rdk1 = _rdk_cpu()
    left = p.flush(120)
    cb.check()
    if left:
        raise TimeoutError(f"{left} records not acknowledged")
    return {"records": i, "rdk_cpu": rdk1 - rdk0}


def _transactions(clients: Any, bootstrap: str, topic: str, t_start: float, seconds: float) -> dict:
    p = clients.producer(bootstrap, "transactional", **{"linger.ms": 0})
    cb = clients._Failures()
    value = b"t" * RECORD
    p.init_transactions(60)
    time.sleep(max(0.0, t_start - time.time()))
    end = time.monotonic() + seconds
    lat: list[float] = []
    while time.monotonic() < end:
        t0 = time.perf_counter()
        p.begin_transaction()
        for i in range(TXN_RECORDS):
            clients._put(p, topic, value, i % TXN_PARTITIONS, cb, end + 60)
        p.commit_transaction(60)
        lat.append(time.perf_counter() - t0)
    cb.check()
    return {"latencies": lat}


def _consume(clients: Any, bootstrap: str, topic: str, partitions: int, t_start: float, seconds: float) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    c = clients.consumer(bootstrap, "read_committed")
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        c.consume(num_messages=1, timeout=10)  # connected
        time.sleep(max(0.0, t_start - time.time()))
        end = time.monotonic() + seconds
        got = 0
        while time.monotonic() < end:
            for m in c.consume(num_messages=10_000, timeout=0.2):
                if m.error() is None:
                    got += 1
        return {"records": got}
    finally:
        c.close()


# -- measuring -------------------------------------------------------------------------------------

def _threads(pid: int) -> dict[str, float]:
    """CPU seconds per thread of ``pid``, keyed "name/tid"."""
    out: dict[str, float] = {}
    try:
        for t in psutil.Process(pid).threads():
            try:
                with open(f"/proc/{pid}/task/{t.id}/comm") as f:
                    name = f.read().strip()
            except OSError:
                name = "?"
            out[f"{name}/{t.id}"] = t.user_time + t.system_time
    except psutil.Error:
        pass
    return out


def _pg_snapshot(conn: Any, db: str) -> dict:
    commits = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (db,)).fetchone()[0]
    (wal_sync,) = conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
    lsn = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0]
    return {"commits": commits, "wal_sync": wal_sync, "lsn": int(lsn)}


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def measure(pg: Any, brokers: int, args: argparse.Namespace, work: Path, baseline: Path | None = None) -> dict:
    """One configuration: ``brokers`` on a fresh database of ``pg`` (0: one embedded broker);
    ``baseline``: the brokers run that source tree's ``src`` instead (the clients do not change)."""
    import psycopg

    from bench.systems import create_topic_admin, wait_leaders
    from oncelog.process import BrokerProcess

    label = ("embedded" if brokers == 0 else f"B={brokers}") + (" (baseline)" if baseline else "")
    env = {"PYTHONPATH": str(baseline / "src")} if baseline else None
    overrides = {} if baseline else dict(kv.split("=", 1) for kv in args.override)
    db = f"scale_{brokers}_{time.time_ns()}"
    dsn = pg.create_database(db) if brokers else None
    n = max(brokers, 1)
    procs = [BrokerProcess(work / f"{db}-b{i}", node_id=i, store=dsn, log_path=work / f"{db}-b{i}.log",
                           env=env, overrides=overrides)
             for i in range(1, n + 1)]
    stats = psycopg.connect(pg.dsn(db), autocommit=True, connect_timeout=10) if brokers else None
    ctx = mp.get_context("spawn")
    workers: list[Any] = []
    try:
        for b in procs:
            b.start(timeout=60)
        bootstrap = ",".join(b.bootstrap for b in procs)
        create_topic_admin(bootstrap, "load", args.partitions)
        wait_leaders(bootstrap, "load", args.partitions)
        if args.txn_producers:
            create_topic_admin(bootstrap, "txn", TXN_PARTITIONS)
            wait_leaders(bootstrap, "txn", TXN_PARTITIONS)
        q = ctx.Queue()
        t_start = time.time() + args.settle
        kinds = ["produce"] * args.producers + ["txn"] * args.txn_producers + ["consume"] * args.consumers
        for kind in kinds:
            topic = "txn" if kind == "txn" else "load"
            w = ctx.Process(target=_worker, args=(kind, bootstrap, topic, args.partitions, t_start, args.seconds, q))
            w.start()
            workers.append(w)
        time.sleep(max(0.0, t_start - time.time()))
        bp = [psutil.Process(b.pid) for b in procs]
        wp = [psutil.Process(w.pid) for w in workers]
        pgp = pg_processes(pg)
        th0 = [_threads(b.pid) for b in procs]
        b0, w0, p0 = [cpu_seconds([p]) for p in bp], cpu_seconds(wp), cpu_seconds(pgp)
        s0 = _pg_snapshot(stats, db) if stats else None
        t0 = time.monotonic()
        time.sleep(args.seconds)
        el = time.monotonic() - t0
        th1 = [_threads(b.pid) for b in procs]
        b1, w1, p1 = [cpu_seconds([p]) for p in bp], cpu_seconds(wp), cpu_seconds(pg_processes(pg))
        s1 = _pg_snapshot(stats, db) if stats else None
        reports: dict[str, list[dict]] = {"produce": [], "txn": [], "consume": []}
        for _ in workers:
            kind, out = q.get(timeout=args.seconds + 240)
            if "error" in out:
                raise RuntimeError(f"{label}: a {kind} client failed: {out['error']}")
            reports[kind].append(out)
        for w in workers:
            w.join(30)
        busiest = []
        for a, b in zip(th0, th1):
            deltas = {k: v - a.get(k, 0.0) for k, v in b.items()}
            k = max(deltas, key=deltas.__getitem__)
            busiest.append((k.split("/")[0], deltas[k] / el))
        records = sum(r["records"] for r in reports["produce"])
        lat = [x for r in reports["txn"] for x in r["latencies"]]
        cpu_brokers = sum(b - a for a, b in zip(b0, b1)) / el
        commits = (s1["commits"] - s0["commits"]) if s0 else 0
        res = {
            "config": label, "brokers": brokers, "seconds": el,
            "records_per_s": records / el,
            "txn_per_s": len(lat) / el, "txn_p50_ms": _pct(lat, 0.5) * 1e3, "txn_p99_ms": _pct(lat, 0.99) * 1e3,
            "consume_per_s": sum(r["records"] for r in reports["consume"]) / el,
            "cpu_brokers": cpu_brokers, "cpu_each": [(b - a) / el for a, b in zip(b0, b1)], "busiest": busiest,
            "cpu_clients": (w1 - w0) / el, "cpu_rdk": sum(r["rdk_cpu"] for r in reports["produce"]) / el,
            "cpu_postgres": (p1 - p0) / el if brokers else 0.0,
            "commits_per_s": commits / el,
            "wal_mb_per_s": (s1["lsn"] - s0["lsn"]) / el / 1e6 if s0 else 0.0,
            "wal_fsyncs_per_s": (s1["wal_sync"] - s0["wal_sync"]) / el if s0 else 0.0,
        }
        res["records_per_broker_cpu_s"] = res["records_per_s"] / cpu_brokers if cpu_brokers else 0.0
        res["records_per_commit"] = records / commits if commits else 0.0
        res["client_us_per_record"] = (w1 - w0) / records * 1e6 if records else 0.0
        res["rdk_us_per_record"] = res["cpu_rdk"] * el / records * 1e6 if records else 0.0
        return res
    finally:
        for w in workers:
            if w.is_alive():
                w.kill()
                w.join(10)
        if stats is not None:
            stats.close()
        stop_brokers(procs)
        if brokers:
            drop_database(pg, db)


COLUMNS = [
    ("records_per_s", "produce records/s", "{:,.0f}"),
    ("cpu_brokers", "broker CPU (cores, all)", "{:.2f}"),
    ("busiest", "busiest broker thread (cores)", None),
    ("cpu_clients", "client CPU (cores)", "{:.2f}"),
    ("client_us_per_record", "client CPU µs/record", "{:.2f}"),
    ("rdk_us_per_record", "of which rdk:broker µs/record", "{:.2f}"),
    ("cpu_postgres", "PG CPU (cores)", "{:.2f}"),
    ("commits_per_s", "COMMITs/s", "{:,.0f}"),
    ("wal_mb_per_s", "WAL MB/s", "{:.1f}"),
    ("txn_per_s", "txn/s", "{:,.1f}"),
    ("txn_p50_ms", "txn p50 ms", "{:.1f}"),
    ("txn_p99_ms", "txn p99 ms", "{:.1f}"),
    ("consume_per_s", "consume records/s", "{:,.0f}"),
    ("records_per_broker_cpu_s", "records per broker-CPU-s", "{:,.0f}"),
    ("records_per_commit", "records per COMMIT", "{:,.0f}"),
]


def _cell(r: dict, key: str, fmt: str | None) -> str:
    if key == "busiest":
        name, cores = max(r["busiest"], key=lambda x: x[1])
        return f"{cores:.2f} ({name})"
    if r["brokers"] == 0 and key in ("cpu_postgres", "commits_per_s", "wal_mb_per_s", "records_per_commit"):
        return "—"
    return fmt.format(r[key])  # type: ignore[union-attr]


def table(results: list[dict]) -> str:
    """The results as a Markdown table, one row per configuration (medians of repeats)."""
    configs: list[str] = []
    for r in results:
        if r["config"] not in configs:
            configs.append(r["config"])
    rows = []
    for c in configs:
        rs = [r for r in results if r["config"] == c]
        med = dict(rs[0])
        for k, _l, fmt in COLUMNS:
            if fmt is not None:
                med[k] = statistics.median(r[k] for r in rs)
        rows.append(med)
    lines = ["| config | " + " | ".join(label for _k, label, _f in COLUMNS) + " |",
             "|---|" + "---:|" * len(COLUMNS)]
    for r in rows:
        lines.append(f"| {r['config']} | " + " | ".join(_cell(r, k, f) for k, _l, f in COLUMNS) + " |")
    rel = []
    for r in rows:
        same = [x for x in rows if x["config"].endswith("(baseline)") == r["config"].endswith("(baseline)")]
        one = next((x for x in same if x["brokers"] == 1), None)
        emb = next((x for x in same if x["brokers"] == 0), None)
        if r["brokers"] > 1 and one is not None and one["records_per_s"]:
            txn = f", txn/s {r['txn_per_s'] / one['txn_per_s']:.2f}×" if one["txn_per_s"] else ""
            rel.append(f"{r['config']}/{one['config']}: produce {r['records_per_s'] / one['records_per_s']:.2f}×{txn}")
        if r["brokers"] > 0 and emb is not None and emb["client_us_per_record"]:
            rel.append(f"{r['config']}: client CPU per record {r['client_us_per_record'] / emb['client_us_per_record']:.2f}× "
                       f"embedded's (rdk:broker threads {r['rdk_us_per_record'] / max(emb['rdk_us_per_record'], 1e-9):.2f}×)")
    return "\n".join(lines) + ("\n\n" + "\n".join(f"- {x}" for x in rel if x) if rel else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench --cluster-scale", description=__doc__.split("\n\n")[1])
    ap.add_argument("--brokers", type=int, nargs="+", default=[1, 3], help="cluster sizes on PostgreSQL")
    ap.add_argument("--no-embedded", action="store_true", help="leave out the embedded reference broker")
    ap.add_argument("--producers", type=int, default=2, help="idempotent producer processes (N)")
    ap.add_argument("--txn-producers", type=int, default=1, help="transactional producer processes (M)")
    ap.add_argument("--consumers", type=int, default=1, help="read_committed consumer processes (K)")
    ap.add_argument("--partitions", type=int, default=6, help="partitions of the produce topic (P)")
    ap.add_argument("--seconds", type=float, default=8.0, help="the measured window per configuration")
    ap.add_argument("--settle", type=float, default=4.0, help="seconds for the clients to connect before the window")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--baseline", type=Path, metavar="DIR",
                    help="also run the brokers from this source tree (e.g. `git archive main src`), each "
                         "configuration right before the current one")
    ap.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker property for the current tree's brokers (not the baseline's)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    load0 = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    configs = ([] if args.no_embedded else [0]) + args.brokers
    results: list[dict] = []
    with pg_and_workdir("oncelog-scale-") as (pg, work):
        for rep in range(args.repeat):
            for b in configs:
                for tree in ([args.baseline] if args.baseline else []) + [None]:
                    r = measure(pg, b, args, work, tree)
                    results.append(r)
                    print(f"rep {rep} {r['config']}: " + ", ".join(
                        f"{label} {_cell(r, k, f)}" for k, label, f in COLUMNS), file=sys.stderr, flush=True)
    load1 = os.getloadavg()
    print(f"Measured {started} by `python -m bench --cluster-scale --brokers {' '.join(map(str, args.brokers))} "
          f"--producers {args.producers} --txn-producers {args.txn_producers} --consumers {args.consumers} "
          f"--partitions {args.partitions} --seconds {args.seconds:g}`: {os.cpu_count()} cores, load average "
          f"{load0[0]:.1f} before, {load1[0]:.1f} after; PostgreSQL, brokers and clients on this machine; "
          f"{'median of ' + str(args.repeat) if args.repeat > 1 else 'one run'}.\n")
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps({"started": started, "load": [load0, load1], "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
