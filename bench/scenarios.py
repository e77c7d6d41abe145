"""The scenarios of ``python -m bench``: each yields cases, each case is measured once per
system per repetition, systems alternating (the starting system rotates with the repetition, so
the load of other processes on this shared machine falls on all of them alike).

A case is ``Case(name, unit, run)`` where ``run(system, topic_factory) -> float`` measures once
on a fresh topic. Every case creates its own topics (``bench-<uuid>``) so runs never see each
other's data.
"""

from __future__ import annotations

import statistics
import uuid
from dataclasses import dataclass
from typing import Callable

from bench import clients


@dataclass
class Options:
    records: int = 200_000  # produce-throughput records per run (100 B; 1 KiB runs use half)
    seconds: float = 5.0  # timed runs (transaction overhead, latency)
    latency_rate: int = 10_000
    latency_txn_ms: int = 10


@dataclass
class Case:
    scenario: str
    name: str
    unit: str  # "rec/s", "ms", "aborted delivered"
    run: Callable[[object], float | dict[str, float]]
    higher_is_better: bool = True


def topic(system, partitions: int = 1) -> str:  # type: ignore[no-untyped-def]
    name = f"bench-{uuid.uuid4().hex[:10]}"
    system.create_topic(name, partitions)
    return name


def produce_cases(o: Options) -> list[Case]:
    out = []
    for size in (100, 1024):
        n = o.records if size == 100 else o.records // 2
        for mode in clients.MODES:
            label = mode + (" (10,000 rec/txn)" if mode == "transactional" else "")
            out.append(Case("produce", f"{size} B {label}", "rec/s",
                            lambda s, size=size, n=n, mode=mode: clients.produce_count(
                                s.bootstrap, topic(s), n, size, mode)))
    return out


def consume_cases(o: Options) -> list[Case]:
    def run(s):  # type: ignore[no-untyped-def]
        t = topic(s)
        clients.produce_count(s.bootstrap, t, o.records, 100, "transactional")
        ru = clients.consume_all(s.bootstrap, t, 1, "read_uncommitted")
        rc = clients.consume_all(s.bootstrap, t, 1, "read_committed")
        return {"100 B read_uncommitted": ru, "100 B read_committed": rc, "read_committed / read_uncommitted": rc / ru}
    return [Case("consume", "consume", "rec/s", run)]


def txn_overhead_cases(o: Options) -> list[Case]:
    """1 KiB records, idempotent vs transactional with a commit every 100 ms (Kafka's published
    cost: 3%). One run = 3 back-to-back pairs of ``seconds / 2`` each, the order inside a pair
    alternating, so both modes see the same moments of this shared machine's load; the overhead
    is the median of the per-pair ratios (steadier than the ratio of medians)."""

    def run(s):  # type: ignore[no-untyped-def]
        idem, txn, ratios = [], [], []
        for pair in range(3):
            rates = {}
            for mode in (("idempotent", "transactional") if pair % 2 == 0 else ("transactional", "idempotent")):
                rates[mode] = clients.produce_timed(s.bootstrap, topic(s), o.seconds / 2, 1024, mode, txn_ms=100)
            idem.append(rates["idempotent"])
            txn.append(rates["transactional"])
            ratios.append(rates["transactional"] / rates["idempotent"])
        return {"1 KiB idempotent": statistics.median(idem),
                "1 KiB transactional, commit every 100 ms": statistics.median(txn),
                "transaction overhead % (median of paired runs)": 100 * (1 - statistics.median(ratios))}
    return [Case("txn-overhead", "txn-overhead", "rec/s", run)]


def latency_cases(o: Options) -> list[Case]:
    def run(s):  # type: ignore[no-untyped-def]
        lat = sorted(clients.latency(s.bootstrap, topic(s), o.latency_rate, o.seconds, o.latency_txn_ms))
        q = statistics.quantiles(lat, n=1000, method="inclusive")
        return {"p50 ms": q[499], "p99 ms": q[989], "p99.9 ms": q[998]}
    return [Case("latency", "latency", "ms", run, higher_is_better=False)]


def aborted_cases(o: Options) -> list[Case]:
    return [Case("correctness", "aborted records delivered to read_committed (of 100)", "records",
                 lambda s: float(clients.aborted_visible(s.bootstrap, topic(s))), higher_is_better=False)]


def partitions_cases(o: Options) -> list[Case]:
    """100 B plain produce, round-robin over 1, 10, 100 and 1,000 partitions."""
    return [Case("partitions", f"100 B plain, {n} partitions", "rec/s",
                 lambda s, n=n: clients.produce_count(s.bootstrap, topic(s, n), o.records, 100, "plain", partitions=n))
            for n in (1, 10, 100, 1000)]


def txn_producers_cases(o: Options) -> list[Case]:
    """Concurrent transactional producers (1, 10, 50, 100), 100 B records, 1,000 per
    transaction, each producer on its own partition of a 100-partition topic; aggregate rate."""
    return [Case("txn-producers", f"{n} transactional producers", "rec/s",
                 lambda s, n=n: clients.produce_concurrent(s.bootstrap, topic(s, 100), n, max(o.records // n, 2_000),
                                                           100, 1_000, 100))
            for n in (1, 10, 50, 100)]


SCENARIOS: dict[str, Callable[[Options], list[Case]]] = {
    "produce": produce_cases,
    "consume": consume_cases,
    "txn-overhead": txn_overhead_cases,
    "latency": latency_cases,
    "correctness": aborted_cases,
    "partitions": partitions_cases,
    "txn-producers": txn_producers_cases,
}
DEFAULT = ["produce", "consume", "txn-overhead", "latency", "correctness"]
