"""One classic group and its members: the data the membership protocol works on.

A ``ClassicGroup`` holds two kinds of state:

* durable: generation, protocol type and name, leader, and each member's id, instance id,
  client, timeouts, subscription metadata and assignment. This is what a GroupMetadata record
  of ``__consumer_offsets`` stores; a group is rebuilt from it on load (``from_record``).
* volatile: who is waiting in a JoinGroup or SyncGroup (``awaiting_join`` / ``awaiting_sync``
  hold the id of the parked reply), heartbeat deadlines, members that were given an id but have
  not joined yet (``pending_members``, KIP-394), members that have not synced yet
  (``pending_sync``), and the group's join and sync deadlines. As in Kafka, this state is not
  logged: after a coordinator restart members simply heartbeat, or rejoin.

State changes go through ``transition`` and the table in ``state.py``. Pure: no I/O, no clock
(times are passed in).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from oncelog.coordinator.group import records as rec
from oncelog.coordinator.group.state import GroupState, check_transition


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), in the member's preference order
    assignment: bytes = b""
    awaiting_join: int | None = None  # id of the parked JoinGroup reply
    awaiting_sync: int | None = None  # id of the parked SyncGroup reply
    is_new: bool = False
    heartbeat_deadline: int = 0

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates`` (never empty)."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp: int = -1
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # insertion order = join order
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> deadline
    pending_sync: set[str] = field(default_factory=set)
    new_member_added: bool = False
    join_deadline: int | None = None
    initial_delay_remaining: int | None = None  # not None: the first rebalance is being delayed
    sync_deadline: int | None = None
    subscribed_topics: frozenset[str] | None = None  # None: unknown (not a consumer group)

    # -- state ------------------------------------------------------------------------------

    def transition(self, target: GroupState, now_ms: int) -> None:
        check_transition(self.group_id, self.state, target)
        self.state = target
        self.state_timestamp = now_ms

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    # -- membership -------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> Member:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.pending_sync.discard(member_id)
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Give the static member ``instance_id`` the new member id (KIP-345 fencing of the old
        id). The caller completes the old id's parked replies first."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        """A request naming ``instance_id`` whose current member id is another one."""
        current = self.static_member_id(instance_id)
        return current is not None and current != member_id

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.awaiting_join_count() and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols --------------------------------------------------------------------------

    def _candidates(self) -> set[str]:
        counts = Counter(name for m in self.members.values() for name in set(m.protocol_names()))
        return {name for name, n in counts.items() if n == len(self.members)}

    def supports(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Whether a member with these protocols may join (Kafka's ``supportsProtocols``)."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        names = {name for name, _ in protocols}
        return protocol_type == self.protocol_type and bool(names & self._candidates())

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer (ties: the first member's
        preference order)."""
        candidates = self._candidates()
        if not candidates:
            raise ValueError(f"group {self.group_id}: no protocol is supported by every member")
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        first = next(iter(self.members.values()))
        for name in first.protocol_names():
            if votes.get(name) == best:
                return name
        return max(votes, key=lambda n: votes[n])  # unreachable: the first member votes too

    def init_next_generation(self, now_ms: int) -> None:
        """End a join phase: bump the generation, pick the protocol, go to CompletingRebalance
        (or Empty when no member is left)."""
        self.generation += 1
        self.join_deadline = None
        self.initial_delay_remaining = None
        self.new_member_added = False
        self.pending_sync.clear()
        self.sync_deadline = None
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self._subscribed_topics()
            self.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = None
            self.transition(GroupState.EMPTY, now_ms)

    def _subscribed_topics(self) -> frozenset[str] | None:
        from oncelog.coordinator.group.consumer_protocol import subscribed_topics

        if self.protocol_type != "consumer":
            return None
        topics: set[str] = set()
        for m in self.members.values():
            found = subscribed_topics(m.metadata(self.protocol_name))
            if found is None:
                return None
            topics |= found
        return frozenset(topics)

    def is_subscribed_to(self, topic: str) -> bool:
        """Whether a member consumes ``topic`` (unknown subscriptions count as yes: safe for
        OffsetDelete)."""
        return self.subscribed_topics is None or topic in self.subscribed_topics

    # -- records ----------------------------------------------------------------------------

    def to_record(self, assignments: dict[str, bytes] | None = None) -> rec.GroupValue:
        """The GroupMetadata value for the group as it is (``assignments`` override members')."""
        members = tuple(
            rec.MemberValue(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata(self.protocol_name),
                assignment=(assignments or {}).get(m.member_id, m.assignment),
            )
            for m in self.members.values()
        )
        return rec.GroupValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=self.state_timestamp,
            members=members,
        )

    @classmethod
    def from_record(cls, group_id: str, value: rec.GroupValue, now_ms: int) -> "ClassicGroup":
        """The group a GroupMetadata record describes, as a coordinator that loads it sees it:
        Stable with its members (each must heartbeat within its session timeout), or Empty."""
        group = cls(group_id)
        group.generation = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.state = GroupState.STABLE if value.members else GroupState.EMPTY
        group.state_timestamp = value.current_state_timestamp if value.current_state_timestamp >= 0 else now_ms
        for mv in value.members:
            group.add(member_from_record(mv, value, now_ms))
        group.leader_id = value.leader if value.leader in group.members else next(iter(group.members), None)
        group.subscribed_topics = group._subscribed_topics() if group.members else None
        return group


def member_from_record(mv: rec.MemberValue, value: rec.GroupValue, now_ms: int) -> Member:
    return Member(
        member_id=mv.member_id,
        group_instance_id=mv.group_instance_id,
        client_id=mv.client_id,
        client_host=mv.client_host,
        rebalance_timeout_ms=mv.rebalance_timeout,
        session_timeout_ms=mv.session_timeout,
        protocol_type=value.protocol_type,
        protocols=((value.protocol or "", mv.subscription),),
        assignment=mv.assignment,
        heartbeat_deadline=now_ms + mv.session_timeout,
    )
