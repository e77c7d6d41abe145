"""Thin, uniform wrappers over the three real Kafka clients used by the integration tests.

Each wrapper uses the client the way an application would (its own producer, consumer and admin
classes); none of them reaches into oncelog. Every loop here is bounded in time.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Iterable

CLIENTS = ("confluent", "kafka-python", "aiokafka")

Record = tuple[int, int, bytes | None, bytes | None]  # partition, offset, key, value


# -- admin -------------------------------------------------------------------------------------


def create_topic(client: str, bootstrap: str, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    configs = configs or {}
    if client == "confluent":
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        futs = admin.create_topics([NewTopic(topic, partitions, 1, config=configs)], operation_timeout=10)
        futs[topic].result(timeout=30)
    elif client == "kafka-python":
        from kafka.admin import KafkaAdminClient, NewTopic as KNewTopic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.create_topics([KNewTopic(topic, partitions, 1, topic_configs=configs)])
        finally:
            admin.close()
    elif client == "aiokafka":
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic as ANewTopic

        async def go() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
            await admin.start()
            try:
                await admin.create_topics([ANewTopic(topic, partitions, 1, topic_configs=configs)])
            finally:
                await admin.close()

        asyncio.run(go())
    else:
        raise ValueError(client)


# -- produce -----------------------------------------------------------------------------------


def produce(
    client: str,
    bootstrap: str,
    topic: str,
    items: Iterable[tuple[int, bytes | None, bytes]],
    *,
    compression: str | None = None,
    acks: str | int = "all",
    extra: dict | None = None,
    timeout: float = 120.0,
) -> list[tuple[int, int]]:
    """Send (partition, key, value) items; returns the acknowledged (partition, offset) list."""
    items = list(items)
    extra = extra or {}
    if client == "confluent":
        from confluent_kafka import Producer

        acked: list[tuple[int, int]] = []
        errors: list[str] = []

        def cb(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(str(err))
            else:
                acked.append((msg.partition(), msg.offset()))

        conf = {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "compression.type": compression or "none"}
        conf.update(extra)
        p = Producer(conf)
        for part, key, value in items:
            while True:
                try:
                    p.produce(topic, value=value, key=key, partition=part, on_delivery=cb)
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
        remaining = p.flush(timeout)
        assert remaining == 0, f"{remaining} messages not delivered in {timeout}s"
        assert not errors, errors[:5]
        return acked
    if client == "kafka-python":
        from kafka import KafkaProducer

        prod = KafkaProducer(
            bootstrap_servers=bootstrap, acks=acks if acks != "all" else "all", compression_type=compression, linger_ms=5, **extra
        )
        futures = [prod.send(topic, value=value, key=key, partition=part) for part, key, value in items]
        prod.flush(timeout=timeout)
        out = []
        for f in futures:
            md = f.get(timeout=timeout)
            out.append((md.partition, md.offset))
        prod.close()
        return out
    if client == "aiokafka":
        from aiokafka import AIOKafkaProducer

        async def go() -> list[tuple[int, int]]:
            prod = AIOKafkaProducer(
                bootstrap_servers=bootstrap, acks=acks if acks != "all" else "all", compression_type=compression, linger_ms=5, **extra
            )
            await prod.start()
            try:
                futs = [await prod.send(topic, value=value, key=key, partition=part) for part, key, value in items]
                mds = await asyncio.wait_for(asyncio.gather(*futs), timeout)
                return [(md.partition, md.offset) for md in mds]
            finally:
                await prod.stop()

        return asyncio.run(go())
    raise ValueError(client)


# -- consume -----------------------------------------------------------------------------------


def consume(
    client: str,
    bootstrap: str,
    topic: str,
    partitions: list[int],
    *,
    expected: int,
    start: str = "earliest",
    isolation: str = "read_uncommitted",
    timeout: float = 120.0,
    on_ready: Callable[[], None] | None = None,
    settle: float = 0.0,
) -> list[Record]:
    """Assign ``partitions`` from ``start`` ('earliest' or 'latest'), read until ``expected``
    records arrived (then ``settle`` more seconds to catch extras) or ``timeout`` passed.

    ``on_ready`` runs once the consumer is positioned (for 'latest' tests: produce then)."""
    deadline = time.monotonic() + timeout
    out: list[Record] = []
    if client == "confluent":
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "oncelog-test-assign",
                "enable.auto.commit": False,
                "isolation.level": isolation,
                "enable.partition.eof": False,
            }
        )
        off = OFFSET_BEGINNING if start == "earliest" else OFFSET_END
        c.assign([TopicPartition(topic, p, off) for p in partitions])
        if on_ready:
            _wait_positioned_confluent(c, topic, partitions, deadline)
            on_ready()
        try:
            _drain(lambda: _poll_confluent(c), out, expected, deadline, settle)
        finally:
            c.close()
        return out
    if client == "kafka-python":
        from kafka import KafkaConsumer, TopicPartition as KTP

        c = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, isolation_level=isolation,
            auto_offset_reset=start,
        )
        tps = [KTP(topic, p) for p in partitions]
        c.assign(tps)
        if start == "earliest":
            c.seek_to_beginning(*tps)
        else:
            c.seek_to_end(*tps)
        for tp in tps:
            c.position(tp)
        if on_ready:
            on_ready()

        def poll() -> list[Record]:
            batch = c.poll(timeout_ms=200)
            return [(m.partition, m.offset, m.key, m.value) for msgs in batch.values() for m in msgs]

        try:
            _drain(poll, out, expected, deadline, settle)
        finally:
            c.close()
        return out
    if client == "aiokafka":
        from aiokafka import AIOKafkaConsumer, TopicPartition as ATP

        async def go() -> None:
            c = AIOKafkaConsumer(
                bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, isolation_level=isolation,
                auto_offset_reset=start,
            )
            await c.start()
            try:
                tps = [ATP(topic, p) for p in partitions]
                c.assign(tps)
                if start == "earliest":
                    await c.seek_to_beginning(*tps)
                else:
                    await c.seek_to_end(*tps)
                for tp in tps:
                    await c.position(tp)
                if on_ready:
                    await asyncio.get_running_loop().run_in_executor(None, on_ready)
                settle_until = None
                while time.monotonic() < deadline:
                    batch = await c.getmany(timeout_ms=200)
                    for msgs in batch.values():
                        out.extend((m.partition, m.offset, m.key, m.value) for m in msgs)
                    if len(out) >= expected:
                        settle_until = settle_until or time.monotonic() + settle
                        if time.monotonic() >= settle_until:
                            break
            finally:
                await c.stop()

        asyncio.run(go())
        return out
    raise ValueError(client)


def _drain(poll: Callable[[], list[Record]], out: list[Record], expected: int, deadline: float, settle: float) -> None:
    settle_until = None
    while time.monotonic() < deadline:
        out.extend(poll())
        if len(out) >= expected:
            settle_until = settle_until or time.monotonic() + settle
            if time.monotonic() >= settle_until:
                return


def _poll_confluent(c) -> list[Record]:  # type: ignore[no-untyped-def]
    msgs = c.consume(num_messages=10000, timeout=0.2)
    out = []
    for m in msgs:
        if m.error():
            raise RuntimeError(f"consumer error: {m.error()}")
        out.append((m.partition(), m.offset(), m.key(), m.value()))
    return out


def _wait_positioned_confluent(c, topic: str, partitions: list[int], deadline: float) -> None:  # type: ignore[no-untyped-def]
    """librdkafka resolves OFFSET_END (a ListOffsets request) in the background after assign and
    exposes no position until a message is consumed, so give it a bounded moment of polling."""
    until = min(deadline, time.monotonic() + 2.0)
    while time.monotonic() < until:
        msgs = c.consume(num_messages=1, timeout=0.1)
        assert not [m for m in msgs if not m.error()], "a record arrived before any was produced"
