"""The consumer rebalance protocol (KIP-848, issue 30) with real clients and crafted requests
(R3, R13, R22): confluent-kafka with ``group.protocol=consumer`` joins, rebalances as members
come and go, follows a regex subscription to a new topic; offset commits and fetches are fenced
by the member epoch; classic and consumer groups keep to their own group ids.

Before issue 30 such a consumer hung silently: ApiVersions had no ConsumerGroupHeartbeat (68).
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest

from kafka_clients import create_topic, produce
from oncelog.client import ProtocolClient
from oncelog.coordinator.group.consumer_protocol import encode_subscription
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import make

pytestmark = pytest.mark.integration

MS = datetime.timedelta(milliseconds=1)
#: heartbeats every second (Kafka's minimum is 5 s by default; lowered with it)
FAST = {"group.consumer.heartbeat.interval.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "500"}


def _consumer(bootstrap: str, group: str, topics: list[str], instance: str | None = None) -> Any:
    from confluent_kafka import Consumer

    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": True, "auto.commit.interval.ms": 500}
    if instance is not None:
        conf["group.instance.id"] = instance
    c = Consumer(conf)
    c.subscribe(topics)
    return c


def _assigned(c: Any) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in c.assignment()}


def _poll_until(consumers: list[Any], done: Any, timeout: float, what: str, seen: dict | None = None) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        for c in consumers:
            msg = c.poll(0.1)
            if msg is not None and not msg.error() and seen is not None:
                seen[(msg.topic(), msg.partition(), msg.offset())] = msg.value()
        if done():
            return time.monotonic() - start
    raise AssertionError(f"timed out after {timeout}s waiting for {what}: "
                         f"{[sorted(_assigned(c)) for c in consumers]}")


def _split(consumers: list[Any], every: set[tuple[str, int]]) -> bool:
    """The partitions are split among the consumers: each has some, none twice, all covered."""
    sets = [_assigned(c) for c in consumers]
    return all(sets) and sum(len(s) for s in sets) == len(every) and set().union(*sets) == every


def test_consumers_join_and_rebalance_as_members_come_and_go(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory("kip848", FAST)
    topic, partitions = "kip848", 6
    create_topic("confluent", b.bootstrap, topic, partitions)
    produce("confluent", b.bootstrap, topic, [(i % partitions, None, b"v%d" % i) for i in range(300)])
    every = {(topic, p) for p in range(partitions)}
    seen: dict = {}
    consumers = [_consumer(b.bootstrap, "g848", [topic])]
    try:
        _poll_until(consumers, lambda: _assigned(consumers[0]) == every, 60, "the first member to own everything", seen)
        consumers.append(_consumer(b.bootstrap, "g848", [topic]))
        consumers.append(_consumer(b.bootstrap, "g848", [topic]))
        _poll_until(consumers, lambda: _split(consumers, every) and all(len(_assigned(c)) == 2 for c in consumers),
                    60, "three members to own two partitions each", seen)
        consumers.pop(0).close()  # a graceful leave (epoch -1)
        _poll_until(consumers, lambda: _split(consumers, every), 60, "the two others to take over", seen)
        _poll_until(consumers, lambda: len({k for k in seen if k[0] == topic}) == 300, 60, "every record", seen)
        listed = _list_groups(b.bootstrap)
        assert listed["g848"] == ("consumer", "consumer")
    finally:
        for c in consumers:
            c.close()


def test_a_regex_subscription_picks_up_a_new_topic(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory("kip848-regex", FAST)
    create_topic("confluent", b.bootstrap, "rx-a", 2)
    create_topic("confluent", b.bootstrap, "other", 2)
    c = _consumer(b.bootstrap, "g-rx", ["^rx-.*"])
    try:
        _poll_until([c], lambda: _assigned(c) == {("rx-a", 0), ("rx-a", 1)}, 60, "rx-a (and not other)")
        create_topic("confluent", b.bootstrap, "rx-b", 1)
        _poll_until([c], lambda: ("rx-b", 0) in _assigned(c), 60, "the new topic rx-b")
        assert not any(t == "other" for t, _ in _assigned(c))
    finally:
        c.close()


def test_a_static_member_restarts_without_a_rebalance(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """group.instance.id: the closing member leaves with epoch -2 and keeps its partitions; its
    successor with the same instance id takes them over at once and the other member's
    assignment never changes (no rebalance)."""
    b = broker_factory("kip848-static", FAST)
    topic = "static848"
    create_topic("confluent", b.bootstrap, topic, 4)
    every = {(topic, p) for p in range(4)}
    first = _consumer(b.bootstrap, "g-static", [topic], instance="s-1")
    other = _consumer(b.bootstrap, "g-static", [topic])
    successor = None
    try:
        _poll_until([first, other], lambda: _split([first, other], every), 60, "two members to split the partitions")
        mine, theirs = _assigned(first), _assigned(other)
        first.close()
        changes: list[set] = []
        gap = time.monotonic() + 4  # a restart's gap: several heartbeats of the other member
        while time.monotonic() < gap:
            other.poll(0.1)
            if _assigned(other) != theirs:
                changes.append(_assigned(other))
        assert changes == [], f"the other member took the departed static member's partitions: {changes[0]}"
        successor = _consumer(b.bootstrap, "g-static", [topic], instance="s-1")

        def back() -> bool:
            if _assigned(other) != theirs:
                changes.append(_assigned(other))
            return _assigned(successor) == mine
        took = _poll_until([successor, other], back, 40, "the successor to own the first member's partitions")
        assert took < 30, "the successor waited for a session timeout"
        settle = time.monotonic() + 3  # a few more heartbeats: nothing moves
        while time.monotonic() < settle:
            back()
            for c in (successor, other):
                c.poll(0.1)
        assert changes == [], f"the other member's assignment changed: {changes}"
    finally:
        for c in (successor, other):
            if c is not None:
                c.close()


# -- crafted requests ---------------------------------------------------------------------------


def _call(c: ProtocolClient, api_key: int, version: int, cls: str, **fields: Any) -> Any:
    return c.request(api_key, make(c.classes(api_key, version)[cls], **fields), version=version)


def _heartbeat(c: ProtocolClient, group: str, member: str, epoch: int, owned: tuple | None = (),
               names: tuple[str, ...] | None = ("cf",), regex: str | None = None) -> Any:
    m = c.classes(apis.CONSUMER_GROUP_HEARTBEAT, 1)
    return c.request(apis.CONSUMER_GROUP_HEARTBEAT, m["ConsumerGroupHeartbeatRequest"](
        group_id=group, member_id=member, member_epoch=epoch, rebalance_timeout=30_000 * MS,
        subscribed_topic_names=names, subscribed_topic_regex=regex,
        topic_partitions=None if owned is None else tuple(
            m["TopicPartitions"](topic_id=tid, partitions=ps) for tid, ps in owned)), version=1)


def _commit(c: ProtocolClient, version: int, group: str, member: str, epoch: int) -> ErrorCode:
    m = c.classes(apis.OFFSET_COMMIT, version)
    res = c.request(apis.OFFSET_COMMIT, m["OffsetCommitRequest"](
        group_id=group, generation_id_or_member_epoch=epoch, member_id=member, group_instance_id=None,
        topics=(m["OffsetCommitRequestTopic"](name="cf", partitions=(m["OffsetCommitRequestPartition"](
            partition_index=0, committed_offset=3, committed_leader_epoch=-1, committed_metadata=""),)),)),
        version=version)
    return res.topics[0].partitions[0].error_code


def _fetch(c: ProtocolClient, group: str, member: str | None, epoch: int) -> ErrorCode:
    m = c.classes(apis.OFFSET_FETCH, 9)
    res = c.request(apis.OFFSET_FETCH, m["OffsetFetchRequest"](require_stable=False, groups=(m["OffsetFetchRequestGroup"](
        group_id=group, member_id=member, member_epoch=epoch,
        topics=(m["OffsetFetchRequestTopics"](name="cf", partition_indexes=(0,)),)),)), version=9)
    return res.groups[0].error_code


def _list_groups(bootstrap: str) -> dict[str, tuple[str, str]]:
    with ProtocolClient(bootstrap) as c:
        res = _call(c, apis.LIST_GROUPS, 5, "ListGroupsRequest", states_filter=(), types_filter=())
    return {g.group_id: (g.protocol_type, g.group_type) for g in res.groups}


def test_commits_and_fetches_are_fenced_by_the_member_epoch(broker) -> None:  # type: ignore[no-untyped-def]
    create_topic("confluent", broker.bootstrap, "cf", 2)
    with ProtocolClient(broker.bootstrap) as c:
        a = _heartbeat(c, "fence", "member-a", 0)
        assert a.error_code == ErrorCode.none and a.member_id == "member-a" and a.member_epoch >= 1
        assert {p for t in a.assignment.topic_partitions for p in t.partitions} == {0, 1}
        epoch = a.member_epoch
        assert _commit(c, 9, "fence", "member-a", epoch) == ErrorCode.none
        assert _commit(c, 9, "fence", "member-a", epoch - 1) == ErrorCode.stale_member_epoch
        assert _commit(c, 9, "fence", "zombie", epoch) == ErrorCode.unknown_member_id
        assert _commit(c, 8, "fence", "member-a", epoch) == ErrorCode.unsupported_version
        assert _fetch(c, "fence", "member-a", epoch) == ErrorCode.none
        assert _fetch(c, "fence", "member-a", epoch + 1) == ErrorCode.stale_member_epoch
        assert _fetch(c, "fence", None, -1) == ErrorCode.none  # an admin's fetch
        # a heartbeat from the future, or from a member the group does not know
        assert _heartbeat(c, "fence", "member-a", epoch + 5, None, None).error_code == ErrorCode.fenced_member_epoch
        assert _heartbeat(c, "fence", "ghost", 3, None, None).error_code == ErrorCode.unknown_member_id
        bad = _heartbeat(c, "fence", "member-b", 0, names=None, regex="(?=cf)cf")
        assert bad.error_code == ErrorCode.invalid_regular_expression and bad.error_message
        # classic and consumer groups keep to their ids while they have members
        join = _call(c, apis.JOIN_GROUP, 9, "JoinGroupRequest", group_id="fence", session_timeout=10_000 * MS,
                     rebalance_timeout=10_000 * MS, member_id="", group_instance_id=None, protocol_type="consumer",
                     protocols=(make(c.classes(apis.JOIN_GROUP, 9)["JoinGroupRequestProtocol"], name="range",
                                     metadata=encode_subscription(["cf"])),), reason=None)
        assert join.error_code == ErrorCode.inconsistent_group_protocol
        # the member leaves (epoch -1); the empty consumer group keeps accepting admin commits
        assert _heartbeat(c, "fence", "member-a", -1, None, None).member_epoch == -1
        assert _commit(c, 9, "fence", "", -1) == ErrorCode.none


def test_consumer_group_describe_and_the_cli_show_members_epochs_and_targets(broker) -> None:  # type: ignore[no-untyped-def]
    """ConsumerGroupDescribe (69) and ``oncelog groups describe|list`` for a consumer group."""
    import subprocess
    import sys

    create_topic("confluent", broker.bootstrap, "cf", 2)
    with ProtocolClient(broker.bootstrap) as c:
        a = _heartbeat(c, "shown", "member-a", 0)
        b = _heartbeat(c, "shown", "member-b", 0)
        assert a.error_code == b.error_code == ErrorCode.none
        d = _call(c, apis.CONSUMER_GROUP_DESCRIBE, 1, "ConsumerGroupDescribeRequest", group_ids=("shown", "nobody"),
                  include_authorized_operations=False)
        shown, nobody = d.groups
        assert nobody.error_code == ErrorCode.group_id_not_found and nobody.error_message
        assert (shown.error_code, shown.group_state, shown.assignor_name) == (ErrorCode.none, "Reconciling", "uniform")
        assert shown.assignment_epoch == shown.group_epoch >= 2
        by = {m.member_id: m for m in shown.members}
        assert by["member-a"].member_epoch == a.member_epoch and by["member-b"].member_epoch == b.member_epoch
        assert by["member-a"].subscribed_topic_names == ("cf",) and by["member-a"].member_type == 1
        targets = [{p for t in m.target_assignment.topic_partitions for p in t.partitions} for m in shown.members]
        assert sorted(map(len, targets)) == [1, 1] and set().union(*targets) == {0, 1}
        assert by["member-a"].assignment.topic_partitions[0].topic_name == "cf"
    out = subprocess.run([sys.executable, "-m", "oncelog", "groups", "describe", "shown", "-b", broker.bootstrap],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "consumer group (KIP-848)" in out.stdout and "member-a" in out.stdout and "target" in out.stdout
    out = subprocess.run([sys.executable, "-m", "oncelog", "groups", "list", "-b", broker.bootstrap],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "shown" in out.stdout and "consumer" in out.stdout, out.stderr
