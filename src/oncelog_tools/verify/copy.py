"""Scenario 1 of ``oncelog verify``: transactional copy under broker and copier kills, in the
style of Kafka's own ``transactions_test.py``.

An input topic is seeded with unique records. One transactional copier per input partition
(``oncelog_tools.verify.copier``: confluent-kafka, sendOffsetsToTransaction, a third of its
transactions aborted at random) copies them to the same partition of an output topic. Meanwhile
the broker and the copiers are killed with SIGKILL at random moments and restarted, and a
read_committed consumer reads the output the whole time.

Checks: the output equals the input, each record once, in the input's order per partition; the
concurrent reader saw, per partition, exactly a prefix of the final output at the same offsets —
so it never saw an aborted or uncommitted record, a duplicate, or a gap.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from oncelog_tools.verify.checker import Anomaly
from oncelog_tools.verify.targets import Cluster, SingleBroker, Target
from oncelog_tools.verify.copier import HEARTBEAT_ENV
from oncelog_tools.verify.reader import ConcurrentReader

INPUT, OUTPUT = "input", "output"
#: a copier that finishes no transaction for this long is hung (librdkafka #5456) and is killed
WATCHDOG_S = 30.0


@dataclass
class CopyResult:
    records: int = 0
    copied: int = 0
    broker_kills: int = 0  # faults of the target (broker, or cluster: see targets.py)
    faults: dict[str, int] = field(default_factory=dict)  # by kind
    copier_kills: int = 0
    #: object-store fault windows of the loopback proxy (issue 29; their kinds are in ``faults``)
    store_faults: int = 0
    copier_restarts: int = 0
    #: copiers whose client hung (no transaction finished for WATCHDOG_S) and were killed
    watchdog_kills: int = 0
    reader_records: int = 0
    #: seconds into the run of the concurrent reader's last record (a reader that stalled shows here)
    reader_last_s: float = 0.0
    anomalies: list[Anomaly] = field(default_factory=list)
    seconds: float = 0.0


def _seed_input(bootstrap: str, records: int, partitions: int,
                configs: dict[str, str] | None = None) -> dict[int, list[bytes]]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(INPUT, partitions, 1, config=configs or {}), NewTopic(OUTPUT, partitions, 1, config=configs or {})]
    for f in admin.create_topics(topics).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    by_part: dict[int, list[bytes]] = {q: [] for q in range(partitions)}
    for i in range(records):
        q = i % partitions
        v = f"in-{q}-{i:08d}".encode()
        by_part[q].append(v)
        while True:
            try:
                p.produce(INPUT, v, partition=q)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0
    return by_part


def _final_read(bootstrap: str, partitions: int, expected: int) -> dict[int, list[tuple[int, bytes]]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify-final", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.assign([TopicPartition(OUTPUT, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    got = 0
    deadline = time.monotonic() + 120
    idle_since = time.monotonic()
    while time.monotonic() < deadline and (got < expected or time.monotonic() - idle_since < 2):
        msgs = [m for m in c.consume(10_000, 0.3) if not m.error()]
        if msgs:
            idle_since = time.monotonic()
        for m in msgs:
            out[m.partition()].append((m.offset(), m.value()))
            got += 1
    c.close()
    return out


def run(work: Path, *, records: int, partitions: int, broker_kills: int, copier_kills: int, seed: int,
        time_limit: float = 900.0, progress=None, txn_records: int = 500,
        txn_pause_ms: int = 0, cluster: int = 0, diskless: dict[str, str] | None = None,
        diskless_env: dict[str, str] | None = None, store_fault=None, store_faults: int = 0,
        proxy_fault=None) -> CopyResult:  # type: ignore[no-untyped-def]
    """``txn_records`` caps the records per transaction and ``txn_pause_ms`` pauses each copier
    after every transaction: small runs use them so that the faults land while copying.
    ``cluster``: that many brokers on a PostgreSQL (issue 15; ``broker_kills`` then counts the
    cluster's faults: broker SIGKILL, SIGSTOP, PostgreSQL restarts, targets.Cluster); 0: the
    embedded single broker. ``diskless`` (issue 29, cluster only): the brokers' ``diskless.storage.*``
    properties; the input and output topics are then diskless, ``diskless_env`` gives the brokers
    the store's credentials and ``store_fault`` (if given) is one more kind of cluster fault.
    ``store_faults``: that many object-store fault windows, each opened by ``proxy_fault(rng)``
    (verify/store_faults.py: the loopback S3 fault proxy between the brokers and the store; it
    returns the window's kind), scheduled among the other faults."""
    if store_faults and proxy_fault is None:
        raise ValueError("store faults need the object-store fault proxy (proxy_fault)")
    rng = random.Random(seed)
    result = CopyResult(records=records)
    start = time.monotonic()
    overrides = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}
    if diskless:
        if not cluster:
            raise ValueError("diskless topics need cluster mode")
        overrides.update(diskless)
    broker: Target = (Cluster(work, overrides, brokers=cluster, env=diskless_env, store_fault=store_fault) if cluster
                      else SingleBroker(work, overrides))
    copiers: dict[int, subprocess.Popen[bytes]] = {}
    done: set[int] = set()
    reader = ConcurrentReader(broker.bootstrap, OUTPUT, partitions, work / "reader.log")
    try:
        inputs = _seed_input(broker.bootstrap, records, partitions, {"diskless.enable": "true"} if diskless else None)
        reader.start()

        def launch(p: int) -> None:
            beat = work / f"copier-{p}.heartbeat"
            beat.touch()
            copiers[p] = subprocess.Popen(
                [sys.executable, "-m", "oncelog_tools.verify.copier", "confluent", broker.bootstrap, INPUT, OUTPUT, f"{p},",
                 f"verify-copier-{p}", "verify-copy", str(rng.randrange(1 << 30))],
                stdout=subprocess.DEVNULL, stderr=open(work / f"copier-{p}.log", "ab"),
                env={**os.environ, HEARTBEAT_ENV: str(beat), "ONCELOG_COPIER_MAX_POLL": str(txn_records),
                     "ONCELOG_COPIER_PAUSE_MS": str(txn_pause_ms)},
            )

        for p in range(partitions):
            launch(p)
        faults = ["broker"] * broker_kills + ["copier"] * copier_kills + ["store"] * store_faults
        rng.shuffle(faults)
        deadline = start + time_limit
        next_fault = time.monotonic() + rng.uniform(0.5, 2.0)
        while len(done) < partitions and time.monotonic() < deadline:
            time.sleep(0.1)
            for p, proc in list(copiers.items()):
                code = proc.poll()
                if code is None:
                    if time.time() - (work / f"copier-{p}.heartbeat").stat().st_mtime > WATCHDOG_S:
                        proc.kill()
                        proc.wait(10)
                        del copiers[p]
                        result.watchdog_kills += 1
                        launch(p)
                    continue
                del copiers[p]
                if code == 0:
                    done.add(p)
                else:
                    result.copier_restarts += 1
                    launch(p)
            if faults and time.monotonic() >= next_fault:
                fault = faults.pop()
                if fault == "broker":
                    kind = broker.fault(rng)
                    result.broker_kills += 1
                    result.faults[kind] = result.faults.get(kind, 0) + 1
                elif fault == "store":
                    kind = proxy_fault(rng)
                    result.store_faults += 1
                    result.faults[kind] = result.faults.get(kind, 0) + 1
                elif copiers:
                    p = rng.choice(sorted(copiers))
                    copiers[p].kill()
                    copiers[p].wait(10)
                    del copiers[p]
                    result.copier_kills += 1
                    launch(p)
                next_fault = time.monotonic() + rng.uniform(0.5, 2.0)
            if progress is not None:
                progress(len(done), partitions, result)
        if len(done) < partitions:
            result.anomalies.append(Anomaly("lost", f"copiers {sorted(set(range(partitions)) - done)} did not finish in {time_limit:.0f}s"))
        final = _final_read(broker.bootstrap, partitions, records)
        reader.stop_at = time.monotonic() + 3
        reader.join(30)
        result.anomalies += _check(inputs, final, reader)
        result.copied = sum(len(v) for v in final.values())
        result.reader_records = sum(len(v) for v in reader.seen.values())
        result.reader_last_s = max(0.0, reader.last_at - start)
    finally:
        for proc in copiers.values():
            proc.kill()
        reader.stop_at = time.monotonic()
        broker.stop(keep_data=bool(result.anomalies))
    result.seconds = time.monotonic() - start
    return result


def _check(inputs: dict[int, list[bytes]], final: dict[int, list[tuple[int, bytes]]], reader: ConcurrentReader) -> list[Anomaly]:
    out: list[Anomaly] = []
    if reader.error:
        out.append(Anomaly("lost", f"the concurrent reader failed: {reader.error}"))
    for p, values in inputs.items():
        want = [b"copied:" + v for v in values]
        got = [v for _o, v in final[p]]
        counts: dict[bytes, int] = {}
        for v in got:
            counts[v] = counts.get(v, 0) + 1
        out += [Anomaly("duplicate", f"output-{p}: {v!r} copied {n} times") for v, n in counts.items() if n > 1]
        missing = set(want) - set(got)
        out += [Anomaly("lost", f"output-{p}: {v!r} never copied") for v in sorted(missing)[:20]]
        extra = set(got) - set(want)
        out += [Anomaly("uncommitted-read", f"output-{p}: {v!r} is not a copy of any input") for v in sorted(extra)[:20]]
        if not missing and not extra and got != want:
            out.append(Anomaly("nonmonotonic-send", f"output-{p}: records out of the input's order"))
        seen = reader.seen.get(p, [])
        prefix = final[p][: len(seen)]
        if seen != prefix:
            first = next(i for i, (a, b) in enumerate(zip(seen, prefix + [(-1, b"")] * len(seen))) if a != b)
            s_off, s_val = seen[first]
            kind = "aborted-read" if s_val not in set(got) else "inconsistent-offset"
            out.append(Anomaly(kind, f"output-{p}: the concurrent reader saw {s_val!r} at {s_off}, "
                                     f"the final read has {prefix[first] if first < len(prefix) else 'nothing'} there"))
    return out
