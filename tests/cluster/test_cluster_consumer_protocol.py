"""The consumer rebalance protocol (KIP-848, issue 30) in cluster mode, on a real PostgreSQL:
two confluent-kafka consumers with ``group.protocol=consumer`` split a topic's partitions through
whichever broker coordinates their group; when that broker is SIGKILLed the coordinator moves with
its ``__consumer_offsets`` partition, whose consumer-group records the survivor loads: the members
carry on there with the member ids and epochs they had and the group epoch does not move (no
rebalance; before, the membership was in memory only and the members rejoined), and every record
is consumed. Every wait is bounded; all traffic is on 127.0.0.1.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import kafka_clients as kc
from cluster_procs import brokers
from oncelog.client import ProtocolClient
from oncelog.protocol import apis

SESSION = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
           "group.consumer.heartbeat.interval.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "500"}
TOPIC, PARTITIONS, GROUP = "kip848c", 4, "g-kip848-cluster"


def _consumer(bootstrap: str) -> Any:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": True, "auto.commit.interval.ms": 500})
    c.subscribe([TOPIC])
    return c


def _coordinator(bootstrap: str) -> int:
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.FIND_COORDINATOR, 4)
        r = c.request(apis.FIND_COORDINATOR, m["FindCoordinatorRequest"](key_type=0, coordinator_keys=(GROUP,)), version=4)
        return r.coordinators[0].node_id


def _describe(bootstrap: str) -> tuple[int, dict[str, int]]:
    """(group epoch, member id -> member epoch) from ConsumerGroupDescribe (69)."""
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.CONSUMER_GROUP_DESCRIBE, 1)
        g = c.request(apis.CONSUMER_GROUP_DESCRIBE, m["ConsumerGroupDescribeRequest"](
            group_ids=(GROUP,), include_authorized_operations=False), version=1).groups[0]
    assert g.error_code == 0, g.error_message
    return g.group_epoch, {mb.member_id: mb.member_epoch for mb in g.members}


def _run(consumers: list[Any], done: Any, timeout: float, what: str, seen: set) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.1)
            if msg is not None and not msg.error():
                seen.add((msg.partition(), msg.offset()))
        if done():
            return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}: "
                         f"{[sorted((t.partition for t in c.assignment())) for c in consumers]}")


def test_consumer_groups_form_and_survive_a_coordinator_failover(pg_dsn: str, tmp_path: Path) -> None:
    with brokers(pg_dsn, tmp_path, SESSION, (1, 2)) as procs:
        bootstrap = ",".join(b.bootstrap for b in procs)
        kc.create_topic("confluent", bootstrap, TOPIC, PARTITIONS)
        kc.produce("confluent", bootstrap, TOPIC, [(i % PARTITIONS, None, b"a%d" % i) for i in range(200)])
        seen: set = set()
        consumers = [_consumer(bootstrap), _consumer(bootstrap)]
        try:
            def split() -> bool:
                sets = [{t.partition for t in c.assignment()} for c in consumers]
                return all(sets) and sum(map(len, sets)) == PARTITIONS and set().union(*sets) == set(range(PARTITIONS))

            # a third member comes and goes, so the group epoch is past where two members forming
            # the group from scratch would put it
            passer = _consumer(bootstrap)
            try:
                _run([*consumers, passer], lambda: all(c.assignment() for c in [*consumers, passer]), 90,
                     "three members to share the partitions", seen)
            finally:
                passer.close()
            _run(consumers, lambda: split() and len(seen) >= 200, 90, "the two members to split and read", seen)
            settle = time.monotonic() + 3  # heartbeats: the group is stable
            while time.monotonic() < settle:
                for c in consumers:
                    c.poll(0.1)
            node = _coordinator(bootstrap)
            victim = next(b for b in procs if b.node_id == node)
            before = _describe(victim.bootstrap)
            assert set(before[1]) == {c.memberid() for c in consumers} and before[0] >= 4, before
            os.kill(victim.pid, signal.SIGKILL)  # type: ignore[arg-type]
            survivor = next(b for b in procs if b is not victim)
            kc.produce("confluent", survivor.bootstrap, TOPIC, [(i % PARTITIONS, None, b"b%d" % i) for i in range(200)])
            _run(consumers, lambda: split() and len(seen) >= 400, 120,
                 "the group to form again on the survivor and read the new records", seen)
            assert _describe(survivor.bootstrap) == before, "the members or epochs changed with the coordinator"
        finally:
            for c in consumers:
                c.close()
