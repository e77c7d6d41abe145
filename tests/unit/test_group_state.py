"""The group state table and every state x request (R3): the transition table itself, the
per-state answers to Heartbeat / OffsetCommit / SyncGroup from a known member, and a Hypothesis
run of random request sequences that checks the group invariants after every step and, at the
end, that a coordinator reloaded from the log has the same durable state (replay = live)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.coordinator.group.consumer_protocol import encode_assignment
from oncelog.coordinator.group.group import ClassicGroup
from oncelog.coordinator.group.shard import GroupShard
from oncelog.coordinator.group.state import (
    HEARTBEAT,
    OFFSET_COMMIT,
    SYNC_GROUP,
    VALID_PREVIOUS,
    GroupState,
    IllegalGroupTransition,
    check_transition,
)
from oncelog.coordinator.group.types import GroupSettings, JoinResult, Parked, SyncResult
from oncelog.protocol.errors import KafkaError, MemberIdRequired
from oncelog.types import TopicPartition
from test_group_harness import Harness

STATES = list(GroupState)
T0 = TopicPartition("t", 0)


@pytest.mark.parametrize("current", STATES)
@pytest.mark.parametrize("target", STATES)
def test_transition_table(current: GroupState, target: GroupState) -> None:
    group = ClassicGroup("g", state=current)
    if current in VALID_PREVIOUS[target]:
        group.transition(target, 5)
        assert group.state is target and group.state_timestamp == 5
    else:
        with pytest.raises(IllegalGroupTransition):
            group.transition(target, 5)
        assert group.state is current


def test_table_matches_kafka() -> None:
    E, P, C, S, D = STATES
    assert VALID_PREVIOUS == {E: {P}, P: {S, C, E}, C: {P}, S: {C}, D: {S, P, C, E, D}}
    with pytest.raises(IllegalGroupTransition, match="Empty -> Stable"):
        check_transition("g", E, S)


def _group_in(state: GroupState) -> tuple[Harness, JoinResult]:
    """A harness whose group "g" is in ``state`` and one of its members (current generation)."""
    h = Harness()
    a, b = h.stable_group("g", 2)
    leader, other = (a, b) if a.members else (b, a)
    if state is GroupState.STABLE:
        return h, leader
    h.join("g", leader.member_id)
    if state is GroupState.PREPARING_REBALANCE:
        return h, leader
    parked = h.join("g", other.member_id)
    assert state is GroupState.COMPLETING_REBALANCE
    return h, h.answer(parked)


@pytest.mark.parametrize("state", [GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE, GroupState.STABLE])
def test_every_state_answers_requests_as_the_tables_say(state: GroupState) -> None:
    h, m = _group_in(state)
    assert h.shard.groups["g"].state is state
    expected = HEARTBEAT[state]
    if expected is None:
        h.heartbeat("g", m.member_id, m.generation)
    else:
        with pytest.raises(expected):
            h.heartbeat("g", m.member_id, m.generation)
    expected = OFFSET_COMMIT[state]
    if expected is None:
        assert h.commit("g", {T0: 1}, generation=m.generation, member_id=m.member_id) == {T0: None}
    else:
        with pytest.raises(expected):
            h.commit("g", {T0: 1}, generation=m.generation, member_id=m.member_id)
    expected = SYNC_GROUP[state]
    if expected is None:
        out = h.run(h.shard.sync_group("g", m.generation, m.member_id, None, None, None, {}, h.now))
        assert isinstance(out, (Parked, SyncResult))
    else:
        with pytest.raises(expected):
            h.run(h.shard.sync_group("g", m.generation, m.member_id, None, None, None, {}, h.now))


def test_empty_and_dead_groups_know_no_member() -> None:
    assert HEARTBEAT[GroupState.EMPTY] is not None and OFFSET_COMMIT[GroupState.EMPTY] is not None
    assert all(t[GroupState.DEAD] is not None for t in (HEARTBEAT, OFFSET_COMMIT, SYNC_GROUP))


# -- random request sequences -----------------------------------------------------------------

CLIENTS = ["c0", "c1", "c2", "s0"]  # s0 is a static member (group.instance.id "i-s0")

_join = st.tuples(st.just("join"), st.sampled_from(CLIENTS), st.booleans(), st.sampled_from(["range", "roundrobin"]))
_sync = st.tuples(st.just("sync"), st.integers(0, 3))  # an index into the joined clients
_heartbeat = st.tuples(st.just("heartbeat"), st.integers(0, 3))
_short = st.tuples(st.just("advance"), st.sampled_from([1, 500, 1_500, 3_000]))
op = st.one_of(
    _join, _join, _join, _sync, _sync, _sync, _heartbeat, _heartbeat, _short, _short, _short,
    st.tuples(st.just("leave"), st.sampled_from(CLIENTS)),
    st.tuples(st.just("commit"), st.integers(0, 3), st.integers(0, 1000)),
    st.tuples(st.just("simple_commit"), st.integers(0, 1000)),
    st.tuples(st.just("txn_commit"), st.integers(1, 2), st.integers(0, 2), st.integers(0, 1000)),
    st.tuples(st.just("marker"), st.integers(1, 2), st.booleans()),
    st.tuples(st.just("advance"), st.sampled_from([1, 500, 3_000, 7_000, 20_000])),
    st.tuples(st.just("expire")),
    st.tuples(st.just("delete")),
)


def _check_invariants(shard: GroupShard) -> None:
    E, P, C, S, _ = STATES
    for group in shard.groups.values():
        assert group.state is not GroupState.DEAD
        if group.state is E:
            assert not group.members, "an Empty group has no members"
        if group.members:
            assert group.leader_id in group.members
        if group.state in (C, S):
            assert group.generation >= 1 and group.protocol_name is not None
        for m in group.members.values():
            if m.awaiting_join is not None:
                assert group.state is P, f"{m.member_id} waits in JoinGroup while {group.state}"
            if m.awaiting_sync is not None:
                assert group.state is C, f"{m.member_id} waits in SyncGroup while {group.state}"
        for iid, mid in group.static_members.items():
            assert group.members[mid].group_instance_id == iid


def _assert_replay_equals_live(h: Harness) -> None:
    live, fresh = h.shard, h.reloaded()
    assert fresh.offsets.committed == live.offsets.committed
    assert fresh.offsets.pending == live.offsets.pending
    for gid, group in live.groups.items():
        stored = group.state in (GroupState.STABLE, GroupState.EMPTY)
        if not stored or (group.generation == 0 and gid not in fresh.groups):
            continue  # mid-rebalance, or never got a generation: nothing stored yet
        other = fresh.groups[gid]
        assert (other.generation, other.protocol_name, other.state) == (group.generation, group.protocol_name, group.state)
        assert {m: x.assignment for m, x in other.members.items()} == {m: x.assignment for m, x in group.members.items()}
        if group.members:
            assert other.leader_id == group.leader_id
    assert set(fresh.groups) <= set(live.groups) | set()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=10, max_size=80))
def test_random_request_sequences_keep_invariants_and_replay_equals_live(ops: list[tuple]) -> None:
    h = Harness(GroupSettings(initial_rebalance_delay_ms=1_000))
    ids: dict[str, str] = {}
    results: dict[str, JoinResult] = {}
    parked: dict[str, Parked] = {}
    epochs = {1: 0, 2: 0}

    def collect() -> None:
        for client, p in list(parked.items()):
            got = h.answer(p)
            if isinstance(got, JoinResult):
                results[client] = got
                ids[client] = got.member_id
                del parked[client]
            elif got is not None:
                del parked[client]

    for o in ops:
        kind = o[0]
        if kind in ("sync", "heartbeat", "commit"):
            if not results:
                continue
            client = sorted(results)[o[1] % len(results)]
            o = (kind, client, *o[2:])
        try:
            if kind == "join":
                _, client, restart, proto = o
                instance = "i-s0" if client == "s0" else None
                kw = dict(instance=instance, client=client, protocols=((proto, b"m"), ("range", b"m")), v4=True)
                try:
                    out = h.join("g", "" if restart else ids.get(client, ""), **kw)
                except MemberIdRequired as exc:  # a real client rejoins at once with the given id
                    ids[client] = exc.member_id  # type: ignore[attr-defined]
                    out = h.join("g", ids[client], **kw)
                if isinstance(out, Parked):
                    parked[client] = out
                else:
                    results[client] = out
            elif kind == "sync":
                r = results[o[1]]
                assignment = {m: encode_assignment({"t": [i]}) for i, (m, _, _) in enumerate(r.members)}
                h.sync("g", r, assignment, instance="i-s0" if o[1] == "s0" else None)
            elif kind == "heartbeat":
                r = results[o[1]]
                h.heartbeat("g", r.member_id, r.generation, instance="i-s0" if o[1] == "s0" else None)
            elif kind == "leave":
                h.run(h.shard.leave_group("g", [(ids.get(o[1], ""), "i-s0" if o[1] == "s0" else None)], h.now))
            elif kind == "commit":
                r = results[o[1]]
                h.commit("g", {T0: o[2]}, generation=r.generation, member_id=r.member_id)
            elif kind == "simple_commit":
                h.commit("g", {T0: o[1]})
            elif kind == "txn_commit":
                _, pid, bump, offset = o
                epochs[pid] += bump
                h.txn_commit("g", pid, epochs[pid], {TopicPartition("t", pid): offset})
            elif kind == "marker":
                h.marker(o[1], epochs[o[1]], o[2])
            elif kind == "advance":
                h.advance(o[1])
            elif kind == "expire":
                h.run(h.shard.expire_offsets(h.now))
            elif kind == "delete":
                h.run(h.shard.delete_group("g", h.now))
        except KafkaError:
            pass
        collect()
        _check_invariants(h.shard)
    _assert_replay_equals_live(h)


def test_reply_ids_are_unique_across_shards() -> None:
    counter = itertools.count(1)
    a, b = GroupShard(0, reply_ids=counter), GroupShard(1, reply_ids=counter)
    assert a.membership.reply_ids is b.membership.reply_ids
