"""The coordinator runtime in cluster mode (issue 15): a load the store fails is retried while
this broker leads the partition, and a load overtaken by a loss of leadership installs nothing."""

from __future__ import annotations

import asyncio
import logging

from oncelog.broker.coordinators.coordinator_runtime import CoordinatorRuntime
from oncelog.clock import ManualClock
from oncelog.cluster.errors import StoreUnavailable
from oncelog.types import TopicPartition

TP = TopicPartition("__transaction_state", 0)


class _Log:
    def __init__(self, failures: int) -> None:
        self.failures = failures

    def iter_batches(self):  # type: ignore[no-untyped-def]
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("the store is restarting")
        return iter(())


class _Part:
    def __init__(self, failures: int) -> None:
        self.log = _Log(failures)


class _Replicas:
    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, _Part] = {}

    def partition(self, topic: str, index: int) -> _Part:
        return self.partitions[TopicPartition(topic, index)]


class _Shard:
    def __init__(self, partition: int) -> None:
        self.partition = partition


def _runtime(replicas: _Replicas) -> CoordinatorRuntime:
    return CoordinatorRuntime("test coordinator", TP.topic, replicas, ManualClock(),  # type: ignore[arg-type]
                              logger=logging.getLogger("test"))


def test_a_load_the_store_failed_is_retried_while_led_here() -> None:
    async def go() -> None:
        replicas = _Replicas()
        replicas.partitions[TP] = _Part(failures=2)
        rt = _runtime(replicas)
        finished: list[int] = []

        async def then(shard: _Shard) -> None:
            finished.append(shard.partition)

        rt.load_one(0, _Shard, lambda *a: None, then)
        assert 0 in rt.loading
        for _ in range(40):  # 0.25 s + 0.5 s of backoff, bounded
            if finished:
                break
            await asyncio.sleep(0.05)
        assert finished == [0] and 0 in rt.shards and not rt.loading

    asyncio.run(go())


def test_a_load_overtaken_by_a_loss_of_leadership_installs_nothing() -> None:
    async def go() -> None:
        replicas = _Replicas()
        replicas.partitions[TP] = _Part(failures=100)
        rt = _runtime(replicas)
        rt.load_one(0, _Shard, lambda *a: None)
        await asyncio.sleep(0.1)
        del replicas.partitions[TP]  # leadership moved: the leader tracker closed it
        await asyncio.sleep(0.6)
        assert 0 not in rt.shards and 0 not in rt.loading
        assert rt.unload(0) is None

    asyncio.run(go())
