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


def test_join_heartbeat_leave_and_fencing() -> None:
    g = ShareGroups(session_timeout_ms=100, max_size=2)
    a = g.heartbeat("g", "m1", 0, None, ("t",), _topics, now=0)
    assert a.member_epoch == 1 and a.assignment == {T: frozenset({0, 1})}
    b = g.heartbeat("g", "m2", 0, None, ("t", "missing"), _topics, now=0)
    assert b.assignment == {T: frozenset({0, 1})}  # every member gets every partition
    assert g.heartbeat("g", "m1", 1, None, None, _topics, now=10).assignment is None  # unchanged
    with pytest.raises(FencedMemberEpoch):
        g.heartbeat("g", "m1", 7, None, None, _topics, now=10)
    with pytest.raises(UnknownMemberId):
        g.heartbeat("g", "nobody", 1, None, None, _topics, now=10)
    with pytest.raises(GroupMaxSizeReached):
        g.heartbeat("g", "m3", 0, None, ("t",), _topics, now=10)
    with pytest.raises(InvalidRequest):
        g.heartbeat("g", "", 0, None, ("t",), _topics, now=10)
    assert g.heartbeat("g", "m2", -1, None, None, _topics, now=20).member_epoch == -1
    assert g.expire(now=109) == [] and g.expire(now=110) == [("g", "m1")]
    assert g.groups["g"].state == "Empty"


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
