"""``python bench/fixture_startup.py [-n N] [--compare-src DIR] [--kafka-internal-partitions] [--prestart SECONDS]``

How long a test waits for its broker (issue 19): the time from asking for one — what the
``oncelog_broker`` fixture does, ``oncelog.testing.Broker(...).start()`` — to the first record a
confluent-kafka producer got acknowledged (acks=all, topic created on first use). Measured N
times, each a fresh process and data directory; printed: median and p90 of the total, of the
wait for the ready line, and of the first produce, plus the broker process's CPU time at the
ready line (user + system, psutil: less sensitive than wall time to a busy machine) and the
load average before and after.

``--compare-src DIR`` runs the broker process from another checkout's ``src`` (e.g. the main
branch) in alternation with this one, so both see the same load. ``--kafka-internal-partitions``
starts the brokers with Kafka's 50 + 50 internal-topic partitions instead of the test defaults.
``--prestart SECONDS`` measures the plugin's default for function scope instead: the next
broker is started (``oncelog.testing.spare.Spare``) while a "test" of SECONDS runs, so the time
counted is from asking to the first acknowledged record with a spare that had that long.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import psutil
from confluent_kafka import Producer

from oncelog.testing import Broker
from oncelog.testing.spare import Spare


def once(config: dict[str, str], env: dict[str, str] | None, spare: Spare | None = None,
         body: float = 0.0) -> dict[str, float]:
    t0 = time.perf_counter()
    b = spare.take(config) if spare is not None else None
    if b is None:
        b = Broker(config, env=env)
        b.start()
    if spare is not None:
        spare.prepare(config)
    try:
        t1 = time.perf_counter()
        cpu = psutil.Process(b.pid).cpu_times()
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "acks": "all", "linger.ms": 0,
                      "log_level": 0})
        delivered: list[object] = []
        p.produce("first", b"v", callback=lambda err, msg: delivered.append(err))
        left = p.flush(30)
        if left or delivered != [None]:
            raise RuntimeError(f"first produce failed: {delivered}; broker log:\n{b.log_tail(20)}")
        t2 = time.perf_counter()
        time.sleep(body)
    finally:
        b.close()
    return {"total": t2 - t0, "ready": t1 - t0, "produce": t2 - t1, "cpu_at_ready": cpu.user + cpu.system}


def summary(name: str, runs: list[dict[str, float]]) -> str:
    out = [f"{name} ({len(runs)} runs)"]
    for key in ("total", "ready", "produce", "cpu_at_ready"):
        xs = sorted(r[key] for r in runs)
        p90 = xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]
        out.append(f"  {key:13s} median {statistics.median(xs):6.3f} s   p90 {p90:6.3f} s   min {xs[0]:6.3f} s")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1] if __doc__ else None)
    ap.add_argument("-n", type=int, default=10, help="runs per variant (default 10)")
    ap.add_argument("--compare-src", type=Path, help="another checkout's src/ to run the broker from, alternately")
    ap.add_argument("--kafka-internal-partitions", action="store_true",
                    help="offsets/transaction-state topics with Kafka's 50 partitions each")
    ap.add_argument("--prestart", type=float, metavar="SECONDS",
                    help="start the next broker while a test of SECONDS runs (the plugin's default)")
    args = ap.parse_args()
    config = ({"offsets.topic.num.partitions": "50", "transaction.state.log.num.partitions": "50"}
              if args.kafka_internal_partitions else {})
    variants: dict[str, dict[str, str] | None] = {"this checkout": None}
    if args.compare_src:
        variants[f"broker from {args.compare_src}"] = {"PYTHONPATH": str(args.compare_src.resolve())}
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
    once(config, None)  # warm-up: byte-code caches, page cache
    if args.prestart is not None:
        spare = Spare()
        once(config, None, spare, args.prestart)  # the first asks before any spare exists
        name = f"prestarted, tests of {args.prestart:g} s"
        variants, runs = {name: None}, {name: []}
        try:
            for _ in range(args.n):
                runs[name].append(once(config, None, spare, args.prestart))
        finally:
            spare.discard()
    else:
        for _ in range(args.n):
            for name, env in variants.items():
                runs[name].append(once(config, env))
    for name in variants:
        print(summary(name, runs[name]))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"python {sys.version.split()[0]}, internal-topic partitions: "
          f"{'50 + 50' if args.kafka_internal_partitions else '1 + 1 (oncelog.testing.TEST_DEFAULTS)'}")


if __name__ == "__main__":
    main()
