"""Compaction on a real broker (R4): a compacted topic with many updates per key shrinks to the
last value of each key, tombstones go once delete.retention.ms has passed, and every client reads
the compacted log (with its offset gaps) correctly."""

from __future__ import annotations

import time

import pytest

from kafka_clients import CLIENTS, consume, create_topic, produce

pytestmark = pytest.mark.integration

KEYS, UPDATES, DELETED = 50, 40, 10
DELETE_RETENTION_MS = 4_000


def _read_all(bootstrap: str, topic: str, timeout: float = 30) -> list[tuple[int, bytes, bytes | None]]:
    """Every record of partition 0 from the log start to the high watermark (confluent-kafka)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in c.consume(1000, 0.2):
                if m.error():
                    if m.error().code() == m.error()._PARTITION_EOF:
                        return out
                    raise RuntimeError(m.error())
                out.append((m.offset(), m.key(), m.value()))
                if m.offset() >= high - 1:
                    return out
        raise AssertionError(f"could not read {topic} to its end ({high}) in {timeout}s")
    finally:
        c.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_compacted_topic_keeps_last_values_and_drops_old_tombstones(broker_factory, client: str) -> None:
    broker = broker_factory(overrides={"log.cleaner.backoff.ms": "200"})
    topic = f"compacted-{client}"
    create_topic(client, broker.bootstrap, topic, 1, {
        "cleanup.policy": "compact", "segment.bytes": "16384", "delete.retention.ms": str(DELETE_RETENTION_MS)})
    latest: dict[bytes, bytes] = {}
    items = []
    for u in range(UPDATES):
        for k in range(KEYS):
            key, value = b"k%02d" % k, (b"u%03d-" % u) + b"x" * 100
            items.append((0, key, value))
            latest[key] = value
    produce(client, broker.bootstrap, topic, items)
    produce(client, broker.bootstrap, topic, [(0, b"k%02d" % k, None) for k in range(DELETED)])  # type: ignore[misc]
    tombstoned_at = time.monotonic()
    # push the tombstones out of the active segment (the cleaner never touches it)
    produce(client, broker.bootstrap, topic, [(0, b"roll", b"r" * 100) for _ in range(300)])

    def live_keys_compacted() -> list | None:
        recs = _read_all(broker.bootstrap, topic)
        counts: dict[bytes, int] = {}
        for _, k, _ in recs:
            counts[k] = counts.get(k, 0) + 1
        if all(counts.get(b"k%02d" % k) == 1 for k in range(DELETED, KEYS)):
            return recs
        return None

    deadline = time.monotonic() + 60
    while (recs := live_keys_compacted()) is None:
        assert time.monotonic() < deadline, "the topic was not compacted in 60s"
        time.sleep(0.5)
    for _, k, v in recs:
        if k != b"roll" and int(k[1:]) >= DELETED:
            assert v == latest[k], "the last value of each key is kept"
        elif k != b"roll":
            assert v is None, "a deleted key's values are gone; at most its tombstone is left"
    assert len(recs) < len(items) / 4
    offsets = [o for o, _, _ in recs]
    assert offsets == sorted(offsets) and offsets[-1] == len(items) + DELETED + 300 - 1, "offsets never change"

    deadline = time.monotonic() + 60
    while any(k is not None and k != b"roll" and int(k[1:]) < DELETED for _, k, _ in _read_all(broker.bootstrap, topic)):
        assert time.monotonic() < deadline, "tombstones were not removed in 60s"
        time.sleep(0.5)
    assert time.monotonic() - tombstoned_at >= DELETE_RETENTION_MS / 1000, "tombstones stay delete.retention.ms"

    final = _read_all(broker.bootstrap, topic)
    for reader in CLIENTS:  # offset gaps, and the empty batches an idempotent producer's last batch leaves
        got = consume(reader, broker.bootstrap, topic, [0], expected=len(final), timeout=60, settle=0.5)
        assert [(o, k, v) for _, o, k, v in got] == final, f"{reader} reads the compacted log"
