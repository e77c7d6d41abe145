"""``python -m bench --cluster-scale [--brokers 1 3] [--producers 2] [--txn-producers 1] [--consumers 1]
[--partitions 6] [--seconds 8] [--no-embedded] [--diskless [--interval 250] [--latency-intervals 50 100 250]
[--latency-rate 500] [--latency-seconds 8]]`` (also ``python -m bench.cluster_scale``; issue 28; ``--diskless``: issue 29,
``make bench-diskless``)

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

Produce records/s counts the records acknowledged within the window (sent, less those still
queued or in flight at its end: a producer's queue holds up to 64 MB).

``--diskless`` (issue 29) starts a SeaweedFS (``oncelog.testing.seaweedfs``) and runs every
``--brokers`` size again with both topics created ``diskless.enable=true`` (objects closed every
``--interval`` ms), each broker with ``metrics.listen`` so the window's object-store requests
come from its counters (``oncelog_diskless_object_requests_total``: every attempt, as a cloud
store bills them). Added per configuration: payload MB/s (record values), PostgreSQL WAL bytes
per payload byte, PUTs and GETs per second and per payload MB, other requests, SeaweedFS CPU,
and the request cost per TB written at S3 Standard's list prices (``S3_PUT_PER_1000``). Then:

* a cold read, after the smallest diskless configuration: its brokers restarted (read caches
  empty), one read_committed consumer reads ``load`` from offset 0 to the end: records/s, GETs
  per MB read (a consumer at the tail reads the writer's cache: no GET);
* latency, each configuration alone on fresh brokers (``bench.diskless_latency.measure``): one
  idempotent confluent-kafka producer (librdkafka's defaults otherwise) at ``--latency-rate``
  records/s of 1 KiB over 6 partitions, and one read_committed consumer: produce p50/p99
  (produce() to its delivery report), end-to-end p50/p99 (send to arrival), visibility
  (acknowledgement to arrival) and where a batch's time went, for the embedded broker, the
  PostgreSQL engine (B=1) and diskless topics at every ``--brokers`` size and each of
  ``--latency-intervals``.

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
    acked = i - len(p)  # acknowledged in the window: what was sent less what is still queued or in flight
    left = p.flush(120)
    cb.check()
    if left:
        raise TimeoutError(f"{left} records not acknowledged")
    return {"records": acked, "sent": i, "rdk_cpu": rdk1 - rdk0}


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


LAT_RATE = 500  # records/s of the latency producer (``--latency-rate``)


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


def _scrape_diskless(addresses: list[str]) -> dict[str, float]:
    """The brokers' ``oncelog_diskless_*`` samples from /metrics, summed over the brokers:
    ``requests_PUT``, ``requests_GET``, ..., ``bytes_put``, ``bytes_get``, ``cache_hit``, ``cache_miss``,
    ``batches`` (committed); and their Produce requests' count and time (``produce_count``,
    ``produce_seconds``: arrival to encoded answer)."""
    import urllib.request

    out: dict[str, float] = {}
    for addr in addresses:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=30) as resp:
            text = resp.read().decode()
        for line in text.splitlines():
            if not line.startswith(("oncelog_diskless_", "kafka_network_requestmetrics_totaltime_seconds_")):
                continue
            name, _, val = line.rpartition(" ")
            if "{" in name:
                base, labels = name[:-1].split("{", 1)
                label = labels.split('"')[1]
            else:
                base, label = name, ""
            key = {"oncelog_diskless_object_requests_total": f"requests_{label}",
                   "oncelog_diskless_object_bytes_total": f"bytes_{label}",
                   "oncelog_diskless_cache_lookups_total": f"cache_{label}",
                   "oncelog_diskless_object_retries_total": "retries",
                   "oncelog_diskless_writer_batches_total": "batches"}.get(base)
            if base.startswith("kafka_network_requestmetrics_totaltime_seconds_") and 'request="Produce"' in name:
                key = {"count": "produce_count", "sum": "produce_seconds"}.get(base.rsplit("_", 1)[1])
            if key is not None:
                out[key] = out.get(key, 0.0) + float(val)
    return out


def _restart(b: Any, timeout: float = 60.0) -> None:
    """Stop ``b`` (SIGTERM) and start it again, retrying while the store still holds its old
    session; bounded by ``timeout``."""
    b.stop(timeout=30)
    deadline = time.monotonic() + timeout
    while True:
        try:
            b.start(timeout=max(5.0, deadline - time.monotonic()))
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _cold_read(procs: list[Any], metrics: list[str], partitions: int, limit_s: float) -> dict:
    """Restart the brokers (their read caches empty) and read topic ``load`` from its start with
    a read_committed consumer (this process) up to its end offsets seen first, at most
    ``limit_s``: records/s and MB/s read, GETs and GET bytes per MB read."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

    from bench import clients
    from bench.systems import wait_leaders

    for b in procs:
        _restart(b)
    bootstrap = ",".join(b.bootstrap for b in procs)
    wait_leaders(bootstrap, "load", partitions, timeout=60)
    c = clients.consumer(bootstrap, "read_committed")
    try:
        ends: dict[int, int] = {}
        deadline = time.monotonic() + 60
        while len(ends) < partitions:  # the restarted leader opens its partitions (bounded: 60 s)
            p = len(ends)
            try:
                ends[p] = c.get_watermark_offsets(TopicPartition("load", p), timeout=10)[1]
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        want = sum(ends.values())
        c.assign([TopicPartition("load", p, OFFSET_BEGINNING) for p in range(partitions)])
        got = nbytes = 0
        t0 = time.monotonic()
        while got < want and time.monotonic() - t0 < limit_s:
            for m in c.consume(num_messages=10_000, timeout=0.5):
                if m.error() is None:
                    got += 1
                    nbytes += len(m.value())
        el = time.monotonic() - t0
    finally:
        c.close()
    d = _scrape_diskless(metrics)
    mb = nbytes / 1e6
    return {"cold_records": got, "cold_of": want, "cold_records_per_s": got / el, "cold_mb_per_s": mb / el,
            "cold_gets": d.get("requests_GET", 0.0), "cold_gets_per_mb": d.get("requests_GET", 0.0) / mb if mb else 0.0,
            "cold_get_bytes_per_byte": d.get("bytes_get", 0.0) / nbytes if nbytes else 0.0}


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def measure(pg: Any, brokers: int, args: argparse.Namespace, work: Path, baseline: Path | None = None,
            seaweed: Any = None, interval_ms: int | None = None, cold_read: bool = False) -> dict:
    """One configuration: ``brokers`` on a fresh database of ``pg`` (0: one embedded broker);
    ``baseline``: the brokers run that source tree's ``src`` instead (the clients do not change);
    ``seaweed``: the topics are diskless (``diskless.enable=true``) on that SeaweedFS server,
    objects closed every ``interval_ms``; ``cold_read``: after the window, restart the brokers
    and read the topic from its start (``_cold_read``: GETs per MB)."""
    import psycopg

    from bench.systems import create_topic_admin, wait_leaders
    from oncelog.process import BrokerProcess, free_port

    diskless = seaweed is not None
    label = ("embedded" if brokers == 0 else f"{'diskless ' if diskless else ''}B={brokers}") + (
        " (baseline)" if baseline else "")
    env = {"PYTHONPATH": str(baseline / "src")} if baseline else {}
    overrides = {} if baseline else dict(kv.split("=", 1) for kv in args.override)
    db = f"scale_{'dl' if diskless else 'pg'}{brokers}_{time.time_ns()}"
    dsn = pg.create_database(db) if brokers else None
    n = max(brokers, 1)
    metrics: list[str] = []
    if diskless:
        metrics = [f"127.0.0.1:{free_port()}" for _ in range(n)]
    if diskless:
        env.update(seaweed.env())
        overrides.update({"diskless.storage.url": f"s3://{seaweed.bucket}/{db}",
                          "diskless.storage.endpoint": seaweed.endpoint,
                          "diskless.commit.interval.ms": str(interval_ms)})
    topic_config = {"diskless.enable": "true"} if diskless else None
    procs = [BrokerProcess(work / f"{db}-b{i}", node_id=i, store=dsn, log_path=work / f"{db}-b{i}.log",
                           env=env or None,
                           overrides={**overrides, **({"metrics.listen": metrics[i - 1]} if metrics else {})})
             for i in range(1, n + 1)]
    stats = psycopg.connect(pg.dsn(db), autocommit=True, connect_timeout=10) if brokers else None
    ctx = mp.get_context("spawn")
    workers: list[Any] = []
    try:
        for b in procs:
            b.start(timeout=60)
        bootstrap = ",".join(b.bootstrap for b in procs)
        create_topic_admin(bootstrap, "load", args.partitions, topic_config)
        wait_leaders(bootstrap, "load", args.partitions)
        if args.txn_producers:
            create_topic_admin(bootstrap, "txn", TXN_PARTITIONS, topic_config)
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
        swp = [psutil.Process(seaweed.proc.pid)] if diskless else []
        th0 = [_threads(b.pid) for b in procs]
        b0, w0, p0 = [cpu_seconds([p]) for p in bp], cpu_seconds(wp), cpu_seconds(pgp)
        o0 = cpu_seconds(swp) if swp else 0.0
        s0 = _pg_snapshot(stats, db) if stats else None
        d0 = _scrape_diskless(metrics) if metrics else {}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        el = time.monotonic() - t0
        th1 = [_threads(b.pid) for b in procs]
        b1, w1, p1 = [cpu_seconds([p]) for p in bp], cpu_seconds(wp), cpu_seconds(pg_processes(pg))
        o1 = cpu_seconds(swp) if swp else 0.0
        s1 = _pg_snapshot(stats, db) if stats else None
        d1 = _scrape_diskless(metrics) if metrics else {}
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
        payload = (records + len(lat) * TXN_RECORDS) * RECORD  # record values written in the window
        dd = {k: v - d0.get(k, 0.0) for k, v in d1.items()}
        res = {
            "config": label, "brokers": brokers, "engine": "diskless" if diskless else ("pg" if brokers else "embedded"),
            "interval_ms": interval_ms, "seconds": el,
            "records_per_s": records / el,
            "txn_per_s": len(lat) / el, "txn_p50_ms": _pct(lat, 0.5) * 1e3, "txn_p99_ms": _pct(lat, 0.99) * 1e3,
            "consume_per_s": sum(r["records"] for r in reports["consume"]) / el,
            "cpu_brokers": cpu_brokers, "cpu_each": [(b - a) / el for a, b in zip(b0, b1)], "busiest": busiest,
            "cpu_clients": (w1 - w0) / el, "cpu_rdk": sum(r["rdk_cpu"] for r in reports["produce"]) / el,
            "cpu_postgres": (p1 - p0) / el if brokers else 0.0,
            "commits_per_s": commits / el,
            "wal_mb_per_s": (s1["lsn"] - s0["lsn"]) / el / 1e6 if s0 else 0.0,
            "wal_fsyncs_per_s": (s1["wal_sync"] - s0["wal_sync"]) / el if s0 else 0.0,
            "payload_mb_per_s": payload / el / 1e6,
            "wal_per_payload": (s1["lsn"] - s0["lsn"]) / payload if s0 and payload else 0.0,
            "cpu_objstore": (o1 - o0) / el,
            "puts_per_s": dd.get("requests_PUT", 0.0) / el, "gets_per_s": dd.get("requests_GET", 0.0) / el,
            "puts_per_mb": dd.get("requests_PUT", 0.0) / (payload / 1e6) if payload else 0.0,
            "gets_per_mb": dd.get("requests_GET", 0.0) / (payload / 1e6) if payload else 0.0,
            "other_requests_per_s": sum(v for k, v in dd.items() if k.startswith("requests_")
                                        and k not in ("requests_PUT", "requests_GET")) / el,
            "put_mb_per_s": dd.get("bytes_put", 0.0) / el / 1e6,
            "cache_hits": dd.get("cache_hit", 0.0), "cache_misses": dd.get("cache_miss", 0.0),
            "retries": dd.get("retries", 0.0),
        }
        res["records_per_broker_cpu_s"] = res["records_per_s"] / cpu_brokers if cpu_brokers else 0.0
        res["records_per_commit"] = records / commits if commits else 0.0
        res["client_us_per_record"] = (w1 - w0) / records * 1e6 if records else 0.0
        res["rdk_us_per_record"] = res["cpu_rdk"] * el / records * 1e6 if records else 0.0
        if cold_read:
            res.update(_cold_read(procs, metrics, args.partitions, limit_s=60.0))
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
        one = next((x for x in same if x["brokers"] == 1 and x.get("engine") == r.get("engine")), None)
        emb = next((x for x in same if x["brokers"] == 0), None)
        if r["brokers"] > 1 and one is not None and one["records_per_s"]:
            txn = f", txn/s {r['txn_per_s'] / one['txn_per_s']:.2f}×" if one["txn_per_s"] else ""
            rel.append(f"{r['config']}/{one['config']}: produce {r['records_per_s'] / one['records_per_s']:.2f}×{txn}")
        if r["brokers"] > 0 and emb is not None and emb["records_per_s"]:
            rel.append(f"{r['config']}/embedded: produce {r['records_per_s'] / emb['records_per_s']:.2f}×")
        if r["brokers"] > 0 and emb is not None and emb["client_us_per_record"]:
            rel.append(f"{r['config']}: client CPU per record {r['client_us_per_record'] / emb['client_us_per_record']:.2f}× "
                       f"embedded's (rdk:broker threads {r['rdk_us_per_record'] / max(emb['rdk_us_per_record'], 1e-9):.2f}×)")
    return "\n".join(lines) + ("\n\n" + "\n".join(f"- {x}" for x in rel if x) if rel else "")


#: S3 Standard, US East (N. Virginia), from https://aws.amazon.com/s3/pricing/ (the published price
#: list; these figures are the ones it has shown since 2018 — check it before quoting a bill):
#: PUT, COPY, POST, LIST per 1,000 requests; GET, SELECT and all other requests per 1,000
S3_PUT_PER_1000 = 0.005
S3_GET_PER_1000 = 0.0004
SECONDS_PER_MONTH = 30 * 86400


def diskless_table(results: list[dict]) -> str:
    """What the object store and PostgreSQL carry per configuration (the engines side by side),
    and the object-store request cost on paper at S3 Standard's list prices."""
    configs: list[str] = []
    for r in results:
        if r["config"] not in configs and "records_per_s" in r:
            configs.append(r["config"])
    lines = ["| config | records/s | payload MB/s | WAL bytes / payload byte | COMMITs/s | PUTs/s | PUTs / MB "
             "| GETs/s | other requests/s | broker CPU | PG CPU | SeaweedFS CPU | records per broker-CPU-s "
             "| all CPU (cores) | S3 requests $ per TB written |",
             "|---|" + "---:|" * 14]
    for c in configs:
        rs = [r for r in results if r["config"] == c]
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0] if isinstance(rs[0][k], (int, float))
               and not isinstance(rs[0][k], bool) and rs[0][k] is not None}
        med.update(config=c, engine=rs[0]["engine"])
        dl = med["engine"] == "diskless"
        na = "—"
        cost = med["puts_per_mb"] * 1e6 / 1000 * S3_PUT_PER_1000 + med["gets_per_mb"] * 1e6 / 1000 * S3_GET_PER_1000
        lines.append(
            f"| {c} | {med['records_per_s']:,.0f} | {med['payload_mb_per_s']:.1f} | "
            + (f"{med['wal_per_payload']:.3f} | {med['commits_per_s']:,.0f}" if med["brokers"] else f"{na} | {na}")
            + (f" | {med['puts_per_s']:.1f} | {med['puts_per_mb']:.3f} | {med['gets_per_s']:.1f} | "
               f"{med['other_requests_per_s']:.2f}" if dl else f" | {na} | {na} | {na} | {na}")
            + f" | {med['cpu_brokers']:.2f} | " + (f"{med['cpu_postgres']:.2f}" if med["brokers"] else na)
            + f" | {med['cpu_objstore']:.2f}" * dl + f" | {na}" * (not dl)
            + f" | {med['records_per_broker_cpu_s']:,.0f} | "
            + f"{med['cpu_brokers'] + med['cpu_clients'] + med['cpu_postgres'] + med['cpu_objstore']:.2f} | "
            + (f"${cost:.2f}" if dl else na) + " |")
    out = "\n".join(lines)
    cold = [r for r in results if "cold_gets_per_mb" in r]
    for r in cold:
        gcost = r["cold_gets_per_mb"] * 1e6 / 1000 * S3_GET_PER_1000
        out += (f"\n\nCold read ({r['config']}, brokers restarted, read_committed from offset 0): "
                f"{r['cold_records']:,} of {r['cold_of']:,} records, {r['cold_records_per_s']:,.0f} records/s "
                f"({r['cold_mb_per_s']:.1f} MB/s of values), {r['cold_gets']:.0f} GETs = "
                f"{r['cold_gets_per_mb']:.3f} GETs per MB read ({r['cold_get_bytes_per_byte']:.2f} bytes GET per "
                f"value byte): ${gcost:.2f} of GETs per TB read at S3 list prices.")
    ivs = sorted({r["interval_ms"] for r in results if r.get("engine") == "diskless" and r.get("interval_ms")})
    if ivs:
        out += "\n\nObject-store requests on paper (S3 Standard list prices: PUT $%g, GET $%g per 1,000): " % (
            S3_PUT_PER_1000, S3_GET_PER_1000)
        out += "; ".join(f"a broker written to without pause closes {1000 / iv:g} objects/s at {iv} ms = "
                         f"{1000 / iv * SECONDS_PER_MONTH / 1e6:.1f} M PUTs = "
                         f"${1000 / iv * SECONDS_PER_MONTH / 1000 * S3_PUT_PER_1000:,.0f} per broker-month"
                         for iv in ivs) + (", plus one early close for each transaction marker that joins an open "
                                           "object; at the other end, objects full at diskless.object.max.bytes "
                                           "(8 MiB) are 0.12 PUTs per MB = $%.2f per TB written."
                                           % (1e6 / (8 << 20) * 1e6 / 1000 * S3_PUT_PER_1000))
    return out


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
    ap.add_argument("--diskless", action="store_true",
                    help="also run every --brokers size with diskless topics (diskless.enable=true) on a "
                         "SeaweedFS started here, a cold read of the smallest, and the latency rows")
    ap.add_argument("--interval", type=int, default=250, metavar="MS",
                    help="diskless.commit.interval.ms of the diskless throughput configurations")
    ap.add_argument("--latency-intervals", type=int, nargs="+", default=[50, 100, 250], metavar="MS",
                    help="commit intervals of the diskless latency rows (with --diskless), at every --brokers size")
    ap.add_argument("--latency-rate", type=int, default=LAT_RATE, help="records/s of the latency producer")
    ap.add_argument("--latency-seconds", type=float, default=8.0, help="the latency producer's window")
    ap.add_argument("--no-latency", action="store_true", help="leave out the latency rows")
    ap.add_argument("--no-cold-read", action="store_true", help="leave out the cold read")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    load0 = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    configs = ([] if args.no_embedded else [0]) + args.brokers
    results: list[dict] = []
    lat_results: list[dict] = []
    seaweed = None
    if args.diskless:
        from oncelog.testing.seaweedfs import SeaweedServer

        seaweed = SeaweedServer(volumes=256).start()  # gigabytes over the configurations: room for 16 GB
    try:
        with pg_and_workdir("oncelog-scale-") as (pg, work):
            for rep in range(args.repeat):
                for b in configs:
                    for tree in ([args.baseline] if args.baseline else []) + [None]:
                        r = measure(pg, b, args, work, tree)
                        results.append(r)
                        print(f"rep {rep} {r['config']}: " + ", ".join(
                            f"{label} {_cell(r, k, f)}" for k, label, f in COLUMNS), file=sys.stderr, flush=True)
                for i, b in enumerate(args.brokers if seaweed is not None else []):
                    r = measure(pg, b, args, work, None, seaweed, args.interval,
                                cold_read=(i == 0 and rep == 0 and not args.no_cold_read))
                    results.append(r)
                    print(f"rep {rep} {r['config']}: " + ", ".join(
                        f"{label} {_cell(r, k, f)}" for k, label, f in COLUMNS)
                        + f", WAL/payload {r['wal_per_payload']:.3f}, PUTs/s {r['puts_per_s']:.1f}, "
                        f"GETs/s {r['gets_per_s']:.1f}", file=sys.stderr, flush=True)
            if seaweed is not None and not args.no_latency:
                from bench import diskless_latency as dl

                lat_configs = [(0, None, False), (1, None, False)] + [
                    (b, iv, True) for b in args.brokers for iv in args.latency_intervals]
                for b, iv, on_store in lat_configs:
                    r = dl.measure(pg, seaweed, work, b, iv, "confluent", "default", args.latency_rate,
                                   dl.LATENCY_RECORD, args.latency_seconds, diskless=on_store)
                    lat_results.append(r)
                    print(f"latency {dl._line(r)}", file=sys.stderr, flush=True)
    finally:
        if seaweed is not None:
            seaweed.close()
    load1 = os.getloadavg()
    dl_args = (f" --diskless --interval {args.interval} --latency-intervals "
               f"{' '.join(map(str, args.latency_intervals))} --latency-rate {args.latency_rate}") if args.diskless else ""
    print(f"Measured {started} by `python -m bench --cluster-scale --brokers {' '.join(map(str, args.brokers))} "
          f"--producers {args.producers} --txn-producers {args.txn_producers} --consumers {args.consumers} "
          f"--partitions {args.partitions} --seconds {args.seconds:g}{dl_args}`: {os.cpu_count()} cores, load average "
          f"{load0[0]:.1f} before, {load1[0]:.1f} after; PostgreSQL, brokers and clients on this machine; "
          f"{'median of ' + str(args.repeat) if args.repeat > 1 else 'one run'}.\n")
    print(table(results))
    if args.diskless:
        print("\n" + diskless_table(results))
    if lat_results:
        from bench import diskless_latency as dl

        print(f"\nLatency (bench.diskless_latency): one idempotent confluent-kafka producer (librdkafka's defaults "
              f"otherwise) at {args.latency_rate} records/s of {dl.LATENCY_RECORD} bytes over 6 partitions and one "
              "read_committed consumer, alone on the brokers; produce = produce() to its delivery report, end-to-end = "
              "send to arrival at the consumer, visible = acknowledgement to arrival; the rest: where a batch's time "
              "went, mean ms.\n")
        print(dl.table(lat_results))
    if args.json:
        args.json.write_text(json.dumps({"started": started, "load": [load0, load1], "results": results,
                                         "latency": lat_results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
