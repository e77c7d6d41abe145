"""``python bench/metrics_overhead.py [-n RUNS] [--records N] [--size BYTES] [--linger MS] [--batch N] [--aa]``

What the metrics cost the produce path (issue 19, docs/METRICS.md): two brokers, one with
``metrics.listen`` set and one without, each sent N small records by a confluent-kafka producer
(acks=all, linger.ms=5; ``--linger 0`` sends far more, smaller requests: the per-request cost
shows more; ``--batch N`` caps a batch at N records, librdkafka's batch.num.messages, so
100k records make 100k/N Produce requests), in alternation, RUNS times each, so both see the same machine load.
Printed per variant: median and spread of the producer's wall time and of the broker process's
CPU time (user + system, psutil) for the run; CPU time is the figure less disturbed by other
load. The metrics broker is scraped once after each of its runs (the values must be there).
``--aa`` starts both brokers without metrics (an A/A run: the difference it shows is the
noise floor of the comparison). Last, the request-path update alone (``RequestStats.request`` + ``produced``, what a one-batch
Produce adds) is timed in this process, which a loaded machine disturbs far less.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
from confluent_kafka import Producer

from oncelog.process import BrokerProcess, free_port


def run(bootstrap: str, topic: str, records: int, size: int, linger: int = 5, batch: int = 10_000) -> float:
    """Produce ``records`` records of ``size`` bytes; returns the wall time in seconds."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger, "log_level": 0,
                  "batch.num.messages": batch})
    value = b"x" * size
    t0 = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(120):
        raise RuntimeError("records left unacknowledged")
    return time.perf_counter() - t0


def cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def micro(n: int = 200_000) -> float:
    """Microseconds the metrics add to a one-batch Produce request (best of 5)."""
    import timeit

    from oncelog.broker.observability.metrics import RequestStats

    stats = RequestStats()

    def one() -> None:
        stats.request(0, 0.0012, 0)
        stats.produced("bench", 16_000, 100)

    return min(timeit.repeat(one, number=n, repeat=5)) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", "--runs", type=int, default=5)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--linger", type=int, default=5)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--aa", action="store_true", help="both brokers without metrics (the noise floor)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        metrics_addr = f"127.0.0.1:{free_port()}"
        brokers = {
            "off": BrokerProcess(Path(tmp) / "off"),
            "on": BrokerProcess(Path(tmp) / "on", overrides={} if args.aa else {"metrics.listen": metrics_addr}),
        }
        for b in brokers.values():
            b.start()
        try:
            procs = {k: psutil.Process(b.proc.pid) for k, b in brokers.items()}  # type: ignore[union-attr]
            for k, b in brokers.items():
                run(b.bootstrap, "warm", 1000, args.size)  # topic creation, first-request costs
            wall: dict[str, list[float]] = {"off": [], "on": []}
            used: dict[str, list[float]] = {"off": [], "on": []}
            load_before = os.getloadavg()
            for i in range(args.runs):
                for k in (("off", "on") if i % 2 == 0 else ("on", "off")):
                    before = cpu(procs[k])
                    wall[k].append(run(brokers[k].bootstrap, "bench", args.records, args.size, args.linger, args.batch))
                    used[k].append(cpu(procs[k]) - before)
                    if k == "on" and not args.aa:
                        with urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=10) as r:
                            assert b"kafka_server_brokertopicmetrics_messagesin_total" in r.read()
            load_after = os.getloadavg()
        finally:
            for b in brokers.values():
                b.stop()
    print(f"{args.runs} runs x {args.records} records of {args.size} bytes, linger.ms={args.linger}, "
          f"batch.num.messages={args.batch}, alternating{' (A/A: metrics off in both)' if args.aa else ''}; "
          f"load average {load_before[0]:.2f} -> {load_after[0]:.2f}")
    print("| metrics | wall median (s) | wall min-max (s) | records/s (median) | broker CPU median (s) | CPU min-max (s) |")
    print("|---|---|---|---|---|---|")
    for k in ("off", "on"):
        w, c = wall[k], used[k]
        print(f"| {k} | {statistics.median(w):.2f} | {min(w):.2f}-{max(w):.2f} | "
              f"{args.records / statistics.median(w):,.0f} | {statistics.median(c):.2f} | {min(c):.2f}-{max(c):.2f} |")
    off, on = statistics.median(used["off"]), statistics.median(used["on"])
    print(f"broker CPU per run, on vs off: {100 * (on - off) / off:+.1f}%")
    print(f"request-path update of a one-batch Produce: {micro():.2f} us")


if __name__ == "__main__":
    main()
