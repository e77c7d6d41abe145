"""``python bench/metrics_scrape.py [--partitions N] [--seconds S] [--before-src DIR]``

What scraping /metrics costs Kafka clients on a broker with many partitions (issue 26 row 14,
docs/METRICS.md). A broker with ``metrics.listen`` gets N partitions (topics of 100), then a
confluent-kafka producer sends one record at a time for S seconds per phase (acks=1,
linger.ms=0, each flushed: one Produce round trip each) while 0, 1 and 4 scrapers (separate processes, so their GIL is not the
producer's) fetch /metrics as fast as they can. Printed per phase: the produce round trip's
p50 / p99 / max, and the scrapes answered.

``--before-src DIR``: also start a second broker from the ``src`` of another checkout (e.g. the
code before a change: ``git worktree add /tmp/before main``, then ``--before-src /tmp/before/src``)
and measure both in alternation in the same run, so both see the same machine load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.process import BrokerProcess, free_port

SCRAPER = """
import os, sys, time, urllib.request
url, stop = sys.argv[1], sys.argv[2]
n = 0
while not os.path.exists(stop):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            r.read()
        n += 1
    except OSError:
        time.sleep(0.05)
print(n)
"""


def make_partitions(bootstrap: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(f"p{i:03d}", num_partitions=min(100, partitions - i * 100), replication_factor=1)
              for i in range((partitions + 99) // 100)]
    for i in range(0, len(topics), 10):
        for f in admin.create_topics(topics[i:i + 10], operation_timeout=120, request_timeout=120).values():
            f.result()


def produce_latencies(producer: Producer, samples: int, seconds: float = 0.0) -> list[float]:
    """``samples`` round trips, or as many as ``seconds`` allow when that is given."""
    out = []
    errors: list[object] = []
    until = time.monotonic() + seconds
    while (len(out) < samples) if not seconds else (time.monotonic() < until):
        t = time.perf_counter()
        producer.produce("lat", b"x" * 100, on_delivery=lambda err, _msg: errors.append(err) if err else None)
        if producer.flush(30) or errors:
            raise RuntimeError(f"a record was not acknowledged: {errors}")
        out.append((time.perf_counter() - t) * 1000)
    return out


def phase(b: BrokerProcess, metrics: str, producer: Producer, scrapers: int, seconds: float) -> tuple[list[float], int]:
    stop = b.data_dir.parent / f"stop-{time.monotonic_ns()}"
    procs = [subprocess.Popen([sys.executable, "-c", SCRAPER, f"http://{metrics}/metrics", str(stop)],
                              stdout=subprocess.PIPE, text=True) for _ in range(scrapers)]
    try:
        time.sleep(1.0 if scrapers else 0)  # the scrapers are going
        lat = produce_latencies(producer, 0, seconds)
    finally:
        stop.touch()
    scraped = 0
    for p in procs:
        out, _ = p.communicate(timeout=60)
        scraped += int(out.strip() or 0)
    return lat, scraped


def q(values: list[float], frac: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(frac * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=6200)
    ap.add_argument("--seconds", type=float, default=30.0, help="per phase")
    ap.add_argument("--before-src", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        variants: dict[str, tuple[BrokerProcess, str]] = {}
        if args.before_src is not None:
            addr = f"127.0.0.1:{free_port()}"
            env = {"PYTHONPATH": str(args.before_src.resolve())}
            variants["before"] = (BrokerProcess(Path(tmp) / "before", overrides={"metrics.listen": addr}, env=env), addr)
        addr = f"127.0.0.1:{free_port()}"
        variants["this"] = (BrokerProcess(Path(tmp) / "this", overrides={"metrics.listen": addr}), addr)
        try:
            producers = {}
            for name, (b, _addr) in variants.items():
                b.start(timeout=120)
                t = time.monotonic()
                make_partitions(b.bootstrap, args.partitions)
                admin = AdminClient({"bootstrap.servers": b.bootstrap})
                for f in admin.create_topics([NewTopic("lat", num_partitions=1, replication_factor=1)]).values():
                    f.result()
                print(f"{name}: {args.partitions} partitions created in {time.monotonic() - t:.0f} s", flush=True)
                p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "acks": 1, "log_level": 0})
                produce_latencies(p, 50)  # topic creation, metadata, first requests
                producers[name] = p
            rows = []
            load_before = os.getloadavg()
            for scrapers in (0, 1, 4):
                for name, (b, addr) in variants.items():
                    lat, scraped = phase(b, addr, producers[name], scrapers, args.seconds)
                    rows.append((name, scrapers, len(lat), statistics.median(lat), statistics.fmean(lat), q(lat, 0.99),
                                 max(lat), scraped))
                    print(f"  {name} scrapers={scrapers}: p50 {rows[-1][3]:.2f} ms", flush=True)
            for name, (b, addr) in variants.items():
                with urllib.request.urlopen(f"http://{addr}/metrics", timeout=60) as r:
                    for line in r.read().decode().splitlines():
                        if line.startswith("oncelog_metrics_scrape_build"):
                            print(f"  {name}: {line}")
            load_after = os.getloadavg()
        finally:
            for b, _addr in variants.values():
                try:
                    b.stop(timeout=120)
                except subprocess.TimeoutExpired:
                    b.kill()
    print(f"\n{args.partitions} partitions, {args.seconds:.0f} s of produce round trips per phase (acks=1, one record "
          f"each); "
          f"load average {load_before[0]:.2f} -> {load_after[0]:.2f}")
    print("| broker | scrapers | round trips | produce p50 (ms) | mean (ms) | p99 (ms) | max (ms) | scrapes answered |")
    print("|---|---|---|---|---|---|---|---|")
    for name, scrapers, n, p50, mean, p99, mx, scraped in rows:
        print(f"| {name} | {scrapers} | {n:,} | {p50:.2f} | {mean:.2f} | {p99:.1f} | {mx:.1f} | {scraped:,} |")


if __name__ == "__main__":
    main()
