"""Group coordinator APIs with crafted requests (R3, R13, R22): FindCoordinator, the group
lifecycle at every advertised version of each API, the bad-input errors (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, INVALID_GROUP_ID, ...), the administrative APIs, and transactional offset
commits (pending until the COMMIT marker, dropped on ABORT, fenced for stale epochs, kept across
kill -9).
"""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

import pytest

from kafka_clients import create_topic
from oncelog.protocol.messages import make
from oncelog.client import ProtocolClient
from oncelog.coordinator.group.consumer_protocol import encode_assignment, encode_subscription
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration

SUB = encode_subscription(["t"])
MS = datetime.timedelta(milliseconds=1)


class Wire:
    """Crafted group requests at a chosen version (default: the highest both sides speak)."""

    def __init__(self, bootstrap: str) -> None:
        self.c = ProtocolClient(bootstrap)
        self._ids: dict[str, uuid.UUID] = {}

    def topic_id(self, topic: str) -> uuid.UUID:
        """The topic's id from Metadata (OffsetCommit/OffsetFetch v10+ name topics by id); a
        topic the broker does not have gets a made-up id."""
        if topic not in self._ids:
            m = self.c.classes(apis.METADATA, 12)
            res = self.c.request(apis.METADATA, m["MetadataRequest"](
                topics=(m["MetadataRequestTopic"](name=topic, topic_id=None),), allow_auto_topic_creation=False,
                include_topic_authorized_operations=False), version=12)
            t = res.topics[0]
            self._ids[topic] = t.topic_id if t.error_code == ErrorCode.none else uuid.uuid5(uuid.NAMESPACE_OID, topic)
        return self._ids[topic]

    def name_of(self, topic_id: uuid.UUID) -> str:
        if topic_id not in self._ids.values():  # learn every topic's id
            m = self.c.classes(apis.METADATA, 12)
            res = self.c.request(apis.METADATA, m["MetadataRequest"](
                topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False), version=12)
            self._ids.update({t.name: t.topic_id for t in res.topics})
        return next(n for n, i in self._ids.items() if i == topic_id)

    def topic_ref(self, topic: str, version: int, by_id_from: int = 10) -> dict[str, Any]:
        return {"topic_id": self.topic_id(topic)} if version >= by_id_from else {"name": topic}

    def topic_of(self, entity: Any) -> str:
        return entity.name if hasattr(entity, "name") else self.name_of(entity.topic_id)

    def call(self, api_key: int, version: int | None = None, **fields: Any) -> Any:
        v = self.c.version_for(api_key) if version is None else version
        cls = apis.message_class(api_key, v, False)
        classes = apis.message_module_classes(api_key, v, False)

        def build(value: Any) -> Any:  # nested entities given as ("ClassName", {fields})
            if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) and value[0] in classes:
                return make(classes[value[0]], **{k: build(x) for k, x in value[1].items()})
            if isinstance(value, tuple):
                return tuple(build(x) for x in value)
            return value

        return self.c.request(api_key, make(cls, **{k: build(x) for k, x in fields.items()}), version=v)

    def join(self, group: str, member_id: str = "", version: int | None = None, instance: str | None = None,
             session_ms: int = 10_000) -> Any:
        return self.call(
            apis.JOIN_GROUP, version, group_id=group, session_timeout=session_ms * MS, rebalance_timeout=session_ms * MS,
            member_id=member_id, group_instance_id=instance, protocol_type="consumer",
            protocols=(("JoinGroupRequestProtocol", {"name": "range", "metadata": SUB}),),
        )

    def join_fully(self, group: str, version: int | None = None) -> Any:
        res = self.join(group, version=version)
        if res.error_code == ErrorCode.member_id_required:
            res = self.join(group, res.member_id, version=version)
        assert res.error_code == ErrorCode.none, res
        return res

    def sync(self, group: str, generation: int, member_id: str, assignments: dict[str, bytes],
             version: int | None = None) -> Any:
        return self.call(
            apis.SYNC_GROUP, version, group_id=group, generation_id=generation, member_id=member_id,
            group_instance_id=None, protocol_type="consumer", protocol_name="range",
            assignments=tuple(("SyncGroupRequestAssignment", {"member_id": m, "assignment": a}) for m, a in assignments.items()),
        )

    def commit(self, group: str, generation: int, member_id: str, offsets: dict[tuple[str, int], int],
               version: int | None = None) -> dict[tuple[str, int], ErrorCode]:
        version = self.c.version_for(apis.OFFSET_COMMIT) if version is None else version
        topics: dict[str, list] = {}
        for (t, p), o in offsets.items():
            topics.setdefault(t, []).append(("OffsetCommitRequestPartition", {
                "partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": "m"}))
        res = self.call(
            apis.OFFSET_COMMIT, version, group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
            group_instance_id=None, retention_time=-1 * MS,
            topics=tuple(("OffsetCommitRequestTopic", {**self.topic_ref(t, version), "partitions": tuple(ps)})
                         for t, ps in topics.items()),
        )
        return {(self.topic_of(t), p.partition_index): p.error_code for t in res.topics for p in t.partitions}

    def fetch(self, group: str, partitions: list[tuple[str, int]] | None, version: int | None = None,
              require_stable: bool = False) -> tuple[ErrorCode, dict[tuple[str, int], Any]]:
        v = self.c.version_for(apis.OFFSET_FETCH) if version is None else version
        topics = None
        if partitions is not None:
            by: dict[str, list[int]] = {}
            for t, p in partitions:
                by.setdefault(t, []).append(p)
            cls = "OffsetFetchRequestTopics" if v >= 8 else "OffsetFetchRequestTopic"
            topics = tuple((cls, {**self.topic_ref(t, v), "partition_indexes": tuple(ps)}) for t, ps in by.items())
        if v >= 8:
            res = self.call(apis.OFFSET_FETCH, v, require_stable=require_stable,
                            groups=(("OffsetFetchRequestGroup", {"group_id": group, "topics": topics}),)).groups[0]
        else:
            res = self.call(apis.OFFSET_FETCH, v, group_id=group, topics=topics, require_stable=require_stable)
        code = getattr(res, "error_code", ErrorCode.none)
        return code, {(self.topic_of(t), p.partition_index): (p.committed_offset if p.error_code == ErrorCode.none else p.error_code)
                      for t in res.topics for p in t.partitions}

    def close(self) -> None:
        self.c.close()


@pytest.fixture
def wire(broker):  # type: ignore[no-untyped-def]
    create_topic("confluent", broker.bootstrap, "t", 3)
    w = Wire(broker.bootstrap)
    yield w
    w.close()


@pytest.fixture(scope="module")
def shared_wire(module_broker):  # type: ignore[no-untyped-def]
    """The lifecycle tests share one broker: each works on its own group (``life-<version>``)
    and none restarts the broker."""
    create_topic("confluent", module_broker.bootstrap, "t", 3)
    w = Wire(module_broker.bootstrap)
    yield w
    w.close()


def test_find_coordinator_every_version(broker, wire: Wire) -> None:
    host, port = broker.bootstrap.rsplit(":", 1)
    for v in range(0, 4):
        res = wire.call(apis.FIND_COORDINATOR, v, key="g", key_type=0)
        assert (res.error_code, res.node_id, res.host, res.port) == (ErrorCode.none, 1, host, int(port))
    for v in range(4, 7):  # v5: same as v4; v6 (Kafka 4.2): share coordinator keys
        res = wire.call(apis.FIND_COORDINATOR, v, key_type=0, coordinator_keys=("a", "b", "", "x" * 256, "x" * 40_000))
        codes = [c.error_code for c in res.coordinators]
        # Kafka accepts any non-empty id (issue 26 row 13); only one past a Kafka string (32,767 bytes) is refused
        assert codes == [ErrorCode.none, ErrorCode.none, ErrorCode.invalid_group_id, ErrorCode.none, ErrorCode.invalid_group_id]
        assert res.coordinators[0].port == int(port)
        res = wire.call(apis.FIND_COORDINATOR, v, key_type=1, coordinator_keys=("txn",))
        assert (res.coordinators[0].error_code, res.coordinators[0].port) == (ErrorCode.none, int(port))
    # a share group's key (KIP-932: "group:topic id:partition"): share groups are not served
    res = wire.call(apis.FIND_COORDINATOR, 6, key_type=2, coordinator_keys=(f"sg:{uuid.uuid4()}:0",))
    assert res.coordinators[0].error_code == ErrorCode.invalid_request


@pytest.mark.parametrize("join_v", range(0, 10))
def test_group_lifecycle_at_every_join_version(shared_wire: Wire, join_v: int) -> None:
    wire = shared_wire
    group = f"life-{join_v}"
    sync_v = min(join_v, 5)
    res = wire.join(group, version=join_v)
    if join_v >= 4:
        assert res.error_code == ErrorCode.member_id_required and res.member_id, "KIP-394"
        res = wire.join(group, res.member_id, version=join_v)
    assert res.error_code == ErrorCode.none and res.generation_id == 1 and res.leader == res.member_id
    assert [m.member_id for m in res.members] == [res.member_id]
    assignment = encode_assignment({"t": [0, 1, 2]})
    s = wire.sync(group, 1, res.member_id, {res.member_id: assignment}, version=sync_v)
    assert s.error_code == ErrorCode.none and s.assignment == assignment
    hb = wire.call(apis.HEARTBEAT, min(join_v, 4), group_id=group, generation_id=1, member_id=res.member_id,
                   group_instance_id=None)
    assert hb.error_code == ErrorCode.none
    commit_v = max(2, min(join_v + 1, 10))
    assert wire.commit(group, 1, res.member_id, {("t", 0): 7, ("t", 1): 9}, version=commit_v) == {
        ("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none}
    fetch_v = max(1, min(join_v + 1, 10))
    code, got = wire.fetch(group, [("t", 0), ("t", 1), ("t", 2)], version=fetch_v)
    assert code == ErrorCode.none and got == {("t", 0): 7, ("t", 1): 9, ("t", 2): -1}
    leave_v = min(join_v, 5)
    if leave_v >= 3:
        out = wire.call(apis.LEAVE_GROUP, leave_v, group_id=group,
                        members=(("MemberIdentity", {"member_id": res.member_id, "group_instance_id": None}),))
        assert out.error_code == ErrorCode.none and out.members[0].error_code == ErrorCode.none
    else:
        out = wire.call(apis.LEAVE_GROUP, leave_v, group_id=group, member_id=res.member_id)
        assert out.error_code == ErrorCode.none
    d = wire.call(apis.DESCRIBE_GROUPS, min(join_v, 6), groups=(group,), include_authorized_operations=False).groups[0]
    assert (d.error_code, d.group_state, d.protocol_type, d.members) == (ErrorCode.none, "Empty", "consumer", ())


def test_stale_generation_unknown_member_and_invalid_group_ids(wire: Wire) -> None:
    """The bad input of issue 3: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, INVALID_GROUP_ID."""
    res = wire.join_fully("bad")
    wire.sync("bad", res.generation_id, res.member_id, {res.member_id: b""})
    assert wire.commit("bad", res.generation_id + 1, res.member_id, {("t", 0): 1}) == {("t", 0): ErrorCode.illegal_generation}
    assert wire.commit("bad", res.generation_id - 1, res.member_id, {("t", 0): 1}) == {("t", 0): ErrorCode.illegal_generation}
    assert wire.commit("bad", res.generation_id, "no-such-member", {("t", 0): 1}) == {("t", 0): ErrorCode.unknown_member_id}
    # a generation for a group that does not exist: ILLEGAL_GENERATION below v9, GROUP_ID_NOT_FOUND from v9
    assert wire.commit("never-joined", 3, "m", {("t", 0): 1}, version=8) == {("t", 0): ErrorCode.illegal_generation}
    for v in (9, 10):
        assert wire.commit("never-joined", 3, "m", {("t", 0): 1}, version=v) == {("t", 0): ErrorCode.group_id_not_found}
    hb = wire.call(apis.HEARTBEAT, group_id="bad", generation_id=res.generation_id + 5, member_id=res.member_id,
                   group_instance_id=None)
    assert hb.error_code == ErrorCode.illegal_generation
    hb = wire.call(apis.HEARTBEAT, group_id="bad", generation_id=res.generation_id, member_id="x", group_instance_id=None)
    assert hb.error_code == ErrorCode.unknown_member_id
    assert wire.join("").error_code == ErrorCode.invalid_group_id
    assert wire.join("g" * 256).error_code != ErrorCode.invalid_group_id  # Kafka has no length limit (issue 26 row 13)
    assert wire.join("g" * 40_000).error_code == ErrorCode.invalid_group_id  # past a Kafka string: unstorable
    assert wire.commit("g" * 40_000, -1, "", {("t", 0): 1}) == {("t", 0): ErrorCode.invalid_group_id}
    hb = wire.call(apis.HEARTBEAT, group_id="", generation_id=1, member_id="m", group_instance_id=None)
    assert hb.error_code == ErrorCode.invalid_group_id
    assert wire.commit("bad", res.generation_id, res.member_id, {("nope", 0): 1}, version=8) == {
        ("nope", 0): ErrorCode.unknown_topic_or_partition}  # by name; by id (v10+): UNKNOWN_TOPIC_ID
    assert wire.join("bad2", session_ms=1000).error_code == ErrorCode.invalid_session_timeout


def test_admin_apis(wire: Wire) -> None:
    res = wire.join_fully("admin")
    wire.sync("admin", res.generation_id, res.member_id, {res.member_id: encode_assignment({"t": [0]})})
    assert wire.commit("admin", res.generation_id, res.member_id, {("t", 0): 3, ("u", 0): 4}, version=8) == {
        ("t", 0): ErrorCode.none, ("u", 0): ErrorCode.unknown_topic_or_partition}
    assert wire.commit("simple", -1, "", {("t", 1): 5}) == {("t", 1): ErrorCode.none}
    listed = wire.call(apis.LIST_GROUPS, states_filter=())
    assert {(g.group_id, g.group_state) for g in listed.groups} >= {("admin", "Stable"), ("simple", "Empty")}
    stable_only = wire.call(apis.LIST_GROUPS, states_filter=("stable",))
    assert {g.group_id for g in stable_only.groups} == {"admin"}
    d = wire.call(apis.DESCRIBE_GROUPS, groups=("admin", "nope"), include_authorized_operations=False).groups
    assert d[0].group_state == "Stable" and d[0].protocol_data == "range" and d[0].members[0].member_assignment
    assert d[0].members[0].client_host.startswith("/127.0.0.1")
    assert d[1].group_state == "Dead"
    od = wire.call(apis.OFFSET_DELETE, group_id="admin", topics=(("OffsetDeleteRequestTopic", {
        "name": "t", "partitions": (("OffsetDeleteRequestPartition", {"partition_index": 0}),)}),))
    assert od.error_code == ErrorCode.none and od.topics[0].partitions[0].error_code == ErrorCode.group_subscribed_to_topic
    deleted = wire.call(apis.DELETE_GROUPS, groups_names=("admin", "simple", "nope"))
    assert [r.error_code for r in deleted.results] == [ErrorCode.non_empty_group, ErrorCode.none, ErrorCode.group_id_not_found]
    assert wire.fetch("simple", [("t", 1)]) == (ErrorCode.none, {("t", 1): -1})


# -- transactional offsets (R13) -------------------------------------------------------------------


def _txn_producer(wire: Wire, tid: str) -> tuple[int, int]:
    for _ in range(50):
        res = wire.call(apis.INIT_PRODUCER_ID, transactional_id=tid, transaction_timeout=60_000 * MS,
                        producer_id=-1, producer_epoch=-1)
        if res.error_code != ErrorCode.concurrent_transactions:
            break
        time.sleep(0.1)
    assert res.error_code == ErrorCode.none, res
    return res.producer_id, res.producer_epoch


def _txn_commit(wire: Wire, tid: str, group: str, pid: int, epoch: int, offsets: dict[tuple[str, int], int],
                generation: int = -1, member_id: str = "") -> dict[tuple[str, int], ErrorCode]:
    topics: dict[str, list] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(("TxnOffsetCommitRequestPartition", {
            "partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": ""}))
    res = wire.call(apis.TXN_OFFSET_COMMIT, transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
                    generation_id=generation, member_id=member_id, group_instance_id=None,
                    topics=tuple(("TxnOffsetCommitRequestTopic", {"name": t, "partitions": tuple(ps)}) for t, ps in topics.items()))
    return {(t.name, p.partition_index): p.error_code for t in res.topics for p in t.partitions}


def _fetch_after_load(wire_factory: Any, group: str, parts: list[tuple[str, int]], stable: bool = True) -> dict:
    for _ in range(100):
        w = wire_factory()
        try:
            code, got = w.fetch(group, parts, require_stable=stable)
        finally:
            w.close()
        if code != ErrorCode.coordinator_load_in_progress:
            assert code == ErrorCode.none
            return got
        time.sleep(0.1)
    raise AssertionError("coordinator still loading")


@pytest.mark.parametrize("commit", [True, False])
def test_transactional_offsets_wait_for_the_marker_and_survive_kill_9(broker, wire: Wire, commit: bool) -> None:
    group, tid = f"txn-group-{commit}", f"txn-{commit}"
    wire.commit(group, -1, "", {("t", 0): 5})
    pid, epoch = _txn_producer(wire, tid)
    add = wire.call(apis.ADD_OFFSETS_TO_TXN, transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group)
    assert add.error_code == ErrorCode.none
    assert _txn_commit(wire, tid, group, pid, epoch, {("t", 0): 50, ("t", 1): 60}) == {
        ("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none}
    assert wire.fetch(group, [("t", 0), ("t", 1)]) == (ErrorCode.none, {("t", 0): 5, ("t", 1): -1}), "pending: invisible"
    _, stable = wire.fetch(group, [("t", 0), ("t", 1)], require_stable=True)
    assert stable == {("t", 0): ErrorCode.unstable_offset_commit, ("t", 1): ErrorCode.unstable_offset_commit}
    end = wire.call(apis.END_TXN, transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)
    assert end.error_code == ErrorCode.none
    expected = {("t", 0): 50, ("t", 1): 60} if commit else {("t", 0): 5, ("t", 1): -1}
    assert wire.fetch(group, [("t", 0), ("t", 1)], require_stable=True) == (ErrorCode.none, expected)
    wire.close()
    broker.kill()
    broker.start()
    got = _fetch_after_load(lambda: Wire(broker.bootstrap), group, [("t", 0), ("t", 1)])
    assert got == expected, "the marker is replayed on load (R13, R14)"


def test_stale_producer_epoch_is_fenced(wire: Wire) -> None:
    tid, group = "fenced", "fenced-group"
    pid, epoch = _txn_producer(wire, tid)
    wire.call(apis.ADD_OFFSETS_TO_TXN, transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group)
    assert _txn_commit(wire, tid, group, pid, epoch, {("t", 0): 1}) == {("t", 0): ErrorCode.none}
    pid2, epoch2 = _txn_producer(wire, tid)  # a new instance: the old transaction is aborted, the epoch bumped
    assert pid2 == pid and epoch2 > epoch
    assert _txn_commit(wire, tid, group, pid, epoch, {("t", 0): 2}) == {("t", 0): ErrorCode.producer_fenced}
    assert wire.fetch(group, [("t", 0)], require_stable=True) == (ErrorCode.none, {("t", 0): -1})


def test_txn_offset_commit_checks_the_consumer_group_metadata(wire: Wire) -> None:
    res = wire.join_fully("kip447")
    wire.sync("kip447", res.generation_id, res.member_id, {res.member_id: b""})
    tid = "kip447-txn"
    pid, epoch = _txn_producer(wire, tid)
    wire.call(apis.ADD_OFFSETS_TO_TXN, transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id="kip447")
    assert _txn_commit(wire, tid, "kip447", pid, epoch, {("t", 0): 1}, res.generation_id + 1, res.member_id) == {
        ("t", 0): ErrorCode.illegal_generation}
    assert _txn_commit(wire, tid, "kip447", pid, epoch, {("t", 0): 1}, res.generation_id, "ghost") == {
        ("t", 0): ErrorCode.unknown_member_id}
    assert _txn_commit(wire, tid, "kip447", pid, epoch, {("t", 0): 1}, res.generation_id, res.member_id) == {
        ("t", 0): ErrorCode.none}


def test_send_offsets_to_transaction_with_confluent_kafka(broker, wire: Wire) -> None:
    """A real client's consume-transform-produce commit of input offsets (R13, R17)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    create_topic("confluent", broker.bootstrap, "out", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ctp"})
    producer.init_transactions(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ctp-group", "enable.auto.commit": False,
                         "session.timeout.ms": 6000, "auto.offset.reset": "earliest"})
    consumer.subscribe(["t"])
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.consume(1, 0.2)
    try:
        producer.begin_transaction()
        producer.produce("out", b"x")
        producer.send_offsets_to_transaction([TopicPartition("t", 0, 42)], consumer.consumer_group_metadata(), 30)
        assert wire.fetch("ctp-group", [("t", 0)], require_stable=True)[1] == {("t", 0): ErrorCode.unstable_offset_commit}
        producer.commit_transaction(30)
        assert wire.fetch("ctp-group", [("t", 0)], require_stable=True) == (ErrorCode.none, {("t", 0): 42})
        committed = consumer.committed([TopicPartition("t", 0)], timeout=10)
        assert committed[0].offset == 42
    finally:
        consumer.close()


def test_transactional_offsets_for_partitions_that_do_not_exist(wire: Wire) -> None:
    """As Kafka 4.x (KafkaApis.handleTxnOffsetCommitRequest): a topic or partition the broker does
    not know answers UNKNOWN_TOPIC_OR_PARTITION (a retriable error: the Java producer and
    librdkafka retry it, KAFKA-5269, as they would against Kafka); the request's other partitions
    are committed with the transaction (issue 16)."""
    group, tid = "txn-missing-group", "txn-missing"
    pid, epoch = _txn_producer(wire, tid)
    add = wire.call(apis.ADD_OFFSETS_TO_TXN, transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group)
    assert add.error_code == ErrorCode.none
    assert _txn_commit(wire, tid, group, pid, epoch, {("t", 0): 7, ("no-such-topic", 0): 1, ("t", 99): 1}) == {
        ("t", 0): ErrorCode.none, ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
        ("t", 99): ErrorCode.unknown_topic_or_partition}
    end = wire.call(apis.END_TXN, transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True)
    assert end.error_code == ErrorCode.none
    assert wire.fetch(group, [("t", 0)], require_stable=True) == (ErrorCode.none, {("t", 0): 7})


def test_describe_groups_v6_names_a_missing_group(wire: Wire) -> None:
    """KIP-1043: DescribeGroups v6 answers GROUP_ID_NOT_FOUND, with a message, for a group that
    does not exist; v0..v5 describe it as Dead without an error."""
    g = wire.call(apis.DESCRIBE_GROUPS, 6, groups=("nobody",), include_authorized_operations=False).groups[0]
    assert (g.error_code, g.group_state) == (ErrorCode.group_id_not_found, "Dead")
    assert g.error_message and "nobody" in g.error_message
    g = wire.call(apis.DESCRIBE_GROUPS, 5, groups=("nobody",), include_authorized_operations=False).groups[0]
    assert (g.error_code, g.group_state) == (ErrorCode.none, "Dead")
    res = wire.join_fully("present")
    wire.sync("present", res.generation_id, res.member_id, {res.member_id: b""})
    g = wire.call(apis.DESCRIBE_GROUPS, 6, groups=("present",), include_authorized_operations=False).groups[0]
    assert (g.error_code, g.group_state, g.error_message) == (ErrorCode.none, "Stable", None)


def test_offsets_by_topic_id_v10(wire: Wire) -> None:
    """OffsetCommit/OffsetFetch v10 name topics by id: an id the broker knows is the topic; an
    unknown one is UNKNOWN_TOPIC_ID on its partitions; "all offsets" names topics by id."""
    assert wire.commit("ids", -1, "", {("t", 0): 11, ("t", 2): 12}, version=10) == {
        ("t", 0): ErrorCode.none, ("t", 2): ErrorCode.none}
    code, got = wire.fetch("ids", [("t", 0), ("t", 1), ("t", 2)], version=10)
    assert code == ErrorCode.none and got == {("t", 0): 11, ("t", 1): -1, ("t", 2): 12}
    # the same offsets read by name (v8) and by id (v10) with every topic asked for
    assert wire.fetch("ids", [("t", 0), ("t", 2)], version=8) == (ErrorCode.none, {("t", 0): 11, ("t", 2): 12})
    assert wire.fetch("ids", None, version=10) == (ErrorCode.none, {("t", 0): 11, ("t", 2): 12})
    wire.topic_id("missing-topic")  # a made-up id: no topic has it
    assert wire.commit("ids", -1, "", {("missing-topic", 0): 1, ("t", 1): 5}, version=10) == {
        ("missing-topic", 0): ErrorCode.unknown_topic_id, ("t", 1): ErrorCode.none}
    code, got = wire.fetch("ids", [("missing-topic", 0), ("t", 1)], version=10)
    assert code == ErrorCode.none and got == {("missing-topic", 0): ErrorCode.unknown_topic_id, ("t", 1): 5}
    # v9's member id and epoch belong to consumer groups (KIP-848): a classic group ignores them
    res = wire.call(apis.OFFSET_FETCH, 9, require_stable=False, groups=(("OffsetFetchRequestGroup", {
        "group_id": "ids", "member_id": "someone", "member_epoch": 3,
        "topics": (("OffsetFetchRequestTopics", {"name": "t", "partition_indexes": (1,)}),)}),)).groups[0]
    assert res.error_code == ErrorCode.none and res.topics[0].partitions[0].committed_offset == 5


def test_txn_offset_commit_fences_a_stale_member_epoch_of_a_consumer_group(wire: Wire) -> None:
    """KIP-447 under KIP-848 (issue 30): a zombie's TxnOffsetCommit with a member epoch that is no
    longer the member's is refused (ILLEGAL_GENERATION, as Kafka maps STALE_MEMBER_EPOCH there)."""
    hb = wire.call(apis.CONSUMER_GROUP_HEARTBEAT, 1, group_id="kip848-txn", member_id="m-1", member_epoch=0,
                   rebalance_timeout=30_000 * MS, subscribed_topic_names=("t",), topic_partitions=())
    assert hb.error_code == ErrorCode.none and hb.member_epoch >= 1
    tid = "kip848-txn-id"
    pid, epoch = _txn_producer(wire, tid)
    wire.call(apis.ADD_OFFSETS_TO_TXN, transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id="kip848-txn")
    assert _txn_commit(wire, tid, "kip848-txn", pid, epoch, {("t", 0): 1}, hb.member_epoch - 1, "m-1") == {
        ("t", 0): ErrorCode.illegal_generation}
    assert _txn_commit(wire, tid, "kip848-txn", pid, epoch, {("t", 0): 1}, hb.member_epoch, "zombie") == {
        ("t", 0): ErrorCode.unknown_member_id}
    assert _txn_commit(wire, tid, "kip848-txn", pid, epoch, {("t", 0): 1}, hb.member_epoch, "m-1") == {
        ("t", 0): ErrorCode.none}
