"""``python -m bench.produce_costs [--brokers 1 3] [--producers 2] [--seconds 8] [--repeat 2]
[--compare OLD_SRC NEW_SRC] [--profile FILE]``

Where cluster-mode produce CPU goes, per unit of work, and whether it scales per core. For each
configuration — ``0`` (one embedded broker, local files) or B brokers on one PostgreSQL (a fresh
database each) — 24 partitions and ``--producers`` confluent-kafka producers in processes of
their own (idempotent, acks=all, linger 5 ms, 1 MB batches, 100-byte values round-robin over the
partitions, as the device kit's ``scaleout.py``), flat out; over a ``--seconds`` window after a
warm-up:

* records/s (from the batch rows the window added), Produce requests/s (the brokers' request
  counters, ``metrics.listen``), batches/s (rows inserted, ``pg_stat_database``), COMMITs/s;
* CPU of the brokers and of PostgreSQL (the postmaster and its children);
* per unit: records per batch, batches per request and per COMMIT, broker µs per request and per
  batch, PostgreSQL µs per batch; records per (broker + PostgreSQL) core-second, and its ratio
  B=b/B=1 — a ratio of CPU, not of wall time, so it means something on a machine too small to
  show throughput scaling.

The embedded broker (``0``) has no store: only its requests/s and CPU per request are given.
``--compare OLD_SRC NEW_SRC``: every configuration run with the brokers of both source trees
(``PYTHONPATH``), alternated, ``--repeat`` times; the clients and PostgreSQL are the same.
``--profile FILE``: in the first run of the largest B (of NEW_SRC with ``--compare``), the first
broker is sampled by ``py-spy record`` over the window (collapsed stacks, idle frames left out)
into FILE, for where a Produce request's CPU goes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from bench.common import cpu_seconds, pg_processes

TOPIC, PARTITIONS, WARMUP_S = "load", 24, 4.0


def _producer(bootstrap: str, seconds: float, idx: int) -> None:
    """One producer process, flat out for ``seconds`` (spawned: librdkafka must not cross a fork)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "batch.size": 1_000_000, "queue.buffering.max.messages": 100_000,
                  "delivery.report.only.error": True})
    value, i, end = os.urandom(100), idx * 7, time.time() + seconds
    while time.time() < end:
        try:
            for _ in range(200):
                p.produce(TOPIC, value, partition=i % PARTITIONS)
                i += 1
        except BufferError:
            p.poll(0.002)
        p.poll(0)
    p.purge(in_queue=True, in_flight=False)
    p.flush(10)


def _produce_requests(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    m = re.search(r'kafka_network_requestmetrics_requests_total\{request="Produce"\} (\S+)', text)
    return float(m.group(1)) if m else 0.0


def measure(pg: Any, brokers: int, producers: int, seconds: float, src: str | None,
            profile: str | None = None) -> dict[str, Any]:
    """One configuration: ``brokers`` 0 is the embedded broker."""
    import psycopg
    from confluent_kafka.admin import AdminClient, NewTopic

    from oncelog.process import BrokerProcess, free_port

    embedded = brokers == 0
    name = f"costs_{brokers}_{time.time_ns() % 10**9}"
    dsn = pg.create_database(name)
    env = {"PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)} if src else None
    ports = [free_port() for _ in range(max(brokers, 1))]
    with tempfile.TemporaryDirectory(prefix="oncelog-costs-") as d:
        procs = [BrokerProcess(Path(d) / f"b{k}", node_id=None if embedded else k, store=None if embedded else dsn,
                               overrides={"metrics.listen": f"127.0.0.1:{ports[k - 1]}"}, env=env)
                 for k in range(1, len(ports) + 1)]
        clients: list[Any] = []
        try:
            for b in procs:
                b.start()
            boot = ",".join(b.bootstrap for b in procs)
            admin = AdminClient({"bootstrap.servers": boot})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(60)
            time.sleep(3)  # every partition led
            ctx = mp.get_context("spawn")
            clients = [ctx.Process(target=_producer, args=(boot, WARMUP_S + seconds + 1, i)) for i in range(producers)]
            for c in clients:
                c.start()
            time.sleep(WARMUP_S)
            bprocs, pgprocs = [psutil.Process(b.proc.pid) for b in procs], pg_processes(pg)
            spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(procs[0].proc.pid), "--duration",
                                    str(max(1, int(seconds))), "--format", "raw", "--output", profile],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) if profile else None
            with psycopg.connect(dsn, autocommit=True) as st:
                def snap() -> tuple:
                    st.execute("SELECT pg_stat_clear_snapshot()")
                    ins, com = st.execute("SELECT tup_inserted, xact_commit FROM pg_stat_database "
                                          "WHERE datname = current_database()").fetchone()
                    (rec,) = (0,) if embedded else st.execute(
                        "SELECT coalesce(sum(last_offset - base_offset + 1), 0)::int8 FROM oncelog_batch").fetchone()
                    return (time.monotonic(), sum(_produce_requests(p) for p in ports), cpu_seconds(bprocs),
                            cpu_seconds(pgprocs), ins, com, rec)

                t0, q0, b0, p0, i0, k0, r0 = snap()
                time.sleep(seconds)
                t1, q1, b1, p1, i1, k1, r1 = snap()
            if spy is not None:
                spy.wait(seconds + 30)
            w = t1 - t0
            req, bcpu = q1 - q0, b1 - b0
            out: dict[str, Any] = {"brokers": brokers, "requests_per_s": req / w, "broker_cores": bcpu / w,
                                   "broker_us_per_request": bcpu / req * 1e6 if req else 0.0}
            if not embedded:
                rec, bat, com, pcpu = r1 - r0, i1 - i0, k1 - k0, p1 - p0
                out.update(records_per_s=rec / w, batches_per_s=bat / w, commits_per_s=com / w, pg_cores=pcpu / w,
                           records_per_batch=rec / bat, batches_per_request=bat / req, batches_per_commit=bat / com,
                           broker_us_per_batch=bcpu / bat * 1e6, pg_us_per_batch=pcpu / bat * 1e6,
                           records_per_core_s=rec / (bcpu + pcpu))
            return out
        finally:
            for c in clients:
                c.join(60)
            for b in procs:
                try:
                    b.stop(timeout=30)
                except Exception:  # noqa: BLE001
                    b.kill()
            try:
                pg.drop_database(name)
            except Exception:  # noqa: BLE001
                pass


COLUMNS = (("records_per_s", "records/s", "{:,.0f}"), ("requests_per_s", "Produce req/s", "{:,.0f}"),
           ("batches_per_s", "batches/s", "{:,.0f}"), ("commits_per_s", "COMMITs/s", "{:,.0f}"),
           ("records_per_batch", "records/batch", "{:.1f}"), ("batches_per_request", "batches/req", "{:.1f}"),
           ("batches_per_commit", "batches/COMMIT", "{:.1f}"), ("broker_cores", "broker cores", "{:.2f}"),
           ("pg_cores", "PG cores", "{:.2f}"), ("broker_us_per_request", "broker µs/req", "{:.0f}"),
           ("broker_us_per_batch", "broker µs/batch", "{:.1f}"), ("pg_us_per_batch", "PG µs/batch", "{:.1f}"),
           ("records_per_core_s", "records per (broker+PG) core-s", "{:,.0f}"), ("ratio", "÷ B=1", "{:.2f}"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.produce_costs", description=__doc__.split("\n\n")[1])
    ap.add_argument("--brokers", type=int, nargs="+", default=[1, 3], help="0: the embedded broker")
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--compare", nargs=2, metavar=("OLD_SRC", "NEW_SRC"))
    ap.add_argument("--profile", help="py-spy's collapsed stacks of the first broker, one run, into this file")
    args = ap.parse_args(argv)
    from oncelog.testing.pgserver import PgServer

    trees: list[tuple[str, str | None]] = [("old", args.compare[0]), ("new", args.compare[1])] if args.compare \
        else [("this", None)]
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    print(f"{args.producers} producers, {PARTITIONS} partitions, {args.seconds:.0f} s windows, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    with PgServer() as pg:
        for i in range(args.repeat):
            for label, src in (trees if i % 2 == 0 else trees[::-1]):
                per: dict[int, dict[str, Any]] = {}
                profiled = args.profile if i == 0 and label == trees[-1][0] else None
                for b in args.brokers:
                    r = per[b] = measure(pg, b, args.producers, args.seconds, src,
                                         profiled if b == max(args.brokers) else None)
                    if b > 0 and 1 in per and "records_per_core_s" in per[1]:
                        r["ratio"] = r["records_per_core_s"] / per[1]["records_per_core_s"]
                    runs.setdefault((label, b), []).append(r)
                    print(f"  run {i} {label} B={b}: " + json.dumps({k: round(v, 2) for k, v in r.items()}), flush=True)
    print()
    print("| code | B | " + " | ".join(h for _, h, _ in COLUMNS) + " |")
    print("|---|---:|" + "---:|" * len(COLUMNS))
    for (label, b), rs in runs.items():
        cells = []
        for k, _, fmt in COLUMNS:
            vs = [r[k] for r in rs if k in r]
            cells.append("—" if not vs else fmt.format(statistics.median(vs)) if len(vs) == 1 else
                         f"{fmt.format(statistics.median(vs))} ({fmt.format(min(vs))}–{fmt.format(max(vs))})")
        print(f"| {label} | {b if b else 'embedded'} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
