"""Consumer groups of the consumer rebalance protocol (KIP-848) survive a broker crash (issue 30,
R3, R13): their state is written to ``__consumer_offsets`` (Kafka's ConsumerGroup* records)
before the heartbeat answer that depends on it, and replayed on start, so after a SIGKILL and a
restart the members carry on with the member ids and epochs they had: no UNKNOWN_MEMBER_ID, no
partitions lost or revoked, no new group epoch, and no record delivered twice (every offset was
committed before the crash).

Before: the membership lived in memory only; after the restart every member was unknown, lost
its partitions and rejoined at a new, low group epoch.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kafka_clients import create_topic, produce
from oncelog.client import ProtocolClient
from oncelog.protocol import apis
from oncelog.protocol.messages import make

pytestmark = pytest.mark.integration

#: heartbeats every second (Kafka's minimum is 5 s by default; lowered with it)
FAST = {"group.consumer.heartbeat.interval.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "500"}
TOPIC = "durable848"
PARTITIONS = 4


class _Member:
    """A confluent-kafka consumer (``group.protocol=consumer``) that commits synchronously after
    every record it processes and notes every assignment change."""

    def __init__(self, bootstrap: str, group: str) -> None:
        from confluent_kafka import Consumer

        self.seen: list[tuple[int, int]] = []
        self.events: list[tuple[str, frozenset[int]]] = []
        self.commit_errors: list[str] = []
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.c.subscribe([TOPIC], on_assign=self._on("assign"), on_revoke=self._on("revoke"), on_lost=self._on("lost"))

    def _on(self, what: str) -> Any:
        def cb(_c: Any, parts: list[Any]) -> None:
            self.events.append((what, frozenset(p.partition for p in parts)))
        return cb

    def poll(self) -> None:
        msg = self.c.poll(0.05)
        if msg is None or msg.error():
            return
        self.seen.append((msg.partition(), msg.offset()))
        try:
            self.c.commit(message=msg, asynchronous=False)
        except Exception as exc:  # noted: a failed commit may allow a redelivery, which the test counts
            self.commit_errors.append(str(exc))

    def assigned(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}


def _poll_until(members: list[_Member], done: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for m in members:
            m.poll()
        if done():
            return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}: {[sorted(m.assigned()) for m in members]}")


def _describe(bootstrap: str, group: str) -> tuple[int, dict[str, int]]:
    """(group epoch, member id -> member epoch) from ConsumerGroupDescribe (69)."""
    with ProtocolClient(bootstrap) as c:
        req = make(c.classes(apis.CONSUMER_GROUP_DESCRIBE, 1)["ConsumerGroupDescribeRequest"],
                   group_ids=(group,), include_authorized_operations=False)
        g = c.request(apis.CONSUMER_GROUP_DESCRIBE, req, version=1).groups[0]
    assert g.error_code == 0, g.error_message
    return g.group_epoch, {m.member_id: m.member_epoch for m in g.members}


def test_consumer_group_members_keep_their_ids_and_epochs_across_a_broker_crash(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory("kip848-durable", FAST)
    create_topic("confluent", b.bootstrap, TOPIC, PARTITIONS)
    group = "g-durable"
    first = [(p, None, f"a{i}".encode()) for i in range(40) for p in range(PARTITIONS)]
    produce("confluent", b.bootstrap, TOPIC, first)
    x, y = _Member(b.bootstrap, group), _Member(b.bootstrap, group)
    members = [x, y]
    passer = None
    passed: list[tuple[int, int]] = []  # what the third member consumed (and committed)
    try:
        # a third member comes and goes first, so the group epoch is well past where a group
        # formed from scratch by two members would be
        passer = _Member(b.bootstrap, group)
        _poll_until([x, y, passer], lambda: all(m.assigned() for m in (x, y, passer)), 90, "three members to share")
        passer.c.close()
        passed, passer = passer.seen, None
        every = set(range(PARTITIONS))
        _poll_until(members, lambda: x.assigned() | y.assigned() == every and not x.assigned() & y.assigned()
                    and len(x.seen) + len(y.seen) + len(passed) >= len(first), 90, "two members to split and consume everything")
        epoch, before = _describe(b.bootstrap, group)
        ids = {x.c.memberid(), y.c.memberid()}
        assert set(before) == ids and epoch >= 4, (epoch, before)
        settle = time.monotonic() + 3  # heartbeats: the group is stable, every commit answered
        while time.monotonic() < settle:
            for m in members:
                m.poll()
        epoch, before = _describe(b.bootstrap, group)
        mine = {m.c.memberid(): m.assigned() for m in members}
        events_before = [list(m.events) for m in members]

        b.restart(hard=True)  # SIGKILL, then start on the same port and data directory

        second = [(p, None, f"b{i}".encode()) for i in range(40) for p in range(PARTITIONS)]
        produce("confluent", b.bootstrap, TOPIC, second)
        total = len(first) + len(second)
        _poll_until(members, lambda: len(x.seen) + len(y.seen) + len(passed) >= total, 90, "the records produced after the restart")
        settle = time.monotonic() + 4  # several heartbeats after the restart
        while time.monotonic() < settle:
            for m in members:
                m.poll()
        epoch_after, after = _describe(b.bootstrap, group)
        assert after == before, f"members or their epochs changed across the restart: {before} -> {after}"
        assert epoch_after == epoch, f"the group rebalanced after the restart: epoch {epoch} -> {epoch_after}"
        assert {m.c.memberid(): m.assigned() for m in members} == mine
        assert [list(m.events) for m in members] == events_before, "partitions were revoked or lost by the restart"
        seen = x.seen + y.seen + passed
        twice = {r for r in seen if seen.count(r) > 1}
        assert not twice, f"records delivered twice though every offset was committed: {sorted(twice)[:10]}"
        assert len(seen) == total
    finally:
        for m in [*members, *([passer] if passer else [])]:
            m.c.close()
