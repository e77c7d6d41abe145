"""Idempotent producers across broker crashes: nothing lost, nothing twice, nothing reordered
(R5, R6, R7; issue 4 "Done means").

A confluent-kafka producer (librdkafka, ``enable.idempotence=true``) and a kafka-python producer
(``enable_idempotence=True``, set explicitly although it is the 3.x default) each write 200,000
records with unique 100-byte payloads, concurrently, into one 4-partition topic. A background
thread injects faults at fixed shares of the records acknowledged: SIGKILL of the broker and a
start 1 s later, twice, and between the two kills a stall (SIGSTOP for 3.5 s, then SIGCONT)
longer than the clients' 2 s request timeout. The producers keep retrying (unbounded retries,
120 s delivery timeouts).

Why the stall: a SIGKILL alone almost never hits the instant between a batch being written and
its answer reaching the client, so a test with kills only passes even with deduplication turned
off (checked by running it against a broker with the producer-state check removed: no
duplicate). After a stall the clients have given up on requests that the broker then still
executes, and retry them with the same sequence numbers: without deduplication the log gets
hundreds of duplicates from each client; with it, none.

Afterwards a consumer reads every partition up to its high watermark and the test checks:

* every record was acknowledged (no delivery failed) and is in the log exactly once;
* no record at all is in the log twice;
* per producer and partition, records are in send order (no reordering by retries);
* every fault happened while both producers were still sending.

A second test covers librdkafka's client-side epoch bump (KIP-360): messages that time out in
flight make it bump its epoch locally (same producer id) and restart its sequences at 0.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import defaultdict
from typing import Callable

import pytest

from kafka_clients import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N_CONFLUENT = 200_000
N_KAFKA_PYTHON = 200_000
PARTITIONS = 4
#: (share of its records acknowledged by the producer furthest ahead, fault to inject then)
FAULTS = ((0.25, "sigkill"), (0.45, "stall"), (0.65, "sigkill"))
DOWN_SECONDS = 1.0
#: client-side request timeout, and a broker stall (SIGSTOP .. SIGCONT) longer than it
REQUEST_TIMEOUT_MS = 2_000
STALL_SECONDS = 3.5
DELIVERY_TIMEOUT_MS = 120_000
DEADLINE_S = 160.0

TAGS = {"confluent": b"c", "kafka-python": b"k"}


def payload(tag: bytes, i: int) -> bytes:
    """100 bytes: the producer tag and the send index, then padding."""
    return tag + b"-%08d-" % i + b"." * 89


def index_of(value: bytes) -> tuple[bytes, int]:
    return value[:1], int(value[2:10])


class Progress:
    """Acknowledged-record counters per producer, shared by the callbacks and the killer."""

    def __init__(self, totals: dict[str, int]) -> None:
        self.totals = totals
        self.counts = dict.fromkeys(totals, 0)
        self.changed = threading.Condition()

    def add(self, name: str) -> None:
        with self.changed:
            self.counts[name] += 1
            if self.counts[name] % 1000 == 0:
                self.changed.notify_all()

    def fraction(self) -> float:
        """How far the producer furthest ahead is."""
        return max(self.counts[n] / self.totals[n] for n in self.totals)

    def wait_for(self, fraction: float, deadline: float) -> bool:
        with self.changed:
            while self.fraction() < fraction:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 0.5))
            return True


class Run:
    """One producer's outcome: acknowledged send indexes and delivery errors."""

    def __init__(self, name: str, n: int) -> None:
        self.name = name
        self.n = n
        self.acked: set[int] = set()
        self.errors: list[str] = []
        self.finished_at: float | None = None
        self.crash: BaseException | None = None


def run_confluent(bootstrap: str, topic: str, run: Run, progress: Progress) -> None:
    from confluent_kafka import Producer

    tag = TAGS["confluent"]

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            run.errors.append(f"{index_of(msg.value())[1]}: {err}")
        else:
            run.acked.add(index_of(msg.value())[1])
            progress.add(run.name)

    p = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": DELIVERY_TIMEOUT_MS,
        "retry.backoff.ms": 50,
        "retry.backoff.max.ms": 500,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "queue.buffering.max.messages": 50_000,
        "socket.timeout.ms": REQUEST_TIMEOUT_MS,
    })
    for i in range(run.n):
        value = payload(tag, i)
        while True:
            try:
                p.produce(topic, value=value, partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(DELIVERY_TIMEOUT_MS / 1000 + 10)
    if left:
        run.errors.append(f"{left} records neither delivered nor failed after flush")


def run_kafka_python(bootstrap: str, topic: str, run: Run, progress: Progress) -> None:
    from kafka import KafkaProducer

    tag = TAGS["kafka-python"]
    prod = KafkaProducer(
        bootstrap_servers=bootstrap,
        enable_idempotence=True,
        acks="all",
        retries=2**31 - 1,
        delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
        max_in_flight_requests_per_connection=5,
        linger_ms=5,
        retry_backoff_ms=50,
        reconnect_backoff_ms=50,
        reconnect_backoff_max_ms=500,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
    )

    def ok(i: int) -> Callable[[object], None]:
        def cb(_md: object) -> None:
            run.acked.add(i)
            progress.add(run.name)
        return cb

    def failed(i: int) -> Callable[[BaseException], None]:
        return lambda exc: run.errors.append(f"{i}: {exc!r}")

    try:
        for i in range(run.n):
            fut = prod.send(topic, value=payload(tag, i), partition=i % PARTITIONS)
            fut.add_callback(ok(i))
            fut.add_errback(failed(i))
        prod.flush(timeout=DELIVERY_TIMEOUT_MS / 1000 + 10)
    finally:
        prod.close(timeout=10)


def read_all(bootstrap: str, topic: str, deadline: float, partitions: int = PARTITIONS) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition up to its high watermark: partition -> [(offset, value)]."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "idem-check", "enable.auto.commit": False,
                  "enable.partition.eof": False, "fetch.max.bytes": 8 << 20})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        todo = {p for p in range(partitions) if ends[p] > 0}
        while todo and time.monotonic() < deadline:
            for m in c.consume(num_messages=10_000, timeout=0.5):
                if m.error():
                    raise RuntimeError(f"consumer error: {m.error()}")
                out[m.partition()].append((m.offset(), m.value()))
                if m.offset() >= ends[m.partition()] - 1:
                    todo.discard(m.partition())
        assert not todo, f"partitions {sorted(todo)} not read to their end {ends} in time"
        return out
    finally:
        c.close()


def test_idempotent_producers_survive_two_sigkills(broker_factory) -> None:
    broker = broker_factory()
    topic = "idem-kill"
    create_topic("confluent", broker.bootstrap, topic, PARTITIONS)
    deadline = time.monotonic() + DEADLINE_S
    runs = {"confluent": Run("confluent", N_CONFLUENT), "kafka-python": Run("kafka-python", N_KAFKA_PYTHON)}
    progress = Progress({name: r.n for name, r in runs.items()})
    bodies = {"confluent": run_confluent, "kafka-python": run_kafka_python}
    faults: list[tuple[str, dict[str, int], dict[str, bool]]] = []
    killer_error: list[BaseException] = []

    def producer(name: str) -> None:
        run = runs[name]
        try:
            bodies[name](broker.bootstrap, topic, run, progress)
        except BaseException as exc:  # reported by the main thread
            run.crash = exc
        finally:
            run.finished_at = time.monotonic()

    def killer() -> None:
        try:
            for at, fault in FAULTS:
                if not progress.wait_for(at, deadline):
                    return
                busy = {name: r.finished_at is None for name, r in runs.items()}
                if fault == "sigkill":
                    broker.kill()
                    time.sleep(DOWN_SECONDS)
                    broker.start()
                else:
                    assert broker.pid is not None
                    os.kill(broker.pid, signal.SIGSTOP)
                    time.sleep(STALL_SECONDS)
                    os.kill(broker.pid, signal.SIGCONT)
                faults.append((fault, dict(progress.counts), busy))
        except BaseException as exc:
            killer_error.append(exc)

    threads = [threading.Thread(target=producer, args=(name,), name=name, daemon=True) for name in runs]
    threads.append(threading.Thread(target=killer, name="killer", daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), f"still running at the deadline: {[t.name for t in threads if t.is_alive()]}"
    assert not killer_error, killer_error
    for r in runs.values():
        assert r.crash is None, f"{r.name} producer crashed: {r.crash!r}"
    assert [f for f, *_ in faults] == [f for _, f in FAULTS], f"faults injected: {faults}"
    for fault, counts, busy in faults:
        assert all(busy.values()), f"a producer had finished before the {fault} at {counts}: {busy}"

    for r in runs.values():
        assert not r.errors, f"{r.name}: {len(r.errors)} records failed, e.g. {r.errors[:3]}"
        assert len(r.acked) == r.n, f"{r.name}: {len(r.acked)} of {r.n} acknowledged"

    log = read_all(broker.bootstrap, topic, time.monotonic() + 60)
    seen: dict[bytes, set[int]] = defaultdict(set)
    for p, recs in log.items():
        last: dict[bytes, int] = {}
        for off, value in recs:
            tag, i = index_of(value)
            assert i not in seen[tag], f"record {tag!r}-{i} is in the log twice (partition {p}, offset {off})"
            seen[tag].add(i)
            assert i % PARTITIONS == p, f"record {tag!r}-{i} in partition {p}"
            assert i > last.get(tag, -1), (
                f"partition {p} offset {off}: record {tag!r}-{i} after {tag!r}-{last[tag]}: reordered")
            last[tag] = i
    for name, r in runs.items():
        missing = r.acked - seen[TAGS[name]]
        assert not missing, f"{name}: {len(missing)} acknowledged records missing, e.g. {sorted(missing)[:5]}"
    total = sum(len(recs) for recs in log.values())
    assert total == sum(len(seen[t]) for t in seen)


def test_librdkafka_epoch_bump_after_message_timeout(broker_factory) -> None:
    """KIP-360 on the client side: when in-flight messages of an idempotent librdkafka producer
    time out (here: the broker is stalled with SIGSTOP for longer than ``message.timeout.ms``),
    librdkafka fails them (possibly persisted), drains, bumps its epoch locally (same producer
    id, epoch + 1, sequences from 0) and goes on. The broker must take the new epoch at sequence
    0; afterwards every acknowledged record is there once, nothing twice, in send order."""
    from confluent_kafka import Producer

    from oncelog.protocol import records

    broker = broker_factory()
    topic = "idem-bump"
    create_topic("confluent", broker.bootstrap, topic, 2)
    acked: set[int] = set()
    timed_out: list[int] = []
    other: list[str] = []

    def cb(err, msg) -> None:  # type: ignore[no-untyped-def]
        i = index_of(msg.value())[1]
        if err is None:
            acked.add(i)
        elif "timed out" in str(err).lower():
            timed_out.append(i)
        else:
            other.append(f"{i}: {err}")

    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": 2000, "socket.timeout.ms": 1500, "retry.backoff.ms": 50})
    n, stall_at = 30_000, 12_000
    for i in range(n):
        if i == stall_at:
            assert p.flush(30) == 0
            for j in range(stall_at, stall_at + 2000):  # these are in flight when the broker stalls
                p.produce(topic, value=payload(b"c", j), partition=j % 2, on_delivery=cb)
            assert broker.pid is not None
            os.kill(broker.pid, signal.SIGSTOP)
            until = time.monotonic() + 4.0
            while time.monotonic() < until:
                p.poll(0.1)
            os.kill(broker.pid, signal.SIGCONT)
        if stall_at <= i < stall_at + 2000:
            continue
        while True:
            try:
                p.produce(topic, value=payload(b"c", i), partition=i % 2, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0
    assert not other, other[:3]
    assert timed_out, "no message timed out: the stall did not provoke an epoch bump"
    assert len(acked) + len(timed_out) == n
    assert acked >= set(range(stall_at)) | set(range(stall_at + 2000, n))
    del p
    broker.stop()
    # The batch headers on disk: the same producer id, and a higher epoch after the stall.
    epochs: dict[int, set[int]] = defaultdict(set)
    for seg in sorted((broker.data_dir / f"{topic}-0").glob("*.log")) + sorted((broker.data_dir / f"{topic}-1").glob("*.log")):
        for _pos, h in records.iter_batches(seg.read_bytes()):
            epochs[h.producer_id].add(h.producer_epoch)
    assert len(epochs) == 1 and len(next(iter(epochs.values()))) >= 2, f"producer ids and epochs in the log: {dict(epochs)}"
    broker.start()
    log = read_all(broker.bootstrap, topic, time.monotonic() + 60, partitions=2)
    seen: set[int] = set()
    for part, recs in log.items():
        last = -1
        for off, value in recs:
            i = index_of(value)[1]
            assert i not in seen, f"record {i} twice (partition {part}, offset {off})"
            assert i > last, f"partition {part} offset {off}: record {i} after {last}: reordered"
            seen.add(i)
            last = i
    assert acked <= seen
