"""``__consumer_offsets`` records: Kafka's OffsetCommit and GroupMetadata key/value schemas.

Every record key starts with an int16 *key version* that says what the record is, exactly as in
Kafka (group-coordinator ``*Key.json``; the version doubles as the record type):

* key version 0 or 1 — an offset commit. Key: string group, string topic, int32 partition.
  Value (int16 version first):

  - v0: int64 offset, string metadata, int64 commit_timestamp
  - v1: v0 + int64 expire_timestamp (per-commit retention, OffsetCommit v2..v4 retention_time)
  - v2: as v0
  - v3: int64 offset, int32 leader_epoch, string metadata, int64 commit_timestamp

* key version 2 — group metadata. Key: string group. Value (int16 version first), v0..v3:
  string protocol_type, int32 generation, nullable string protocol, nullable string leader,
  [v2+] int64 current_state_timestamp, array of members: string member_id,
  [v3+] nullable string group_instance_id, string client_id, string client_host,
  [v1+] int32 rebalance_timeout, int32 session_timeout, bytes subscription, bytes assignment.

* key versions 3..8 — the consumer groups of KIP-848 (consumer_records.py: group epoch,
  subscribed topics, member metadata, target assignment epoch, target and current member
  assignments; flexible values).

Strings are int16-length UTF-8, bytes int32-length, arrays int32-count (the non-flexible
encoding Kafka uses for these versions; record_codec.py reads and writes them). A null value is a tombstone: the offset or the group was
deleted. We write key version 1, offset values v3 (v1 when the commit carries an expire
timestamp) and group values v3; we read every version above, so a log written by an older
writer (or by Kafka) loads. Anything else raises ``RecordFormatError``.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.coordinator.group import consumer_records as crec
from oncelog.coordinator.group.record_codec import RecordReader, RecordWriter

__all__ = [
    "GroupKey",
    "GroupValue",
    "MemberValue",
    "OffsetKey",
    "OffsetValue",
    "RecordFormatError",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3


class RecordFormatError(ValueError):
    """A ``__consumer_offsets`` record that does not decode (unknown version, truncated)."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1
    expire_timestamp: int = -1  # only v1 records carry one


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberValue, ...]


Key = OffsetKey | GroupKey | crec.Key
Value = OffsetValue | GroupValue | crec.Value


# -- writing ------------------------------------------------------------------------------------


def encode_key(key: Key) -> bytes:
    if not isinstance(key, (OffsetKey, GroupKey)):
        return crec.encode_key(key)
    w = RecordWriter()
    if isinstance(key, OffsetKey):
        w.i16(OFFSET_KEY_VERSION)
        w.string(key.group)
        w.string(key.topic)
        w.i32(key.partition)
    else:
        w.i16(GROUP_KEY_VERSION)
        w.string(key.group)
    return bytes(w.buf)


def encode_value(value: Value | None) -> bytes | None:
    """The value bytes; None (a tombstone) for None."""
    if value is None:
        return None
    if not isinstance(value, (OffsetValue, GroupValue)):
        return crec.encode_value(value)
    w = RecordWriter()
    if isinstance(value, OffsetValue):
        if value.expire_timestamp >= 0:
            w.i16(OFFSET_VALUE_VERSION_WITH_EXPIRY)
            w.i64(value.offset)
            w.string(value.metadata)
            w.i64(value.commit_timestamp)
            w.i64(value.expire_timestamp)
        else:
            w.i16(OFFSET_VALUE_VERSION)
            w.i64(value.offset)
            w.i32(value.leader_epoch)
            w.string(value.metadata)
            w.i64(value.commit_timestamp)
        return bytes(w.buf)
    w.i16(GROUP_VALUE_VERSION)
    w.string(value.protocol_type)
    w.i32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    w.i64(value.current_state_timestamp)
    w.i32(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.i32(m.rebalance_timeout)
        w.i32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return bytes(w.buf)


# -- reading ------------------------------------------------------------------------------------


def decode_key(data: bytes) -> Key:
    r = RecordReader(data, RecordFormatError)
    version = r.i16()
    if version in (0, 1):
        key: Key = OffsetKey(r.string(), r.string(), r.i32())
    elif version == GROUP_KEY_VERSION:
        key = GroupKey(r.string())
    elif version in crec.KEY_VERSIONS.values():
        try:
            return crec.decode_key(version, data)
        except crec.ConsumerRecordError as exc:
            raise RecordFormatError(str(exc)) from None
    else:
        raise RecordFormatError(f"__consumer_offsets key version {version} is unknown")
    r.done()
    return key


def decode_value(key: Key, data: bytes | None) -> Value | None:
    """The value of a record whose key is ``key``; None for a tombstone."""
    if data is None:
        return None
    if not isinstance(key, (OffsetKey, GroupKey)):
        try:
            return crec.decode_value(key, data)
        except crec.ConsumerRecordError as exc:
            raise RecordFormatError(str(exc)) from None
    r = RecordReader(data, RecordFormatError)
    version = r.i16()
    if isinstance(key, OffsetKey):
        value: Value = _offset_value(r, version)
    else:
        value = _group_value(r, version)
    r.done()
    return value


def _offset_value(r: RecordReader, version: int) -> OffsetValue:
    if version in (0, 2):
        return OffsetValue(offset=r.i64(), metadata=r.string(), commit_timestamp=r.i64())
    if version == 1:
        return OffsetValue(offset=r.i64(), metadata=r.string(), commit_timestamp=r.i64(), expire_timestamp=r.i64())
    if version == 3:
        offset, epoch = r.i64(), r.i32()
        return OffsetValue(offset=offset, leader_epoch=epoch, metadata=r.string(), commit_timestamp=r.i64())
    raise RecordFormatError(f"offset commit value version {version} is unknown")


def _group_value(r: RecordReader, version: int) -> GroupValue:
    if not 0 <= version <= 3:
        raise RecordFormatError(f"group metadata value version {version} is unknown")
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.i64() if version >= 2 else -1
    count = r.i32()
    if count < 0 or count > len(r.data):
        raise RecordFormatError(f"group metadata value with {count} members")
    members = []
    for _ in range(count):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        session_first = version == 0
        rebalance = -1 if session_first else r.i32()
        session = r.i32()
        if session_first:
            rebalance = session
        members.append(MemberValue(member_id, instance_id, client_id, client_host, rebalance, session, r.bytes_(), r.bytes_()))
    return GroupValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))
