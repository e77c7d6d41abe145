"""Share-group membership and share sessions (KIP-932, issue 30), pure."""

from __future__ import annotations

import uuid

import pytest

from oncelog.coordinator.share.group import Sessions, ShareGroups
from oncelog.protocol.errors import (
    FencedMemberEpoch,
    GroupMaxSizeReached,
    InvalidRequest,
    InvalidShareSessionEpoch,
    ShareSessionLimitReached,
    ShareSessionNotFound,
    UnknownMemberId,
)

T = uuid.UUID(int=7)


def _topics(name: str):  # type: ignore[no-untyped-def]
    return (T, 2) if name == "t" else None


def _ready(group: str) -> dict[uuid.UUID, frozenset[int]]:
    """Every partition of "t" has its share state initialized already."""
    return {T: frozenset({0, 1})}


def test_partitions_are_assigned_once_their_share_state_is_initialized() -> None:
    """Kafka assigns only initialized share partitions (isPartitionAssignable): the first member
    of a new group gets nothing at its first heartbeat, which names what to initialize; a member
    joining after that gets its share at once, the first at its next heartbeat."""
    g = ShareGroups()
    a = g.heartbeat("g", "m1", 0, None, ("t",), _topics, now=0)
    assert a.assignment == {} and a.uninitialized == {T: frozenset({0, 1})}
    g.mark_initialized("g", T, frozenset({0, 1}))
    b = g.heartbeat("g", "m2", 0, None, ("t",), _topics, now=1)
    assert b.assignment is not None and len(b.assignment[T]) == 1 and not b.uninitialized
    a = g.heartbeat("g", "m1", a.member_epoch, None, None, _topics, now=2)
    assert a.assignment is not None and a.assignment[T] == {0, 1} - b.assignment[T]


def test_join_heartbeat_leave_and_fencing() -> None:
    g = ShareGroups(session_timeout_ms=100, max_size=2)
    a = g.heartbeat("g", "m1", 0, None, ("t",), _topics, now=0, initialized=_ready)
    assert a.member_epoch == 1 and a.assignment == {T: frozenset({0, 1})}
    b = g.heartbeat("g", "m2", 0, None, ("t", "missing"), _topics, now=0)
    assert b.member_epoch == 2 and b.assignment == {T: frozenset({1})}  # two members, two partitions: one each
    assert g.heartbeat("g", "m1", 1, None, None, _topics, now=10).assignment == {T: frozenset({0})}  # m1 gives one up
    assert g.heartbeat("g", "m1", 2, None, None, _topics, now=10).assignment is None  # unchanged
    with pytest.raises(FencedMemberEpoch):
        g.heartbeat("g", "m1", 7, None, None, _topics, now=10)
    with pytest.raises(UnknownMemberId):
        g.heartbeat("g", "nobody", 1, None, None, _topics, now=10)
    with pytest.raises(GroupMaxSizeReached):
        g.heartbeat("g", "m3", 0, None, ("t",), _topics, now=10)
    with pytest.raises(InvalidRequest):
        g.heartbeat("g", "", 0, None, ("t",), _topics, now=10)
    assert g.heartbeat("g", "m2", -1, None, None, _topics, now=20).member_epoch == -1
    assert g.heartbeat("g", "m1", 2, None, None, _topics, now=30).assignment == {T: frozenset({0, 1})}  # m2's back
    assert g.expire(now=129) == [] and g.expire(now=130) == [("g", "m1")]
    assert "g" not in g.groups  # an empty group is not kept (its durable state is the caller's)


def test_the_assignment_follows_the_topics_partition_count() -> None:
    counts = {"t": 2}
    g = ShareGroups()
    a = g.heartbeat("g", "m1", 0, None, ("t",), lambda n: (T, counts[n]) if n in counts else None, now=0,
                    initialized=_ready)
    b = g.heartbeat("g", "m2", 0, None, ("t",), lambda n: (T, counts[n]) if n in counts else None, now=0)
    counts["t"] = 6
    b = g.heartbeat("g", "m2", b.member_epoch, None, None, lambda n: (T, counts[n]), now=1)
    assert b.uninitialized == {T: frozenset(range(2, 6))}  # the new partitions: assigned once initialized
    g.mark_initialized("g", T, b.uninitialized[T])
    a = g.heartbeat("g", "m1", a.member_epoch, None, None, lambda n: (T, counts[n]), now=1)
    b = g.heartbeat("g", "m2", b.member_epoch, None, None, lambda n: (T, counts[n]), now=1)
    assert a.assignment is not None and b.assignment is not None
    assert len(a.assignment[T]) == len(b.assignment[T]) == 3 and a.assignment[T] | b.assignment[T] == set(range(6))


def test_the_groups_with_members_are_capped_and_an_empty_one_frees_its_place() -> None:
    g = ShareGroups(max_groups=2)
    g.heartbeat("a", "m", 0, None, ("t",), _topics, now=0)
    g.heartbeat("b", "m", 0, None, ("t",), _topics, now=0)
    with pytest.raises(GroupMaxSizeReached, match="group.share.max.groups"):
        g.heartbeat("c", "m", 0, None, ("t",), _topics, now=0)
    g.heartbeat("a", "m", -1, None, None, _topics, now=1)
    assert g.heartbeat("c", "m", 0, None, ("t",), _topics, now=2).member_epoch == 1


def test_member_expiry_costs_the_deadlines_due_not_the_members() -> None:
    """100,000 join+leave cycles leave nothing behind; expiry pops due deadlines from a heap
    (heartbeats push one each; a member that heartbeat since has a stale one, skipped)."""
    g = ShareGroups(session_timeout_ms=100)
    for i in range(100_000):
        g.heartbeat(f"g{i}", "m", 0, None, ("t",), _topics, now=i, initialized=_ready)
        g.heartbeat(f"g{i}", "m", -1, None, None, _topics, now=i)
    assert g.groups == {} and len(g._deadlines) < 2000
    g.heartbeat("g", "m", 0, None, ("t",), _topics, now=0)
    g.heartbeat("g", "m", 1, None, None, _topics, now=50)
    assert g.expire(now=100) == [] and g.next_deadline() == 150
    assert g.expire(now=150) == [("g", "m")] and g.next_deadline() is None


def test_share_session_epochs() -> None:
    s = Sessions(max_sessions=1)
    with pytest.raises(ShareSessionNotFound):
        s.open("g", "m", 1)
    assert s.open("g", "m", 0) is not None
    with pytest.raises(ShareSessionLimitReached):
        s.open("g", "other", 0)
    assert s.open("g", "m", 1) is not None
    with pytest.raises(InvalidShareSessionEpoch):
        s.open("g", "m", 1)
    assert s.open("g", "m", 2) is not None
    assert s.open("g", "m", -1) is None  # closed
    with pytest.raises(ShareSessionNotFound):
        s.open("g", "m", 3)


def test_only_members_open_sessions_and_at_the_limit_those_of_members_gone_are_evicted() -> None:
    s = Sessions(max_sessions=2)
    members = {("g", "a"), ("g", "left"), ("g", "b")}
    s.open("g", "a", 0)
    s.open("g", "left", 0)
    members.discard(("g", "left"))
    with pytest.raises(UnknownMemberId):
        s.open("g", "stranger", 0, lambda g, m: (g, m) in members)
    s.open("g", "b", 0, lambda g, m: (g, m) in members)  # the session of the member that left goes
    assert set(s.sessions) == {("g", "a"), ("g", "b")}
    members.add(("g", "c"))
    with pytest.raises(ShareSessionLimitReached):
        s.open("g", "c", 0, lambda g, m: (g, m) in members)


def test_sessions_expire_when_idle_and_end_with_their_connection() -> None:
    s = Sessions(idle_ms=100)
    s.open("g", "a", 0, now=0, connection="c1")
    s.open("g", "b", 0, now=0, connection="c2")
    s.open("g", "a", 1, now=60)
    assert s.expire_idle(now=100) == [("g", "b")]
    assert s.drop_connection("c2") == [] and s.drop_connection("c1") == [("g", "a")]
    assert s.sessions == {}
    s.open("g", "a", 0, now=0, connection="c1")
    s.open("g", "a", 0, now=0, connection="c3")  # opened again on another connection: the first one no longer ends it
    assert s.drop_connection("c1") == [] and set(s.sessions) == {("g", "a")}
