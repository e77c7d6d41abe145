"""The group coordinator state machine of one ``__consumer_offsets`` partition (R3, R13).

Theory of operation (STYLE habit 7, Kafka's ``GroupCoordinatorShard``). Each request handler
validates against the current state and returns a ``Result``: the records to append to this
partition and the answer. The caller (service.py) appends the records as one batch and then feeds
each one to ``replay``; only then does it answer. ``replay`` is the only code that changes the
durable state — committed offsets, pending transactional offsets, which groups exist and the
generation/assignment each one stored — and loading the partition on start runs the same
``replay`` over the log, so a restarted coordinator has exactly the state the old one had
written. Transaction markers found in the partition go to ``replay_marker``, live
(``complete_transaction``) and on load alike.

Consumer groups of the consumer rebalance protocol (KIP-848, consumer_group.py) live beside the
classic ones under the same group ids: a consumer-protocol member may take over a group id whose
classic group is empty (it then only holds offsets), and a classic member one whose consumer
group is empty; otherwise GROUP_ID_NOT_FOUND / INCONSISTENT_GROUP_PROTOCOL. Their state is
durable as Kafka keeps it (consumer_store.py): an operation changes the group in memory (the
state machine decides on its own state), and its Result carries the records that make the log
describe the group again (``consumer_store.diff`` against what the log holds, ``consumer_written``);
their replay after the append is a no-op on the live group and rebuilds it on load. A failed
append leaves ``consumer_written`` as it was, so the next operation writes the difference again.

The membership of a group (membership.py) is volatile, as in Kafka: who is joining, parked
requests and heartbeat deadlines live in memory and are driven by the transition table; each
finished generation is stored as a GroupMetadata record, and the leader's assignment becomes
effective when that record is replayed.

Pure and synchronous: no I/O, no asyncio, time passed in as ``now``.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Callable, Iterator

from oncelog.coordinator.group import records as rec
from oncelog.coordinator.group import consumer_group as cg
from oncelog.coordinator.group import consumer_records as crec
from oncelog.coordinator.group import consumer_store
from oncelog.coordinator.group.group import ClassicGroup, member_from_record
from oncelog.coordinator.group.membership import Membership, group_deadline
from oncelog.coordinator.group.offsets import CommittedOffset, OffsetStore
from oncelog.coordinator.group.state import OFFSET_COMMIT, GroupState
from oncelog.coordinator.group.types import (
    GroupSettings,
    GroupSummary,
    JoinRequest,
    MemberSummary,
    OffsetCommitData,
    Record,
    Result,
)
from oncelog.protocol.errors import (
    CoordinatorNotAvailable,
    FencedInstanceId,
    GroupIdNotFound,
    GroupSubscribedToTopic,
    IllegalGeneration,
    InconsistentGroupProtocol,
    KafkaError,
    NonEmptyGroup,
    OffsetMetadataTooLarge,
    ProducerFenced,
    StaleMemberEpoch,
    UnknownMemberId,
    UnstableOffsetCommit,
)
from oncelog.types import TopicPartition

E, D = GroupState.EMPTY, GroupState.DEAD
#: the record keys of one member of a consumer group, and of the group
_MEMBER_KEYS = (crec.MemberKey, crec.TargetMemberKey, crec.CurrentAssignmentKey)
_GROUP_KEYS = (*_MEMBER_KEYS, crec.GroupEpochKey, crec.SubscriptionKey, crec.TargetEpochKey)


def _random_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class GroupShard:
    def __init__(
        self,
        partition: int,
        settings: GroupSettings | None = None,
        *,
        reply_ids: Iterator[int] | None = None,
        new_member_id: Callable[[str], str] = _random_member_id,
        consumer_settings_of: Callable[[str], cg.ConsumerSettings] | None = None,
    ) -> None:
        """``consumer_settings_of(group_id)``: a consumer group's own settings (its group
        configs over ``settings.consumer``); None: ``settings.consumer`` for every group."""
        self.partition = partition
        self.settings = settings or GroupSettings()
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets = OffsetStore()
        #: (reply id, payload) answers to parked requests, for the caller to deliver
        self.outbox: list[tuple[int, object]] = []
        self.membership = Membership(
            self.groups, self.settings, self.outbox, reply_ids or itertools.count(1), new_member_id
        )
        self.consumers = cg.ConsumerGroups(self.settings.consumer, lambda: str(uuid.uuid4()), consumer_settings_of)
        #: what the log holds of each consumer group (consumer_store.py)
        self.consumer_written: dict[str, consumer_store.Written] = {}

    # -- consumer groups (KIP-848, consumer_group.py) -------------------------------------------

    def consumer_heartbeat(self, req: cg.HeartbeatRequest, topics: cg.TopicImage | cg.Topics, now: int,
                           may_describe: Callable[[str], bool] | None = None) -> Result:
        """ConsumerGroupHeartbeat (``may_describe``: see ``ConsumerGroups.heartbeat``). A classic
        group with members under the same id: GROUP_ID_NOT_FOUND (an empty one, which only
        holds offsets, is taken over)."""
        classic = self.groups.get(req.group_id)
        if classic is not None:
            if classic.members or not classic.is_(E):
                raise GroupIdNotFound(f"Group {req.group_id} is not a consumer group (a classic group has members)")
        answer = self.consumers.heartbeat(req, topics, now, may_describe)
        if classic is not None and req.member_epoch >= 0:
            del self.groups[req.group_id]  # taken over (the heartbeat was accepted)
        return Result(self._consumer_records(req.group_id), answer)

    def _consumer_records(self, group_id: str) -> list[Record]:
        """The records that make the log describe consumer group ``group_id`` as it now is: of
        the group and of its ``dirty`` members (all of them when unknown). The members that
        had records stay dirty until a later diff finds the log holds them (their append may
        fail), the others are clean."""
        group = self.consumers.groups.get(group_id)
        members = None if group is None or group.dirty is None else list(group.dirty)
        records = consumer_store.diff(group, self.consumer_written.get(group_id, {}), members)
        if group is not None:
            group.dirty = {k.member_id for k, _v in records if isinstance(k, _MEMBER_KEYS)}
        return list(records)

    def describe_consumer_group(self, group_id: str) -> cg.ConsumerGroup:
        """ConsumerGroupDescribe: the group as it is. Raises GroupIdNotFound for a group that
        does not exist or is a classic group."""
        group = self._consumer_group(group_id)
        if group is None:
            kind = "is not a consumer group" if group_id in self.groups else "not found"
            raise GroupIdNotFound(f"Group {group_id} {kind}.")
        return group

    def _consumer_group(self, group_id: str) -> cg.ConsumerGroup | None:
        return None if group_id in self.groups else self.consumers.groups.get(group_id)

    # -- membership (membership.py) ---------------------------------------------------------

    def join_group(self, req: JoinRequest, now: int) -> Result:
        consumer = self.consumers.groups.get(req.group_id)
        if consumer is not None:
            if consumer.members:
                raise InconsistentGroupProtocol(f"group {req.group_id} is a consumer group (KIP-848) with members")
            del self.consumers.groups[req.group_id]  # an empty one: the classic member takes it over
            tombstones = self._consumer_records(req.group_id)
            result = self.membership.join(req, now)
            result.records[:0] = tombstones
            return result
        return self.membership.join(req, now)

    def sync_group(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
                   now: int) -> Result:
        return self.membership.sync(group_id, generation, member_id, instance_id, protocol_type, protocol_name,
                                    assignments, now)

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None, now: int) -> None:
        self.membership.heartbeat(group_id, generation, member_id, instance_id, now)

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]], now: int) -> Result:
        return self.membership.leave(group_id, members, now)

    def tick(self, now: int) -> Result:
        gone = self.consumers.tick(now)
        records: list[Record] = []
        for group_id in dict.fromkeys(g for g, _ in gone):
            records.extend(self._consumer_records(group_id))
        return Result(records + self.membership.tick(now))

    def next_deadline(self) -> int | None:
        deadlines = [d for d in (self.membership.next_deadline(), self.consumers.next_deadline()) if d is not None]
        return min(deadlines, default=None)

    def group_deadline(self, group_id: str) -> int | None:
        """The earliest timer of one group, classic or consumer (None: none): what is due of it
        without looking at the partition's other groups."""
        classic = self.groups.get(group_id)
        deadlines = [d for d in (None if classic is None else group_deadline(classic),
                                 self.consumers.group_deadline(group_id)) if d is not None]
        return min(deadlines, default=None)

    def store_failed(self, group_ids: set[str], error: KafkaError, now: int) -> None:
        for group_id in group_ids:
            self.membership.store_failed(group_id, error, now)

    def consumer_records_refused(self, records: list[Record], now: int) -> None:
        """``records`` can never be written (too large for a batch, not encodable): the consumer
        groups they describe are put back as the log has them, so the change that made them is
        undone (as Kafka reverts a failed write) instead of failing every later operation of
        the group (a transient failure of the store keeps the change: the next diff writes it)."""
        for group_id in {k.group for k, _v in records if isinstance(k, _GROUP_KEYS)}:
            written = self.consumer_written.pop(group_id, None)
            self.consumers.groups.pop(group_id, None)
            for key, value in (written or {}).items():  # in the order the log first had them
                consumer_store.replay(self.consumers, self.consumer_written, key, value, now)

    # -- offsets --------------------------------------------------------------------------------

    def _offset_records(self, group_id: str, offsets: dict[TopicPartition, OffsetCommitData], now: int,
                        expire_timestamp: int) -> tuple[list[Record], dict[TopicPartition, KafkaError | None]]:
        records: list[Record] = []
        errors: dict[TopicPartition, KafkaError | None] = {}
        limit = self.settings.max_metadata_bytes
        for tp, data in offsets.items():
            metadata = data.metadata or ""
            if len(metadata.encode("utf-8")) > limit:
                errors[tp] = OffsetMetadataTooLarge(f"group {group_id} {tp}: offset metadata longer than {limit} bytes")
                continue
            errors[tp] = None
            value = rec.OffsetValue(data.offset, metadata, now, data.leader_epoch, expire_timestamp)
            records.append((rec.OffsetKey(group_id, tp.topic, tp.partition), value))
        return records, errors

    def commit_offsets(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                       offsets: dict[TopicPartition, OffsetCommitData], now: int, *,
                       expire_timestamp: int = -1, api_version: int | None = None) -> Result:
        """OffsetCommit. A commit with generation -1 from outside any group (a consumer that
        assigns partitions itself) is accepted while the group has no members; a member of a
        group must name its member id and the current generation. Raises GroupIdNotFound (a
        generation for a group that does not exist), IllegalGeneration,
        UnknownMemberId, FencedInstanceId, RebalanceInProgress, CoordinatorNotAvailable;
        per-partition errors (OffsetMetadataTooLarge) in ``response``."""
        consumer = self._consumer_group(group_id)
        if consumer is not None:
            self.consumers.validate_commit(consumer, member_id, generation, transactional=False, api_version=api_version)
            records, errors = self._offset_records(group_id, offsets, now, expire_timestamp)
            return Result(records, errors)
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:  # the handler answers ILLEGAL_GENERATION below OffsetCommit v9, as Kafka
                raise GroupIdNotFound(f"group {group_id} does not exist: generation {generation} is not current")
        elif group.is_(D):
            raise CoordinatorNotAvailable(f"group {group_id} is being deleted")
        elif group.is_static_member_fenced(instance_id, member_id):
            raise FencedInstanceId(f"group {group_id}: instance {instance_id} is not member {member_id}")
        elif not (generation < 0 and group.is_(E)):
            if not group.has(member_id):
                raise UnknownMemberId(f"group {group_id}: member {member_id!r} is unknown")
            if generation != group.generation:
                raise IllegalGeneration(f"group {group_id}: generation {generation} received, {group.generation} is current")
            error = OFFSET_COMMIT[group.state]
            if error is not None:
                raise error(f"group {group_id} is {group.state.value}")
            member = group.get(member_id)
            member.heartbeat_deadline = max(member.heartbeat_deadline, now + member.session_timeout_ms)
        records, errors = self._offset_records(group_id, offsets, now, expire_timestamp)
        return Result(records, errors)

    def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, generation: int,
                           member_id: str, instance_id: str | None, offsets: dict[TopicPartition, OffsetCommitData],
                           now: int) -> Result:
        """TxnOffsetCommit (R13): the offsets are written as a transactional batch of the
        producer and stay pending until its transaction ends. Raises ProducerFenced when the
        producer's epoch is older than one already seen on this partition; when the client sends
        its group metadata (KIP-447: member id, generation), they are checked like OffsetCommit's.
        """
        known = self.offsets.producer_epochs.get(producer_id)
        if known is not None and producer_epoch < known:
            raise ProducerFenced(
                f"producer {producer_id} epoch {producer_epoch}: epoch {known} already wrote to __consumer_offsets-{self.partition}"
            )
        consumer = self._consumer_group(group_id)
        if consumer is not None:  # KIP-447 under KIP-848: the member's epoch fences a zombie
            try:
                self.consumers.validate_commit(consumer, member_id, generation, transactional=True, api_version=None)
            except StaleMemberEpoch as exc:  # TxnOffsetCommit answers ILLEGAL_GENERATION, as Kafka
                raise IllegalGeneration(str(exc)) from None
            records, errors = self._offset_records(group_id, offsets, now, -1)
            return Result(records, errors, producer=(producer_id, producer_epoch))
        group = self.groups.get(group_id)
        current_generation = 0 if group is None else group.generation
        if group is not None:
            if group.is_(D):
                raise CoordinatorNotAvailable(f"group {group_id} is being deleted")
            if group.is_static_member_fenced(instance_id, member_id):
                raise FencedInstanceId(f"group {group_id}: instance {instance_id} is not member {member_id}")
        if member_id and (group is None or not group.has(member_id)):
            raise UnknownMemberId(f"group {group_id}: member {member_id!r} is unknown")
        if generation >= 0 and generation != current_generation:
            raise IllegalGeneration(f"group {group_id}: generation {generation} received, {current_generation} is current")
        records, errors = self._offset_records(group_id, offsets, now, -1)
        return Result(records, errors, producer=(producer_id, producer_epoch))

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None, require_stable: bool,
                      member_id: str | None = None, member_epoch: int = -1,
                      ) -> list[tuple[TopicPartition, CommittedOffset | None, KafkaError | None]]:
        """OffsetFetch: committed offsets only (pending transactional ones are invisible); with
        ``require_stable``, a partition with a pending transactional offset answers
        UNSTABLE_OFFSET_COMMIT so the consumer waits for the transaction to end (KIP-447). A
        member of a consumer group names its member id and epoch (v9+): UNKNOWN_MEMBER_ID,
        STALE_MEMBER_EPOCH."""
        consumer = self._consumer_group(group_id)
        if consumer is not None:
            self.consumers.validate_fetch(consumer, member_id, member_epoch)
        if partitions is None:
            partitions = sorted(self.offsets.of_group(group_id))
        out = []
        for tp in partitions:
            if require_stable and self.offsets.has_pending(group_id, tp):
                out.append((tp, None, UnstableOffsetCommit(f"group {group_id} {tp}: a transaction holds a pending offset")))
            else:
                out.append((tp, self.offsets.get(group_id, tp), None))
        return out

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition], now: int) -> Result:
        """OffsetDelete. Raises GroupIdNotFound, NonEmptyGroup (a non-consumer group with
        members); per partition GroupSubscribedToTopic for topics the members consume."""
        group = self.groups.get(group_id)
        if group is None or group.is_(D):
            raise GroupIdNotFound(f"group {group_id} does not exist")
        if not group.is_(E) and group.protocol_type != "consumer":
            raise NonEmptyGroup(f"group {group_id} has members and is not a consumer group")
        errors: dict[TopicPartition, KafkaError | None] = {}
        records: list[Record] = []
        for tp in partitions:
            if not group.is_(E) and group.is_subscribed_to(tp.topic):
                errors[tp] = GroupSubscribedToTopic(f"group {group_id} consumes {tp.topic}")
                continue
            errors[tp] = None
            if self.offsets.get(group_id, tp) is not None:
                records.append((rec.OffsetKey(group_id, tp.topic, tp.partition), None))
        return Result(records, errors)

    def expire_offsets(self, now: int) -> Result:
        """Offsets retention (offsets.retention.minutes), as Kafka: offsets of an Empty group
        expire once the group has been empty for the retention time; a group that only stores
        offsets (no protocol type) loses each offset the retention time after its commit; a
        Stable consumer group loses offsets of topics it no longer subscribes to. A commit's own
        expire timestamp (OffsetCommit v2..v4 retention_time) overrides. Offsets pending in a
        transaction never expire. An Empty group left without offsets is deleted (tombstone)."""
        retention = self.settings.offsets_retention_ms
        records: list[Record] = []
        for group_id, group in list(self.groups.items()):
            if group.is_(D):
                continue
            offsets = self.offsets.of_group(group_id)
            if group.protocol_type is not None and group.is_(E):
                base: Callable[[CommittedOffset], int] | None = (
                    (lambda o: group.state_timestamp) if group.state_timestamp >= 0 else (lambda o: o.commit_timestamp)
                )
                keep_topics: frozenset[str] = frozenset()
            elif group.protocol_type is None:
                base, keep_topics = (lambda o: o.commit_timestamp), frozenset()
            elif group.protocol_type == "consumer" and group.is_(GroupState.STABLE) and group.subscribed_topics is not None:
                base, keep_topics = (lambda o: o.commit_timestamp), group.subscribed_topics
            else:
                base = None
                keep_topics = frozenset()
            remaining = len(offsets)
            if base is not None:
                for tp, o in offsets.items():
                    if tp.topic in keep_topics or self.offsets.has_pending(group_id, tp):
                        continue
                    expired = now >= o.expire_timestamp if o.expire_timestamp >= 0 else now - base(o) >= retention
                    if expired:
                        records.append((rec.OffsetKey(group_id, tp.topic, tp.partition), None))
                        remaining -= 1
            if group.is_(E) and remaining == 0 and not self.offsets.has_pending(group_id) and not group.pending_members:
                records.append((rec.GroupKey(group_id), None))
        return Result(records)

    # -- administration ---------------------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every classic group."""
        return [(g.group_id, g.protocol_type or "", g.state.value) for g in self.groups.values() if not g.is_(D)]

    def list_consumer_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type "consumer", state) of every consumer group (KIP-848)."""
        return [(g.group_id, "consumer", g.state) for g in self.consumers.groups.values() if g.group_id not in self.groups]

    def describe_group(self, group_id: str) -> GroupSummary:
        """As Kafka: members' metadata and assignments only when the group is Stable; an unknown
        group is described as Dead."""
        group = self.groups.get(group_id)
        if group is None:
            return GroupSummary(group_id, D.value, "", "", ())
        stable = group.is_(GroupState.STABLE)
        members = tuple(
            MemberSummary(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.metadata(group.protocol_name) if stable else b"", m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        protocol = (group.protocol_name or "") if stable else ""
        return GroupSummary(group_id, group.state.value, group.protocol_type or "", protocol, members)

    def delete_group(self, group_id: str, now: int) -> Result:
        """DeleteGroups for one group: tombstones for its offsets and itself. Raises
        GroupIdNotFound, NonEmptyGroup (members, or a transaction still writing its offsets)."""
        consumer = self._consumer_group(group_id)
        if consumer is not None:
            if consumer.members:
                raise NonEmptyGroup(f"consumer group {group_id} has {len(consumer.members)} member(s)")
            del self.consumers.groups[group_id]
            records = [(rec.OffsetKey(group_id, tp.topic, tp.partition), None) for tp in self.offsets.of_group(group_id)]
            return Result(records + self._consumer_records(group_id))
        group = self.groups.get(group_id)
        if group is None or group.is_(D):
            raise GroupIdNotFound(f"group {group_id} does not exist")
        if group.members or not group.is_(E):
            raise NonEmptyGroup(f"group {group_id} is {group.state.value} with {len(group.members)} member(s)")
        if self.offsets.has_pending(group_id):
            raise NonEmptyGroup(f"group {group_id}: a transaction is still committing offsets for it")
        records: list[Record] = [(rec.OffsetKey(group_id, tp.topic, tp.partition), None) for tp in self.offsets.of_group(group_id)]
        records.append((rec.GroupKey(group_id), None))
        return Result(records)

    # -- replay -----------------------------------------------------------------------------------

    def replay(self, key: rec.Key, value: rec.Value | None, *,
               record_offset: int, now: int, producer_id: int = -1, producer_epoch: int = -1,
               transactional: bool = False) -> None:
        """Apply one record of this partition (live after its append, or while loading)."""
        if not isinstance(key, (rec.OffsetKey, rec.GroupKey)):
            assert value is None or isinstance(value, crec.Value.__args__)  # type: ignore[attr-defined]
            classic = self.groups.get(key.group)
            if value is not None and classic is not None and not classic.members and classic.is_(E):
                del self.groups[key.group]  # taken over by the consumer group (as live)
            consumer_store.replay(self.consumers, self.consumer_written, key, value, now)  # type: ignore[arg-type]
            return
        if isinstance(key, rec.OffsetKey):
            assert value is None or isinstance(value, rec.OffsetValue)
            tp = TopicPartition(key.topic, key.partition)
            if value is None:
                if not transactional:
                    self.offsets.delete(key.group, tp)
                return
            committed = CommittedOffset(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp,
                                        value.expire_timestamp, record_offset)
            self._ensure_group(key.group)
            if transactional:
                self.offsets.put_pending(producer_id, producer_epoch, key.group, tp, committed)
            else:
                self.offsets.put(key.group, tp, committed)
            return
        assert value is None or isinstance(value, rec.GroupValue)
        if value is None:
            group = self.groups.pop(key.group, None)
            if group is not None:
                group.transition(D, now)
            self.offsets.delete_group(key.group)
            return
        self._replay_group(key.group, value, now)

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> set[str]:
        """Apply a COMMIT/ABORT marker of ``producer_id`` (R13, R14); returns the groups whose
        pending offsets it settled. Idempotent."""
        if producer_epoch >= 0:
            self.offsets.note_epoch(producer_id, producer_epoch)
        touched = self.offsets.complete(producer_id, commit)
        for group_id in touched:
            # a group that only existed for the aborted offsets goes with them (as it would
            # after compaction dropped the aborted records)
            group = self.groups.get(group_id)
            if (group is not None and group.is_(E) and group.generation == 0 and not group.members
                    and not group.pending_members and not self.offsets.has_offsets(group_id)
                    and not self.offsets.has_pending(group_id)):
                del self.groups[group_id]
        return touched

    def _ensure_group(self, group_id: str) -> None:
        if group_id not in self.groups and group_id not in self.consumers.groups:
            self.groups[group_id] = ClassicGroup(group_id)

    def _replay_group(self, group_id: str, value: rec.GroupValue, now: int) -> None:
        group = self.groups.get(group_id)
        if group is None or group.generation != value.generation:
            self.groups[group_id] = ClassicGroup.from_record(group_id, value, now)
            return
        if group.is_(GroupState.COMPLETING_REBALANCE) and value.members:
            self.membership.complete_assignment(group, value, now)
            return
        # Same generation, no rebalance waiting for it: the record describes the group as it is
        # (it was written from it), or — while loading — a later snapshot of that generation
        # (a static member's new id). Make the stored part equal to the record.
        in_record = {m.member_id for m in value.members}
        for mid in [mid for mid in group.members if mid not in in_record]:
            group.remove(mid)
        for mv in value.members:
            member = group.members.get(mv.member_id)
            if member is None:
                group.add(member_from_record(mv, value, now))
            else:
                member.assignment = mv.assignment
        if value.leader in group.members:
            group.leader_id = value.leader
