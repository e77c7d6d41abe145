"""Share groups (KIP-932): membership by ShareGroupHeartbeat, the assignment, and the share
sessions of ShareFetch/ShareAcknowledge. Pure: the clock is passed in (``now``, ms).

Membership. A member joins with epoch 0 and a member id it generated (v1), heartbeats with its
epoch and leaves with -1. The group epoch moves when the member set, a subscription or the
subscribed topics (their ids and partition counts) change; then, at the next heartbeat of any
member, the group's target assignment is computed once for every member (assignor.py: Kafka's
``simple`` assignor: partitions spread over the members, a partition shared only when members
outnumber partitions; the records of a shared partition are divided at acquisition) and the
assignment epoch follows. A member's epoch follows the assignment epoch when it heartbeats, and
that answer carries its assignment (none otherwise). Only partitions whose share state is
initialized are assigned (Kafka's ``isPartitionAssignable``): a heartbeat names the subscribed
partitions that are not (``HeartbeatAnswer.uninitialized``), the caller initializes them and
says so (``mark_initialized``, which moves the group epoch). So the members of a new group get
their first partitions at their second heartbeat, balanced among all who joined meanwhile, as
on Kafka (there the share coordinator initializes them between the two). A member whose session timeout passes
without a heartbeat is removed (``expire``, in the order of a deadline heap: nothing walks every
member). A group whose last member leaves is dropped from memory (its durable state, share-
partition state and configs, is the caller's: ``ShareGroups`` holds membership only);
``max_groups`` (``group.share.max.groups``) bounds the groups with members, ``max_size``
(``group.share.max.size``) the members of one.

Share sessions (KIP-932's ShareFetch sessions): keyed by (group, member). Epoch 0 opens one
(replacing an older one), -1 closes it, N > 0 must be the next expected epoch
(INVALID_SHARE_SESSION_EPOCH; none open: SHARE_SESSION_NOT_FOUND). A session holds the
partitions the member fetches from: a request adds its topics, ``forgotten`` removes. Only a
member opens one; a session not used for ``idle_ms`` expires (``expire_idle``) and one opened on
a connection ends with it (``drop_connection``), as Kafka ties a share session to its
connection.
"""

from __future__ import annotations

import heapq
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Hashable

from oncelog.coordinator.share.assignor import Assignment, assign
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
#: the subscribed topics as last resolved: ((name, (topic id, partition count) or None), ...)
Metadata = tuple[tuple[str, "tuple[uuid.UUID, int] | None"], ...]


@dataclass
class ShareMember:
    member_id: str
    member_epoch: int
    session_deadline: int
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed: tuple[str, ...] = ()
    #: the assignment the member was last given (what ShareGroupDescribe shows)
    assigned: Assignment = field(default_factory=dict)
    #: the member's part of the group's target assignment (given at its next heartbeat)
    target: Assignment = field(default_factory=dict)


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    #: the group epoch the target assignment was computed at
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    #: subscribed topic name -> how many members subscribe to it
    subscriptions: Counter[str] = field(default_factory=Counter)
    metadata: Metadata = ()
    #: topic id -> the partitions whose share state is initialized: those that may be assigned
    initialized: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return set(self.subscriptions)


@dataclass(frozen=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    assignment: Assignment | None  # None: unchanged since the last answer
    #: the group's subscribed partitions whose share state is not initialized yet (topic id ->
    #: partitions): the caller initializes them and calls ``mark_initialized``
    uninitialized: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)


@dataclass
class ShareGroups:
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200
    max_groups: int = 1000
    groups: dict[str, ShareGroup] = field(default_factory=dict)
    #: (session deadline, group, member) per heartbeat; an entry whose member heartbeat since (or
    #: left) is stale and skipped when it comes up
    _deadlines: list[tuple[int, str, str]] = field(default_factory=list, repr=False)
    _members: int = field(default=0, repr=False)

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: tuple[str, ...] | None, topics: TopicResolver, now: int, *,
                  client_id: str = "", client_host: str = "",
                  initialized: Callable[[str], dict[uuid.UUID, frozenset[int]]] = lambda g: {}) -> HeartbeatAnswer:
        """One ShareGroupHeartbeat. ``initialized(group)``: the partitions whose share state is
        initialized already (durable), asked when the group starts (here). Raises
        InvalidRequest, UnknownMemberId, FencedMemberEpoch, GroupMaxSizeReached (the group is
        full, or ``max_groups`` groups have members) with a message."""
        if not member_id:
            raise InvalidRequest("MemberId can't be empty.")
        if member_epoch < LEAVE_EPOCH:
            raise InvalidRequest(f"MemberEpoch {member_epoch} is invalid (-1, 0 or the member's epoch)")
        group = self.groups.get(group_id)
        changed = False  # the group epoch moves once per heartbeat, whatever changed
        if member_epoch == LEAVE_EPOCH:
            if group is None or member_id not in group.members:
                raise UnknownMemberId(f"member {member_id} is not in share group {group_id}")
            self._remove(group, member_id)
            return HeartbeatAnswer(member_id, LEAVE_EPOCH, None)
        if member_epoch == 0:
            if subscribed is None or not subscribed:
                raise InvalidRequest("SubscribedTopicNames must be set and not empty when joining.")
            if group is None:
                if len(self.groups) >= self.max_groups:
                    raise GroupMaxSizeReached(f"this broker coordinates {len(self.groups)} share groups with members, "
                                              f"its maximum (group.share.max.groups): {group_id} cannot start")
                group = self.groups[group_id] = ShareGroup(group_id, initialized=dict(initialized(group_id)))
            member = group.members.get(member_id)
            if member is None:
                if len(group.members) >= self.max_size:
                    raise GroupMaxSizeReached(f"share group {group_id} has reached its maximum size {self.max_size}")
                member = group.members[member_id] = ShareMember(member_id, 0, now + self.session_timeout_ms)
                self._members += 1
                changed = True
        else:
            member = group.members.get(member_id) if group is not None else None
            if member is None:
                raise UnknownMemberId(f"member {member_id} is not in share group {group_id}")
            if member_epoch != member.member_epoch:
                raise FencedMemberEpoch(f"member {member_id} of share group {group_id}: epoch {member_epoch} "
                                        f"received, {member.member_epoch} expected")
        assert group is not None
        member.session_deadline = now + self.session_timeout_ms
        self._push_deadline(member.session_deadline, group_id, member_id)
        member.rack_id, member.client_id, member.client_host = rack_id, client_id or member.client_id, \
            client_host or member.client_host
        if subscribed is not None and tuple(sorted(set(subscribed))) != member.subscribed:
            group.subscriptions.subtract(member.subscribed)
            member.subscribed = tuple(sorted(set(subscribed)))
            group.subscriptions.update(member.subscribed)
            group.subscriptions = +group.subscriptions  # drops the names nobody subscribes to any more
            changed = True
        metadata = tuple((name, topics(name)) for name in sorted(group.subscriptions))
        if metadata != group.metadata:
            group.metadata = metadata
            changed = True
        if changed:
            group.group_epoch += 1
        if group.assignment_epoch != group.group_epoch:
            self._assign(group)
        pending = {}
        for _, found in group.metadata:
            if found is not None and found[1] > 0:
                missing = frozenset(range(found[1])) - group.initialized.get(found[0], frozenset())
                if missing:
                    pending[found[0]] = missing
        if member_epoch == 0 or member.member_epoch != group.assignment_epoch:
            member.member_epoch = group.assignment_epoch
            member.assigned = member.target
            return HeartbeatAnswer(member_id, member.member_epoch, member.assigned, pending)
        return HeartbeatAnswer(member_id, member.member_epoch, None, pending)

    def mark_initialized(self, group_id: str, topic_id: uuid.UUID, partitions: frozenset[int]) -> None:
        """The share state of ``partitions`` of ``topic_id`` is initialized for the group: they
        may be assigned (the group epoch moves; members get them at their next heartbeat)."""
        group = self.groups.get(group_id)
        if group is None:
            return
        have = group.initialized.get(topic_id, frozenset())
        if not partitions <= have:
            group.initialized[topic_id] = have | partitions
            group.group_epoch += 1

    def _assign(self, group: ShareGroup) -> None:
        """The group's target assignment at its current epoch (assignor.py), from the topics as
        last resolved (``group.metadata``)."""
        resolved = {name: found for name, found in group.metadata if found is not None and found[1] > 0}
        subscriptions = {mid: frozenset(resolved[n][0] for n in m.subscribed if n in resolved)
                         for mid, m in group.members.items()}
        assignable = {tid: sorted(p for p in group.initialized.get(tid, ()) if p < count)
                      for tid, count in resolved.values()}
        targets = assign(subscriptions, {mid: m.target for mid, m in group.members.items()}, assignable)
        for mid, m in group.members.items():
            m.target = targets.get(mid, {})
        group.assignment_epoch = group.group_epoch

    def _remove(self, group: ShareGroup, member_id: str) -> None:
        member = group.members.pop(member_id)
        self._members -= 1
        group.subscriptions.subtract(member.subscribed)
        group.subscriptions = +group.subscriptions
        group.group_epoch += 1
        if not group.members:
            del self.groups[group.group_id]

    def _push_deadline(self, deadline: int, group_id: str, member_id: str) -> None:
        heapq.heappush(self._deadlines, (deadline, group_id, member_id))
        if len(self._deadlines) > 4 * self._members + 1024:  # mostly stale: rebuild from the members
            self._deadlines = [(m.session_deadline, g.group_id, m.member_id)
                               for g in self.groups.values() for m in g.members.values()]
            heapq.heapify(self._deadlines)

    def _live(self, entry: tuple[int, str, str]) -> bool:
        group = self.groups.get(entry[1])
        member = group.members.get(entry[2]) if group is not None else None
        return member is not None and member.session_deadline == entry[0]

    def expire(self, now: int) -> list[tuple[str, str]]:
        """Remove the members whose session timed out; returns (group, member) of each. Costs
        the entries that came due, not the members."""
        gone = []
        while self._deadlines and self._deadlines[0][0] <= now:
            entry = heapq.heappop(self._deadlines)
            if self._live(entry):
                self._remove(self.groups[entry[1]], entry[2])
                gone.append((entry[1], entry[2]))
        return gone

    def next_deadline(self) -> int | None:
        while self._deadlines and not self._live(self._deadlines[0]):
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    next_epoch: int = 1
    partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)
    #: when a request last used it (ms)
    last_used: int = 0
    #: the client connection that opened it (None: not tied to one)
    connection: Hashable | None = None


MAX_EPOCH = 0x7FFFFFFF


@dataclass
class Sessions:
    """The share sessions of this broker (as partition leader), at most ``max_sessions``; one
    unused for ``idle_ms`` is expired by ``expire_idle``."""

    max_sessions: int = 2000
    idle_ms: int = 45_000
    sessions: dict[tuple[str, str], ShareSession] = field(default_factory=dict)
    #: connection -> the sessions opened on it
    _by_connection: dict[Hashable, set[tuple[str, str]]] = field(default_factory=dict, repr=False)

    def open(self, group_id: str, member_id: str, epoch: int,
             is_member: Callable[[str, str], bool] = lambda g, m: True, *, now: int = 0,
             connection: Hashable | None = None) -> ShareSession | None:
        """The session a request with ``epoch`` uses, its epoch checked and moved on; None for a
        final request (-1: the session is closed, its partitions the caller's to release).
        Only a member of the group opens a session (UnknownMemberId otherwise: a client cannot
        make the broker keep state for groups nobody joined); at the limit, a new session evicts
        those whose member has left; only members' sessions make a new one
        ShareSessionLimitReached. Raises UnknownMemberId, ShareSessionNotFound,
        InvalidShareSessionEpoch, ShareSessionLimitReached."""
        key = (group_id, member_id)
        if epoch == 0:
            if not is_member(group_id, member_id):
                raise UnknownMemberId(f"member {member_id} is not in share group {group_id}: join it first "
                                      f"(ShareGroupHeartbeat)")
            if key not in self.sessions and len(self.sessions) >= self.max_sessions:
                for k in [k for k in self.sessions if not is_member(*k)]:
                    self._drop(k)
            if key not in self.sessions and len(self.sessions) >= self.max_sessions:
                raise ShareSessionLimitReached(f"{self.max_sessions} share sessions of members are open")
            self._drop(key)
            session = self.sessions[key] = ShareSession(group_id, member_id, last_used=now, connection=connection)
            if connection is not None:
                self._by_connection.setdefault(connection, set()).add(key)
            return session
        session = self.sessions.get(key)
        if session is None:
            raise ShareSessionNotFound(f"no share session for member {member_id} of group {group_id}")
        if epoch == -1:
            self._drop(key)
            return None
        if epoch != session.next_epoch:
            raise InvalidShareSessionEpoch(f"share session of member {member_id}: epoch {epoch} received, "
                                           f"{session.next_epoch} expected")
        session.next_epoch = 1 if epoch == MAX_EPOCH else epoch + 1
        session.last_used = max(session.last_used, now)
        return session

    def _drop(self, key: tuple[str, str]) -> None:
        session = self.sessions.pop(key, None)
        if session is not None and session.connection is not None:
            keys = self._by_connection.get(session.connection)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_connection[session.connection]

    def drop_member(self, group_id: str, member_id: str) -> None:
        self._drop((group_id, member_id))

    def expire_idle(self, now: int) -> list[tuple[str, str]]:
        """Close the sessions no request used for ``idle_ms``; returns their (group, member)."""
        gone = [k for k, s in self.sessions.items() if s.last_used + self.idle_ms <= now]
        for k in gone:
            self._drop(k)
        return gone

    def drop_connection(self, connection: Hashable) -> list[tuple[str, str]]:
        """Close the sessions opened on ``connection`` (it closed); returns their (group, member)."""
        gone = sorted(self._by_connection.pop(connection, ()))
        for k in gone:
            self.sessions.pop(k, None)
        return gone
