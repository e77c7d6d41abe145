"""Several broker processes on one store, for the cluster-mode tests (issue 15): the one way
those tests start and stop them, read a topic back from its start, ask who coordinates a key and
who leads each partition."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Callable, Iterator

from oncelog.client import ProtocolClient
from oncelog.process import BrokerProcess
from oncelog.protocol import apis


@contextlib.contextmanager
def brokers(dsn: str, base: Path, overrides: dict[str, str], nodes: tuple[int, ...] = (1, 2, 3)
            ) -> Iterator[list[BrokerProcess]]:
    """Broker processes ``nodes`` on the store ``dsn`` (data dirs under ``base``), started in
    order; stopped (or killed, when a stop fails) at the end whatever happened."""
    procs = [BrokerProcess(base / f"broker{n}", node_id=n, store=dsn, overrides=overrides) for n in nodes]
    try:
        for b in procs:
            b.start(timeout=60)
        yield procs
    finally:
        for b in procs:
            try:
                b.stop(timeout=30)
            except Exception:  # noqa: BLE001 - a broker the test left dead or stuck
                b.kill()


def read_from_start(bootstrap: str, topic: str, partitions: int, done: Callable[[list[tuple[int, int, bytes]]], bool], *,
                    group: str, isolation: str = "read_uncommitted", timeout: float = 60.0,
                    settle: float = 1.0) -> list[tuple[int, int, bytes]]:
    """Every record of ``topic`` (partitions 0..``partitions``-1) from the beginning, as
    (partition, offset, value), read by an assigned confluent-kafka consumer until ``done(out)``
    and ``settle`` more seconds, or ``timeout``. Retriable client errors (a dead broker in the
    bootstrap list) are tolerated; any other fails the test."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "enable.partition.eof": False, "isolation.level": isolation,
                  "topic.metadata.refresh.interval.ms": 1000})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + timeout
    settle_until = None
    try:
        while time.monotonic() < deadline:
            for m in c.consume(num_messages=10_000, timeout=0.2):
                err = m.error()
                if err is not None:
                    assert err.retriable() or err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                                                             KafkaError._RESOLVE), f"consumer error: {err}"
                    continue
                out.append((m.partition(), m.offset(), m.value()))
            if done(out):
                settle_until = settle_until or time.monotonic() + settle
                if time.monotonic() >= settle_until:
                    break
    finally:
        c.close()
    return out


def coordinator_node(bootstrap: str, key_type: int, key: str) -> int:
    """The node id FindCoordinator (v4) names for ``key``: a group (``key_type`` 0) or a
    transactional id (1); bounded retries while it names none."""
    with ProtocolClient(bootstrap.split(",")[0]) as c:
        m = apis.message_class(apis.FIND_COORDINATOR, 4, False)
        for _ in range(50):
            r = c.request(apis.FIND_COORDINATOR, m(key_type=key_type, coordinator_keys=(key,)), version=4)
            if r.coordinators[0].error_code == 0:
                return r.coordinators[0].node_id
            time.sleep(0.2)
    raise AssertionError(f"no coordinator for {key!r}")


def partition_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """``topic``'s partition -> leader node id, from a confluent-kafka metadata request."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def wait_spread(bootstrap: str, topic: str, brokers: int = 3) -> None:
    """Wait (bounded: 100 tries, 0.2 s apart) until ``topic``'s leaders are on ``brokers``
    distinct nodes."""
    for _ in range(100):
        if len(set(partition_leaders(bootstrap, topic).values())) == brokers:
            return
        time.sleep(0.2)
    raise AssertionError(f"{topic}'s leaders did not spread over {brokers} brokers: {partition_leaders(bootstrap, topic)}")
