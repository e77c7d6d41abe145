"""A transactional copier (consume-transform-produce, R17) as a separate process, for tests and
fault scenarios that SIGKILL it:
``python -m oncelog_tools.verify.copier CLIENT BOOTSTRAP INPUT OUTPUT PARTITIONS TXN_ID GROUP SEED``.
PARTITIONS is a count (partitions 0..N-1) or a comma-separated list of partitions (``3,`` for
partition 3 alone).

It reads its input partitions (assign, not subscribe: one copier, one transactional.id, as in
Kafka's own transactions_test.py) from the group's committed offsets, and for each poll writes
``copied:<value>`` to the output and commits the input offsets in the same transaction
(sendOffsetsToTransaction). A third of the transactions are aborted at random; after an abort it
rewinds to the committed offsets. It exits 0 once it has copied everything up to the input's end
offsets, as measured at its start (the input is written before the copier starts). Any client
error ends it with status 3, like a crash: whoever runs it starts it again, and the new instance
fences the old one's transaction.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from pathlib import Path

ABORT_FRACTION = 1 / 3
#: records per transaction at most, and a pause after each transaction: a supervisor that wants
#: its faults to land while copying is still going on slows the copier down with these
MAX_POLL = int(os.environ.get("ONCELOG_COPIER_MAX_POLL", "500"))
PAUSE_S = float(os.environ.get("ONCELOG_COPIER_PAUSE_MS", "0")) / 1000
HEARTBEAT_ENV = "ONCELOG_COPIER_HEARTBEAT"


def heartbeat() -> None:
    """Touch the file named by $ONCELOG_COPIER_HEARTBEAT after every finished transaction, so a
    supervisor can tell a copier that is making progress from one whose client hangs
    (librdkafka's send_offsets_to_transaction can block past its timeout when the broker
    restarts under it: librdkafka issue #5456)."""
    path = os.environ.get(HEARTBEAT_ENV)
    if path:
        Path(path).touch()
    if PAUSE_S:
        import time

        time.sleep(PAUSE_S)


def main() -> int:
    client, bootstrap, src, dst, nparts, tid, group, seed = sys.argv[1:9]
    parts = [int(p) for p in nparts.split(",") if p] if "," in nparts else list(range(int(nparts)))
    rng = random.Random(int(seed))
    if client == "confluent":
        return confluent(bootstrap, src, dst, parts, tid, group, rng)
    if client == "kafka-python":
        return kafka_python(bootstrap, src, dst, parts, tid, group, rng)
    if client == "aiokafka":
        return asyncio.run(aiokafka_copier(bootstrap, src, dst, parts, tid, group, rng))
    raise SystemExit(f"unknown client {client}")


def confluent(bootstrap, src, dst, parts, tid, group, rng) -> int:  # type: ignore[no-untyped-def]
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5,
                         "transaction.timeout.ms": 10_000})
    producer.init_transactions(60)
    tps = [TopicPartition(src, p) for p in parts]
    ends = {p: consumer.get_watermark_offsets(TopicPartition(src, p), timeout=30)[1] for p in parts}

    def rewind() -> dict[int, int]:
        committed = consumer.committed(tps, timeout=30)
        pos = {tp.partition: (tp.offset if tp.offset >= 0 else 0) for tp in committed}
        consumer.assign([TopicPartition(src, p, pos[p] if pos[p] > 0 else OFFSET_BEGINNING) for p in parts])
        return pos

    pos = rewind()
    print("started", pos, flush=True)
    heartbeat()
    while any(pos[p] < ends[p] for p in parts):
        msgs = [m for m in consumer.consume(MAX_POLL, 1.0) if not m.error()]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce(dst, value=b"copied:" + m.value(), key=m.key(), partition=m.partition())
        nxt = dict(pos)
        for m in msgs:
            nxt[m.partition()] = max(nxt[m.partition()], m.offset() + 1)
        producer.send_offsets_to_transaction([TopicPartition(src, p, o) for p, o in nxt.items()],
                                             consumer.consumer_group_metadata(), 30)
        if rng.random() < ABORT_FRACTION:
            producer.abort_transaction(30)
            pos = rewind()
        else:
            producer.commit_transaction(30)
            pos = nxt
        heartbeat()
    consumer.close()
    print("done", flush=True)
    return 0


def kafka_python(bootstrap, src, dst, parts, tid, group, rng) -> int:  # type: ignore[no-untyped-def]
    from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             isolation_level="read_committed", auto_offset_reset="earliest")
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, linger_ms=5,
                             transaction_timeout_ms=10_000)
    producer.init_transactions()
    tps = [TopicPartition(src, p) for p in parts]
    consumer.assign(tps)
    ends = {tp.partition: o for tp, o in consumer.end_offsets(tps).items()}

    def rewind() -> dict[int, int]:
        pos = {}
        for tp in tps:
            c = consumer.committed(tp)
            pos[tp.partition] = c if c is not None else 0
            consumer.seek(tp, pos[tp.partition])
        return pos

    pos = rewind()
    print("started", pos, flush=True)
    heartbeat()
    while any(pos[p] < ends[p] for p in parts):
        batch = consumer.poll(timeout_ms=1000, max_records=MAX_POLL)
        msgs = [m for ms in batch.values() for m in ms]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.send(dst, value=b"copied:" + m.value, key=m.key, partition=m.partition)
        nxt = dict(pos)
        for m in msgs:
            nxt[m.partition] = max(nxt[m.partition], m.offset + 1)
        producer.send_offsets_to_transaction(
            {TopicPartition(src, p): OffsetAndMetadata(o, "", -1) for p, o in nxt.items()}, group
        )
        if rng.random() < ABORT_FRACTION:
            producer.abort_transaction()
            pos = rewind()
        else:
            producer.commit_transaction()
            pos = nxt
        heartbeat()
    consumer.close()
    print("done", flush=True)
    return 0


async def aiokafka_copier(bootstrap, src, dst, parts, tid, group, rng) -> int:  # type: ignore[no-untyped-def]
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                isolation_level="read_committed", auto_offset_reset="earliest")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, linger_ms=5,
                                transaction_timeout_ms=10_000)
    await consumer.start()
    await producer.start()
    tps = [TopicPartition(src, p) for p in parts]
    consumer.assign(tps)
    ends = {tp.partition: o for tp, o in (await consumer.end_offsets(tps)).items()}

    async def rewind() -> dict[int, int]:
        pos = {}
        for tp in tps:
            c = await consumer.committed(tp)
            pos[tp.partition] = c if c is not None else 0
            consumer.seek(tp, pos[tp.partition])
        return pos

    pos = await rewind()
    print("started", pos, flush=True)
    heartbeat()
    while any(pos[p] < ends[p] for p in parts):
        batch = await consumer.getmany(timeout_ms=1000, max_records=MAX_POLL)
        msgs = [m for ms in batch.values() for m in ms]
        if not msgs:
            continue
        await producer.begin_transaction()
        for m in msgs:
            await producer.send(dst, value=b"copied:" + m.value, key=m.key, partition=m.partition)
        nxt = dict(pos)
        for m in msgs:
            nxt[m.partition] = max(nxt[m.partition], m.offset + 1)
        await producer.send_offsets_to_transaction({TopicPartition(src, p): o for p, o in nxt.items()}, group)
        if rng.random() < ABORT_FRACTION:
            await producer.abort_transaction()
            pos = await rewind()
        else:
            await producer.commit_transaction()
            pos = nxt
        heartbeat()
    await consumer.stop()
    await producer.stop()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except Exception as exc:  # noqa: BLE001 - a crash, as far as the runner is concerned
        print(f"copier failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        code = 3
    sys.exit(code)
