"""Durability of the broker process (R1, R2, R22).

(a) Every record acknowledged with acks=all survives kill -9 of the broker: after a restart it is
    there exactly once, at its acknowledged offset, in order — with the producer stopped before
    the kill (confluent-kafka and kafka-python) and with an idempotent producer still sending
    while the broker dies and comes back (R6/R7 make the retries exactly-once).
(b) A damaged active segment is repaired on restart: a tail cut mid-batch, garbage appended, a
    corrupt byte in the last batch, deleted index files. The broker starts, serves every whole
    batch before the damage, its log end offset is the offset after the last whole batch, and
    new appends work and are readable.
(c) Startup on an empty data directory (target < 1 s; asserted with a generous bound).
"""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

import pytest

from kafka_clients import consume, create_topic, produce
from oncelog.process import BrokerProcess

pytestmark = pytest.mark.integration


def _items(n: int, partitions: int, tag: str) -> list[tuple[int, bytes, bytes]]:
    return [(i % partitions, f"k{i}".encode(), f"{tag}-{i:07d}".encode().ljust(100, b".")) for i in range(n)]


def _by_partition(records: list) -> dict[int, list[tuple[int, bytes]]]:
    """(partition, offset, key, value) records -> partition -> [(offset, value)] in offset order."""
    out: dict[int, list[tuple[int, bytes]]] = {}
    for p, off, _k, v in records:
        out.setdefault(p, []).append((off, v))
    for lst in out.values():
        lst.sort()
    return out


def _watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "oncelog-test-watermarks"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    finally:
        c.close()


# -- (a) kill -9 after acknowledged writes ---------------------------------------------------


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_acknowledged_records_survive_kill_9(broker_factory, client: str) -> None:
    """R1, R2: produce with acks=all, SIGKILL (no flush, no clean close), restart."""
    b: BrokerProcess = broker_factory()
    topic = f"durable-{client}"
    create_topic("confluent", b.bootstrap, topic, 3)
    items = _items(6000, 3, client)
    acked = produce(client, b.bootstrap, topic, items, acks="all")
    assert len(acked) == len(items)
    b.kill()
    b.start()
    got = consume(client, b.bootstrap, topic, [0, 1, 2], expected=len(items), timeout=60, settle=0.5)
    assert len(got) == len(items), f"{len(got)} records after the restart, {len(items)} acknowledged"
    stored = {(p, off): v for p, off, _k, v in got}
    sent = {p: [v for ip, _k, v in items if ip == p] for p in range(3)}
    # Acknowledgements come back in send order within a partition (not across partitions).
    for p in range(3):
        offsets = [off for ap, off in acked if ap == p]
        for off, v in zip(offsets, sent[p], strict=True):
            assert stored.get((p, off)) == v, f"acknowledged record {v[:12]!r} not at {p}/{off}"
    for p, recs in _by_partition(got).items():
        assert [v for _off, v in recs] == sent[p], f"partition {p}: records missing, duplicated or reordered"
        assert [off for off, _v in recs] == list(range(len(sent[p]))), f"partition {p}: offsets not contiguous"


def test_idempotent_producer_across_kill_9_in_mid_stream(broker_factory) -> None:
    """R1, R6, R7: the broker is killed while an idempotent confluent-kafka producer is sending
    and restarted on the same port; the producer retries what was in flight. Every record it
    acknowledges is stored exactly once, in send order."""
    from confluent_kafka import Producer

    b: BrokerProcess = broker_factory()
    topic = "durable-mid-stream"
    create_topic("confluent", b.bootstrap, topic, 2)
    items = _items(40_000, 2, "mid")
    acked: list[tuple[int, int, bytes]] = []
    errors: list[str] = []

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    p = Producer({
        "bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2,
        "batch.num.messages": 500, "message.timeout.ms": 60_000, "reconnect.backoff.max.ms": 500,
    })
    killed = threading.Event()

    def kill_and_restart() -> None:
        deadline = time.monotonic() + 30
        while len(acked) < 5000 and time.monotonic() < deadline:
            time.sleep(0.005)
        b.kill()
        killed.set()
        time.sleep(0.5)
        b.start()

    t = threading.Thread(target=kill_and_restart)
    t.start()
    try:
        for part, key, value in items:
            while True:
                try:
                    p.produce(topic, value=value, key=key, partition=part, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
        left = p.flush(90)
    finally:
        t.join(60)
    assert killed.is_set()
    assert left == 0 and not errors, f"{left} undelivered; errors {errors[:5]}"
    assert len(acked) == len(items)
    got = consume("confluent", b.bootstrap, topic, [0, 1], expected=len(items), timeout=90, settle=0.5)
    stored = {(p_, off): v for p_, off, _k, v in got}
    assert len(stored) == len(got) == len(items), f"{len(got)} records stored, {len(items)} acknowledged"
    for part, off, v in acked:
        assert stored.get((part, off)) == v, f"acknowledged record {v[:12]!r} not at {part}/{off}"
    sent = {q: [v for ip, _k, v in items if ip == q] for q in (0, 1)}
    for q, recs in _by_partition(got).items():
        assert [v for _off, v in recs] == sent[q], f"partition {q}: records missing, duplicated or reordered"


# -- (b) damaged active segment ----------------------------------------------------------------

SEGMENT_BYTES = 40_000  # a few ~10 KB batches per segment, so the log has several segments
ROUNDS = 12  # produce rounds; each flush makes (at least) one batch


def _batches(log_file: Path) -> list[tuple[int, int, int, int]]:
    """(position, size, base offset, next offset) of each whole batch in a segment file."""
    data = log_file.read_bytes()
    out, pos = [], 0
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        size = 12 + length
        if pos + size > len(data):
            break
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        out.append((pos, size, base, base + delta + 1))
        pos += size
    return out


def _produce_rounds(b: BrokerProcess, topic: str) -> list[tuple[int, bytes]]:
    """ROUNDS flushes of 100 records to partition 0; returns [(offset, value)] acknowledged."""
    acked: list[tuple[int, bytes]] = []
    for r in range(ROUNDS):
        items = [(0, None, f"r{r:02d}-{i:03d}".encode().ljust(100, b"~")) for i in range(100)]
        offsets = produce("confluent", b.bootstrap, topic, items)
        acked += [(off, v) for (_p, off), (_q, _k, v) in zip(offsets, items)]
    acked.sort()
    assert [o for o, _ in acked] == list(range(len(acked)))
    return acked


def _active_segment(b: BrokerProcess, topic: str) -> Path:
    logs = sorted((b.data_dir / f"{topic}-0").glob("*.log"))
    assert len(logs) >= 3, f"expected several segments, found {[p.name for p in logs]}"
    return logs[-1]


def _damage_cut_mid_batch(seg: Path) -> int:
    pos, size, base, _next = _batches(seg)[-1]
    os.truncate(seg, pos + size // 2)
    return base


def _damage_garbage_appended(seg: Path) -> int:
    end = _batches(seg)[-1][3]
    with open(seg, "ab") as f:
        f.write(os.urandom(3000))
    return end


def _damage_corrupt_byte(seg: Path) -> int:
    pos, size, base, _next = _batches(seg)[-1]
    with open(seg, "r+b") as f:
        f.seek(pos + size - 40)  # inside the records, covered by the CRC
        byte = f.read(1)
        f.seek(pos + size - 40)
        f.write(bytes([byte[0] ^ 0xFF]))
    return base


def _damage_indexes_deleted(seg: Path) -> int:
    end = _batches(seg)[-1][3]
    for d in seg.parent.glob("*.index"):
        d.unlink()
    for d in seg.parent.glob("*.timeindex"):
        d.unlink()
    return end


def _damage_cut_and_indexes_deleted(seg: Path) -> int:
    base = _damage_cut_mid_batch(seg)
    _damage_indexes_deleted(seg)
    return base


DAMAGE = {
    "cut-mid-batch": _damage_cut_mid_batch,
    "garbage-appended": _damage_garbage_appended,
    "corrupt-byte-in-last-batch": _damage_corrupt_byte,
    "indexes-deleted": _damage_indexes_deleted,
    "cut-and-indexes-deleted": _damage_cut_and_indexes_deleted,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_active_segment_is_repaired_on_restart(broker_factory, damage: str) -> None:
    """R1, R22: the broker repairs the damage, serves what precedes it, and appends after it."""
    b: BrokerProcess = broker_factory(overrides={"log.segment.bytes": str(SEGMENT_BYTES)})
    topic = f"damaged-{damage}"
    create_topic("confluent", b.bootstrap, topic, 1)
    acked = _produce_rounds(b, topic)
    assert b.stop() == 0
    seg = _active_segment(b, topic)
    expected_end = DAMAGE[damage](seg)
    assert 0 < expected_end <= len(acked)
    b.start()

    low, high = _watermarks(b.bootstrap, topic, 0)
    assert (low, high) == (0, expected_end), f"watermarks after recovery {(low, high)}, expected (0, {expected_end})"
    got = consume("confluent", b.bootstrap, topic, [0], expected=expected_end, timeout=60, settle=0.5)
    assert [(off, v) for _p, off, _k, v in got] == acked[:expected_end]

    # New appends go after the last whole batch and read back with everything before them.
    more = [(0, None, f"after-{i:03d}".encode()) for i in range(50)]
    offsets = produce("confluent", b.bootstrap, topic, more)
    assert [off for _p, off in offsets] == list(range(expected_end, expected_end + 50))
    got = consume("kafka-python", b.bootstrap, topic, [0], expected=expected_end + 50, timeout=60, settle=0.5)
    assert [(off, v) for _p, off, _k, v in got] == acked[:expected_end] + [
        (expected_end + i, v) for i, (_p, _k, v) in enumerate(more)
    ]
    assert "Traceback" not in b.log_tail(20_000)


# -- (c) startup ------------------------------------------------------------------------------


def test_startup_on_empty_data_dir(tmp_path: Path, record_property) -> None:  # type: ignore[no-untyped-def]
    """Popen to the ready line, on an empty data directory. Target < 1 s (docs/PERFORMANCE.md);
    the assertion is generous because CI machines are shared."""
    times = []
    for i in range(3):
        b = BrokerProcess(tmp_path / f"empty-{i}")
        t0 = time.perf_counter()
        b.start()
        times.append(time.perf_counter() - t0)
        try:
            assert b.stop() == 0
        finally:
            b.kill()
    best = min(times)
    record_property("startup_seconds", best)
    print(f"broker startup on an empty data dir: {', '.join(f'{t:.3f}' for t in times)} s")
    assert best < 5.0, f"broker startup took {best:.2f} s"
