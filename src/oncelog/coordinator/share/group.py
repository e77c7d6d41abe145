"""Share groups (KIP-932): membership by ShareGroupHeartbeat, the assignment, and the share
sessions of ShareFetch/ShareAcknowledge. Pure: the clock is passed in (``now``, ms).

Membership. A member joins with epoch 0 and a member id it generated (v1), heartbeats with its
epoch and leaves with -1. The group epoch moves when the member set or a subscription changes;
a member's epoch follows the group epoch when its assignment changes, and the answer then
carries the assignment (none otherwise). Assignment: every member is assigned every partition
of the topics it subscribes to (a share partition is consumed by several members at once, each
record going to one of them: the records are divided at acquisition, not by the assignment; the
simple assignor of Kafka gives every member every partition while members do not outnumber
partitions many times over, which is the case here). A member whose session timeout passes
without a heartbeat is removed (``expire``).

Share sessions (KIP-932's ShareFetch sessions): keyed by (group, member). Epoch 0 opens one
(replacing an older one), -1 closes it, N > 0 must be the next expected epoch
(INVALID_SHARE_SESSION_EPOCH; none open: SHARE_SESSION_NOT_FOUND). A session holds the
partitions the member fetches from: a request adds its topics, ``forgotten`` removes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable

from oncelog.protocol.errors import (
    FencedMemberEpoch,
    GroupMaxSizeReached,
    InvalidRequest,
    InvalidShareSessionEpoch,
    ShareSessionLimitReached,
    ShareSessionNotFound,
    UnknownMemberId,
)

__all__ = ["HeartbeatAnswer", "ShareGroup", "ShareGroups", "ShareMember", "ShareSession", "Sessions"]

LEAVE_EPOCH = -1
#: topic name -> (topic id, partition count), or None when the topic does not exist
TopicResolver = Callable[[str], "tuple[uuid.UUID, int] | None"]
Assignment = dict[uuid.UUID, frozenset[int]]


@dataclass
class ShareMember:
    member_id: str
    member_epoch: int
    session_deadline: int
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed: tuple[str, ...] = ()
    assigned: Assignment = field(default_factory=dict)


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}


@dataclass(frozen=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    assignment: Assignment | None  # None: unchanged since the last answer


@dataclass
class ShareGroups:
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200
    groups: dict[str, ShareGroup] = field(default_factory=dict)

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: tuple[str, ...] | None, topics: TopicResolver, now: int, *,
                  client_id: str = "", client_host: str = "") -> HeartbeatAnswer:
        """One ShareGroupHeartbeat. Raises InvalidRequest, UnknownMemberId, FencedMemberEpoch,
        GroupMaxSizeReached with a message."""
        if not member_id:
            raise InvalidRequest("MemberId can't be empty.")
        if member_epoch < LEAVE_EPOCH:
            raise InvalidRequest(f"MemberEpoch {member_epoch} is invalid (-1, 0 or the member's epoch)")
        group = self.groups.get(group_id)
        if member_epoch == LEAVE_EPOCH:
            if group is None or member_id not in group.members:
                raise UnknownMemberId(f"member {member_id} is not in share group {group_id}")
            del group.members[member_id]
            group.group_epoch += 1
            return HeartbeatAnswer(member_id, LEAVE_EPOCH, None)
        if member_epoch == 0:
            if subscribed is None or not subscribed:
                raise InvalidRequest("SubscribedTopicNames must be set and not empty when joining.")
            if group is None:
                group = self.groups[group_id] = ShareGroup(group_id)
            member = group.members.get(member_id)
            if member is None:
                if len(group.members) >= self.max_size:
                    raise GroupMaxSizeReached(f"share group {group_id} has reached its maximum size {self.max_size}")
                member = group.members[member_id] = ShareMember(member_id, 0, now + self.session_timeout_ms)
            member.assigned = {}  # a (re)join gets its whole assignment
        else:
            member = group.members.get(member_id) if group is not None else None
            if member is None:
                raise UnknownMemberId(f"member {member_id} is not in share group {group_id}")
            if member_epoch != member.member_epoch:
                raise FencedMemberEpoch(f"member {member_id} of share group {group_id}: epoch {member_epoch} "
                                        f"received, {member.member_epoch} expected")
        assert group is not None
        member.session_deadline = now + self.session_timeout_ms
        member.rack_id, member.client_id, member.client_host = rack_id, client_id or member.client_id, \
            client_host or member.client_host
        if subscribed is not None and tuple(sorted(set(subscribed))) != member.subscribed:
            member.subscribed = tuple(sorted(set(subscribed)))
            group.group_epoch += 1
        target: Assignment = {}
        for name in member.subscribed:
            found = topics(name)
            if found is not None and found[1] > 0:
                target[found[0]] = frozenset(range(found[1]))
        if member_epoch == 0 or target != member.assigned:
            if member_epoch != 0 and target != member.assigned:
                group.group_epoch += 1
            group.group_epoch = max(group.group_epoch, 1)
            member.assigned = target
            member.member_epoch = group.group_epoch
            return HeartbeatAnswer(member_id, member.member_epoch, target)
        return HeartbeatAnswer(member_id, member.member_epoch, None)

    def expire(self, now: int) -> list[tuple[str, str]]:
        """Remove the members whose session timed out; returns (group, member) of each."""
        gone = []
        for group in self.groups.values():
            for mid in [mid for mid, m in group.members.items() if m.session_deadline <= now]:
                del group.members[mid]
                group.group_epoch += 1
                gone.append((group.group_id, mid))
        return gone

    def next_deadline(self) -> int | None:
        deadlines = [m.session_deadline for g in self.groups.values() for m in g.members.values()]
        return min(deadlines) if deadlines else None


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    next_epoch: int = 1
    partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)


MAX_EPOCH = 0x7FFFFFFF


@dataclass
class Sessions:
    """The share sessions of this broker (as partition leader), at most ``max_sessions``."""

    max_sessions: int = 2000
    sessions: dict[tuple[str, str], ShareSession] = field(default_factory=dict)

    def open(self, group_id: str, member_id: str, epoch: int,
             is_member: Callable[[str, str], bool] = lambda g, m: True) -> ShareSession | None:
        """The session a request with ``epoch`` uses, its epoch checked and moved on; None for a
        final request (-1: the session is closed, its partitions the caller's to release).
        Only a member of the group opens a session (UnknownMemberId otherwise: a client cannot
        make the broker keep state for groups nobody joined); at the limit, a new session evicts
        those whose member has left; only members' sessions make a new one
        ShareSessionLimitReached. Raises UnknownMemberId, ShareSessionNotFound, InvalidShareSessionEpoch, ShareSessionLimitReached."""
        key = (group_id, member_id)
        if epoch == 0:
            if not is_member(group_id, member_id):
                raise UnknownMemberId(f"member {member_id} is not in share group {group_id}: join it first "
                                      f"(ShareGroupHeartbeat)")
            if key not in self.sessions and len(self.sessions) >= self.max_sessions:
                for k in [k for k in self.sessions if not is_member(*k)]:
                    del self.sessions[k]
            if key not in self.sessions and len(self.sessions) >= self.max_sessions:
                raise ShareSessionLimitReached(f"{self.max_sessions} share sessions of members are open")
            session = self.sessions[key] = ShareSession(group_id, member_id)
            return session
        session = self.sessions.get(key)
        if session is None:
            raise ShareSessionNotFound(f"no share session for member {member_id} of group {group_id}")
        if epoch == -1:
            del self.sessions[key]
            return None
        if epoch != session.next_epoch:
            raise InvalidShareSessionEpoch(f"share session of member {member_id}: epoch {epoch} received, "
                                           f"{session.next_epoch} expected")
        session.next_epoch = 1 if epoch == MAX_EPOCH else epoch + 1
        return session

    def drop_member(self, group_id: str, member_id: str) -> None:
        self.sessions.pop((group_id, member_id), None)
