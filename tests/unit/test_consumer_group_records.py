"""Consumer groups (KIP-848) are durable (issue 30): their ``__consumer_offsets`` records
(coordinator/group/consumer_records.py, Kafka 4.x's ConsumerGroup* schemas) and their replay
(consumer_store.py): a shard fed the records another shard wrote, through their bytes, holds the
same groups — also after compaction kept only the latest record of each key."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.coordinator.group import consumer_group as cg
from oncelog.coordinator.group import consumer_records as crec
from oncelog.coordinator.group import records as rec
from oncelog.coordinator.group.shard import GroupShard
from oncelog.coordinator.group.types import GroupSettings
from oncelog.protocol.errors import KafkaError

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
SESSION = 45_000
SETTINGS = GroupSettings(consumer=cg.ConsumerSettings(session_timeout_ms=SESSION, heartbeat_interval_ms=5_000))

ids = st.text(min_size=1, max_size=8)
partitions = st.lists(st.tuples(st.uuids(), st.lists(st.integers(0, 2**31 - 1), max_size=4).map(tuple)), max_size=3).map(tuple)
keys = st.one_of(
    st.builds(crec.GroupEpochKey, ids), st.builds(crec.SubscriptionKey, ids), st.builds(crec.TargetEpochKey, ids),
    st.builds(crec.MemberKey, ids, ids), st.builds(crec.TargetMemberKey, ids, ids),
    st.builds(crec.CurrentAssignmentKey, ids, ids),
)
opt = st.none() | ids


def _value_for(key: crec.Key) -> st.SearchStrategy[crec.Value]:
    i32 = st.integers(-(2**31), 2**31 - 1)
    if isinstance(key, crec.GroupEpochKey):
        return st.builds(crec.GroupEpochValue, i32)
    if isinstance(key, crec.SubscriptionKey):
        return st.builds(crec.SubscriptionValue, st.lists(st.tuples(st.uuids(), ids, i32), max_size=3).map(tuple))
    if isinstance(key, crec.TargetEpochKey):
        return st.builds(crec.TargetEpochValue, i32)
    if isinstance(key, crec.MemberKey):
        return st.builds(crec.MemberValue, opt, opt, ids, ids, st.lists(ids, max_size=3).map(tuple), opt, i32, opt)
    if isinstance(key, crec.TargetMemberKey):
        return st.builds(crec.TargetMemberValue, partitions)
    return st.builds(crec.CurrentAssignmentValue, i32, i32, st.integers(0, 2), partitions, partitions)


@given(keys.flatmap(lambda k: st.tuples(st.just(k), _value_for(k))))
def test_every_record_round_trips_through_its_bytes(kv: tuple[crec.Key, crec.Value]) -> None:
    key, value = kv
    kb, vb = rec.encode_key(key), rec.encode_value(value)
    assert vb is not None
    back = rec.decode_key(kb)
    assert back == key
    assert rec.decode_value(back, vb) == value


def test_bytes_are_kafkas_layout() -> None:
    # ConsumerGroupMetadataKey: int16 3, string group; value v0 (flexible): int32 epoch, no tags
    assert rec.encode_key(crec.GroupEpochKey("g")) == b"\x00\x03\x00\x01g"
    assert rec.encode_value(crec.GroupEpochValue(5)) == b"\x00\x00\x00\x00\x00\x05\x00"
    # ConsumerGroupCurrentMemberAssignmentKey: int16 8, group, member
    assert rec.encode_key(crec.CurrentAssignmentKey("g", "m")) == b"\x00\x08\x00\x01g\x00\x01m"
    v = crec.CurrentAssignmentValue(3, 2, 0, ((T, (0, 1)),), ())
    assert rec.encode_value(v) == (
        b"\x00\x00" + b"\x00\x00\x00\x03" + b"\x00\x00\x00\x02" + b"\x00"
        + b"\x02" + T.bytes + b"\x03" + b"\x00\x00\x00\x00\x00\x00\x00\x01" + b"\x00"  # assigned: 1 topic, 2 partitions
        + b"\x01"  # pending revocation: empty
        + b"\x00"  # no tagged fields
    )
    # ConsumerGroupMemberMetadataValue with a tagged field (ClassicMemberMetadata, tag 0) from
    # a Kafka writer: the tag is skipped
    mv = crec.MemberValue(None, None, "c", "h", ("t",), None, 30_000, None)
    raw = rec.encode_value(mv)
    assert raw is not None
    tagged = raw[:-1] + b"\x01" + b"\x00" + b"\x03" + b"xyz"
    assert rec.decode_value(crec.MemberKey("g", "m"), tagged) == mv


def _hb(member: str, epoch: int, owned: cg.Assignment | None, names: tuple[str, ...], instance: str | None = None,
        group: str = "g") -> cg.HeartbeatRequest:
    return cg.HeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, instance_id=instance, rack_id=None,
        rebalance_timeout_ms=30_000, subscribed_names=names, subscribed_regex=None, server_assignor=None,
        owned={} if epoch == 0 else owned, client_id="cid", client_host="/127.0.0.1",
    )


def _snapshot(shard: GroupShard) -> dict[str, object]:
    """The groups without their volatile deadlines."""
    out: dict[str, object] = {}
    for gid, g in shard.consumers.groups.items():
        members = {
            mid: (m.client_id, m.client_host, m.rebalance_timeout_ms, m.instance_id, m.rack_id, m.subscribed_names,
                  m.subscribed_regex, m.server_assignor, m.member_epoch, m.state, m.assigned, m.revoking, m.departed,
                  m.revocation_deadline is not None)
            for mid, m in g.members.items()
        }
        out[gid] = (g.group_epoch, g.assignment_epoch, members, g.target, g.subscribed_topics)
    return out


class _Log:
    """A shard whose records go through their bytes into a list, then replay (as the service)."""

    def __init__(self) -> None:
        self.shard = GroupShard(0, SETTINGS)
        self.log: list[tuple[bytes, bytes | None]] = []

    def write(self, records: list[tuple[rec.Key, rec.Value | None]], now: int) -> None:
        for key, value in records:
            kb, vb = rec.encode_key(key), rec.encode_value(value)
            self.log.append((kb, vb))
            k = rec.decode_key(kb)
            self.shard.replay(k, rec.decode_value(k, vb), record_offset=len(self.log), now=now)


def _load(log: list[tuple[bytes, bytes | None]], now: int) -> GroupShard:
    shard = GroupShard(0, SETTINGS)
    for i, (kb, vb) in enumerate(log):
        k = rec.decode_key(kb)
        shard.replay(k, rec.decode_value(k, vb), record_offset=i, now=now)
    return shard


def _compacted(log: list[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
    """The latest record of each key, in log order (tombstones past their retention: gone)."""
    latest = {kb: i for i, (kb, _) in enumerate(log)}
    return [(kb, vb) for i, (kb, vb) in enumerate(log) if latest[kb] == i and vb is not None]


ops = st.lists(
    st.tuples(st.sampled_from(["join", "beat", "leave", "static_leave", "expire", "topics", "delete"]),
              st.sampled_from(["a", "b", "c"]), st.sampled_from([("t",), ("t", "u"), ("u",)])),
    min_size=1, max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_replaying_the_log_rebuilds_the_groups_that_wrote_it(steps: list[tuple[str, str, tuple[str, ...]]]) -> None:
    w = _Log()
    topics: dict[str, tuple[uuid.UUID, int]] = {"t": (T, 4), "u": (U, 3)}
    now = 0
    for op, member, names in steps:
        now += 1_000
        g = w.shard.consumers.groups.get("g")
        m = None if g is None else g.members.get(member)
        try:
            if op == "join":
                result = w.shard.consumer_heartbeat(_hb(member, 0, {}, names, instance=f"i-{member}"), topics, now)
            elif op == "beat" and m is not None:
                # acknowledges revocations: it owns what it was given
                result = w.shard.consumer_heartbeat(_hb(member, m.member_epoch, dict(m.assigned), names), topics, now)
            elif op in ("leave", "static_leave") and m is not None:
                epoch = cg.LEAVE_EPOCH if op == "leave" else cg.STATIC_LEAVE_EPOCH
                result = w.shard.consumer_heartbeat(_hb(member, epoch, None, names), topics, now)
            elif op == "expire":
                now += SESSION
                result = w.shard.tick(now)
            elif op == "topics":
                topics["u"] = (U, topics["u"][1] + 1)
                continue
            elif op == "delete":
                result = w.shard.delete_group("g", now)
            else:
                continue
        except KafkaError:
            continue
        before = _snapshot(w.shard)
        w.write(result.records, now)
        assert _snapshot(w.shard) == before, "replaying its own records changed the live group"
    live = _snapshot(w.shard)
    assert _snapshot(_load(w.log, now + 1)) == live
    assert _snapshot(_load(_compacted(w.log), now + 1)) == live


def test_a_loaded_member_keeps_its_id_and_epoch_and_its_session_restarts_from_the_load() -> None:
    w = _Log()
    topics = {"t": (T, 4)}
    a = w.shard.consumer_heartbeat(_hb("a", 0, {}, ("t",)), topics, 1_000)
    w.write(a.records, 1_000)
    b = w.shard.consumer_heartbeat(_hb("b", 0, {}, ("t",)), topics, 2_000)
    w.write(b.records, 2_000)
    ans = w.shard.consumer_heartbeat(_hb("a", 1, a.response.assignment, ("t",)), topics, 3_000)
    w.write(ans.records, 3_000)
    loaded = _load(w.log, 500_000)
    group = loaded.consumers.groups["g"]
    assert set(group.members) == {"a", "b"}
    assert all(m.session_deadline == 500_000 + SESSION for m in group.members.values())
    epoch = group.group_epoch
    # the members heartbeat on with the epochs they have: answered as the shard that wrote the
    # log answers them (no fencing, no new group epoch)
    for mid in ("a", "b", "a"):
        m = w.shard.consumers.groups["g"].members[mid]
        hb = _hb(mid, m.member_epoch, dict(m.assigned) | dict(m.revoking), ("t",))
        again = loaded.consumer_heartbeat(hb, topics, 501_000)
        assert again.response == w.shard.consumer_heartbeat(hb, topics, 501_000).response
    assert loaded.consumers.groups["g"].group_epoch == w.shard.consumers.groups["g"].group_epoch == epoch


def test_leaving_members_and_a_deleted_group_leave_tombstones() -> None:
    w = _Log()
    topics = {"t": (T, 2)}
    w.write(w.shard.consumer_heartbeat(_hb("a", 0, {}, ("t",)), topics, 1).records, 1)
    leave = w.shard.consumer_heartbeat(_hb("a", cg.LEAVE_EPOCH, None, ("t",)), topics, 2)
    gone = {k for k, v in leave.records if v is None}
    assert gone == {crec.MemberKey("g", "a"), crec.TargetMemberKey("g", "a"), crec.CurrentAssignmentKey("g", "a")}
    w.write(leave.records, 2)
    delete = w.shard.delete_group("g", 3)
    assert [k for k, v in delete.records if v is None][-1] == crec.GroupEpochKey("g"), "the group epoch goes last"
    w.write(delete.records, 3)
    assert "g" not in w.shard.consumers.groups
    assert _compacted(w.log) == []
    assert "g" not in _load(w.log, 4).consumers.groups


def test_a_steady_heartbeat_writes_nothing_and_a_rejoin_writes_only_its_member() -> None:
    w = _Log()
    topics = {"t": (T, 4)}
    a = w.shard.consumer_heartbeat(_hb("a", 0, {}, ("t",)), topics, 1)
    w.write(a.records, 1)
    steady = w.shard.consumer_heartbeat(_hb("a", 1, a.response.assignment, ("t",)), topics, 2)
    assert steady.records == [], "a heartbeat that changes nothing durable appends nothing"
    b = w.shard.consumer_heartbeat(_hb("b", 0, {}, ("t",)), topics, 3)
    w.write(b.records, 3)
    # a's next heartbeat revokes two partitions: its current assignment is all that changes
    revoke = w.shard.consumer_heartbeat(_hb("a", 1, a.response.assignment, ("t",)), topics, 4)
    assert [k for k, _ in revoke.records] == [crec.CurrentAssignmentKey("g", "a")]
