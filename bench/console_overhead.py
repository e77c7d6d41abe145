"""``python bench/console_overhead.py [--snapshot-only | --produce-only] [-n RUNS] [--records N] [--pages K] [--partitions 0,1000,3000]``

What the web console costs (issue 19 section 3, docs/CONSOLE.md).

1. Snapshot cost by partition count: one broker with ``console.listen``; topics of 10
   partitions are added until the broker holds each count of ``--partitions`` (plus its 100
   internal ones), a consumer group commits an offset on every partition; then ``/api/state``
   is fetched 5 times (1.1 s apart, so each takes a fresh snapshot). Printed: how long the
   snapshot held the event loop (``broker.snapshot_ms``, measured in the broker), the HTTP
   request's wall time (snapshot + document + JSON), and the document's size.
2. Produce with open consoles: two brokers, one with the console and ``--pages`` pollers each
   fetching ``/api/state`` every 2 s as an open page does, one without; each sent N small
   records by a confluent-kafka producer (acks=all, linger.ms=5) in alternation, RUNS times
   each (as bench/metrics_overhead.py). Printed: median producer wall time and broker CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from metrics_overhead import cpu, run  # noqa: E402

from oncelog.process import BrokerProcess, free_port  # noqa: E402


def fetch(address: str) -> tuple[dict, float, int]:
    t = time.perf_counter()
    with urllib.request.urlopen(f"http://{address}/api/state", timeout=30) as r:
        body = r.read()
    return json.loads(body), time.perf_counter() - t, len(body)


def snapshot_cost(counts: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        address = f"127.0.0.1:{free_port()}"
        b = BrokerProcess(Path(tmp) / "b", overrides={"console.listen": address}).start()
        try:
            admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
            have = 0
            print("| user partitions (+100 internal) | snapshot holds the loop, median (ms) | max (ms) | "
                  "GET /api/state median (ms) | document (KiB) |")
            print("|---|---|---|---|---|")
            for n in counts:
                new = [NewTopic(f"t{i:05d}", 10) for i in range(have // 10, n // 10)]
                for i in range(0, len(new), 50):
                    for f in admin.create_topics(new[i:i + 50], request_timeout=120).values():
                        f.result(120)
                have = n
                if n:
                    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "bench"})
                    c.commit(offsets=[TopicPartition(f"t{i // 10:05d}", i % 10, 1) for i in range(n)],
                             asynchronous=False)
                    c.close()
                loop_ms, wall_ms, size = [], [], 0
                fetch(address)
                for _ in range(5):
                    time.sleep(1.1)  # past STATE_MIN_INTERVAL_S: a fresh snapshot each time
                    doc, wall, size = fetch(address)
                    loop_ms.append(doc["broker"]["snapshot_ms"])
                    wall_ms.append(wall * 1000)
                print(f"| {n} | {statistics.median(loop_ms):.1f} | {max(loop_ms):.1f} | "
                      f"{statistics.median(wall_ms):.0f} | {size / 1024:.0f} |", flush=True)
        finally:
            b.stop()


def poll_pages(address: str, pages: int, stop: threading.Event) -> list[int]:
    """``pages`` threads fetching /api/state every 2 s until ``stop``; returns a one-item list
    with the number of fetches made (as they go)."""
    count = [0]

    def page() -> None:
        while not stop.is_set():
            fetch(address)
            count[0] += 1
            stop.wait(2.0)

    for _ in range(pages):
        threading.Thread(target=page, daemon=True).start()
    return count


def produce_cost(runs: int, records: int, size: int, pages: int, idle_s: float = 30.0) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        address = f"127.0.0.1:{free_port()}"
        brokers = {"off": BrokerProcess(Path(tmp) / "off"),
                   "on": BrokerProcess(Path(tmp) / "on", overrides={"console.listen": address})}
        for b in brokers.values():
            b.start()
        stop = threading.Event()
        try:
            procs = {k: psutil.Process(b.proc.pid) for k, b in brokers.items()}  # type: ignore[union-attr]
            for b in brokers.values():
                run(b.bootstrap, "warm", 1000, size)
            fetched = poll_pages(address, pages, stop)
            idle_before = {k: cpu(p) for k, p in procs.items()}
            time.sleep(idle_s)  # no load: what the open pages alone cost
            idle = {k: cpu(p) - idle_before[k] for k, p in procs.items()}
            wall: dict[str, list[float]] = {"off": [], "on": []}
            used: dict[str, list[float]] = {"off": [], "on": []}
            load_before = os.getloadavg()
            for i in range(runs):
                for k in (("off", "on") if i % 2 == 0 else ("on", "off")):
                    before = cpu(procs[k])
                    wall[k].append(run(brokers[k].bootstrap, "bench", records, size))
                    used[k].append(cpu(procs[k]) - before)
            load_after = os.getloadavg()
        finally:
            stop.set()
            for b in brokers.values():
                b.stop()
    print(f"{runs} runs x {records} records of {size} bytes, linger.ms=5, alternating; {pages} open pages "
          f"polling every 2 s ({fetched[0]} fetches); load average {load_before[0]:.2f} -> {load_after[0]:.2f}")
    print("| console | wall median (s) | wall min-max (s) | records/s (median) | broker CPU median (s) | CPU min-max (s) |")
    print("|---|---|---|---|---|---|")
    for k in ("off", "on"):
        w, c = wall[k], used[k]
        print(f"| {k} | {statistics.median(w):.2f} | {min(w):.2f}-{max(w):.2f} | "
              f"{records / statistics.median(w):,.0f} | {statistics.median(c):.2f} | {min(c):.2f}-{max(c):.2f} |")
    off, on = statistics.median(used["off"]), statistics.median(used["on"])
    print(f"broker CPU per run, console polled vs none: {100 * (on - off) / off:+.1f}%")
    print(f"idle for {idle_s:.0f} s: broker CPU {idle['off']:.2f} s without the console, {idle['on']:.2f} s with "
          f"{pages} pages polling ({100 * idle['on'] / idle_s:.1f}% vs {100 * idle['off'] / idle_s:.1f}% of a core)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", "--runs", type=int, default=5)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--pages", type=int, default=5)
    ap.add_argument("--partitions", default="0,1000,3000")
    ap.add_argument("--snapshot-only", action="store_true")
    ap.add_argument("--produce-only", action="store_true")
    args = ap.parse_args()
    if not args.produce_only:
        snapshot_cost([int(x) for x in args.partitions.split(",")])
    if not args.snapshot_only:
        produce_cost(args.runs, args.records, args.size, args.pages)


if __name__ == "__main__":
    main()
