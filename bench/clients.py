"""Client-side measurements with confluent-kafka, the same settings against every system.

Every function takes a bootstrap address and a topic, is bounded in time, and raises on any
delivery error: a figure is only reported for work that was fully acknowledged.

Producer settings (all modes): acks=all, linger.ms=5, batch.size 1 MB, at most 5 requests in
flight, no compression (except the compressed produce cases), delivery reports for errors only (no Python callback per record).
Modes: ``plain`` (enable.idempotence=false), ``idempotent``, ``transactional``
(idempotent + transactional.id; a commit every ``txn_records`` records or every ``txn_ms``).
"""

from __future__ import annotations

import struct
import threading
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

MODES = ("plain", "idempotent", "transactional")


def producer(bootstrap: str, mode: str, **extra: object) -> Producer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "max.in.flight.requests.per.connection": 5,
        "compression.type": "none",
        "queue.buffering.max.messages": 500_000,
        "queue.buffering.max.kbytes": 64 * 1024,  # deep enough for 5 x 1 MB in flight; a deeper queue only costs memory
        "message.timeout.ms": 60_000,  # <= transaction.timeout.ms (60 s default)
        "delivery.report.only.error": True,
        "enable.idempotence": mode != "plain",
    }
    if mode == "transactional":
        conf["transactional.id"] = f"bench-{uuid.uuid4().hex[:12]}"
    conf.update(extra)
    return Producer(conf)


class _Failures:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def __call__(self, err, _msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            self.errors.append(str(err))

    def check(self) -> None:
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} delivery errors, first: {self.errors[0]}")


def _put(p: Producer, topic: str, value: bytes, partition: int, cb: _Failures, deadline: float) -> None:
    while True:
        try:
            p.produce(topic, value, partition=partition, on_delivery=cb)
            return
        except BufferError:
            p.poll(0.005)
            if time.monotonic() > deadline:
                raise TimeoutError("producer queue did not drain") from None


def text_payload(size: int) -> bytes:
    """``size`` bytes of word-like text (compresses about 3x, as log lines and JSON do; the
    ``b"x" * size`` of uncompressed runs would compress 100x and measure nothing)."""
    import random

    rng = random.Random(size)
    words = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(400)]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + b" "
    return bytes(out[:size])


def _ready_producer(bootstrap: str, mode: str, size: int, compression: str = "none"):  # type: ignore[no-untyped-def]
    """(failure recorder, producer, payload, transactional?) with a transaction begun if so."""
    cb = _Failures()
    p = producer(bootstrap, mode, **{"compression.type": compression})
    txn = mode == "transactional"
    if txn:
        p.init_transactions(30)
        p.begin_transaction()
    return cb, p, (b"x" * size if compression == "none" else text_payload(size)), txn


def produce_count(bootstrap: str, topic: str, n: int, size: int, mode: str, partitions: int = 1,
                  txn_records: int = 10_000, timeout: float = 300.0, compression: str = "none") -> float:
    """Records/s for ``n`` records of ``size`` bytes, from the first ``produce()`` to the end of
    ``flush()`` (transactional: the last commit), after one warm-up record (connection set-up
    and InitProducerId are not in the figure)."""
    cb, p, value, txn = _ready_producer(bootstrap, mode, size, compression)
    _put(p, topic, value, 0, cb, time.monotonic() + 30)
    if txn:
        p.commit_transaction(30)
    elif p.flush(30):
        raise TimeoutError("warm-up record not acknowledged")
    deadline = time.monotonic() + timeout
    t0 = time.perf_counter()
    if txn:
        p.begin_transaction()
    for i in range(n):
        _put(p, topic, value, i % partitions, cb, deadline)
        if i % 1000 == 0:
            p.poll(0)
        if txn and (i + 1) % txn_records == 0:
            p.commit_transaction(max(deadline - time.monotonic(), 1.0))
            if i + 1 < n:
                p.begin_transaction()
    if txn and n % txn_records:
        p.commit_transaction(max(deadline - time.monotonic(), 1.0))
    left = p.flush(max(deadline - time.monotonic(), 1.0))
    seconds = time.perf_counter() - t0
    cb.check()
    if left:
        raise TimeoutError(f"{left} records not acknowledged")
    return n / seconds


def produce_timed(bootstrap: str, topic: str, seconds: float, size: int, mode: str, partitions: int = 1,
                  txn_ms: int = 100) -> float:
    """Records/s acknowledged over ``seconds`` of producing (commits every ``txn_ms`` included)."""
    cb, p, value, txn = _ready_producer(bootstrap, mode, size)
    start = time.monotonic()
    end = start + seconds
    deadline = end + 120
    next_commit = start + txn_ms / 1000
    i = 0
    while True:
        now = time.monotonic()
        if now >= end:
            break
        _put(p, topic, value, i % partitions, cb, deadline)
        i += 1
        if i % 1000 == 0:
            p.poll(0)
        if txn and now >= next_commit:
            p.commit_transaction(30)
            p.begin_transaction()
            next_commit = time.monotonic() + txn_ms / 1000
    if txn:
        p.commit_transaction(30)
    left = p.flush(max(deadline - time.monotonic(), 1.0))
    cb.check()
    if left:
        raise TimeoutError(f"{left} records not acknowledged")
    return i / (time.monotonic() - start)


def consumer(bootstrap: str, isolation: str, **extra: object) -> Consumer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "isolation.level": isolation,
        "fetch.max.bytes": 50 * 1024 * 1024,
        "fetch.wait.max.ms": 100,
    }
    conf.update(extra)
    return Consumer(conf)


def consume_all(bootstrap: str, topic: str, partitions: int, isolation: str, timeout: float = 120.0) -> float:
    """Records/s reading every partition from its start to its end offset as seen before the
    read (read_committed: the last stable offset; the mock may have dropped the oldest data,
    so the count is what the read actually returns). Timed from ``assign`` to the record at the
    end offset of every partition."""
    c = consumer(bootstrap, isolation)
    try:
        ends = {}
        for p in range(partitions):
            _lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if hi > 0:
                ends[p] = hi
        got = 0
        deadline = time.monotonic() + timeout
        t0 = time.perf_counter()
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        left = dict(ends)
        while left:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumed {got} records in {timeout}s, partitions left: {sorted(left)}")
            for m in c.consume(num_messages=10_000, timeout=0.2):
                if m.error():
                    raise KafkaException(m.error())
                got += 1
                p = m.partition()
                if p in left and m.offset() >= left[p] - 2:  # the last data record (a commit marker may follow)
                    del left[p]
            if isolation == "read_committed" and left:
                # The last data record before the end is followed by a control record; the
                # consumer's position past it is the only sign that the partition is done.
                for tp in c.position([TopicPartition(topic, p) for p in list(left)]):
                    if tp.offset >= left[tp.partition]:
                        del left[tp.partition]
        seconds = time.perf_counter() - t0
    finally:
        c.close()
    return got / seconds


def latency(bootstrap: str, topic: str, rate: int, seconds: float, txn_ms: int, size: int = 100) -> list[float]:
    """End-to-end latencies (ms): a transactional producer (acks=all) sends ``rate`` records/s,
    committing every ``txn_ms``; a read_committed consumer in another thread of this process
    notes when each record arrives. Latency = arrival − the ``produce()`` call, so the wait for
    the commit is included, as an exactly-once reader sees it."""
    stamp = struct.Struct(">d")
    pad = b"x" * (size - stamp.size)
    c = consumer(bootstrap, "read_committed", **{"fetch.wait.max.ms": 5, "fetch.min.bytes": 1})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    samples: list[float] = []
    stop = threading.Event()
    expected = [None]

    def reader() -> None:
        end = time.monotonic() + seconds + 60
        while not stop.is_set() and time.monotonic() < end:
            # poll(), not consume(n): consume() waits for n records or its timeout
            m = c.poll(0.05)
            if m is not None and not m.error():
                samples.append((time.perf_counter() - stamp.unpack_from(m.value())[0]) * 1000)
            if expected[0] is not None and len(samples) >= expected[0]:
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    time.sleep(1.0)  # the consumer is assigned and fetching before the first record
    cb = _Failures()
    p = producer(bootstrap, "transactional", **{"linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    start = time.perf_counter()
    next_commit = start + txn_ms / 1000
    sent = 0
    deadline = time.monotonic() + seconds + 60
    while True:
        now = time.perf_counter()
        if now - start >= seconds:
            break
        due = int((now - start) * rate) + 1
        while sent < due:
            _put(p, topic, stamp.pack(time.perf_counter()) + pad, 0, cb, deadline)
            sent += 1
        p.poll(0)
        if now >= next_commit:
            p.commit_transaction(30)
            p.begin_transaction()
            next_commit += txn_ms / 1000
        time.sleep(0.0005)
    p.commit_transaction(30)
    expected[0] = sent
    t.join(60)
    stop.set()
    c.close()
    cb.check()
    if len(samples) < sent:
        raise RuntimeError(f"only {len(samples)} of {sent} records delivered")
    return samples


def aborted_visible(bootstrap: str, topic: str, n: int = 100) -> int:
    """How many records of an aborted transaction a read_committed consumer delivers (0 is
    correct). Writes ``n`` records and aborts, then ``n`` and commits; reads to the end."""
    p = producer(bootstrap, "transactional")
    p.init_transactions(30)
    for tag, commit in ((b"aborted", False), (b"committed", True)):
        p.begin_transaction()
        for _ in range(n):
            p.produce(topic, tag, partition=0)
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    c = consumer(bootstrap, "read_committed")
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen = {b"aborted": 0, b"committed": 0}
    deadline = time.monotonic() + 30
    try:
        while seen[b"committed"] < n and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.2):
                if not m.error():
                    seen[m.value()] = seen.get(m.value(), 0) + 1
    finally:
        c.close()
    if seen[b"committed"] < n:
        raise TimeoutError(f"committed records not delivered ({seen[b'committed']} of {n})")
    return seen[b"aborted"]


def _run_concurrently(ps: list[Producer], work, timeout: float) -> float:  # type: ignore[no-untyped-def]
    """Run ``work(i, producer)`` for every producer in a thread of its own (the client library
    works outside the GIL), all released at once; returns the seconds from the release to the
    last thread's end. Raises RuntimeError if any failed or is still running after ``timeout``."""
    errors: list[str] = []
    go = threading.Event()

    def run(i: int, p: Producer) -> None:
        go.wait(60)
        try:
            work(i, p)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"producer {i}: {e}")

    threads = [threading.Thread(target=run, args=(i, p), daemon=True) for i, p in enumerate(ps)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    t0 = time.perf_counter()
    go.set()
    for t in threads:
        t.join(max(deadline - time.monotonic(), 1.0))
    elapsed = time.perf_counter() - t0
    hung = sum(t.is_alive() for t in threads)
    if errors or hung:
        raise RuntimeError(f"{len(errors)} producers failed ({errors[:2]}), {hung} hung")
    return elapsed


def produce_concurrent(bootstrap: str, topic: str, producers: int, per_producer: int, size: int,
                       txn_records: int, partitions: int, timeout: float = 300.0) -> float:
    """Aggregate records/s of ``producers`` transactional producers (one thread each; the
    client library works outside the GIL), each sending ``per_producer`` records in
    transactions of ``txn_records``, producer ``i`` writing to partition ``i % partitions``.
    Timed from the start of all (after every producer's InitProducerId) to the last commit."""
    ps = []
    for _ in range(producers):
        p = producer(bootstrap, "transactional", **{"queue.buffering.max.kbytes": 32 * 1024})
        p.init_transactions(60)
        ps.append(p)
    value = b"x" * size
    deadline = time.monotonic() + timeout

    def work(i: int, p: Producer) -> None:
        cb = _Failures()
        for start in range(0, per_producer, txn_records):
            p.begin_transaction()
            for _ in range(min(txn_records, per_producer - start)):
                _put(p, topic, value, i % partitions, cb, deadline)
            p.commit_transaction(max(deadline - time.monotonic(), 1.0))
        cb.check()

    seconds = _run_concurrently(ps, work, timeout)
    return producers * per_producer / seconds


def transactions_per_second(bootstrap: str, topic: str, producers: int, seconds: float) -> float:
    """Committed transactions per second over ``seconds``, each transaction one 100 B record
    (begin, produce, commit), from ``producers`` concurrent transactional producers (one thread
    each, producer ``i`` on partition ``i``). InitProducerId is outside the timed part."""
    ps = []
    for _ in range(producers):
        p = producer(bootstrap, "transactional", **{"linger.ms": 0, "queue.buffering.max.kbytes": 1024})
        p.init_transactions(60)
        ps.append(p)
    commits = [0] * producers
    value = b"x" * 100

    def work(i: int, p: Producer) -> None:
        cb = _Failures()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            p.begin_transaction()
            _put(p, topic, value, i, cb, end + 60)
            p.commit_transaction(60)
            commits[i] += 1
        cb.check()

    elapsed = _run_concurrently(ps, work, seconds + 120)
    return sum(commits) / elapsed


def footprint(total_bytes: int, partitions: int, size: int = 1024) -> dict[str, float]:
    """A broker of its own (oncelog) takes ``total_bytes`` of ``size``-byte records written
    round-robin into ``partitions`` partitions; then it is stopped and started again with that
    data on disk. Returns its peak RSS while writing, the restart time, its RSS once restarted
    and after reading 100 MB back (MB, s)."""
    import shutil
    import tempfile
    from pathlib import Path

    from bench.common import RssSampler
    from oncelog.process import BrokerProcess

    from bench.systems import create_topic_admin

    work = Path(tempfile.mkdtemp(prefix="oncelog-footprint-"))
    try:
        b = BrokerProcess(work / "data", log_path=work / "broker.log").start(timeout=60)
        try:
            create_topic_admin(b.bootstrap, "footprint", partitions)
            sampler = RssSampler(b.pid)
            n = total_bytes // size
            rate = produce_count(b.bootstrap, "footprint", n, size, "plain", partitions=partitions, timeout=900)
            writing = sampler.peak()
            sampler.stop()
            on_disk = sum(f.stat().st_size for f in (work / "data").rglob("*") if f.is_file())
            b.stop()
            t0 = time.perf_counter()
            b.start(timeout=300)
            restart = time.perf_counter() - t0
            sampler = RssSampler(b.pid)
            after_restart = sampler.sample()
            c = consumer(b.bootstrap, "read_committed")
            c.assign([TopicPartition("footprint", p, OFFSET_BEGINNING) for p in range(partitions)])
            got, deadline = 0, time.monotonic() + 120
            while got < 100_000_000 // size and time.monotonic() < deadline:
                msgs = c.consume(10_000, 1.0)
                got += len(msgs)
            c.close()
            after_read = sampler.peak()
            sampler.stop()
        finally:
            b.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    mb = 1_000_000
    return {"GB on disk": on_disk / 1e9, "write rate, 1 KiB rec/s": rate, "peak RSS MB while writing": writing / mb,
            "restart s": restart, "RSS MB after restart": after_restart / mb,
            "peak RSS MB reading 100 MB back": after_read / mb}
