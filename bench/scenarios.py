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
    footprint_bytes: int = 5_000_000_000


@dataclass
class Case:
    scenario: str
    name: str
    unit: str  # "rec/s", "ms", "aborted delivered"
    run: Callable[[object], float | dict[str, float]]
    higher_is_better: bool = True
    systems: tuple[str, ...] | None = None  # None: every system; else only these (by name)


#: Topics created by the case being run, deleted by the harness once the case is done (a long
#: suite would otherwise pile up thousands of partitions: file descriptors on oncelog, memory
#: on the in-memory peers).
CREATED: list[str] = []


def topic(system, partitions: int = 1) -> str:  # type: ignore[no-untyped-def]
    name = f"bench-{uuid.uuid4().hex[:10]}"
    system.create_topic(name, partitions)
    CREATED.append(name)
    return name


def produce_cases(o: Options) -> list[Case]:
    """100 B and 1 KiB records; plain, idempotent, transactional with a commit every 10,000
    records and transactional with a commit every 100 ms (a timed run); 1, 10 and 100
    partitions (records round-robin); and 100 B plain with lz4 and zstd."""
    out = []
    for size in (100, 1024):
        n = o.records if size == 100 else o.records // 2
        for parts in (1, 10, 100):
            where = "" if parts == 1 else f", {parts} partitions"
            for mode in clients.MODES:
                label = mode + (" (10,000 rec/txn)" if mode == "transactional" else "")
                out.append(Case("produce", f"{size} B {label}{where}", "rec/s",
                                lambda s, size=size, n=n, mode=mode, parts=parts: clients.produce_count(
                                    s.bootstrap, topic(s, parts), n, size, mode, partitions=parts)))
            out.append(Case("produce", f"{size} B transactional (100 ms/txn){where}", "rec/s",
                            lambda s, size=size, parts=parts: clients.produce_timed(
                                s.bootstrap, topic(s, parts), o.seconds, size, "transactional", partitions=parts,
                                txn_ms=100)))
    for codec in ("lz4", "zstd"):  # the broker decompresses every batch to validate its records
        out.append(Case("produce", f"100 B plain, {codec} (text, ~3x)", "rec/s",
                        lambda s, codec=codec: clients.produce_count(
                            s.bootstrap, topic(s, 1), o.records, 100, "plain", compression=codec)))
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


def coordinator_cases(o: Options) -> list[Case]:
    """Transactions per second with one 100 B record per transaction (begin, produce, commit),
    1 and 50 concurrent transactional producers, each on its own partition of a 50-partition
    topic: the transaction coordinator's and the markers' throughput."""
    return [Case("coordinator", f"{n} transactional producer{'s' if n > 1 else ''}, 1 record/txn", "txn/s",
                 lambda s, n=n: clients.transactions_per_second(s.bootstrap, topic(s, 50), n, o.seconds))
            for n in (1, 50)]


def footprint_cases(o: Options) -> list[Case]:
    """oncelog only (the peers keep their data in memory): a broker of its own writes
    ``footprint_bytes`` (5 GB by default) of 1 KiB records round-robin into 1,000 partitions;
    reported are its peak RSS while writing, its restart time with that data on disk, and its
    RSS after the restart (the target: at most 150 MB)."""
    return [Case("footprint", "footprint", "MB", lambda s: clients.footprint(o.footprint_bytes, 1000),
                 higher_is_better=False, systems=("oncelog",))]


def cluster_produce_cases(o: Options) -> list[Case]:
    """Cluster mode (issue 15), produce: 100 B and 1 KiB records, plain and idempotent
    (acks=all), 1 and 6 partitions (6: two per broker with 3 brokers), records round-robin.
    Transactions are ``cluster-txn``."""
    out = []
    for size in (100, 1024):
        n = o.records if size == 100 else o.records // 2
        for parts in (1, 6):
            where = "" if parts == 1 else f", {parts} partitions"
            for mode in ("plain", "idempotent"):
                out.append(Case("cluster-produce", f"{size} B {mode}{where}", "rec/s",
                                lambda s, size=size, n=n, mode=mode, parts=parts: clients.produce_count(
                                    s.bootstrap, topic(s, parts), n, size, mode, partitions=parts)))
    return out


def cluster_consume_cases(o: Options) -> list[Case]:
    """``records`` idempotent 100 B records into 6 partitions, then read back by an assigned
    consumer (assign, as the embedded consume scenario), read_uncommitted."""
    def run(s):  # type: ignore[no-untyped-def]
        t = topic(s, 6)
        clients.produce_count(s.bootstrap, t, o.records, 100, "idempotent", partitions=6)
        return {"100 B read_uncommitted, 6 partitions": clients.consume_all(s.bootstrap, t, 6, "read_uncommitted")}
    return [Case("cluster-consume", "consume", "rec/s", run)]


def cluster_txn_cases(o: Options) -> list[Case]:
    """Cluster mode (issue 15), transactions: the ``txn-overhead`` pair (1 KiB idempotent vs
    transactional with a commit every 100 ms) and the ``coordinator`` cases (1 and 50
    transactional producers, one record per transaction: with 3 brokers their coordinators,
    partitions and markers are spread over the brokers)."""
    return txn_overhead_cases(o) + coordinator_cases(o)


SCENARIOS: dict[str, Callable[[Options], list[Case]]] = {
    "cluster-produce": cluster_produce_cases,
    "cluster-consume": cluster_consume_cases,
    "cluster-txn": cluster_txn_cases,
    "produce": produce_cases,
    "consume": consume_cases,
    "txn-overhead": txn_overhead_cases,
    "latency": latency_cases,
    "correctness": aborted_cases,
    "partitions": partitions_cases,
    "txn-producers": txn_producers_cases,
    "coordinator": coordinator_cases,
    "footprint": footprint_cases,
}
DEFAULT = ["produce", "consume", "txn-overhead", "latency", "correctness"]
#: ``python -m bench --cluster``: oncelog embedded (reference), 1 and 3 brokers on PostgreSQL, Tansu on PostgreSQL.
CLUSTER = ["cluster-produce", "cluster-consume", "cluster-txn"]
CLUSTER_SYSTEMS = ["oncelog", "oncelog-cluster1", "oncelog-cluster3", "tansu-pg"]
