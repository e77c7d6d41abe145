"""``python -m bench.rebalance [--consumers N] [--partitions P]``: rebalance time for N
confluent-kafka consumers joining one group one after another, with the classic protocol and with
the consumer rebalance protocol (KIP-848, ``group.protocol=consumer``), in the same run on one
broker (issue 30).

For each protocol and each join k = 1..N: the time from the k-th consumer's ``subscribe`` until
the k members' assignments are disjoint and cover every partition. Broker settings are Kafka's
defaults except ``group.initial.rebalance.delay.ms=0`` (as the tests use); the classic consumers
use the ``cooperative-sticky`` assignor (the incremental one, closest to KIP-848's). Reported:
the median and the maximum per join, and the total, per protocol.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from oncelog.process import BrokerProcess


def _consumer(bootstrap: str, group: str, topic: str, protocol: str) -> Any:
    from confluent_kafka import Consumer

    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf["partition.assignment.strategy"] = "cooperative-sticky"
    c = Consumer(conf)
    c.subscribe([topic])
    return c


def _split(consumers: list[Any], partitions: int) -> bool:
    sets = [{t.partition for t in c.assignment()} for c in consumers]
    return all(sets) and sum(map(len, sets)) == partitions and set().union(*sets) == set(range(partitions))


def run(protocol: str, bootstrap: str, topic: str, partitions: int, n: int, timeout: float = 120.0) -> list[float]:
    consumers: list[Any] = []
    times: list[float] = []
    try:
        for _ in range(n):
            start = time.monotonic()
            consumers.append(_consumer(bootstrap, f"bench-{protocol}", topic, protocol))
            while not _split(consumers, partitions):
                if time.monotonic() - start > timeout:
                    raise RuntimeError(f"{protocol}: no stable split after {timeout}s with {len(consumers)} members")
                for c in consumers:
                    c.poll(0.02)
            times.append(time.monotonic() - start)
    finally:
        for c in consumers:
            c.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--consumers", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=20)
    args = ap.parse_args()
    from confluent_kafka.admin import AdminClient, NewTopic

    with tempfile.TemporaryDirectory() as d:
        with BrokerProcess(Path(d) / "b", overrides={"group.initial.rebalance.delay.ms": "0"}) as b:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            for f in admin.create_topics([NewTopic("rebalance", args.partitions, 1)]).values():
                f.result(30)
            print(f"{args.consumers} consumers joining one after another, {args.partitions} partitions, one broker")
            print("| protocol | median per join (s) | max per join (s) | total (s) |")
            print("|---|---|---|---|")
            for protocol in ("classic", "consumer"):
                times = run(protocol, b.bootstrap, "rebalance", args.partitions, args.consumers)
                print(f"| {protocol} | {statistics.median(times):.2f} | {max(times):.2f} | {sum(times):.2f} |", flush=True)


if __name__ == "__main__":
    main()
