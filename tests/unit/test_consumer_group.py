"""The consumer rebalance protocol's state machine (KIP-848, issue 30): coordinator/group/consumer_group.py
and its place in the shard beside classic groups. Pure: time is passed in."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.coordinator.group import consumer_group as cg
from oncelog.coordinator.group.shard import GroupShard
from oncelog.coordinator.group.types import JoinRequest, OffsetCommitData
from oncelog.protocol.errors import (
    FencedMemberEpoch,
    GroupIdNotFound,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidRegularExpression,
    InvalidRequest,
    StaleMemberEpoch,
    UnknownMemberId,
    UnreleasedInstanceId,
    UnsupportedAssignor,
    UnsupportedVersion,
)
from oncelog.types import TopicPartition

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
TOPICS = {"t": (T, 6)}
SETTINGS = cg.ConsumerSettings(session_timeout_ms=45_000, heartbeat_interval_ms=5_000)


def req(member: str, epoch: int, owned: cg.Assignment | None = None, *, names: tuple[str, ...] | None = ("t",),
        regex: str | None = None, group: str = "g", assignor: str | None = None) -> cg.HeartbeatRequest:
    return cg.HeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30_000, subscribed_names=names, subscribed_regex=regex, server_assignor=assignor,
        owned={} if epoch == 0 and owned is None else owned,
    )


def parts(a: cg.Assignment | None) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in (a or {}).items() for p in ps}


def no_partition_held_twice(groups: cg.ConsumerGroups, group: str = "g") -> None:
    held: list[tuple[uuid.UUID, int]] = []
    for m in groups.groups[group].members.values():
        held += list(parts(m.assigned)) + list(parts(m.revoking))
    assert len(held) == len(set(held)), "a partition is held by two members"


def test_a_lone_member_gets_every_partition_at_epoch_one() -> None:
    g = cg.ConsumerGroups(SETTINGS, lambda: "generated")
    a = g.heartbeat(req("a", 0), TOPICS, 0)
    assert (a.member_id, a.member_epoch, a.heartbeat_interval_ms) == ("a", 1, 5_000)
    assert parts(a.assignment) == {(T, p) for p in range(6)}
    assert g.groups["g"].state == "Stable"
    # v0: the coordinator names a member that sent no id
    assert g.heartbeat(req("", 0, group="h"), TOPICS, 0).member_id == "generated"


def test_partitions_move_only_after_the_previous_owner_acknowledged_their_revocation() -> None:
    g = cg.ConsumerGroups(SETTINGS, lambda: "x")
    a = g.heartbeat(req("a", 0), TOPICS, 0)
    b = g.heartbeat(req("b", 0), TOPICS, 10)  # joins: the target splits the partitions
    assert b.member_epoch == g.groups["g"].assignment_epoch and parts(b.assignment) == set()  # all still a's
    assert g.groups["g"].state == "Reconciling"
    no_partition_held_twice(g)
    # a's heartbeat: it must revoke three partitions first, keeping its epoch
    a2 = g.heartbeat(req("a", a.member_epoch, a.assignment), TOPICS, 20)
    assert a2.member_epoch == a.member_epoch and len(parts(a2.assignment)) == 3
    assert g.groups["g"].members["a"].state == cg.MemberState.UNREVOKED_PARTITIONS
    # b still gets nothing: a has not acknowledged
    assert parts(g.heartbeat(req("b", b.member_epoch, {}), TOPICS, 30).assignment) == set()
    no_partition_held_twice(g)
    # a acknowledges (owns only what it kept): it takes the new epoch
    a3 = g.heartbeat(req("a", a2.member_epoch, a2.assignment), TOPICS, 40)
    assert a3.member_epoch == g.groups["g"].assignment_epoch and parts(a3.assignment) == parts(a2.assignment)
    # now b gets the released partitions
    b2 = g.heartbeat(req("b", b.member_epoch, {}), TOPICS, 50)
    assert parts(b2.assignment) == {(T, p) for p in range(6)} - parts(a3.assignment)
    assert g.groups["g"].state == "Stable"
    no_partition_held_twice(g)


def test_a_leaving_member_gives_its_partitions_to_the_others() -> None:
    g = cg.ConsumerGroups(SETTINGS, lambda: "x")
    a = g.heartbeat(req("a", 0), TOPICS, 0)
    b = g.heartbeat(req("b", 0), TOPICS, 0)
    a = g.heartbeat(req("a", a.member_epoch, a.assignment), TOPICS, 0)
    a = g.heartbeat(req("a", a.member_epoch, a.assignment), TOPICS, 0)
    b = g.heartbeat(req("b", b.member_epoch, {}), TOPICS, 0)
    assert len(parts(a.assignment)) == len(parts(b.assignment)) == 3
    assert g.heartbeat(req("b", cg.LEAVE_EPOCH, None, names=None), TOPICS, 0).member_epoch == cg.LEAVE_EPOCH
    a = g.heartbeat(req("a", a.member_epoch, a.assignment), TOPICS, 0)
    assert parts(a.assignment) == {(T, p) for p in range(6)}


def test_epochs_fence_zombies() -> None:
    g = cg.ConsumerGroups(SETTINGS, lambda: "x")
    a = g.heartbeat(req("a", 0), TOPICS, 0)
    with pytest.raises(FencedMemberEpoch):
        g.heartbeat(req("a", a.member_epoch + 1, a.assignment), TOPICS, 0)
    with pytest.raises(UnknownMemberId):
        g.heartbeat(req("ghost", 3, {}), TOPICS, 0)
    # a new topic bumps the epochs: the previous epoch with a subset of the partitions is accepted
    topics = {**TOPICS, "u": (U, 2)}
    a2 = g.heartbeat(req("a", a.member_epoch, a.assignment, names=("t", "u")), topics, 0)
    assert a2.member_epoch > a.member_epoch
    assert g.heartbeat(req("a", a.member_epoch, a.assignment, names=None), topics, 0).member_epoch == a2.member_epoch
    with pytest.raises(FencedMemberEpoch):  # the previous epoch claiming a partition it never had
        g.heartbeat(req("a", a.member_epoch, {U: frozenset({0}), T: frozenset({7})}, names=None), topics, 0)


def test_session_timeout_removes_a_silent_member() -> None:
    g = cg.ConsumerGroups(SETTINGS, lambda: "x")
    g.heartbeat(req("a", 0), TOPICS, 0)
    assert g.next_deadline() == 45_000
    assert g.tick(44_999) == []
    assert g.tick(45_000) == [("g", "a")]
    assert g.groups["g"].state == "Empty"


def test_a_revocation_not_acknowledged_within_the_rebalance_timeout_removes_the_member() -> None:
    g = cg.ConsumerGroups(SETTINGS, lambda: "x")
    a = g.heartbeat(req("a", 0), TOPICS, 0)
    g.heartbeat(req("b", 0), TOPICS, 0)
    g.heartbeat(req("a", a.member_epoch, a.assignment), TOPICS, 1_000)  # revocation starts: 30 s to acknowledge
    assert g.tick(30_999) == []
    assert g.tick(31_000) == [("g", "a")]


def test_bad_heartbeats_are_refused() -> None:
    g = cg.ConsumerGroups(SETTINGS, lambda: "x")
    with pytest.raises(InvalidRequest):
        g.heartbeat(req("a", 0, names=()), TOPICS, 0)  # no subscription
    with pytest.raises(InvalidRequest):
        g.heartbeat(req("a", 0, {T: frozenset({1})}), TOPICS, 0)  # owns partitions on join
    with pytest.raises(InvalidRequest):
        g.heartbeat(req("", 5, {}), TOPICS, 0)
    with pytest.raises(InvalidRequest):
        g.heartbeat(req("a", -3, {}), TOPICS, 0)
    with pytest.raises(UnsupportedAssignor):
        g.heartbeat(req("a", 0, assignor="sticky"), TOPICS, 0)


@pytest.mark.parametrize("pattern", ["(?=t)t", "(?!x).*", "(?<=a)b", r"(a)\1", "(?>a)", "a*+", r"a\Z", "[", "", r"a\C"])
def test_patterns_re2j_refuses_are_refused(pattern: str) -> None:
    with pytest.raises(InvalidRegularExpression):
        cg.compile_regex(pattern)


def test_a_pathological_pattern_matches_in_linear_time() -> None:
    """RE2 never backtracks: (a*)*b against a 249-character topic name is answered at once (a
    backtracking engine such as Python's re takes exponential time on it)."""
    assert cg.compile_regex("(a*)*b").fullmatch("a" * 249) is None
    assert cg.compile_regex("(?P<n>rx)-.*").fullmatch("rx-1") is not None


def test_a_regex_subscription_picks_up_a_new_topic() -> None:
    g = cg.ConsumerGroups(SETTINGS, lambda: "x")
    topics = {"rx-a": (T, 2), "other": (U, 2), "__consumer_offsets": (uuid.UUID(int=9), 50)}
    a = g.heartbeat(req("a", 0, names=None, regex="rx-.*"), topics, 0)
    assert parts(a.assignment) == {(T, 0), (T, 1)}  # a full match; internal topics never
    new = uuid.UUID(int=3)
    a2 = g.heartbeat(req("a", a.member_epoch, a.assignment, names=None), {**topics, "rx-b": (new, 1)}, 0)
    assert a2.member_epoch > a.member_epoch and (new, 0) in parts(a2.assignment)


def test_range_and_uniform_assignors_balance() -> None:
    members = [cg.ConsumerMember(f"m{i}", "", "", 1, 0, subscribed_names=("t", "u")) for i in range(3)]
    topics = {"t": (T, 4), "u": (U, 3)}
    for assign in (cg.assign_range, cg.assign_uniform):
        out = assign(members, topics, {})
        counts = sorted(len(parts(a)) for a in out.values())
        every = [p for a in out.values() for p in parts(a)]
        assert len(every) == len(set(every)) == 7
        if assign is cg.assign_uniform:
            assert counts == [2, 2, 3]
    rng = cg.assign_range(members, topics, {})
    assert rng["m0"][T] == frozenset({0, 1}) and rng["m0"][U] == frozenset({0})
    # uniform is sticky: a fourth member takes from others without reshuffling the rest
    before = cg.assign_uniform(members, topics, {})
    after = cg.assign_uniform(members + [cg.ConsumerMember("m3", "", "", 1, 0, subscribed_names=("t", "u"))],
                              topics, before)
    moved = sum(len(parts(before[m]) - parts(after[m])) for m in before)
    assert moved == 1 and len(parts(after["m3"])) == 1


def test_offset_commits_and_fetches_of_a_consumer_group_are_fenced_by_the_member_epoch() -> None:
    shard = GroupShard(0)
    a = shard.consumer_heartbeat(req("a", 0), TOPICS, 0).response
    tp = TopicPartition("t", 0)
    data = {tp: OffsetCommitData(5, -1, "")}
    assert shard.commit_offsets("g", a.member_epoch, "a", None, data, 0, api_version=9).response == {tp: None}
    with pytest.raises(StaleMemberEpoch):
        shard.commit_offsets("g", a.member_epoch - 1, "a", None, data, 0, api_version=9)
    with pytest.raises(UnknownMemberId):
        shard.commit_offsets("g", a.member_epoch, "ghost", None, data, 0, api_version=9)
    with pytest.raises(UnsupportedVersion):  # OffsetCommit below v9 cannot carry a member epoch
        shard.commit_offsets("g", a.member_epoch, "a", None, data, 0, api_version=8)
    with pytest.raises(IllegalGeneration):  # TxnOffsetCommit from a zombie (KIP-447 under KIP-848)
        shard.txn_commit_offsets("g", 7, 0, a.member_epoch - 1, "a", None, data, 0)
    assert shard.txn_commit_offsets("g", 7, 0, a.member_epoch, "a", None, data, 0).response == {tp: None}
    with pytest.raises(StaleMemberEpoch):
        shard.fetch_offsets("g", [tp], False, "a", a.member_epoch + 1)
    shard.fetch_offsets("g", [tp], False, "a", a.member_epoch)
    shard.fetch_offsets("g", [tp], False, None, -1)  # an admin's fetch


def test_classic_and_consumer_groups_share_ids_only_when_empty() -> None:
    shard = GroupShard(0)
    join = JoinRequest(group_id="c", member_id="", group_instance_id=None, protocol_type="consumer",
                       protocols=(("range", b""),), session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                       client_id="cl", client_host="/h", require_known_member_id=False)
    shard.join_group(join, 0)
    with pytest.raises(GroupIdNotFound):  # a classic group with a member keeps its id
        shard.consumer_heartbeat(req("a", 0, group="c"), TOPICS, 0)
    a = shard.consumer_heartbeat(req("a", 0, group="k"), TOPICS, 0).response
    with pytest.raises(InconsistentGroupProtocol):  # and a consumer group with a member its own
        shard.join_group(_with_group(join, "k"), 0)
    shard.consumer_heartbeat(req("a", cg.LEAVE_EPOCH, None, names=None, group="k"), TOPICS, 0)
    shard.join_group(_with_group(join, "k"), 0)  # empty: a classic member takes it over
    assert a.member_epoch > 0 and "k" not in shard.consumers.groups


def _with_group(join: JoinRequest, group: str) -> JoinRequest:
    from dataclasses import replace

    return replace(join, group_id=group)


def test_a_static_member_restarts_without_a_rebalance() -> None:
    g = cg.ConsumerGroups(SETTINGS, lambda: "x")

    def static(member: str, epoch: int, owned: cg.Assignment | None = None, names: tuple[str, ...] | None = ("t",)) -> cg.HeartbeatRequest:
        from dataclasses import replace

        return replace(req(member, epoch, owned, names=names), instance_id="i-1")

    a = g.heartbeat(static("a", 0), TOPICS, 0)
    b = g.heartbeat(req("b", 0), TOPICS, 0)
    a = g.heartbeat(static("a", a.member_epoch, a.assignment, None), TOPICS, 0)
    a = g.heartbeat(static("a", a.member_epoch, a.assignment, None), TOPICS, 0)
    b = g.heartbeat(req("b", b.member_epoch, {}, names=None), TOPICS, 0)
    epoch = g.groups["g"].group_epoch
    with pytest.raises(UnreleasedInstanceId):  # the instance id is still in use
        g.heartbeat(static("a2", 0), TOPICS, 0)
    assert g.heartbeat(static("a", cg.STATIC_LEAVE_EPOCH, None, None), TOPICS, 1_000).member_epoch == cg.STATIC_LEAVE_EPOCH
    b2 = g.heartbeat(req("b", b.member_epoch, b.assignment, names=None), TOPICS, 2_000)
    assert parts(b2.assignment) == parts(b.assignment)  # b does not get a's partitions meanwhile
    a2 = g.heartbeat(static("a2", 0), TOPICS, 3_000)  # the restarted instance
    assert (a2.member_epoch, parts(a2.assignment)) == (a.member_epoch, parts(a.assignment))
    assert g.groups["g"].group_epoch == epoch and "a" not in g.groups["g"].members
    # a departed static member that never comes back goes with its session
    g.heartbeat(static("a2", cg.STATIC_LEAVE_EPOCH, None, None), TOPICS, 4_000)
    assert ("g", "a2") not in g.tick(4_000 + 44_999) and ("g", "a2") in g.tick(4_000 + 45_000)


@settings(max_examples=150, deadline=None)
@given(counts=st.lists(st.integers(1, 12), min_size=1, max_size=4), members=st.integers(1, 7),
       subsets=st.booleans(), data=st.data())
def test_uniform_assigns_every_partition_once_balanced_and_sticky(counts: list, members: int, subsets: bool,
                                                                   data: st.DataObject) -> None:
    topics = {f"t{i}": (uuid.UUID(int=i + 1), n) for i, n in enumerate(counts)}
    names = sorted(topics)
    subs = [tuple(data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True))) if subsets else tuple(names)
            for _ in range(members)]
    ms = [cg.ConsumerMember(f"m{i}", "", "", 1, 0, subscribed_names=s) for i, s in enumerate(subs)]
    out = cg.assign_uniform(ms, topics, {})
    owned = [(t, p, mid) for mid, a in out.items() for t, ps in a.items() for p in ps]
    wanted = {(topics[n][0], p) for s in subs for n in s for p in range(topics[n][1])}
    assert sorted((t, p) for t, p, _ in owned) == sorted(wanted)  # each exactly once
    by_id = {tid: n for n, (tid, _) in topics.items()}
    assert all(by_id[t] in dict(zip((m.member_id for m in ms), subs))[mid] for t, _, mid in owned)
    if not subsets:
        sizes = [len(parts(out[m.member_id])) for m in ms]
        assert max(sizes) - min(sizes) <= 1
        more = ms + [cg.ConsumerMember("new", "", "", 1, 0, subscribed_names=tuple(names))]
        after = cg.assign_uniform(more, topics, out)
        moved = sum(len(parts(out[m]) - parts(after[m])) for m in out)
        assert moved <= -(-len(wanted) // (members + 1))  # only the new member's share moves
