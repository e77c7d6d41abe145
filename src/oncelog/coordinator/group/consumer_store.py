"""Consumer groups (KIP-848) to and from their ``__consumer_offsets`` records (consumer_records.py).

Writing: ``group_records(group)`` is the whole durable part of a group as a record set, one
record per key, as Kafka keeps it: the group epoch, the subscribed topics, per member its
metadata, target assignment and current assignment, and the target assignment epoch. The shard
keeps what the log holds (``Written``); ``diff`` is the records that make the log equal the
group again: the keys whose value changed, and tombstones for the keys the group no longer has
(a member gone: its three records; the group deleted: all of them, the group epoch last, as
Kafka orders a group's deletion). Compaction keeps the latest record of each key, so the
compacted log still replays to the same group.

Reading: ``replay`` applies one record to the groups; it is idempotent (a record that equals the
state changes nothing), so the shard replays its own records after their append as it does on
load. What is not durable is what Kafka keeps volatile too: session deadlines restart from the
load (``now`` + the session timeout) and a pending revocation's deadline from the load
(``now`` + the member's rebalance timeout).

A static member that left with epoch -2 (``departed``) is written as Kafka writes it: member
epoch -2 in its current assignment, its real epoch kept as the previous epoch.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Iterable

from oncelog.coordinator.group import consumer_group as cg
from oncelog.coordinator.group import consumer_records as crec

__all__ = ["Written", "diff", "group_records", "replay"]

#: what the log holds of one group: key -> value
Written = dict[crec.Key, crec.Value]

_STATE_BYTES = {cg.MemberState.STABLE: 0, cg.MemberState.UNREVOKED_PARTITIONS: 1, cg.MemberState.UNRELEASED_PARTITIONS: 2}
_STATES = {v: k for k, v in _STATE_BYTES.items()}


def _parts(a: cg.Assignment) -> crec.Partitions:
    return tuple((tid, tuple(sorted(ps))) for tid, ps in sorted(a.items(), key=lambda kv: kv[0].bytes) if ps)


def _assignment(parts: crec.Partitions) -> cg.Assignment:
    return {tid: frozenset(ps) for tid, ps in parts if ps}


def group_records(group: cg.ConsumerGroup, members: Iterable[str] | None = None) -> Written:
    """Every record of ``group``, in the order a replay wants them (group first); with
    ``members``, the group's own records and those of these members alone."""
    g = group.group_id
    out: Written = {
        crec.GroupEpochKey(g): crec.GroupEpochValue(group.group_epoch),
        crec.SubscriptionKey(g): crec.SubscriptionValue(
            tuple((tid, name, count) for name, (tid, count) in sorted(group.subscribed_topics.items()))),
        crec.TargetEpochKey(g): crec.TargetEpochValue(group.assignment_epoch),
    }
    chosen = group.members if members is None else {m: group.members[m] for m in members if m in group.members}
    for mid, m in chosen.items():
        out[crec.MemberKey(g, mid)] = crec.MemberValue(
            m.instance_id, m.rack_id, m.client_id, m.client_host, tuple(m.subscribed_names), m.subscribed_regex,
            m.rebalance_timeout_ms, m.server_assignor)
        epoch, previous = (cg.STATIC_LEAVE_EPOCH, m.member_epoch) if m.departed else (m.member_epoch, m.previous_epoch)
        out[crec.CurrentAssignmentKey(g, mid)] = crec.CurrentAssignmentValue(
            epoch, previous, _STATE_BYTES[m.state], _parts(m.assigned), _parts(m.revoking))
    targets = group.target if members is None else {m: group.target[m] for m in members if m in group.target}
    for mid, target in targets.items():
        out[crec.TargetMemberKey(g, mid)] = crec.TargetMemberValue(_parts(target))
    return out


def _tombstone_order(key: crec.Key) -> int:
    """Tombstones: members' records first, the group's own last (its epoch the very last)."""
    if isinstance(key, (crec.CurrentAssignmentKey, crec.TargetMemberKey, crec.MemberKey)):
        return 0
    return 2 if isinstance(key, crec.GroupEpochKey) else 1


def diff(group: cg.ConsumerGroup | None, written: Written,
         members: Iterable[str] | None = None) -> list[tuple[crec.Key, crec.Value | None]]:
    """The records that make the log (``written``) describe ``group`` (None: deleted). With
    ``members`` (member ids), the caller vouches that no other member's records changed (the
    group's ``dirty`` members): the cost is then that of these members, not of the whole group."""
    now = group_records(group, members) if group is not None else {}
    out: list[tuple[crec.Key, crec.Value | None]] = [(k, v) for k, v in now.items() if written.get(k) != v]
    if members is None or group is None:
        candidates: Iterable[crec.Key] = written
    else:
        g = group.group_id
        candidates = [k for mid in members for k in (crec.MemberKey(g, mid), crec.TargetMemberKey(g, mid),
                                                     crec.CurrentAssignmentKey(g, mid)) if k in written]
    gone = sorted((k for k in candidates if k not in now), key=_tombstone_order)
    out.extend((k, None) for k in gone)
    return out


def replay(groups: cg.ConsumerGroups, written: dict[str, Written], key: crec.Key, value: crec.Value | None,
           now: int) -> None:
    """Apply one record to ``groups`` and note it in ``written`` (group id -> its records)."""
    g = key.group
    if value is None:
        w = written.get(g)
        if w is not None:
            w.pop(key, None)
        if isinstance(key, crec.GroupEpochKey):
            groups.groups.pop(g, None)
            written.pop(g, None)
            return
        group = groups.groups.get(g)
        if group is None:
            return
        if isinstance(key, (crec.MemberKey, crec.CurrentAssignmentKey)):
            if group.members.pop(key.member_id, None) is not None:
                group.invalidate()  # loading: a member gone behind the state machine's back
        elif isinstance(key, crec.TargetMemberKey):
            group.target.pop(key.member_id, None)
        return
    written.setdefault(g, {})[key] = value
    group = groups.groups.get(g)
    if group is None:
        group = groups.groups[g] = cg.ConsumerGroup(g)
    if isinstance(value, crec.GroupEpochValue):
        group.group_epoch = value.epoch
    elif isinstance(value, crec.SubscriptionValue):
        topics = {name: (tid, count) for tid, name, count in value.topics}
        if topics != group.subscribed_topics:
            group.subscribed_topics = topics
            group.invalidate()
    elif isinstance(value, crec.TargetEpochValue):
        group.assignment_epoch = value.assignment_epoch
    elif isinstance(value, crec.TargetMemberValue):
        assert isinstance(key, crec.TargetMemberKey)
        group.target[key.member_id] = _assignment(value.partitions)
    elif isinstance(value, crec.MemberValue):
        assert isinstance(key, crec.MemberKey)
        m = _member(groups, group, key.member_id, now)
        m.instance_id, m.rack_id = value.instance_id, value.rack_id
        m.client_id, m.client_host = value.client_id, value.client_host
        if value.subscribed_names != m.subscribed_names or value.subscribed_regex != m.subscribed_regex:
            names = tuple(value.subscribed_names)  # sorted by the writer; sorted again if not
            if any(a > b for a, b in zip(names, names[1:])):
                names = tuple(sorted(names))
            m.subscribed_names, m.subscribed_regex = names, value.subscribed_regex
            group.invalidate()  # loading: derived state (regex users, names found) rebuilt at the next use
        m.rebalance_timeout_ms, m.server_assignor = value.rebalance_timeout_ms, value.server_assignor
    else:
        assert isinstance(key, crec.CurrentAssignmentKey) and isinstance(value, crec.CurrentAssignmentValue)
        m = _member(groups, group, key.member_id, now)
        if value.member_epoch == cg.STATIC_LEAVE_EPOCH:
            if not m.departed:  # a live leave already set its deadline; on load it starts now
                m.session_deadline = now + groups.settings_of(group.group_id).session_timeout_ms
            m.departed, m.member_epoch = True, value.previous_epoch
        else:
            m.departed = False
            m.member_epoch, m.previous_epoch = value.member_epoch, value.previous_epoch
        m.state = _STATES.get(value.state, cg.MemberState.STABLE)
        m.assigned, m.revoking = _assignment(value.assigned), _assignment(value.revoking)
        if m.state != cg.MemberState.UNREVOKED_PARTITIONS:
            m.revocation_deadline = None
        elif m.revocation_deadline is None:
            m.revocation_deadline = now + m.rebalance_timeout_ms


def _member(groups: cg.ConsumerGroups, group: cg.ConsumerGroup, member_id: str, now: int) -> cg.ConsumerMember:
    """The member, created (its session starting ``now``) when the log first names it."""
    m = group.members.get(member_id)
    if m is None:
        m = group.members[member_id] = cg.ConsumerMember(
            member_id, "", "", -1, now + groups.settings_of(group.group_id).session_timeout_ms)
        group.invalidate()
    return m
