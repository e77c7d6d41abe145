"""Consumer groups of the consumer rebalance protocol (KIP-848): the pure state machine.

Theory of operation (Kafka's modern consumer group, read from its group coordinator; no code of
it is copied). The coordinator computes every assignment itself:

* Every change a member's heartbeat brings (a new member, a new subscription, a member gone, or
  a change in the partitions of the subscribed topics) bumps the **group epoch**. When the group
  epoch is ahead of the **target assignment epoch**, the server-side assignor (``uniform`` or
  ``range``, ``group.consumer.assignors``) computes a new target assignment for every member and
  the target assignment epoch catches up.
* Each member moves towards its target on its own heartbeats (``reconcile``, the table
  ``MEMBER_STATES``): partitions it must give up are first **revoked** (state
  ``unrevoked_partitions``: its assignment shrinks, its epoch stays) until a heartbeat lists them
  no longer owned; only then does the member take the target epoch and the partitions of its
  target that no other member still holds (assigned or pending revocation). Partitions another
  member has not released yet are given later (state ``unreleased_partitions``). So a partition
  is never owned by two members at once.
* A member that stops heartbeating for its session timeout
  (``group.consumer.session.timeout.ms``), or does not acknowledge a revocation within its
  rebalance timeout, is removed and the group epoch bumped (``tick``).
* Epochs fence zombies: a heartbeat with an epoch other than the member's (or its previous one
  with a subset of its partitions, when the answer that bumped it was lost) is
  FENCED_MEMBER_EPOCH; an OffsetCommit/OffsetFetch/TxnOffsetCommit whose epoch is not the
  member's current one is STALE_MEMBER_EPOCH (``validate_commit``, ``validate_fetch``).

Subscriptions are topic names or a regular expression, evaluated on the broker with RE2 (the
``google-re2`` bindings; Kafka uses RE2/J, the Java port of the same library), matching whole
topic names, never internal ones; a pattern RE2 refuses, or RE2 syntax RE2/J lacks, is
INVALID_REGULAR_EXPRESSION (``compile_regex``). Topics are identified by id in assignments;
the caller passes the current topics (name -> id, partition count) into every call.

Static members (``group.instance.id``) leave with epoch -2 and keep their place and partitions
for their session timeout: the next member with the same instance id takes them over with the
same epoch, and the group does not rebalance; while the old member has not left, a new one with
its instance id is UNRELEASED_INSTANCE_ID.

Durability is the shard's (consumer_store.py): the records of what changed are written to
``__consumer_offsets`` before the answer and replayed into these objects on load.

Pure and synchronous: no I/O, time passed in as ``now`` (milliseconds).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from typing import Any, Callable, Mapping

import re2  # google-re2: the RE2 library Kafka's RE2/J ports

from oncelog.protocol.errors import (
    FencedMemberEpoch,
    GroupMaxSizeReached,
    InvalidRegularExpression,
    InvalidRequest,
    StaleMemberEpoch,
    UnknownMemberId,
    UnreleasedInstanceId,
    UnsupportedAssignor,
)

#: partitions by topic id
Assignment = dict[uuid.UUID, frozenset[int]]
#: the broker's topics as the assignor sees them: name -> (topic id, partition count)
Topics = Mapping[str, tuple[uuid.UUID, int]]

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    """The ``group.consumer.*`` broker configs (Kafka's names and defaults)."""

    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors (first: default)
    max_size: int = 0x7FFFFFFF  # group.consumer.max.size


class MemberState(Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


#: state -> what its heartbeat may lead to (``reconcile``): the transition table
MEMBER_STATES: dict[MemberState, frozenset[MemberState]] = {
    MemberState.STABLE: frozenset(MemberState),  # a new target: revoke first, or take what is free
    MemberState.UNREVOKED_PARTITIONS: frozenset(MemberState),  # stays until it lists the revoked ones gone
    MemberState.UNRELEASED_PARTITIONS: frozenset(MemberState),  # takes partitions as others release them
}


# -- regular expressions ----------------------------------------------------------------------------

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a client's bad pattern is its error answer, not a broker log line
#: RE2 (C++) syntax that RE2/J, which Kafka uses, does not have: ``\C`` (any byte)
_NOT_RE2J = ("\\C",)


@lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> Any:
    """The subscription regex, compiled by RE2 (linear-time matching, as Kafka's RE2/J: no
    pattern can make matching a topic name slow) and matched against whole topic names as
    RE2/J's ``matches()`` does (``fullmatch``). Raises InvalidRegularExpression for a pattern RE2
    refuses (lookaround, backreferences, possessive quantifiers, ...) or one using RE2 syntax
    RE2/J lacks."""
    if not pattern:
        raise InvalidRegularExpression("the subscription regex is empty")
    if any(s in pattern for s in _NOT_RE2J):
        raise InvalidRegularExpression(f"regex {pattern!r} uses syntax RE2/J does not have")
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise InvalidRegularExpression(f"regex {pattern!r} is not valid: {reason}") from None


# -- state ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_deadline: int
    instance_id: str | None = None
    rack_id: str | None = None
    subscribed_names: tuple[str, ...] = ()
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    revoking: Assignment = field(default_factory=dict)
    #: when a revocation must be acknowledged (None: none pending)
    revocation_deadline: int | None = None
    #: a static member that left with epoch -2: its place waits for its instance id
    departed: bool = False


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    #: member id -> its target assignment (at ``assignment_epoch``)
    target: dict[str, Assignment] = field(default_factory=dict)
    #: the subscribed topics as last seen: name -> (id, partitions); a change bumps the epoch
    subscribed_topics: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """Kafka's consumer group states: Empty, Assigning, Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch != self.group_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def owner_epoch(self, topic_id: uuid.UUID, partition: int, but: str) -> int:
        """The epoch of the member (other than ``but``) holding the partition, -1 if none does."""
        for m in self.members.values():
            if m.member_id != but and (partition in m.assigned.get(topic_id, ()) or partition in m.revoking.get(topic_id, ())):
                return m.member_epoch
        return -1


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_names: tuple[str, ...] | None
    subscribed_regex: str | None
    server_assignor: str | None
    #: the partitions the member owns (None: unchanged since its last heartbeat)
    owned: Assignment | None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    #: the member's assignment (None: not sent, e.g. on leave)
    assignment: Assignment | None


# -- assignors ------------------------------------------------------------------------------------


def _matching(pattern: str, topics: Topics) -> set[str]:
    rx = compile_regex(pattern)
    return {n for n in topics if not n.startswith("__") and rx.fullmatch(n)}


def _subscribed(member: ConsumerMember, topics: Topics) -> list[str]:
    names = set(n for n in member.subscribed_names if n in topics)
    if member.subscribed_regex is not None:
        names |= _matching(member.subscribed_regex, topics)
    return sorted(names)


def assign_range(members: list[ConsumerMember], topics: Topics, previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """``range``: per topic, the subscribed members (by member id) get contiguous ranges of its
    partitions, the first ones one more when they do not divide evenly."""
    out: dict[str, dict[uuid.UUID, set[int]]] = {m.member_id: {} for m in members}
    subs = {m.member_id: _subscribed(m, topics) for m in members}
    for name in sorted({n for s in subs.values() for n in s}):
        tid, count = topics[name]
        who = sorted(mid for mid, s in subs.items() if name in s)
        per, extra = divmod(count, len(who))
        start = 0
        for i, mid in enumerate(who):
            n = per + (1 if i < extra else 0)
            if n:
                out[mid].setdefault(tid, set()).update(range(start, start + n))
            start += n
    return {mid: {t: frozenset(p) for t, p in a.items()} for mid, a in out.items()}


def assign_uniform(members: list[ConsumerMember], topics: Topics, previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """``uniform``: every member gets as many partitions as it can (counts differ by at most one
    among members that could take each other's partitions), keeping each member's previous
    target where balance allows (sticky), so few partitions move when members come and go."""
    subs = {m.member_id: set(_subscribed(m, topics)) for m in members}
    ids = sorted(subs)
    if not ids:
        return {}
    partitions = [(name, topics[name][0], p) for name in sorted({n for s in subs.values() for n in s})
                  for p in range(topics[name][1])]
    if all(subs[mid] == subs[ids[0]] for mid in ids):
        return _uniform_homogeneous(ids, [(tid, p) for _n, tid, p in partitions], previous)
    eligible = {(tid, p): [mid for mid in ids if name in subs[mid]] for name, tid, p in partitions}
    total = len(partitions)
    quota = -(-total // len(ids))  # ceil: nobody keeps more than this
    count = {mid: 0 for mid in ids}
    owner: dict[tuple[uuid.UUID, int], str] = {}
    # 1. sticky: keep the previous target where still subscribed and within the quota
    for _name, tid, p in partitions:
        for mid in eligible[(tid, p)]:
            if p in previous.get(mid, {}).get(tid, ()) and count[mid] < quota:
                owner[(tid, p)] = mid
                count[mid] += 1
                break
    # 2. the rest to the eligible member with the fewest
    for _name, tid, p in partitions:
        if (tid, p) not in owner:
            who = eligible[(tid, p)]
            mid = min(who, key=lambda m: (count[m], m))
            owner[(tid, p)] = mid
            count[mid] += 1
    # 3. balance (members with different subscriptions): a partition moves from a member to an
    # eligible one with two or more fewer; a few passes over the partitions, O(passes x P x M)
    for _ in range(4):
        moved = False
        for key in sorted(owner, key=lambda k: (str(k[0]), k[1])):
            mid = owner[key]
            target = min(eligible[key], key=lambda m: (count[m], m))
            if count[target] + 1 < count[mid]:
                owner[key] = target
                count[mid] -= 1
                count[target] += 1
                moved = True
        if not moved:
            break
    out: dict[str, dict[uuid.UUID, set[int]]] = {mid: {} for mid in ids}
    for (tid, p), mid in owner.items():
        out[mid].setdefault(tid, set()).add(p)
    return {mid: {t: frozenset(ps) for t, ps in a.items()} for mid, a in out.items()}


def _uniform_homogeneous(ids: list[str], partitions: list[tuple[uuid.UUID, int]],
                         previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """``uniform`` when every member subscribes to the same topics, in O(P + M): each member
    keeps its previous partitions up to its share (P // M, one more for the first P % M members
    to reach it), the rest go to the members below their share."""
    floor, extra = divmod(len(partitions), len(ids))
    wanted = set(partitions)
    owner: dict[tuple[uuid.UUID, int], str] = {}
    count = {mid: 0 for mid in ids}
    bigger = extra  # members that may still get floor + 1
    for mid in ids:
        for tid, ps in sorted(previous.get(mid, {}).items(), key=lambda kv: str(kv[0])):
            for p in sorted(ps):
                key = (tid, p)
                if key not in wanted or key in owner:
                    continue
                if count[mid] < floor or (count[mid] == floor and bigger > 0):
                    if count[mid] == floor:
                        bigger -= 1
                    owner[key] = mid
                    count[mid] += 1
    free = iter(k for k in partitions if k not in owner)
    for mid in ids:
        share = floor + 1 if count[mid] > floor else floor  # above floor: it took a bigger share
        if share == floor and bigger > 0:
            share, bigger = floor + 1, bigger - 1
        while count[mid] < share:
            owner[next(free)] = mid
            count[mid] += 1
    out: dict[str, dict[uuid.UUID, set[int]]] = {mid: {} for mid in ids}
    for (tid, p), mid in owner.items():
        out[mid].setdefault(tid, set()).add(p)
    return {mid: {t: frozenset(ps) for t, ps in a.items()} for mid, a in out.items()}


ASSIGNORS: dict[str, Callable[[list[ConsumerMember], Topics, Mapping[str, Assignment]], dict[str, Assignment]]] = {
    "uniform": assign_uniform,
    "range": assign_range,
}


# -- the group -------------------------------------------------------------------------------------


def _copy(a: Mapping[uuid.UUID, frozenset[int]]) -> Assignment:
    return {t: frozenset(p) for t, p in a.items() if p}


def _owns_any(owned: Assignment | None, of: Assignment) -> bool:
    """Whether the member still lists any of ``of`` (an unknown owned set counts as yes)."""
    if owned is None:
        return True
    return any(p in of.get(t, ()) for t, ps in owned.items() for p in ps)


def _subset(owned: Assignment | None, of: Assignment) -> bool:
    if owned is None:
        return False
    return all(p in of.get(t, ()) for t, ps in owned.items() for p in ps)


class ConsumerGroups:
    """The consumer groups of one ``__consumer_offsets`` partition. ``new_member_id`` makes the
    id of a member whose client sent none (v0)."""

    def __init__(self, settings: ConsumerSettings, new_member_id: Callable[[], str]) -> None:
        self.settings = settings
        self.groups: dict[str, ConsumerGroup] = {}
        self.new_member_id = new_member_id

    # -- heartbeat ----------------------------------------------------------------------------

    def heartbeat(self, req: HeartbeatRequest, topics: Topics, now: int) -> HeartbeatAnswer:
        """ConsumerGroupHeartbeat. Raises InvalidRequest, UnsupportedAssignor,
        InvalidRegularExpression, UnknownMemberId, FencedMemberEpoch, GroupMaxSizeReached."""
        self._validate(req)
        if req.subscribed_regex:  # "" clears the regex (clients send it with a subscription by names)
            compile_regex(req.subscribed_regex)
        group = self.groups.get(req.group_id)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            if group is None or req.member_id not in group.members:
                raise UnknownMemberId(f"member {req.member_id} is not in group {req.group_id}")
            leaving = group.members[req.member_id]
            if req.member_epoch == STATIC_LEAVE_EPOCH and leaving.instance_id is not None:
                # a static member's temporary leave: it keeps its place and partitions until its
                # session times out, for the next member with its instance id
                leaving.departed = True
                leaving.session_deadline = now + self.settings.session_timeout_ms
            else:
                self._remove(group, req.member_id)
            return HeartbeatAnswer(req.member_id, req.member_epoch, self.settings.heartbeat_interval_ms, None)
        if group is None:
            group = self.groups[req.group_id] = ConsumerGroup(req.group_id)
        if req.member_epoch == 0:
            member_id = req.member_id or self.new_member_id()
            member = group.members.get(member_id)
            static = None if req.instance_id is None else next(
                (m for m in group.members.values() if m.instance_id == req.instance_id and m.member_id != member_id), None)
            if static is not None:
                if not static.departed:
                    raise UnreleasedInstanceId(f"instance {req.instance_id} is still member {static.member_id}")
                member = self._replace_static(group, static, member_id)
            elif member is None:
                if len(group.members) >= self.settings.max_size:
                    raise GroupMaxSizeReached(f"group {req.group_id} has {len(group.members)} members")
                member = group.members[member_id] = ConsumerMember(
                    member_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
                    now + self.settings.session_timeout_ms,
                )
            else:  # rejoining with epoch 0: it lost everything
                member.assigned, member.revoking, member.revocation_deadline = {}, {}, None
                member.state, member.member_epoch, member.previous_epoch = MemberState.STABLE, 0, -1
        else:
            member = group.members.get(req.member_id)
            if member is None:
                raise UnknownMemberId(f"member {req.member_id} is not in group {req.group_id}")
            if member.departed:
                raise FencedMemberEpoch(f"static member {req.member_id} left the group")
            self._check_epoch(member, req.member_epoch, req.owned)
        member.session_deadline = now + self.settings.session_timeout_ms
        changed = req.member_epoch == 0 and member.member_epoch == 0 and not member.subscribed_names \
            and member.subscribed_regex is None  # a new member
        if req.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.instance_id is not None:
            member.instance_id = req.instance_id
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.subscribed_names is not None and tuple(sorted(req.subscribed_names)) != member.subscribed_names:
            member.subscribed_names, changed = tuple(sorted(req.subscribed_names)), True
        if req.subscribed_regex is not None and (req.subscribed_regex or None) != member.subscribed_regex:
            member.subscribed_regex, changed = req.subscribed_regex or None, True
        if req.server_assignor != member.server_assignor and req.server_assignor is not None:
            member.server_assignor, changed = req.server_assignor, True
        if self._refresh_topics(group, topics) or changed:
            group.group_epoch += 1  # once per heartbeat, whatever changed
        if group.group_epoch > group.assignment_epoch:
            self._assign(group, topics)
        self._reconcile(group, member, req.owned, now)
        return HeartbeatAnswer(member.member_id, member.member_epoch, self.settings.heartbeat_interval_ms,
                               _copy(member.assigned))

    def _validate(self, req: HeartbeatRequest) -> None:
        if not req.group_id:
            raise InvalidRequest("GroupId can't be empty.")
        if req.instance_id == "":
            raise InvalidRequest("InstanceId can't be empty.")
        if req.rack_id == "":
            raise InvalidRequest("RackId can't be empty.")
        if req.member_epoch > 0 or req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            if not req.member_id:
                raise InvalidRequest("MemberId can't be empty.")
        elif req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise InvalidRequest("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or any(req.owned.values()):
                raise InvalidRequest("TopicPartitions must be empty when (re-)joining.")
            if not req.subscribed_names and not req.subscribed_regex:
                raise InvalidRequest("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        else:
            raise InvalidRequest("MemberEpoch is invalid.")
        if req.server_assignor is not None and req.server_assignor not in self.settings.assignors:
            raise UnsupportedAssignor(f"ServerAssignor {req.server_assignor} is not supported. "
                                      f"Supported assignors: {', '.join(self.settings.assignors)}.")

    @staticmethod
    def _check_epoch(member: ConsumerMember, epoch: int, owned: Assignment | None) -> None:
        if epoch > member.member_epoch:
            raise FencedMemberEpoch(f"member epoch {epoch} is ahead of the coordinator's {member.member_epoch}")
        if epoch < member.member_epoch and (epoch != member.previous_epoch or not _subset(owned, member.assigned)):
            raise FencedMemberEpoch(f"member epoch {epoch} is behind the coordinator's {member.member_epoch}")

    def _refresh_topics(self, group: ConsumerGroup, topics: Topics) -> bool:
        """Whether the subscribed topics changed (created, deleted, more partitions): the
        caller then bumps the group epoch."""
        names: set[str] = set()
        patterns: set[str] = set()
        for m in group.members.values():  # each distinct regex scans the topics once
            names.update(n for n in m.subscribed_names if n in topics)
            if m.subscribed_regex is not None:
                patterns.add(m.subscribed_regex)
        for pattern in patterns:
            names |= _matching(pattern, topics)
        seen = {n: topics[n] for n in sorted(names)}
        if seen == group.subscribed_topics:
            return False
        group.subscribed_topics = seen
        return True

    def _assign(self, group: ConsumerGroup, topics: Topics) -> None:
        members = list(group.members.values())
        name = next((m.server_assignor for m in members if m.server_assignor), None) or self.settings.assignors[0]
        group.target = ASSIGNORS[name](members, topics, group.target)
        group.assignment_epoch = group.group_epoch

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None, now: int) -> None:
        """Move ``member`` towards its target (``MEMBER_STATES``; see the module docstring)."""
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if _owns_any(owned, member.revoking):
                return  # still owns what it must give up
            member.revoking, member.revocation_deadline = {}, None
        elif member.state == MemberState.STABLE and member.member_epoch == group.assignment_epoch:
            return
        target = group.target.get(member.member_id, {})
        keep: dict[uuid.UUID, frozenset[int]] = {}
        revoke: dict[uuid.UUID, frozenset[int]] = {}
        pending: dict[uuid.UUID, set[int]] = {}
        unreleased = False
        for tid in set(target) | set(member.assigned):
            want = target.get(tid, frozenset())
            have = member.assigned.get(tid, frozenset())
            if have & want:
                keep[tid] = have & want
            if have - want:
                revoke[tid] = have - want
            for p in want - have:
                if group.owner_epoch(tid, p, member.member_id) != -1:
                    unreleased = True
                else:
                    pending.setdefault(tid, set()).add(p)
        before = member.state
        if revoke and _owns_any(owned, revoke):
            member.state, member.assigned, member.revoking = MemberState.UNREVOKED_PARTITIONS, keep, revoke
            member.revocation_deadline = now + member.rebalance_timeout_ms
        else:
            for tid, ps in pending.items():
                keep[tid] = keep.get(tid, frozenset()) | frozenset(ps)
            member.assigned, member.revoking = keep, {}
            member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
            if member.member_epoch != group.assignment_epoch:
                member.previous_epoch, member.member_epoch = member.member_epoch, group.assignment_epoch
        assert member.state in MEMBER_STATES[before]

    @staticmethod
    def _replace_static(group: ConsumerGroup, old: ConsumerMember, member_id: str) -> ConsumerMember:
        """The static member ``old`` (departed) comes back as ``member_id``: same epoch, same
        partitions, same target; the group does not rebalance."""
        old_id = old.member_id
        del group.members[old_id]
        old.member_id, old.departed = member_id, False
        group.members[member_id] = old
        if old_id in group.target:
            group.target[member_id] = group.target.pop(old_id)
        return old

    def _remove(self, group: ConsumerGroup, member_id: str) -> None:
        del group.members[member_id]
        group.target.pop(member_id, None)
        group.group_epoch += 1

    # -- timers -------------------------------------------------------------------------------

    def tick(self, now: int) -> list[tuple[str, str]]:
        """Remove members past their session timeout or their revocation deadline (their
        partitions go to the others on their next heartbeats). Returns (group id, member id)
        of those removed."""
        gone: list[tuple[str, str]] = []
        for group in self.groups.values():
            for m in list(group.members.values()):
                late = m.revocation_deadline is not None and now >= m.revocation_deadline
                if now >= m.session_deadline or late:
                    self._remove(group, m.member_id)
                    gone.append((group.group_id, m.member_id))
        return gone

    def next_deadline(self) -> int | None:
        deadlines = [d for g in self.groups.values() for m in g.members.values()
                     for d in (m.session_deadline, m.revocation_deadline) if d is not None]
        return min(deadlines, default=None)

    # -- offsets ------------------------------------------------------------------------------

    def validate_commit(self, group: ConsumerGroup, member_id: str, epoch: int, *, transactional: bool,
                        api_version: int | None) -> None:
        """OffsetCommit / TxnOffsetCommit by a consumer group: an empty group takes commits with
        epoch -1 (admin, manual assignment); otherwise the member must exist (UNKNOWN_MEMBER_ID)
        and name its current epoch (STALE_MEMBER_EPOCH). OffsetCommit below v9 cannot carry a
        member epoch: UNSUPPORTED_VERSION."""
        from oncelog.protocol.errors import UnsupportedVersion

        if epoch < 0 and not group.members:
            return
        if transactional and epoch < 0 and not member_id:
            return
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberId(f"member {member_id!r} is not in consumer group {group.group_id}")
        if not transactional and api_version is not None and api_version < 9:
            raise UnsupportedVersion("OffsetCommit version 9 or above must be used by members using the consumer protocol")
        if epoch != member.member_epoch:
            raise StaleMemberEpoch(f"member epoch {epoch} received, {member.member_epoch} expected")

    def validate_fetch(self, group: ConsumerGroup, member_id: str | None, epoch: int) -> None:
        """OffsetFetch v9+ by a member: it must exist and name its current epoch; without a
        member id and epoch (admin) anything may be read."""
        if member_id is None and epoch < 0:
            return
        member = group.members.get(member_id or "")
        if member is None:
            raise UnknownMemberId(f"member {member_id!r} is not in consumer group {group.group_id}")
        if epoch != member.member_epoch:
            raise StaleMemberEpoch(f"member epoch {epoch} received, {member.member_epoch} expected")
