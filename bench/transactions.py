"""What transactions cost: produce and consume throughput, with confluent-kafka.

Not a test: a measurement (issue 5). Against one ``oncelog broker`` process it measures

* produce: 1 KiB records, acks=all, for a fixed time, with an idempotent producer versus a
  transactional producer that commits every 100 ms (Kafka's published cost for this case is
  about 3%); runs alternate between the two modes, repeated, medians reported;
* consume: the committed transactional data read back with read_committed versus
  read_uncommitted.

    .venv/bin/python bench/transactions.py --seconds 10 --repeat 3 [--markdown out.md]

Every wait is bounded; the broker is stopped on any exit.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.process import BrokerProcess

PARTITIONS = 4


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)


def produce(bootstrap: str, topic: str, seconds: float, size: int, txn_ms: int | None, tid: str) -> float:
    """Records per second acknowledged over ``seconds`` (commits included in the time)."""
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True,
            "batch.size": 1_000_000, "queue.buffering.max.messages": 200_000}
    if txn_ms is not None:
        conf["transactional.id"] = tid
    p = Producer(conf)
    payload = b"x" * size
    acked = 0

    def on_delivery(err, _msg) -> None:  # type: ignore[no-untyped-def]
        nonlocal acked
        if err is None:
            acked += 1

    if txn_ms is not None:
        p.init_transactions(30)
        p.begin_transaction()
    start = time.monotonic()
    end = start + seconds
    next_commit = start + (txn_ms or 0) / 1000
    i = 0
    while True:
        now = time.monotonic()
        if now >= end:
            break
        try:
            p.produce(topic, payload, partition=i % PARTITIONS, on_delivery=on_delivery)
            i += 1
        except BufferError:
            p.poll(0.001)
        if i % 1000 == 0:
            p.poll(0)
        if txn_ms is not None and now >= next_commit:
            p.commit_transaction(30)
            p.begin_transaction()
            next_commit = time.monotonic() + txn_ms / 1000
    if txn_ms is not None:
        p.commit_transaction(30)
    assert p.flush(60) == 0
    return acked / (time.monotonic() - start)


def consume(bootstrap: str, topic: str, isolation: str, expected: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.max.bytes": 50 * 1024 * 1024})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got = 0
    start = time.monotonic()
    deadline = start + 300
    while got < expected and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(10_000, 0.5) if not m.error())
    elapsed = time.monotonic() - start
    c.close()
    return got / elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--txn-ms", type=int, default=100)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="oncelog-bench-txn-"))
    broker = BrokerProcess(work / "data", log_path=work / "broker.log")
    broker.start()
    rows: dict[str, list[float]] = {"idempotent": [], "transactional": [], "read_uncommitted": [], "read_committed": []}
    try:
        for r in range(args.repeat):
            for mode in ("idempotent", "transactional"):
                topic = f"p-{mode}-{r}"
                create_topic(broker.bootstrap, topic)
                rate = produce(broker.bootstrap, topic, args.seconds, args.size,
                               args.txn_ms if mode == "transactional" else None, f"bench-{r}")
                rows[mode].append(rate)
                print(f"run {r} {mode:14s} {rate:12,.0f} records/s", flush=True)
        total = int(statistics.median(rows["transactional"]) * args.seconds * 0.9)
        for r in range(args.repeat):
            for iso in ("read_uncommitted", "read_committed"):
                rate = consume(broker.bootstrap, f"p-transactional-{r}", iso, total)
                rows[iso].append(rate)
                print(f"run {r} {iso:16s} {rate:12,.0f} records/s", flush=True)
    finally:
        broker.stop()
    med = {k: statistics.median(v) for k, v in rows.items()}
    produce_cost = 1 - med["transactional"] / med["idempotent"]
    consume_cost = 1 - med["read_committed"] / med["read_uncommitted"]
    lines = [
        f"| measurement ({args.size} B records, {PARTITIONS} partitions, acks=all) | median records/s | runs |",
        "|---|---:|---|",
        *(f"| {k} | {med[k]:,.0f} | {', '.join(f'{x:,.0f}' for x in v)} |" for k, v in rows.items()),
        "",
        f"Transactions (commit every {args.txn_ms} ms) cost **{produce_cost:.1%}** of idempotent produce throughput; "
        f"read_committed costs **{consume_cost:.1%}** of read_uncommitted consume throughput.",
    ]
    print("\n".join(lines))
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
