"""Hostile clients against the group APIs (R22): the consumer rebalance protocol (KIP-848) and
the topic-id versions of OffsetCommit/OffsetFetch. Each test sends what a client that follows no
rules sends — raw frames through ``ProtocolClient`` — and checks Kafka's answer, what the broker
keeps, and (where the harm was latency) a bystander's round trips."""

from __future__ import annotations

import datetime
import random
import statistics
import string
import threading
import time
import uuid
from typing import Any

import psutil
import pytest

from bystander import Bystander
from kafka_clients import create_topic
from oncelog.client import ProtocolClient
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration
#: These tests measure how fast the broker answers: no spare broker starts next to them (conftest.py).
START_SPARE_BROKER_DURING_TESTS = False

MS = datetime.timedelta(milliseconds=1)
ZERO = uuid.UUID(int=0)


def _topic_id(c: ProtocolClient, name: str) -> uuid.UUID:
    m = c.classes(apis.METADATA, 12)
    md = c.request(apis.METADATA, m["MetadataRequest"](
        topics=(m["MetadataRequestTopic"](name=name, topic_id=None),), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False), version=12)
    return md.topics[0].topic_id


def _commit_v10(c: ProtocolClient, group: str, offsets: list[tuple[uuid.UUID, int, int]]) -> dict[Any, ErrorCode]:
    m = c.classes(apis.OFFSET_COMMIT, 10)
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for tid, p, off in offsets:
        by_topic.setdefault(tid, []).append(m["OffsetCommitRequestPartition"](
            partition_index=p, committed_offset=off, committed_leader_epoch=-1, committed_metadata=""))
    res = c.request(apis.OFFSET_COMMIT, m["OffsetCommitRequest"](
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=tuple(m["OffsetCommitRequestTopic"](topic_id=tid, partitions=tuple(ps)) for tid, ps in by_topic.items())),
        version=10)
    return {(t.topic_id or ZERO, p.partition_index): p.error_code for t in res.topics for p in t.partitions}


def _fetch_v10(c: ProtocolClient, group: str, asked: list[tuple[uuid.UUID, int]]) -> dict[Any, tuple[int, ErrorCode]]:
    m = c.classes(apis.OFFSET_FETCH, 10)
    by_topic: dict[uuid.UUID, list[int]] = {}
    for tid, p in asked:
        by_topic.setdefault(tid, []).append(p)
    res = c.request(apis.OFFSET_FETCH, m["OffsetFetchRequest"](require_stable=False, groups=(m["OffsetFetchRequestGroup"](
        group_id=group, member_id=None, member_epoch=-1,
        topics=tuple(m["OffsetFetchRequestTopics"](topic_id=tid, partition_indexes=tuple(ps))
                     for tid, ps in by_topic.items())),)), version=10)
    (g,) = res.groups
    assert g.error_code == ErrorCode.none, g
    return {(t.topic_id or ZERO, p.partition_index): (p.committed_offset, p.error_code) for t in g.topics for p in t.partitions}


def test_offset_commit_and_fetch_v10_with_the_all_zero_topic_id_answer_unknown_topic_id(broker) -> None:  # type: ignore[no-untyped-def]
    """The all-zero topic id names no topic: UNKNOWN_TOPIC_ID for its partitions, as Kafka 4.2
    answers, while the rest of the request is served. Before: kio reads that id as None, the
    handler raised (a `bug:` traceback), the answer was empty and the valid commit next to it
    was dropped."""
    create_topic("confluent", broker.bootstrap, "zid", 2)
    with ProtocolClient(broker.bootstrap) as c:
        tid = _topic_id(c, "zid")
        assert tid is not None and tid.int
        committed = _commit_v10(c, "g-zero", [(tid, 0, 7), (ZERO, 0, 9), (ZERO, 1, 9)])
        assert committed == {(tid, 0): ErrorCode.none, (ZERO, 0): ErrorCode.unknown_topic_id,
                             (ZERO, 1): ErrorCode.unknown_topic_id}
        fetched = _fetch_v10(c, "g-zero", [(tid, 0), (ZERO, 0)])
        assert fetched == {(tid, 0): (7, ErrorCode.none), (ZERO, 0): (-1, ErrorCode.unknown_topic_id)}
    assert "bug:" not in broker.log_tail(10**7)


# -- the consumer rebalance protocol (KIP-848) under hostile members -------------------------------


def _create_topics(c: ProtocolClient, names: list[str], partitions: int = 1) -> None:
    m = c.classes(apis.CREATE_TOPICS, 5)
    for i in range(0, len(names), 500):
        r = c.request(apis.CREATE_TOPICS, m["CreateTopicsRequest"](topics=tuple(
            m["CreatableTopic"](name=n, num_partitions=partitions, replication_factor=1, assignments=(), configs=())
            for n in names[i:i + 500]), timeout=60_000 * MS, validate_only=False), version=5)
        bad = [t for t in r.topics if t.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists)]
        assert not bad, bad[:3]


def _heartbeat(c: ProtocolClient, group: str, member: str, epoch: int, *, names: tuple[str, ...] | None = None,
               regex: str | None = None, owned: Any = None, assignor: str | None = None) -> Any:
    m = c.classes(apis.CONSUMER_GROUP_HEARTBEAT, 1)
    if owned is not None:
        owned = tuple(m["TopicPartitions"](topic_id=t, partitions=tuple(ps)) for t, ps in owned)
    return c.request(apis.CONSUMER_GROUP_HEARTBEAT, m["ConsumerGroupHeartbeatRequest"](
        group_id=group, member_id=member, member_epoch=epoch, rebalance_timeout=60_000 * MS if epoch == 0 else -1 * MS,
        subscribed_topic_names=names, subscribed_topic_regex=regex, server_assignor=assignor,
        topic_partitions=() if epoch == 0 else owned), version=1)


def _owned(answer: Any) -> list[tuple[uuid.UUID, list[int]]]:
    if answer.assignment is None:
        return []
    return [(t.topic_id, list(t.partitions)) for t in answer.assignment.topic_partitions]


class _Members:
    """Members of one group, each on its own connection, heartbeating as a client does (their
    epoch and owned partitions echoed) from ``threads`` threads until stopped."""

    def __init__(self, bootstrap: str, group: str, joins: list[dict[str, Any]], threads: int = 4) -> None:
        self.bootstrap, self.group, self.joins, self.threads = bootstrap, group, joins, threads
        self.state: list[tuple[str, int, list]] = []
        self.errors: list[ErrorCode] = []
        self.beats = 0
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []

    def join_all(self) -> list[float]:
        """Every member joins (epoch 0), one after the other: the seconds each join took."""
        took = []
        with ProtocolClient(self.bootstrap, timeout=120) as c:
            for i, fields in enumerate(self.joins):
                member = fields.pop("member", f"member-{i:05d}")
                t0 = time.monotonic()
                a = _heartbeat(c, self.group, member, 0, **fields)
                took.append(time.monotonic() - t0)
                assert a.error_code == ErrorCode.none, a
                self.state.append((a.member_id, a.member_epoch, _owned(a)))
        return took

    def _run(self, k: int) -> None:
        mine = list(range(k, len(self.state), self.threads))
        with ProtocolClient(self.bootstrap, timeout=120) as c:
            for _ in range(1_000_000):  # bounded; stopped long before
                for i in mine:
                    if self._stop.is_set():
                        return
                    member, epoch, owned = self.state[i]
                    a = _heartbeat(c, self.group, member, epoch, owned=owned)
                    self.beats += 1
                    if a.error_code != ErrorCode.none:
                        self.errors.append(a.error_code)
                        continue
                    self.state[i] = (member, a.member_epoch, _owned(a) if a.assignment is not None else owned)

    def __enter__(self) -> "_Members":
        self._workers = [threading.Thread(target=self._run, args=(k,), daemon=True) for k in range(self.threads)]
        for w in self._workers:
            w.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for w in self._workers:
            w.join(timeout=120)


def _bystander_under(members: _Members, bootstrap: str, seconds: float) -> tuple[float, float, int]:
    """A bystander's p50 and worst round trip (ms) while ``members`` heartbeat for ``seconds``;
    the heartbeats sent meanwhile."""
    with members:
        with Bystander(bootstrap) as bystander:
            time.sleep(seconds)
    lat = sorted(bystander.latencies)
    assert len(lat) > 10
    return statistics.median(lat) * 1000, lat[-1] * 1000, members.beats


@pytest.mark.parametrize("members, topics", [(60, 400), pytest.param(300, 2_000, marks=pytest.mark.long)],
                         ids=["60x400", "300x2000"])
def test_distinct_regexes_are_matched_once_not_at_every_heartbeat(broker, members: int, topics: int) -> None:  # type: ignore[no-untyped-def]
    """Members subscribed by distinct regular expressions heartbeat while nothing changes: the
    topics are matched against each regex when it arrives (and when topics change), never at a
    heartbeat that changes nothing. Before: every heartbeat matched every member's regex against
    every topic on the event loop (300 x 2,000: bystander p50 1.0 -> 576 ms)."""
    with ProtocolClient(broker.bootstrap, timeout=120) as c:
        _create_topics(c, [f"rt-{i:05d}" for i in range(topics)])
    joins = [{"regex": f"rt-{i:05d}|rt-0*{i}[0-9]*x?"} for i in range(members)]
    group = _Members(broker.bootstrap, "g-regex", joins)
    group.join_all()
    p50, worst, beats = _bystander_under(group, broker.bootstrap, 4.0)
    assert not group.errors, group.errors[:5]
    assert p50 < 20 and worst < 1_000 and beats > 100, \
        f"bystander p50 {p50:.1f} ms, worst {worst:.0f} ms ({beats} heartbeats)"


@pytest.mark.parametrize("members, topics", [(60, 600), pytest.param(300, 2_000, marks=pytest.mark.long)],
                         ids=["60x600", "300x2000"])
def test_range_assignment_of_many_subscribed_names_stays_linear(broker, members: int, topics: int) -> None:  # type: ignore[no-untyped-def]
    """Members of a range-assigned group each subscribe to every topic by name: a join costs
    about the partitions and members, not topics^2 x members. Before: 0.9 s per join (300
    members, 2,000 names)."""
    names = [f"rg-{i:05d}" for i in range(topics)]
    with ProtocolClient(broker.bootstrap, timeout=120) as c:
        _create_topics(c, names)
    group = _Members(broker.bootstrap, "g-range", [{"names": tuple(names), "assignor": "range"}
                                                    for _ in range(members)])
    took = group.join_all()
    last = statistics.median(took[-10:]) * 1000
    assert last < 50, f"a join into {members - 1} members took {last:.0f} ms (median of the last 10)"


@pytest.mark.parametrize("members, names", [(10, 20_000), pytest.param(20, 99_000, marks=pytest.mark.long)],
                         ids=["10x20k", "20x99k"])
def test_heartbeats_of_members_with_huge_subscriptions_are_cheap(broker, members: int, names: int) -> None:  # type: ignore[no-untyped-def]
    """Members subscribed to tens of thousands of (mostly missing) topic names send 60-byte
    heartbeats that change nothing: each costs about the same as any heartbeat. Before: every
    heartbeat looked every member's names up again (20 x 99,000: 156 ms a heartbeat, bystander
    p50 0.9 -> 105 ms)."""
    with ProtocolClient(broker.bootstrap, timeout=120) as c:
        _create_topics(c, ["hs-real"])
    subscription = ("hs-real", *(f"h{i:05x}" for i in range(names - 1)))  # 99,000 x 7 bytes: a record holds them
    group = _Members(broker.bootstrap, "g-huge", [{"names": subscription} for _ in range(members)])
    group.join_all()
    p50, worst, beats = _bystander_under(group, broker.bootstrap, 4.0)
    assert not group.errors, group.errors[:5]
    assert beats > 100 and p50 < 20, f"bystander p50 {p50:.1f} ms, worst {worst:.0f} ms ({beats} heartbeats)"


def _rss_mb(broker) -> float:  # type: ignore[no-untyped-def]
    return psutil.Process(broker.pid).memory_info().rss / 1e6


def _alternation(seed: int, size: int) -> str:
    """A regex of ``size`` characters that RE2 cannot shrink: an alternation of random words."""
    rnd = random.Random(seed)
    words = ["".join(rnd.choices(string.ascii_lowercase, k=12)) for _ in range(size // 13 + 1)]
    return "(" + "|".join(words) + ")"


def test_regexes_are_bounded_in_size_and_their_compiled_forms_in_memory(broker) -> None:  # type: ignore[no-untyped-def]
    """A regex longer than a record can hold (32,767 bytes) or whose RE2 program exceeds its
    memory bound is INVALID_REGULAR_EXPRESSION before anything changes; the compiled regexes the
    broker keeps are bounded in memory, however many distinct ones members send. Before: 600
    distinct 400 KB regexes took RSS from 40 to 3,957 MB (a cache of 1,024 compiled patterns of
    any size), and each could not be written to __consumer_offsets (UNKNOWN_SERVER_ERROR)."""
    with ProtocolClient(broker.bootstrap, timeout=120) as c:
        _create_topics(c, [f"rx-{i:03d}" for i in range(50)])
        before = _rss_mb(broker)
        for i in range(25):
            a = _heartbeat(c, "g-big-rx", f"big-{i}", 0, regex=_alternation(i, 400_000))
            assert a.error_code == ErrorCode.invalid_regular_expression, a
        huge = _rss_mb(broker) - before
        ok = _heartbeat(c, "g-big-rx", "fine", 0, regex="rx-00[0-9]")
        assert ok.error_code == ErrorCode.none, ok
        assert len(_owned(ok)) == 10
        for i in range(120):  # distinct regexes that fit: accepted, their compiled forms not all kept
            a = _heartbeat(c, "g-many-rx", f"many-{i}", 0, regex=_alternation(1_000 + i, 30_000))
            assert a.error_code == ErrorCode.none, a
        many = _rss_mb(broker) - before
    assert huge < 50 and many < 120, f"RSS grew {huge:.0f} MB (25 x 400 KB refused), {many:.0f} MB (+120 x 30 KB)"
    assert "bug:" not in broker.log_tail(10**7)


def test_a_member_id_too_long_for_a_record_is_refused_before_the_group_changes(broker) -> None:  # type: ignore[no-untyped-def]
    """A member id (or instance id, rack id, topic name) longer than a record string can hold
    (32,767 bytes; Kafka's request parser refuses such strings) is INVALID_REQUEST before the
    group changes. Before: the member was added, its records could not be encoded (a plain
    ValueError: UNKNOWN_SERVER_ERROR), and every later member of the group got
    UNKNOWN_SERVER_ERROR until the bad one's session expired (45 s)."""
    with ProtocolClient(broker.bootstrap, timeout=120) as c:
        _create_topics(c, ["long-ids"], partitions=4)
        a = _heartbeat(c, "g-long", "x" * 40_000, 0, names=("long-ids",))
        assert a.error_code == ErrorCode.invalid_request, a
        for field in ({"names": ("y" * 40_000,)},):
            a = _heartbeat(c, "g-long", "other", 0, **field)
            assert a.error_code == ErrorCode.invalid_request, a
        b = _heartbeat(c, "g-long", "fine", 0, names=("long-ids",))
        assert b.error_code == ErrorCode.none and len(_owned(b)[0][1]) == 4, b
    assert "bug:" not in broker.log_tail(10**7)


def test_a_member_record_the_log_refuses_undoes_the_join_instead_of_breaking_the_group(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """A member whose record the log cannot take (here: larger than __consumer_offsets'
    max.message.bytes, lowered to 100 kB) is refused, and the group is put back as the log has
    it: the next member joins at once. Before: the member stayed in the group, every later
    operation of the group wrote its record again and failed (UNKNOWN_SERVER_ERROR) until its
    session expired."""
    b = broker_factory("small-messages", {"message.max.bytes": "100000"})
    with ProtocolClient(b.bootstrap, timeout=60) as c:
        _create_topics(c, ["refused"], partitions=2)
        big = _heartbeat(c, "g-refused", "big", 0, names=("refused", *(f"n{i:05x}" for i in range(20_000))))
        assert big.error_code == ErrorCode.unknown_server_error, big
        fine = _heartbeat(c, "g-refused", "fine", 0, names=("refused",))
        assert fine.error_code == ErrorCode.none and len(_owned(fine)[0][1]) == 2, fine
        assert _heartbeat(c, "g-refused", "big", 1).error_code == ErrorCode.unknown_member_id


@pytest.mark.parametrize("joins", [1_500, pytest.param(10_000, marks=pytest.mark.long)], ids=["1500", "10000"])
def test_many_joins_with_long_member_ids_cost_what_changed(broker, joins: int) -> None:  # type: ignore[no-untyped-def]
    """Thousands of members with 1 KB member ids join one group: a join writes the records of
    what changed (the new member, the targets that moved), not the whole group again."""
    with ProtocolClient(broker.bootstrap, timeout=120) as c:
        _create_topics(c, ["many-joins"], partitions=6)
    group = _Members(broker.bootstrap, "g-many", [{"member": f"{i:06d}-" + "m" * 1_000, "names": ("many-joins",)}
                                                   for i in range(joins)])
    took = group.join_all()
    last = statistics.median(took[-50:]) * 1000
    assert last < 15, f"a join into {joins - 1} members took {last:.0f} ms (median of the last 50)"


def _describe(c: ProtocolClient, group: str) -> Any:
    m = c.classes(apis.CONSUMER_GROUP_DESCRIBE, 1)
    (g,) = c.request(apis.CONSUMER_GROUP_DESCRIBE, m["ConsumerGroupDescribeRequest"](
        group_ids=(group,), include_authorized_operations=False), version=1).groups
    return g


def test_a_member_gets_and_sees_only_topics_it_may_describe(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A member with READ on its group only: subscribing by name to a topic it may not DESCRIBE
    is TOPIC_AUTHORIZATION_FAILED (nothing changes); a regex leaves such topics out of its
    assignment; ConsumerGroupDescribe of a group holding one answers TOPIC_AUTHORIZATION_FAILED
    without the members — Kafka's KafkaApis / GroupMetadataManager rules. Before: the topics were
    assigned and described."""
    from acl_harness import ANONYMOUS, Grants, admin_client, start_acl_broker
    from oncelog.acl.model import AclOperation as Op, ResourceType as R

    b = start_acl_broker(tmp_path / "acl-broker")
    grants = Grants(b, ANONYMOUS)
    try:
        with admin_client(b) as admin:
            _create_topics(admin, ["acl4-visible", "acl4-secret"], partitions=2)
            visible = _topic_id(admin, "acl4-visible")
            # the admin's member holds the secret topic in group g4-admin
            a = _heartbeat(admin, "g4-admin", "admin-member", 0, names=("acl4-secret",))
            assert a.error_code == ErrorCode.none and len(_owned(a)) == 1, a
        grants.grant(grants.binding(R.GROUP, "g4", Op.READ), grants.binding(R.GROUP, "g4-admin", Op.DESCRIBE),
                     grants.binding(R.TOPIC, "acl4-visible", Op.DESCRIBE))
        with ProtocolClient(b.bootstrap, timeout=60) as c:
            refused = _heartbeat(c, "g4", "by-name", 0, names=("acl4-visible", "acl4-secret"))
            assert refused.error_code == ErrorCode.topic_authorization_failed and refused.error_message is None, refused
            assert _describe_as_admin(b, "g4").error_code == ErrorCode.group_id_not_found  # nothing changed
            by_name = _heartbeat(c, "g4", "by-name", 0, names=("acl4-visible",))
            assert by_name.error_code == ErrorCode.none and {t for t, _ in _owned(by_name)} == {visible}, by_name
            by_regex = _heartbeat(c, "g4", "by-regex", 0, regex="acl4-.*")
            assert by_regex.error_code == ErrorCode.none, by_regex
            for _ in range(20):  # the members settle: every partition of the visible topic, nothing else
                by_name = _heartbeat(c, "g4", "by-name", by_name.member_epoch, owned=_owned(by_name))
                by_regex = _heartbeat(c, "g4", "by-regex", by_regex.member_epoch, owned=_owned(by_regex))
            held = {(t, p) for a in (by_name, by_regex) for t, ps in _owned(a) for p in ps}
            assert held == {(visible, 0), (visible, 1)}, held
            mine = _describe(c, "g4")
            assert mine.error_code == ErrorCode.none and {mb.member_id for mb in mine.members} == {"by-name", "by-regex"}
            hidden = _describe(c, "g4-admin")
            assert hidden.error_code == ErrorCode.topic_authorization_failed and hidden.members == (), hidden
            assert hidden.error_message == "The group has described topic(s) that the client is not authorized to describe."
    finally:
        grants.close()
        b.stop()


def _describe_as_admin(b, group: str) -> Any:  # type: ignore[no-untyped-def]
    from acl_harness import admin_client

    with admin_client(b) as admin:
        return _describe(admin, group)
