"""What transactions cost: produce and consume throughput, with confluent-kafka.

Not a test: a measurement (issue 5). Against one ``oncelog broker`` process it measures

* produce: 1 KiB records, acks=all, for a fixed time, with an idempotent producer versus a
  transactional producer that commits every 100 ms (Kafka's published cost for this case is
  about 3%); runs alternate between the two modes, repeated, medians reported;
* consume: the committed transactional data read back with read_committed versus
  read_uncommitted.

    .venv/bin/python -m bench.transactions  (the suite's form: python -m bench txn-overhead) --seconds 10 --repeat 3 [--markdown out.md]

Every wait is bounded; the broker is stopped on any exit.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

if not __package__:  # run as a script (bench/transactions.py): make the bench package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import clients  # noqa: E402
from bench.systems import create_topic_admin  # noqa: E402
from oncelog.process import BrokerProcess  # noqa: E402

PARTITIONS = 4


def create_topic(bootstrap: str, name: str) -> None:
    create_topic_admin(bootstrap, name, PARTITIONS)


def produce(bootstrap: str, topic: str, seconds: float, size: int, txn_ms: int | None, _tid: str) -> float:
    """Records per second acknowledged over ``seconds`` (commits included in the time)."""
    mode = "idempotent" if txn_ms is None else "transactional"
    return clients.produce_timed(bootstrap, topic, seconds, size, mode, PARTITIONS, txn_ms or 100)


def consume(bootstrap: str, topic: str, isolation: str, _expected: int) -> float:
    return clients.consume_all(bootstrap, topic, PARTITIONS, isolation, timeout=300)


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
