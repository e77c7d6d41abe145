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
the caller passes the current topics into every call, as a ``TopicImage`` (a versioned
snapshot; a plain mapping is wrapped). What a group subscribes to is resolved when a
subscription or the topics change, never at a heartbeat that changes nothing
(subscriptions.py: the regexes' resolutions, each member's names found in the image); regex
topics the heartbeating member may not DESCRIBE are left out (``may_describe``, as Kafka).

Bounds, checked before anything changes (Kafka's request parser refuses any string over 32,767
bytes; a record must fit a ``__consumer_offsets`` batch): member, instance and rack ids, the
assignor and each subscribed name at most ``MAX_STRING_BYTES`` (INVALID_REQUEST); a member's
record at most ``MAX_MEMBER_RECORD_BYTES`` (INVALID_REQUEST); a regex as subscriptions.py says
(INVALID_REGULAR_EXPRESSION). A heartbeat writes the records of what it changed: the group's
own, its member's, and those of the members whose target moved (``ConsumerGroup.dirty``),
never the whole group again.

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
from typing import Callable, Mapping

from oncelog.coordinator.group import subscriptions as subs
from oncelog.coordinator.group.assignors import ASSIGNORS, Assignment, Topics, assign_range, assign_uniform, subscribers
from oncelog.coordinator.group.record_codec import MAX_STRING_BYTES
from oncelog.coordinator.group.subscriptions import RegexResolution, TopicImage, compile_regex
from oncelog.protocol.errors import (
    FencedMemberEpoch,
    GroupMaxSizeReached,
    InvalidRequest,
    StaleMemberEpoch,
    UnknownMemberId,
    UnreleasedInstanceId,
    UnsupportedAssignor,
)

__all__ = ["ASSIGNORS", "MAX_MEMBER_RECORD_BYTES", "MAX_STRING_BYTES", "ConsumerGroup", "ConsumerGroups",
           "ConsumerMember", "ConsumerSettings", "HeartbeatAnswer", "HeartbeatRequest", "MemberState", "TopicImage",
           "assign_range", "assign_uniform", "compile_regex"]

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
#: the largest member record (its subscription above all): it must fit one __consumer_offsets
#: batch (message.max.bytes, 1,048,588 by default) with room to spare
MAX_MEMBER_RECORD_BYTES = 1_000_000


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
    #: volatile: the topics of ``topics_version`` of the image it subscribes to by name
    topics: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    topics_version: int = field(default=-1, compare=False, repr=False)


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
    # -- volatile, derived from the members (rebuilt when ``derived`` is False: after a load)
    #: regex -> its users and resolution (subscriptions.py)
    regexes: dict[str, RegexResolution] = field(default_factory=dict, compare=False, repr=False)
    derived: bool = field(default=False, compare=False, repr=False)
    #: the image version ``subscribed_topics`` was computed for; ``stale``: compute it again;
    #: ``joined``: members that joined since (their topics only added to it)
    topics_version: int = field(default=-1, compare=False, repr=False)
    stale: bool = field(default=True, compare=False, repr=False)
    joined: list[str] = field(default_factory=list, compare=False, repr=False)
    #: when every regex is resolved again from scratch (0: not scheduled yet)
    next_full_refresh: int = field(default=0, compare=False, repr=False)
    #: the image version every regex is resolved for (-1: some regex is behind)
    resolved_for: int = field(default=-1, compare=False, repr=False)
    #: topic name -> the sorted ids of its subscribers (assignors.subscribers), for the image
    #: version ``topics_version``; None: built again at the next assignment
    index: dict[str, list[str]] | None = field(default=None, compare=False, repr=False)
    #: members whose records may differ from the log's (None: any member)
    dirty: set[str] | None = field(default=None, compare=False, repr=False)

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

    def touch(self, member_id: str) -> None:
        """``member_id``'s records may differ from the log's now."""
        if self.dirty is not None:
            self.dirty.add(member_id)

    def invalidate(self) -> None:
        """The members changed behind the state machine's back (a record replayed on load):
        derived state is rebuilt and every member's records compared at the next use."""
        self.derived, self.stale, self.dirty = False, True, None

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


# -- the group -------------------------------------------------------------------------------------


def _copy(a: Mapping[uuid.UUID, frozenset[int]]) -> Assignment:
    return {t: frozenset(p) for t, p in a.items() if p}


def _owns_any(owned: Assignment | None, of: Assignment) -> bool:
    """Whether the member still lists any of ``of`` (an unknown owned set counts as yes)."""
    if owned is None:
        return True
    return any(p in of.get(t, ()) for t, ps in owned.items() for p in ps)


def _too_long(value: str) -> bool:
    """Longer than a record string holds (UTF-8 bytes)."""
    return len(value) * 4 > MAX_STRING_BYTES and len(value.encode("utf-8", "surrogatepass")) > MAX_STRING_BYTES


def _subset(owned: Assignment | None, of: Assignment) -> bool:
    if owned is None:
        return False
    return all(p in of.get(t, ()) for t, ps in owned.items() for p in ps)


class ConsumerGroups:
    """The consumer groups of one ``__consumer_offsets`` partition. ``new_member_id`` makes the
    id of a member whose client sent none (v0). ``settings_of(group_id)``: a group's settings,
    its own session timeout and heartbeat interval (the group configs
    ``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms``) over ``settings``;
    asked at every heartbeat, so a change applies from each member's next one."""

    def __init__(self, settings: ConsumerSettings, new_member_id: Callable[[], str],
                 settings_of: Callable[[str], ConsumerSettings] | None = None) -> None:
        self.settings = settings
        self.settings_of: Callable[[str], ConsumerSettings] = settings_of or (lambda group_id: self.settings)
        self.groups: dict[str, ConsumerGroup] = {}
        self.new_member_id = new_member_id
        #: the image a plain mapping of topics was last wrapped in (``_image``)
        self._wrapped: TopicImage | None = None

    # -- heartbeat ----------------------------------------------------------------------------

    def heartbeat(self, req: HeartbeatRequest, topics: TopicImage | Topics, now: int,
                  may_describe: Callable[[str], bool] | None = None) -> HeartbeatAnswer:
        """ConsumerGroupHeartbeat. ``may_describe``: whether the heartbeating member may
        DESCRIBE a topic (None: ACLs are off); the topics its group's regexes resolve to are
        filtered by it. Raises InvalidRequest, UnsupportedAssignor, InvalidRegularExpression,
        UnknownMemberId, FencedMemberEpoch, GroupMaxSizeReached, UnreleasedInstanceId, all
        before anything changes."""
        image = self._image(topics)
        self._validate(req)
        timing = self.settings_of(req.group_id)  # the group's session timeout and heartbeat interval
        group = self.groups.get(req.group_id)
        if group is not None:
            subs.derive(group)
        # a regex new to the group is compiled (validated) now, as Kafka; "" clears the regex
        if req.subscribed_regex and (group is None or req.subscribed_regex not in group.regexes):
            compile_regex(req.subscribed_regex)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            if group is None or req.member_id not in group.members:
                raise UnknownMemberId(f"member {req.member_id} is not in group {req.group_id}")
            leaving = group.members[req.member_id]
            if req.member_epoch == STATIC_LEAVE_EPOCH and leaving.instance_id is not None:
                # a static member's temporary leave: it keeps its place and partitions until its
                # session times out, for the next member with its instance id
                leaving.departed = True
                leaving.session_deadline = now + timing.session_timeout_ms
                group.touch(req.member_id)
            else:
                self._remove(group, req.member_id)
            return HeartbeatAnswer(req.member_id, req.member_epoch, timing.heartbeat_interval_ms, None)
        if req.member_epoch == 0:
            member_id = req.member_id or self.new_member_id()
            member = None if group is None else group.members.get(member_id)
            static = None if req.instance_id is None or group is None else next(
                (m for m in group.members.values() if m.instance_id == req.instance_id and m.member_id != member_id), None)
            if static is not None and not static.departed:
                raise UnreleasedInstanceId(f"instance {req.instance_id} is still member {static.member_id}")
            if static is None and member is None and group is not None and len(group.members) >= self.settings.max_size:
                raise GroupMaxSizeReached(f"group {req.group_id} has {len(group.members)} members")
            if group is None:
                group = self.groups[req.group_id] = ConsumerGroup(req.group_id, derived=True, dirty=set())
            if static is not None:
                member = self._replace_static(group, static, member_id)
            elif member is None:
                member = group.members[member_id] = ConsumerMember(
                    member_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
                    now + timing.session_timeout_ms,
                )  # its subscription is added to the group's below (``joined``)
            else:  # rejoining with epoch 0: it lost everything
                member.assigned, member.revoking, member.revocation_deadline = {}, {}, None
                member.state, member.member_epoch, member.previous_epoch = MemberState.STABLE, 0, -1
        else:
            member = None if group is None else group.members.get(req.member_id)
            if group is None or member is None:
                raise UnknownMemberId(f"member {req.member_id} is not in group {req.group_id}")
            if member.departed:
                raise FencedMemberEpoch(f"static member {req.member_id} left the group")
            self._check_epoch(member, req.member_epoch, req.owned)
        group.touch(member.member_id)
        member.session_deadline = now + timing.session_timeout_ms
        changed = req.member_epoch == 0 and member.member_epoch == 0 and not member.subscribed_names \
            and member.subscribed_regex is None  # a new member
        joined = changed and not group.stale  # its subscription only adds to the group's
        if req.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.instance_id is not None:
            member.instance_id = req.instance_id
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.subscribed_names is not None:
            names = tuple(sorted(set(req.subscribed_names)))
            if names != member.subscribed_names:
                member.subscribed_names, member.topics_version, group.stale = names, -1, True
                changed = True
        if req.subscribed_regex is not None and (req.subscribed_regex or None) != member.subscribed_regex:
            subs.set_regex(group, member, req.subscribed_regex or None)
            changed = True
        if req.server_assignor != member.server_assignor and req.server_assignor is not None:
            member.server_assignor, changed = req.server_assignor, True
        if joined:
            group.stale = False
            group.joined.append(member.member_id)
        if subs.refresh_topics(group, member, image, now, may_describe) or changed:
            group.group_epoch += 1  # once per heartbeat, whatever changed
        if group.group_epoch > group.assignment_epoch:
            self._assign(group, image)
        self._reconcile(group, member, req.owned, now)
        return HeartbeatAnswer(member.member_id, member.member_epoch, timing.heartbeat_interval_ms,
                               _copy(member.assigned))

    def _image(self, topics: TopicImage | Topics) -> TopicImage:
        if isinstance(topics, TopicImage):
            return topics
        self._wrapped = TopicImage.following(topics, self._wrapped)
        return self._wrapped

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
        for what, value in (("MemberId", req.member_id), ("InstanceId", req.instance_id), ("RackId", req.rack_id)):
            if value is not None and _too_long(value):
                raise InvalidRequest(f"{what} of {len(value)} characters is longer than {MAX_STRING_BYTES} bytes.")
        if req.subscribed_names:
            size = 0
            for name in req.subscribed_names:
                if _too_long(name):
                    raise InvalidRequest(f"a SubscribedTopicNames entry of {len(name)} characters is longer than "
                                         f"{MAX_STRING_BYTES} bytes.")
                size += len(name) + 2
            if size > MAX_MEMBER_RECORD_BYTES // 4 and \
                    sum(len(n.encode("utf-8", "surrogatepass")) + 2 for n in req.subscribed_names) > MAX_MEMBER_RECORD_BYTES:
                raise InvalidRequest(f"SubscribedTopicNames ({len(req.subscribed_names)} names) take more than "
                                     f"{MAX_MEMBER_RECORD_BYTES} bytes: more than a member record can hold.")

    @staticmethod
    def _check_epoch(member: ConsumerMember, epoch: int, owned: Assignment | None) -> None:
        if epoch > member.member_epoch:
            raise FencedMemberEpoch(f"member epoch {epoch} is ahead of the coordinator's {member.member_epoch}")
        if epoch < member.member_epoch and (epoch != member.previous_epoch or not _subset(owned, member.assigned)):
            raise FencedMemberEpoch(f"member epoch {epoch} is behind the coordinator's {member.member_epoch}")

    def _assign(self, group: ConsumerGroup, image: TopicImage) -> None:
        members = list(group.members.values())
        name = next((m.server_assignor for m in members if m.server_assignor), None) or self.settings.assignors[0]
        before = group.target
        subscribed = subs.subscriptions_of(group, image)
        if group.index is None:
            group.index = subscribers(subscribed)
        group.target = ASSIGNORS[name](members, image.topics, before, subscribed, group.index)
        group.assignment_epoch = group.group_epoch
        if group.dirty is not None:  # the members whose target moved: their records change
            group.dirty.update(mid for mid, t in group.target.items() if before.get(mid) != t)
            group.dirty.update(mid for mid in before if mid not in group.target)

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
        group.index = None
        group.touch(old_id)
        group.touch(member_id)
        return old

    def _remove(self, group: ConsumerGroup, member_id: str) -> None:
        member = group.members.pop(member_id)
        group.index = None
        if group.derived and member.subscribed_regex is not None:
            subs.set_regex(group, member, None)
        group.target.pop(member_id, None)
        group.group_epoch += 1
        group.stale = True
        group.touch(member_id)

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
        return min((d for g in self.groups.values() if (d := self.group_deadline(g.group_id)) is not None), default=None)

    def group_deadline(self, group_id: str) -> int | None:
        """The earliest session or revocation deadline of one group's members (None: none)."""
        group = self.groups.get(group_id)
        deadlines = [] if group is None else [d for m in group.members.values()
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
