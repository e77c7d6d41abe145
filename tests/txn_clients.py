"""Transactional producers of the three real clients behind one small interface.

``TxnProducer(client, bootstrap, transactional_id)`` offers init / begin / send / commit / abort
/ close, calling each library's own transactional API; no oncelog code is involved.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any


class TxnProducer:
    def __init__(self, client: str, bootstrap: str, transactional_id: str, *, timeout_ms: int = 60_000,
                 extra: dict[str, Any] | None = None) -> None:
        self.client = client
        self.tid = transactional_id
        extra = extra or {}
        if client == "confluent":
            from confluent_kafka import Producer

            conf = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                    "transaction.timeout.ms": timeout_ms, "linger.ms": 5}
            conf.update(extra)
            self._p = Producer(conf)
        elif client == "kafka-python":
            from kafka import KafkaProducer

            self._p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                                    transaction_timeout_ms=timeout_ms, linger_ms=5, **extra)
        elif client == "aiokafka":
            from aiokafka import AIOKafkaProducer

            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
            self._thread.start()

            async def make() -> Any:
                return AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                                        transaction_timeout_ms=timeout_ms, linger_ms=5, **extra)

            self._p = self._run(make())
        else:
            raise ValueError(client)

    def _run(self, coro: Any, timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def init(self) -> None:
        if self.client == "confluent":
            self._p.init_transactions(60)
        elif self.client == "kafka-python":
            self._p.init_transactions()
        else:
            self._run(self._p.start())

    def begin(self) -> None:
        if self.client == "aiokafka":
            self._run(self._begin())
        else:
            self._p.begin_transaction()

    async def _begin(self) -> None:
        await self._p.begin_transaction()

    def send(self, topic: str, value: bytes, key: bytes | None = None, partition: int | None = None) -> None:
        if self.client == "confluent":
            while True:
                try:
                    self._p.produce(topic, value=value, key=key, partition=-1 if partition is None else partition)
                    break
                except BufferError:
                    self._p.poll(0.05)
            self._p.poll(0)
        elif self.client == "kafka-python":
            self._p.send(topic, value=value, key=key, partition=partition)
        else:
            self._run(self._p.send(topic, value=value, key=key, partition=partition))

    def flush(self) -> None:
        if self.client == "confluent":
            assert self._p.flush(60) == 0
        elif self.client == "kafka-python":
            self._p.flush(timeout=60)
        else:
            self._run(self._p.flush())

    def send_offsets(self, offsets: dict[tuple[str, int], int], group_id: str, consumer: Any = None) -> None:
        """sendOffsetsToTransaction: offsets are the NEXT offsets to read, per (topic, partition)."""
        if self.client == "confluent":
            from confluent_kafka import TopicPartition

            tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
            self._p.send_offsets_to_transaction(tps, consumer.consumer_group_metadata(), 60)
        elif self.client == "kafka-python":
            from kafka import OffsetAndMetadata, TopicPartition

            self._p.send_offsets_to_transaction(
                {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}, group_id
            )
        else:
            from aiokafka import TopicPartition

            self._run(self._p.send_offsets_to_transaction({TopicPartition(t, p): o for (t, p), o in offsets.items()}, group_id))

    def commit(self) -> None:
        if self.client == "confluent":
            self._p.commit_transaction(60)
        elif self.client == "kafka-python":
            self._p.commit_transaction()
        else:
            self._run(self._p.commit_transaction())

    def abort(self) -> None:
        if self.client == "confluent":
            self._p.abort_transaction(60)
        elif self.client == "kafka-python":
            self._p.abort_transaction()
        else:
            self._run(self._p.abort_transaction())

    def close(self) -> None:
        try:
            if self.client == "confluent":
                self._p.flush(5)
            elif self.client == "kafka-python":
                self._p.close(timeout=5)
            else:
                self._run(self._p.stop(), timeout=10)
        except Exception:
            pass
        finally:
            if self.client == "aiokafka":
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(5)
