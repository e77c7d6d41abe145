"""``__consumer_offsets`` records of consumer groups (KIP-848): Kafka 4.x's group-coordinator
schemas, read from Kafka's ``ConsumerGroup*.json`` message definitions (no code copied).

Every key is an int16 *key version* (the record type) and non-flexible int16-length strings:

====  =========================================  ======================  =======================
type  key                                        fields                  value (flexible v0)
====  =========================================  ======================  =======================
3     ConsumerGroupMetadataKey                   group                   int32 epoch
4     ConsumerGroupPartitionMetadataKey          group                   [topic id, name, int32
                                                                         partitions, [partition
                                                                         metadata] (empty)]
5     ConsumerGroupMemberMetadataKey             group, member           see ``MemberValue``
6     ConsumerGroupTargetAssignmentMetadataKey   group                   int32 assignment epoch
7     ConsumerGroupTargetAssignmentMemberKey     group, member           [topic id, [int32]]
8     ConsumerGroupCurrentMemberAssignmentKey    group, member           int32 member epoch, int32
                                                                         previous epoch, int8
                                                                         state, assigned,
                                                                         pending revocation
====  =========================================  ======================  =======================

Values start with an int16 value version (0) and use Kafka's flexible encoding (KIP-482):
compact strings/arrays (unsigned varint length + 1, 0 = null), 16-byte UUIDs, and a tagged-field
section after every struct (record_codec.py reads and writes them). We write no tagged fields
and skip every tag we read (Kafka 4.x's ``ClassicMemberMetadata`` tag of a member that came
from a classic group, the metadata hash of newer writers), so a record written by Kafka 4.x decodes. Member states are Kafka's bytes:
0 stable, 1 unrevoked partitions, 2 unreleased partitions.

A null value is a tombstone. Anything malformed raises ``ConsumerRecordError`` (records.py turns
it into its ``RecordFormatError``). Pure: no I/O.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from oncelog.coordinator.group.record_codec import RecordReader, RecordWriter

__all__ = [
    "ConsumerRecordError",
    "CurrentAssignmentKey",
    "CurrentAssignmentValue",
    "GroupEpochKey",
    "GroupEpochValue",
    "KEY_VERSIONS",
    "MemberKey",
    "MemberValue",
    "SubscriptionKey",
    "SubscriptionValue",
    "TargetEpochKey",
    "TargetEpochValue",
    "TargetMemberKey",
    "TargetMemberValue",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]

#: topic id -> sorted partitions, as stored
Partitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


class ConsumerRecordError(ValueError):
    """A consumer-group record that does not decode."""


# -- keys -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupEpochKey:  # ConsumerGroupMetadataKey, type 3
    group: str


@dataclass(frozen=True, slots=True)
class SubscriptionKey:  # ConsumerGroupPartitionMetadataKey, type 4
    group: str


@dataclass(frozen=True, slots=True)
class MemberKey:  # ConsumerGroupMemberMetadataKey, type 5
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class TargetEpochKey:  # ConsumerGroupTargetAssignmentMetadataKey, type 6
    group: str


@dataclass(frozen=True, slots=True)
class TargetMemberKey:  # ConsumerGroupTargetAssignmentMemberKey, type 7
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class CurrentAssignmentKey:  # ConsumerGroupCurrentMemberAssignmentKey, type 8
    group: str
    member_id: str


Key = GroupEpochKey | SubscriptionKey | MemberKey | TargetEpochKey | TargetMemberKey | CurrentAssignmentKey

KEY_VERSIONS: dict[type, int] = {
    GroupEpochKey: 3, SubscriptionKey: 4, MemberKey: 5, TargetEpochKey: 6, TargetMemberKey: 7, CurrentAssignmentKey: 8,
}
_KEY_TYPES = {v: k for k, v in KEY_VERSIONS.items()}

# -- values ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupEpochValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class SubscriptionValue:
    #: (topic id, name, partition count), sorted by name
    topics: tuple[tuple[uuid.UUID, str, int], ...]


@dataclass(frozen=True, slots=True)
class MemberValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_names: tuple[str, ...]
    subscribed_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True, slots=True)
class TargetEpochValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetMemberValue:
    partitions: Partitions


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_epoch: int
    state: int  # Kafka's MemberState byte
    assigned: Partitions
    revoking: Partitions


Value = GroupEpochValue | SubscriptionValue | MemberValue | TargetEpochValue | TargetMemberValue | CurrentAssignmentValue


# -- writing --------------------------------------------------------------------------------------


def _write_partitions(w: RecordWriter, parts: Partitions) -> None:
    w.count(len(parts))
    for tid, ps in parts:
        w.uuid(tid)
        w.count(len(ps))
        for p in ps:
            w.i32(p)
        w.no_tags()


def encode_key(key: Key) -> bytes:
    w = RecordWriter()
    w.i16(KEY_VERSIONS[type(key)])
    w.string(key.group)
    if isinstance(key, (MemberKey, TargetMemberKey, CurrentAssignmentKey)):
        w.string(key.member_id)
    return bytes(w.buf)


def encode_value(value: Value) -> bytes:
    w = RecordWriter()
    w.i16(0)
    if isinstance(value, GroupEpochValue):
        w.i32(value.epoch)
    elif isinstance(value, SubscriptionValue):
        w.count(len(value.topics))
        for tid, name, count in value.topics:
            w.uuid(tid)
            w.cstring(name)
            w.i32(count)
            w.count(0)  # PartitionMetadata (racks): unused since Kafka 4.0
            w.no_tags()
    elif isinstance(value, MemberValue):
        w.cstring(value.instance_id)
        w.cstring(value.rack_id)
        w.cstring(value.client_id)
        w.cstring(value.client_host)
        w.count(len(value.subscribed_names))
        for n in value.subscribed_names:
            w.cstring(n)
        w.cstring(value.subscribed_regex)
        w.i32(value.rebalance_timeout_ms)
        w.cstring(value.server_assignor)
    elif isinstance(value, TargetEpochValue):
        w.i32(value.assignment_epoch)
    elif isinstance(value, TargetMemberValue):
        _write_partitions(w, value.partitions)
    else:
        w.i32(value.member_epoch)
        w.i32(value.previous_epoch)
        w.i8(value.state)
        _write_partitions(w, value.assigned)
        _write_partitions(w, value.revoking)
    w.no_tags()
    return bytes(w.buf)


# -- reading --------------------------------------------------------------------------------------


def _read_partitions(r: RecordReader) -> Partitions:
    out = []
    for _ in range(r.count(18)):
        tid = r.uuid()
        ps = tuple(r.i32() for _ in range(r.count(4)))
        r.skip_tags()
        out.append((tid, ps))
    return tuple(out)


def decode_key(version: int, data: bytes) -> Key:
    """The key of type ``version`` (3..8) whose bytes, version included, are ``data``."""
    cls = _KEY_TYPES.get(version)
    if cls is None:
        raise ConsumerRecordError(f"key version {version} is not a consumer-group record")
    r = RecordReader(data, ConsumerRecordError)
    r.i16()
    group = r.string()
    key: Key = cls(group, r.string()) if cls in (MemberKey, TargetMemberKey, CurrentAssignmentKey) else cls(group)
    r.done()
    return key


def decode_value(key: Key, data: bytes) -> Value:
    r = RecordReader(data, ConsumerRecordError)
    version = r.i16()
    if version != 0:
        raise ConsumerRecordError(f"{type(key).__name__} value version {version} is unknown")
    value: Value
    if isinstance(key, GroupEpochKey):
        value = GroupEpochValue(r.i32())
    elif isinstance(key, SubscriptionKey):
        topics = []
        for _ in range(r.count(23)):
            tid, name, count = r.uuid(), r.cstring(), r.i32()
            for _ in range(r.count(6)):  # PartitionMetadata: partition, racks (ignored)
                r.i32()
                for _ in range(r.count(1)):
                    r.cstring()
                r.skip_tags()
            r.skip_tags()
            topics.append((tid, name, count))
        value = SubscriptionValue(tuple(topics))
    elif isinstance(key, MemberKey):
        instance, rack, client_id, host = r.nullable_cstring(), r.nullable_cstring(), r.cstring(), r.cstring()
        names = tuple(r.cstring() for _ in range(r.count(1)))
        value = MemberValue(instance, rack, client_id, host, names, r.nullable_cstring(), r.i32(), r.nullable_cstring())
    elif isinstance(key, TargetEpochKey):
        value = TargetEpochValue(r.i32())
    elif isinstance(key, TargetMemberKey):
        value = TargetMemberValue(_read_partitions(r))
    else:
        epoch, previous, state = r.i32(), r.i32(), r.i8()
        value = CurrentAssignmentValue(epoch, previous, state, _read_partitions(r), _read_partitions(r))
    r.skip_tags()
    r.done()
    return value
