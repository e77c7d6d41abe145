"""The classic membership protocol on the pure core (R3): joins, generations, syncs, heartbeats,
leaves, timeouts, static members, KIP-394, the delayed initial rebalance, protocol selection."""

from __future__ import annotations

import pytest

from oncelog.coordinator.group.consumer_protocol import encode_assignment, encode_subscription
from oncelog.coordinator.group.state import GroupState
from oncelog.coordinator.group.types import GroupSettings, JoinResult, Parked, SyncResult
from oncelog.protocol.errors import (
    FencedInstanceId,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidSessionTimeout,
    MemberIdRequired,
    RebalanceInProgress,
    UnknownMemberId,
)
from test_group_harness import Harness

A0 = encode_assignment({"t": [0]})


def test_single_member_gets_generation_one_and_its_assignment() -> None:
    h = Harness()
    res = h.join_now("g", client="alice")
    assert res.generation == 1 and res.leader_id == res.member_id and res.protocol_name == "range"
    assert [m[0] for m in res.members] == [res.member_id]
    out = h.sync("g", res, {res.member_id: A0})
    assert h.answer(out) == SyncResult("consumer", "range", A0)
    assert h.shard.groups["g"].state is GroupState.STABLE
    assert len(h.log) == 1, "the leader's assignment is stored as one GroupMetadata record"


def test_second_member_triggers_a_rebalance_and_both_get_generation_two() -> None:
    h = Harness()
    a = h.join_now("g", client="a")
    h.sync("g", a, {a.member_id: A0})
    parked_b = h.join("g", client="b")
    assert h.answer(parked_b) is None, "B waits until A rejoins"
    with pytest.raises(RebalanceInProgress):
        h.heartbeat("g", a.member_id, a.generation)
    rejoin_a = h.join("g", a.member_id)
    ra, rb = h.answer(rejoin_a), h.answer(parked_b)
    assert ra.generation == rb.generation == 2
    assert ra.leader_id == a.member_id and len(ra.members) == 2 and rb.members == ()
    follower = h.sync("g", rb)
    assert h.answer(follower) is None, "the follower waits for the leader's assignment"
    assignments = {a.member_id: encode_assignment({"t": [0]}), rb.member_id: encode_assignment({"t": [1]})}
    leader = h.sync("g", ra, assignments)
    assert h.answer(leader).assignment == assignments[a.member_id]
    assert h.answer(follower).assignment == assignments[rb.member_id]
    h.heartbeat("g", rb.member_id, 2)


def test_member_id_required_then_join_with_the_given_id() -> None:
    h = Harness()
    with pytest.raises(MemberIdRequired) as ei:
        h.join("g", v4=True, client="c")
    given = ei.value.member_id  # type: ignore[attr-defined]
    assert given.startswith("c-")
    res = h.join_now("g", given, v4=True)
    assert res.member_id == given and res.generation == 1


def test_pending_member_that_never_rejoins_is_forgotten_after_its_session_timeout() -> None:
    h = Harness()
    with pytest.raises(MemberIdRequired) as ei:
        h.join("g", v4=True, session=6_000)
    h.advance(6_001)
    assert not h.shard.groups["g"].pending_members
    with pytest.raises(UnknownMemberId):
        h.join("g", ei.value.member_id, v4=True)  # type: ignore[attr-defined]


def test_session_timeout_removes_a_silent_member_and_the_others_rebalance() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    for _ in range(4):  # a keeps heartbeating, b is silent (killed)
        h.advance(3_000)
        try:
            h.heartbeat("g", a.member_id, a.generation)
        except RebalanceInProgress:
            break
    group = h.shard.groups["g"]
    assert b.member_id not in group.members
    assert group.state is GroupState.PREPARING_REBALANCE
    res = h.join_now("g", a.member_id)
    assert res.generation == 3 and [m[0] for m in res.members] == [a.member_id]


def test_leave_triggers_rebalance_and_last_leave_empties_the_group() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    errors = h.run(h.shard.leave_group("g", [(b.member_id, None)], h.now))
    assert errors == [None]
    res = h.join_now("g", a.member_id)
    assert res.generation == 3
    h.sync("g", res, {a.member_id: A0})
    records_before = len(h.log)
    assert h.run(h.shard.leave_group("g", [(a.member_id, None)], h.now)) == [None]
    group = h.shard.groups["g"]
    assert group.state is GroupState.EMPTY and group.generation == 4
    assert len(h.log) == records_before + 1, "the empty generation is stored"
    errs = h.run(h.shard.leave_group("g", [("nobody", None)], h.now))
    assert isinstance(errs[0], UnknownMemberId)


def test_batched_leave_by_instance_id() -> None:
    h = Harness()
    r = h.join_now("g", instance="i-1")
    h.sync("g", r, {r.member_id: A0}, instance="i-1")
    errors = h.run(h.shard.leave_group("g", [("", "i-1"), ("", "i-unknown")], h.now))
    assert errors[0] is None and isinstance(errors[1], UnknownMemberId)
    assert h.shard.groups["g"].state is GroupState.EMPTY


def test_stale_generation_and_unknown_member() -> None:
    h = Harness()
    (a,) = h.stable_group("g", 1)
    with pytest.raises(IllegalGeneration):
        h.heartbeat("g", a.member_id, a.generation - 1)
    with pytest.raises(UnknownMemberId):
        h.heartbeat("g", "ghost", a.generation)
    with pytest.raises(UnknownMemberId):
        h.heartbeat("nope", a.member_id, a.generation)
    with pytest.raises(IllegalGeneration):
        h.run(h.shard.sync_group("g", 7, a.member_id, None, None, None, {}, h.now))
    with pytest.raises(UnknownMemberId):
        h.join("g", "ghost")


def test_inconsistent_protocols_and_session_timeouts_are_refused() -> None:
    h = Harness()
    h.join_now("g", protocols=(("range", b""),))
    with pytest.raises(InconsistentGroupProtocol):
        h.join("g", protocols=(("cooperative-sticky", b""),))
    with pytest.raises(InconsistentGroupProtocol):
        h.join("g", protocol_type="connect")
    with pytest.raises(InconsistentGroupProtocol):
        h.join("other", protocols=())
    with pytest.raises(InvalidSessionTimeout):
        h.join("g2", session=5_999)
    with pytest.raises(InvalidSessionTimeout):
        h.join("g2", session=1_800_001)


def test_protocol_selection_prefers_what_every_member_supports_and_most_prefer() -> None:
    h = Harness(GroupSettings(initial_rebalance_delay_ms=1_000))
    p1 = h.join("g", protocols=(("roundrobin", b"r"), ("range", b"a")))
    p2 = h.join("g", protocols=(("range", b"a"), ("roundrobin", b"r")))
    p3 = h.join("g", protocols=(("range", b"a"),))
    h.advance(1_000)  # members joined during the delay: it is extended once more
    assert h.answer(p1) is None
    h.advance(1_000)
    results = [h.answer(p) for p in (p1, p2, p3)]
    assert {r.protocol_name for r in results} == {"range"}
    assert {r.generation for r in results} == {1}


def test_delayed_initial_rebalance_collects_members_into_one_generation() -> None:
    h = Harness(GroupSettings(initial_rebalance_delay_ms=3_000))
    p1 = h.join("g", rebalance=60_000)
    h.advance(1_000)
    p2 = h.join("g", rebalance=60_000)
    h.advance(2_001)
    assert h.answer(p1) is None, "a member joined during the delay: it is extended"
    h.advance(3_000)
    r1, r2 = h.answer(p1), h.answer(p2)
    assert r1.generation == r2.generation == 1 and len(r1.members or r2.members) == 2


def test_rebalance_timeout_drops_members_that_do_not_rejoin() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    leader, follower = (a, b) if a.members else (b, a)
    # the leader rejoins (a rebalance starts); the follower is alive but never rejoins
    parked = h.join("g", leader.member_id, rebalance=8_000, session=30_000)
    for _ in range(5):
        h.advance(2_000)
        if h.answer(parked) is not None:
            break
        with pytest.raises(RebalanceInProgress):
            h.heartbeat("g", follower.member_id, follower.generation)
    res = h.answer(parked)
    assert isinstance(res, JoinResult) and [m[0] for m in res.members] == [leader.member_id]
    assert follower.member_id not in h.shard.groups["g"].members


def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    leader, other = (a, b) if a.members else (b, a)
    parked_l = h.join("g", leader.member_id, rebalance=6_000)
    parked_o = h.join("g", other.member_id, protocols=(("range", b"changed"),), rebalance=6_000)
    ra, rb = h.answer(parked_l), h.answer(parked_o)
    leader = ra if ra.members else rb
    follower = rb if leader is ra else ra
    h.sync("g", leader, {})
    assert h.shard.groups["g"].state is GroupState.STABLE
    h.advance(6_001)
    group = h.shard.groups["g"]
    assert follower.member_id not in group.members
    assert group.state is GroupState.PREPARING_REBALANCE


def test_static_member_restart_keeps_its_slot_without_a_rebalance() -> None:
    h = Harness()
    r = h.join_now("g", instance="i-1", client="app")
    h.sync("g", r, {r.member_id: A0}, instance="i-1")
    generation = h.shard.groups["g"].generation
    again = h.join_now("g", instance="i-1", client="app")  # restarted: no member id
    assert again.member_id != r.member_id and again.generation == generation
    assert again.leader_id == r.member_id, "the old leader id is returned, so it does not assign"
    sync = h.sync("g", again, instance="i-1")
    assert sync == SyncResult("consumer", "range", A0)
    with pytest.raises(FencedInstanceId):
        h.heartbeat("g", r.member_id, generation, instance="i-1")
    with pytest.raises(UnknownMemberId):
        h.heartbeat("g", r.member_id, generation)


def test_static_member_is_not_dropped_when_it_misses_a_rebalance() -> None:
    h = Harness()
    s = h.join_now("g", instance="i-1", session=30_000, rebalance=5_000)
    h.sync("g", s, {s.member_id: A0}, instance="i-1")
    d = h.join("g", rebalance=5_000)  # a dynamic member arrives; the static one is away
    h.advance(5_001)
    res = h.answer(d)
    assert isinstance(res, JoinResult)
    group = h.shard.groups["g"]
    assert s.member_id in group.members, "static members stay through a rebalance they miss"


def test_second_join_of_the_same_member_answers_the_first_with_rebalance_in_progress() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    first = h.join("g", a.member_id)
    second = h.join("g", a.member_id)
    assert isinstance(h.answer(first), RebalanceInProgress)
    h.join("g", b.member_id)
    assert isinstance(h.answer(second), JoinResult)


def test_follower_rejoin_in_stable_group_with_same_metadata_changes_nothing() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    follower = a if not a.members else b
    res = h.join("g", follower.member_id)
    assert isinstance(res, JoinResult) and res.generation == follower.generation
    assert h.shard.groups["g"].state is GroupState.STABLE


def test_leader_rejoin_forces_a_rebalance() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    leader = a if a.members else b
    assert isinstance(h.join("g", leader.member_id), Parked)
    assert h.shard.groups["g"].state is GroupState.PREPARING_REBALANCE


def test_member_leaving_during_sync_wait_fails_the_parked_syncs() -> None:
    h = Harness()
    a, b = h.stable_group("g", 2)
    leader, other = (a, b) if a.members else (b, a)
    pa, pb = h.join("g", leader.member_id), h.join("g", other.member_id, protocols=(("range", b"x"),))
    ra, rb = h.answer(pa), h.answer(pb)
    follower = rb if ra.members else ra
    parked = h.sync("g", follower)
    leaver = ra if ra.members else rb
    h.run(h.shard.leave_group("g", [(leaver.member_id, None)], h.now))
    assert isinstance(h.answer(parked), RebalanceInProgress)
