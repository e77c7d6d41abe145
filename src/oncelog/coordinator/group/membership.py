"""The classic group membership protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, and the
timers (session, rebalance, pending-member and pending-sync timeouts, the delayed initial
rebalance) (R3).

Theory of operation (Kafka's classic ``GroupCoordinator``). A rebalance starts when a member
joins, changes its subscription, leaves, or expires: the group goes to PreparingRebalance and
every member must send JoinGroup within the rebalance timeout; those requests are parked. The
join phase ends when every member has rejoined (or at the timeout, without the members that did
not): the generation is bumped, a protocol every member supports is selected, every parked
JoinGroup is answered (the leader also gets all members' metadata), and the group waits in
CompletingRebalance for SyncGroup. The leader's SyncGroup carries the assignment; it is stored as
a GroupMetadata record, and the replay of that record moves the group to Stable and answers every
parked SyncGroup. Heartbeats keep members alive and tell them when to rejoin
(REBALANCE_IN_PROGRESS). The first rebalance of an empty group waits
``group.initial.rebalance.delay.ms`` (extended while new members keep coming, up to the rebalance
timeout) so that a consumer group starting up rebalances once, not once per member.

Static members (group.instance.id, KIP-345) keep their place across restarts: a rejoin with an
unknown member id takes over the instance's slot (the old member id is fenced) and, in a Stable
group whose selected protocol does not change, without a rebalance. Dynamic members of JoinGroup
v4+ first get MEMBER_ID_REQUIRED with an id to rejoin with (KIP-394).

Everything here is synchronous and pure: time comes in as ``now_ms``, parked answers go out
through ``outbox``, records to append come back in the ``Result``.
"""

from __future__ import annotations

from typing import Callable, Iterator

from oncelog.coordinator.group import records as rec
from oncelog.coordinator.group.group import ClassicGroup, Member
from oncelog.coordinator.group.state import (
    HEARTBEAT,
    SYNC_GROUP,
    GroupState,
    IllegalGroupTransition,
    can_rebalance,
)
from oncelog.coordinator.group.types import (
    GroupSettings,
    JoinRequest,
    JoinResult,
    Parked,
    Record,
    Result,
    SyncResult,
)
from oncelog.protocol.errors import (
    CoordinatorNotAvailable,
    FencedInstanceId,
    GroupMaxSizeReached,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidSessionTimeout,
    KafkaError,
    MemberIdRequired,
    RebalanceInProgress,
    UnknownMemberId,
)

E, P, C, S, D = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)

Outbox = list[tuple[int, object]]


class Membership:
    """Membership operations over the groups of one shard (see the module docstring)."""

    def __init__(
        self,
        groups: dict[str, ClassicGroup],
        settings: GroupSettings,
        outbox: Outbox,
        reply_ids: Iterator[int],
        new_member_id: Callable[[str], str],
    ) -> None:
        self.groups = groups
        self.settings = settings
        self.outbox = outbox
        self.reply_ids = reply_ids
        self.new_member_id = new_member_id

    # -- parked replies -----------------------------------------------------------------------

    def _park(self) -> int:
        return next(self.reply_ids)

    def _answer_join(self, member: Member, payload: object) -> None:
        if member.awaiting_join is not None:
            self.outbox.append((member.awaiting_join, payload))
            member.awaiting_join = None

    def _answer_sync(self, member: Member, payload: object) -> None:
        if member.awaiting_sync is not None:
            self.outbox.append((member.awaiting_sync, payload))
            member.awaiting_sync = None

    # -- JoinGroup ------------------------------------------------------------------------------

    def join(self, req: JoinRequest, now: int) -> Result:
        """Raises InvalidSessionTimeout, UnknownMemberId, FencedInstanceId,
        InconsistentGroupProtocol, MemberIdRequired (carrying ``member_id``),
        GroupMaxSizeReached, CoordinatorNotAvailable. Otherwise the answer is parked (or
        immediate for a member whose rejoin changes nothing)."""
        s = self.settings
        if not s.min_session_timeout_ms <= req.session_timeout_ms <= s.max_session_timeout_ms:
            raise InvalidSessionTimeout(
                f"group {req.group_id}: session timeout {req.session_timeout_ms} ms outside "
                f"[{s.min_session_timeout_ms}, {s.max_session_timeout_ms}]"
            )
        group = self.groups.get(req.group_id)
        if req.member_id == "":
            if group is None:
                group = self.groups[req.group_id] = ClassicGroup(req.group_id, state_timestamp=now)
            result = self._join_new_member(group, req, now)
        elif group is None:
            raise UnknownMemberId(f"group {req.group_id} does not exist; member {req.member_id} is unknown")
        else:
            result = self._join_known_member(group, req, now)
        self.maybe_complete_join(group, now, result.records)
        return result

    def _check_joinable(self, group: ClassicGroup, req: JoinRequest) -> None:
        if group.is_(D):
            raise CoordinatorNotAvailable(f"group {group.group_id} is being deleted")
        if not group.supports(req.protocol_type, req.protocols):
            raise InconsistentGroupProtocol(
                f"group {group.group_id} (protocol type {group.protocol_type!r}) has no protocol in common with "
                f"{req.protocol_type!r} {[n for n, _ in req.protocols]}"
            )

    def _join_new_member(self, group: ClassicGroup, req: JoinRequest, now: int) -> Result:
        self._check_joinable(group, req)
        if len(group.members) >= self.settings.max_group_size:
            raise GroupMaxSizeReached(f"group {group.group_id} has {len(group.members)} members, the maximum")
        new_id = self.new_member_id(req.group_instance_id or req.client_id)
        if req.group_instance_id is not None:
            old_id = group.static_member_id(req.group_instance_id)
            if old_id is not None:
                return self._replace_static_member(group, req, old_id, new_id, now)
        elif req.require_known_member_id:
            group.pending_members[new_id] = now + req.session_timeout_ms
            exc = MemberIdRequired(f"group {group.group_id}: rejoin with member id {new_id}")
            exc.member_id = new_id  # type: ignore[attr-defined]
            raise exc
        return self._add_member_and_rebalance(group, req, new_id, now)

    def _join_known_member(self, group: ClassicGroup, req: JoinRequest, now: int) -> Result:
        self._check_joinable(group, req)
        mid = req.member_id
        if mid in group.pending_members:
            if req.group_instance_id is not None:
                raise UnknownMemberId(f"group {group.group_id}: pending member {mid} cannot be static")
            return self._add_member_and_rebalance(group, req, mid, now)
        if group.is_static_member_fenced(req.group_instance_id, mid):
            raise FencedInstanceId(
                f"group {group.group_id}: instance {req.group_instance_id} belongs to member "
                f"{group.static_member_id(req.group_instance_id)}, not {mid}"
            )
        unknown_instance = req.group_instance_id is not None and group.static_member_id(req.group_instance_id) is None
        if not group.has(mid) or unknown_instance:
            raise UnknownMemberId(f"group {group.group_id}: member {mid} is unknown")
        member = group.get(mid)
        member.heartbeat_deadline = max(member.heartbeat_deadline, now + member.session_timeout_ms)
        if group.is_(P):
            return self._update_member_and_rebalance(group, member, req, now)
        if group.is_(C):
            if member.matches(req.protocols):
                # it lost the JoinGroup answer: give it the current generation again
                return Result(response=self._join_result(group, member))
            return self._update_member_and_rebalance(group, member, req, now)
        if group.is_(S):
            if group.is_leader(mid) or not member.matches(req.protocols):
                # the leader rejoins to force a rebalance (e.g. topic metadata changed)
                return self._update_member_and_rebalance(group, member, req, now)
            return Result(response=self._join_result(group, member, leader_view=False))
        raise UnknownMemberId(f"group {group.group_id} is {group.state.value}: member {mid} must rejoin afresh")

    def _join_result(self, group: ClassicGroup, member: Member, *, leader_view: bool = True) -> JoinResult:
        leader = group.leader_id or ""
        members = ()
        if leader_view and group.is_leader(member.member_id):
            members = tuple((m.member_id, m.group_instance_id, m.metadata(group.protocol_name)) for m in group.members.values())
        return JoinResult(member.member_id, group.generation, group.protocol_type, group.protocol_name, leader, members)

    def _add_member_and_rebalance(self, group: ClassicGroup, req: JoinRequest, member_id: str, now: int) -> Result:
        reply = self._park()
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            awaiting_join=reply,
            is_new=True,
            # a new member cannot heartbeat before its join completes: it gets a longer timeout
            heartbeat_deadline=now + self.settings.new_member_join_timeout_ms,
        )
        if group.is_(P) and group.generation == 0:
            group.new_member_added = True  # lets the initial delay extend
        group.pending_members.pop(member_id, None)
        group.add(member)
        self.maybe_prepare_rebalance(group, now)
        return Result([], Parked(reply))

    def _update_member_and_rebalance(self, group: ClassicGroup, member: Member, req: JoinRequest, now: int) -> Result:
        self._answer_join(member, RebalanceInProgress(f"member {member.member_id} sent another JoinGroup"))
        reply = self._park()
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.awaiting_join = reply
        self.maybe_prepare_rebalance(group, now)
        return Result([], Parked(reply))

    def _replace_static_member(self, group: ClassicGroup, req: JoinRequest, old_id: str, new_id: str, now: int) -> Result:
        old = group.get(old_id)
        fenced = FencedInstanceId(f"group {group.group_id}: instance {req.group_instance_id} rejoined as {new_id}")
        self._answer_join(old, fenced)
        self._answer_sync(old, fenced)
        current_leader = group.leader_id or ""
        member = group.replace_static_member(req.group_instance_id or "", old_id, new_id)
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        member.heartbeat_deadline = now + req.session_timeout_ms
        reply = self._park()
        member.awaiting_join = reply
        records: list[Record] = []
        if group.is_(S):
            if group.protocol_name == group.select_protocol():
                # Nothing changes for the others: store the new member id and hand the member the
                # current generation. The old leader id is returned so the member never thinks it
                # must compute an assignment that a Stable group would not distribute.
                records.append((rec.GroupKey(group.group_id), group.to_record()))
                self._answer_join(
                    member,
                    JoinResult(new_id, group.generation, group.protocol_type, group.protocol_name, current_leader),
                )
            else:
                self.maybe_prepare_rebalance(group, now)
        elif group.is_(C):
            # the leader may already have computed an assignment for the old member id
            self._prepare_rebalance(group, now)
        elif not group.is_(P):
            raise IllegalGroupTransition(f"group {group.group_id} is {group.state.value} with static member {old_id}")
        return Result(records, Parked(reply))

    # -- rebalance phases -----------------------------------------------------------------------

    def maybe_prepare_rebalance(self, group: ClassicGroup, now: int) -> None:
        if can_rebalance(group.state):
            self._prepare_rebalance(group, now)

    def _prepare_rebalance(self, group: ClassicGroup, now: int) -> None:
        if group.is_(C):
            self._reset_assignments(group, RebalanceInProgress(f"group {group.group_id} is rebalancing again"))
        group.sync_deadline = None
        if group.is_(E):
            delay = self.settings.initial_rebalance_delay_ms
            group.initial_delay_remaining = max(group.rebalance_timeout_ms - delay, 0)
            group.join_deadline = now + delay
        else:
            group.initial_delay_remaining = None
            group.join_deadline = now + group.rebalance_timeout_ms
        group.transition(P, now)

    def _reset_assignments(self, group: ClassicGroup, error: KafkaError) -> None:
        for m in group.members.values():
            m.assignment = b""
            self._answer_sync(m, error)

    def maybe_complete_join(self, group: ClassicGroup, now: int, records: list[Record]) -> None:
        """End the join phase if it may end now: every member rejoined (not during the initial
        delay), or its deadline passed."""
        if not group.is_(P) or group.join_deadline is None:
            return
        if group.initial_delay_remaining is not None:
            if now < group.join_deadline:
                return
            if group.new_member_added and group.initial_delay_remaining > 0:
                group.new_member_added = False
                delay = min(self.settings.initial_rebalance_delay_ms, group.initial_delay_remaining)
                group.initial_delay_remaining -= delay
                group.join_deadline = now + delay
                return
        elif not group.has_all_members_joined() and now < group.join_deadline:
            return
        self._complete_join(group, now, records)

    def _complete_join(self, group: ClassicGroup, now: int, records: list[Record]) -> None:
        for m in group.not_yet_rejoined():
            if not m.is_static:
                self._answer_sync(m, UnknownMemberId(f"member {m.member_id} did not rejoin in time"))
                group.remove(m.member_id)
        if group.members and not self._elect_joined_leader(group):
            # only static members that have not come back: give them another round
            group.initial_delay_remaining = None
            group.join_deadline = now + group.rebalance_timeout_ms
            return
        group.init_next_generation(now)
        if group.is_(E):
            records.append((rec.GroupKey(group.group_id), group.to_record()))
            return
        for m in group.members.values():
            self._answer_join(m, self._join_result(group, m))
            m.is_new = False
            m.heartbeat_deadline = now + m.session_timeout_ms
            group.pending_sync.add(m.member_id)
        group.sync_deadline = now + group.rebalance_timeout_ms

    @staticmethod
    def _elect_joined_leader(group: ClassicGroup) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.awaiting_join is not None:
            return True
        for m in group.members.values():
            if m.awaiting_join is not None:
                group.leader_id = m.member_id
                return True
        return False

    def complete_assignment(self, group: ClassicGroup, value: rec.GroupValue, now: int) -> None:
        """The leader's assignment is stored (replay of its GroupMetadata record): Stable, and
        every parked SyncGroup gets its member's assignment."""
        assignments = {m.member_id: m.assignment for m in value.members}
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        group.transition(S, now)
        for m in group.members.values():
            if m.awaiting_sync is not None:
                self._answer_sync(m, SyncResult(group.protocol_type, group.protocol_name, m.assignment))
                m.heartbeat_deadline = now + m.session_timeout_ms

    def store_failed(self, group_id: str, error: KafkaError, now: int) -> None:
        """The GroupMetadata record of ``group_id`` could not be appended: members waiting for
        their assignment get ``error`` and the group rebalances."""
        group = self.groups.get(group_id)
        if group is not None and group.is_(C):
            self._reset_assignments(group, error)
            self.maybe_prepare_rebalance(group, now)

    # -- SyncGroup / Heartbeat / LeaveGroup -------------------------------------------------------

    def _known_member(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> tuple[ClassicGroup, Member]:
        group = self.groups.get(group_id)
        if group is None:
            raise UnknownMemberId(f"group {group_id} does not exist; member {member_id} is unknown")
        if group.is_(D):
            raise CoordinatorNotAvailable(f"group {group_id} is being deleted")
        if group.is_static_member_fenced(instance_id, member_id):
            raise FencedInstanceId(
                f"group {group_id}: instance {instance_id} belongs to member {group.static_member_id(instance_id)}, not {member_id}"
            )
        if not group.has(member_id):
            raise UnknownMemberId(f"group {group_id}: member {member_id!r} is unknown")
        if generation != group.generation:
            raise IllegalGeneration(f"group {group_id}: generation {generation} received, {group.generation} is current")
        return group, group.get(member_id)

    def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        now: int,
    ) -> Result:
        group, member = self._known_member(group_id, generation, member_id, instance_id)
        if protocol_type is not None and protocol_type != group.protocol_type:
            raise InconsistentGroupProtocol(f"group {group_id}: protocol type {protocol_type!r}, group has {group.protocol_type!r}")
        if protocol_name is not None and protocol_name != group.protocol_name:
            raise InconsistentGroupProtocol(f"group {group_id}: protocol {protocol_name!r}, group selected {group.protocol_name!r}")
        error = SYNC_GROUP[group.state]
        if error is not None:
            raise error(f"group {group_id} is {group.state.value}")
        group.pending_sync.discard(member_id)
        member.heartbeat_deadline = now + member.session_timeout_ms
        if group.is_(S):
            return Result(response=SyncResult(group.protocol_type, group.protocol_name, member.assignment))
        self._answer_sync(member, RebalanceInProgress(f"member {member_id} sent another SyncGroup"))
        member.awaiting_sync = self._park()
        records: list[Record] = []
        if group.is_leader(member_id):
            full = {mid: assignments.get(mid, b"") for mid in group.members}
            records.append((rec.GroupKey(group_id), group.to_record(full)))
        return Result(records, Parked(member.awaiting_sync))

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None, now: int) -> None:
        group, member = self._known_member(group_id, generation, member_id, instance_id)
        if group.is_(P, C, S):
            member.heartbeat_deadline = now + member.session_timeout_ms
        error = HEARTBEAT[group.state]
        if error is not None:
            raise error(f"group {group_id} is {group.state.value}")

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]], now: int) -> Result:
        """Per-member errors in ``Result.response`` (a list aligned with ``leaving``)."""
        group = self.groups.get(group_id)
        if group is None:
            return Result(response=[UnknownMemberId(f"group {group_id} does not exist") for _ in leaving])
        if group.is_(D):
            raise CoordinatorNotAvailable(f"group {group_id} is being deleted")
        errors: list[KafkaError | None] = []
        records: list[Record] = []
        for member_id, instance_id in leaving:
            effective = member_id or group.static_member_id(instance_id) or ""
            if effective in group.pending_members:
                del group.pending_members[effective]
                errors.append(None)
            elif group.is_static_member_fenced(instance_id, effective):
                errors.append(FencedInstanceId(f"group {group_id}: instance {instance_id} is not member {effective}"))
            elif group.has(effective):
                self.remove_member(group, group.get(effective), now, UnknownMemberId(f"member {effective} left"))
                errors.append(None)
            else:
                errors.append(UnknownMemberId(f"group {group_id}: member {effective!r} is unknown"))
        self.maybe_complete_join(group, now, records)
        return Result(records, errors)

    def remove_member(self, group: ClassicGroup, member: Member, now: int, reason: KafkaError) -> None:
        self._answer_join(member, reason)
        self._answer_sync(member, reason)
        group.remove(member.member_id)
        if group.is_(S, C):
            self.maybe_prepare_rebalance(group, now)

    # -- timers ---------------------------------------------------------------------------------

    def tick(self, now: int) -> list[Record]:
        """Fire every timer due at ``now``; returns the records to append."""
        records: list[Record] = []
        for group in list(self.groups.values()):
            if group.is_(D):
                continue
            for mid, deadline in list(group.pending_members.items()):
                if deadline <= now:
                    del group.pending_members[mid]
            for m in list(group.members.values()):
                if m.heartbeat_deadline > now:
                    continue
                if not m.is_new and (m.awaiting_join is not None or m.awaiting_sync is not None):
                    m.heartbeat_deadline = now + m.session_timeout_ms  # waiting in a rebalance counts as alive
                else:
                    self.remove_member(group, m, now, UnknownMemberId(f"member {m.member_id} session expired"))
            if group.sync_deadline is not None and now >= group.sync_deadline:
                group.sync_deadline = None
                if group.is_(C, S):
                    for mid in list(group.pending_sync):
                        if group.has(mid):
                            self.remove_member(group, group.get(mid), now, UnknownMemberId(f"member {mid} did not sync in time"))
            self.maybe_complete_join(group, now, records)
        return records

    def next_deadline(self) -> int | None:
        """The earliest time a timer is due (None: no timer)."""
        return min((d for d in map(group_deadline, self.groups.values()) if d is not None), default=None)


def group_deadline(group: ClassicGroup) -> int | None:
    """The earliest time one of ``group``'s timers is due (None: it has none)."""
    candidates = [*group.pending_members.values(), *(m.heartbeat_deadline for m in group.members.values())]
    if group.join_deadline is not None and group.is_(P):
        candidates.append(group.join_deadline)
    if group.sync_deadline is not None:
        candidates.append(group.sync_deadline)
    return min(candidates, default=None)
