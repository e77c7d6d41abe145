"""``python bench/schema_validation.py [-n RUNS] [--records N] [--size BYTES] [--batch N]``

What schema-id validation (``confluent.value.schema.validation=true``, docs/SCHEMA-REGISTRY.md)
costs the produce path. One broker serving the registry; two topics, ``plain`` (validation off)
and ``checked`` (on, the value schema registered under ``checked-value``); N records of
``--size`` bytes framed with the registered id (magic byte 0 + 4-byte id) are produced by a
confluent-kafka producer (acks=all, linger.ms=5, ``batch.num.messages`` = ``--batch``) to each
topic in alternation, RUNS times, so both see the same machine load. Printed per topic: the
median records/s and the broker process's CPU seconds (user + system) per run.

Then the check alone, in this process (less disturbed by load): ``validate_produce_batch`` of a
batch of ``--batch`` records without and with the schema-id rule (best of 5), microseconds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import timeit
import urllib.request
import json
from pathlib import Path

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.process import BrokerProcess, free_port


def produce(bootstrap: str, topic: str, value: bytes, records: int, batch: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "log_level": 0,
                  "batch.num.messages": batch})
    failed: list[object] = []
    t0 = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, value, on_delivery=lambda err, msg: failed.append(err) if err else None)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(120) or failed:
        raise RuntimeError(f"records not acknowledged: {failed[:3]}")
    return time.perf_counter() - t0


def register(url: str, subject: str) -> int:
    body = json.dumps({"schema": '{"type":"record","name":"V","fields":[{"name":"b","type":"bytes"}]}'}).encode()
    req = urllib.request.Request(f"{url}/subjects/{subject}/versions", data=body, method="POST",
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return int(json.load(r)["id"])


def micro(batch: int, size: int) -> tuple[float, float]:
    from oncelog.protocol import records

    value = b"\x00\x00\x00\x00\x01" + b"x" * (size - 5)
    buf = records.build_batch([(None, value, ())] * batch, timestamp_ms=int(time.time() * 1000))
    rule = records.SchemaIdRule(None, frozenset({1}), "", "t-value")
    off = min(timeit.repeat(lambda: records.validate_produce_batch(buf, 1 << 30), number=200, repeat=5)) / 200
    on = min(timeit.repeat(lambda: records.validate_produce_batch(buf, 1 << 30, schema_ids=rule), number=200,
                           repeat=5)) / 200
    return off * 1e6, on * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", "--runs", type=int, default=5)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=1000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        address = f"127.0.0.1:{free_port()}"
        b = BrokerProcess(Path(tmp) / "broker", overrides={"schema.registry.listen": address,
                                                           "group.initial.rebalance.delay.ms": "0"})
        b.start()
        try:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            futs = admin.create_topics([NewTopic("plain", 1, 1),
                                        NewTopic("checked", 1, 1, config={"confluent.value.schema.validation": "true"})])
            for f in futs.values():
                f.result(30)
            sid = register(f"http://{address}", "checked-value")
            value = b"\x00" + sid.to_bytes(4, "big") + b"x" * (args.size - 5)
            proc = psutil.Process(b.pid)
            results: dict[str, list[tuple[float, float]]] = {"plain": [], "checked": []}
            produce(b.bootstrap, "plain", value, 1000, args.batch)  # warm-up
            produce(b.bootstrap, "checked", value, 1000, args.batch)
            for _ in range(args.runs):
                for topic in ("plain", "checked"):
                    c0 = sum(proc.cpu_times()[:2])
                    wall = produce(b.bootstrap, topic, value, args.records, args.batch)
                    results[topic].append((args.records / wall, sum(proc.cpu_times()[:2]) - c0))
        finally:
            b.stop()
    print(f"{args.records} records of {args.size} B per run, {args.runs} runs, batch.num.messages={args.batch}")
    for topic, label in (("plain", "validation off"), ("checked", "validation on ")):
        rates = [r for r, _ in results[topic]]
        cpus = [c for _, c in results[topic]]
        print(f"  {label}: median {statistics.median(rates):,.0f} records/s (min {min(rates):,.0f}, "
              f"max {max(rates):,.0f}); broker CPU median {statistics.median(cpus):.2f} s per run")
    off, on = micro(args.batch, args.size)
    print(f"  validate_produce_batch of {args.batch} records: {off:.1f} us without the rule, {on:.1f} us with it "
          f"(+{on - off:.1f} us per batch)")


if __name__ == "__main__":
    main()
