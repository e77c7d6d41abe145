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
section after every struct. We write no tagged fields and skip every tag we read (Kafka 4.x's
``ClassicMemberMetadata`` tag of a member that came from a classic group, the metadata hash of
newer writers), so a record written by Kafka 4.x decodes. Member states are Kafka's bytes:
0 stable, 1 unrevoked partitions, 2 unreleased partitions.

A null value is a tombstone. Anything malformed raises ``ConsumerRecordError`` (records.py turns
it into its ``RecordFormatError``). Pure: no I/O.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

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

MAX_STRING_BYTES = 0x7FFF
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

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


class _Writer:
    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def i8(self, v: int) -> None:
        self.buf += _I8.pack(v)

    def i16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def i32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def uvarint(self, v: int) -> None:
        while v >= 0x80:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)

    def string(self, s: str) -> None:  # non-flexible (keys)
        data = s.encode("utf-8")
        if len(data) > MAX_STRING_BYTES:
            raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
        self.i16(len(data))
        self.buf += data

    def cstring(self, s: str | None) -> None:  # compact (nullable)
        if s is None:
            self.uvarint(0)
            return
        data = s.encode("utf-8")
        if len(data) > MAX_STRING_BYTES:
            raise ValueError(f"string of {len(data)} bytes does not fit a record string")
        self.uvarint(len(data) + 1)
        self.buf += data

    def count(self, n: int) -> None:
        self.uvarint(n + 1)

    def uuid(self, u: uuid.UUID) -> None:
        self.buf += u.bytes

    def no_tags(self) -> None:
        self.uvarint(0)

    def partitions(self, parts: Partitions) -> None:
        self.count(len(parts))
        for tid, ps in parts:
            self.uuid(tid)
            self.count(len(ps))
            for p in ps:
                self.i32(p)
            self.no_tags()


def encode_key(key: Key) -> bytes:
    w = _Writer()
    w.i16(KEY_VERSIONS[type(key)])
    w.string(key.group)
    if isinstance(key, (MemberKey, TargetMemberKey, CurrentAssignmentKey)):
        w.string(key.member_id)
    return bytes(w.buf)


def encode_value(value: Value) -> bytes:
    w = _Writer()
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
        w.partitions(value.partitions)
    else:
        w.i32(value.member_epoch)
        w.i32(value.previous_epoch)
        w.i8(value.state)
        w.partitions(value.assigned)
        w.partitions(value.revoking)
    w.no_tags()
    return bytes(w.buf)


# -- reading --------------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, st: struct.Struct) -> int:
        try:
            (v,) = st.unpack_from(self.data, self.pos)
        except struct.error:
            raise ConsumerRecordError(f"record truncated at byte {self.pos} of {len(self.data)}") from None
        self.pos += st.size
        return v

    def i8(self) -> int:
        return self._take(_I8)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= len(self.data):
                raise ConsumerRecordError(f"record truncated in a varint at byte {self.pos}")
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ConsumerRecordError(f"varint longer than 5 bytes at byte {self.pos}")

    def _raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ConsumerRecordError(f"field of {n} bytes at byte {self.pos} runs past the {len(self.data)}-byte record")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return bytes(out)

    def _text(self, n: int) -> str:
        try:
            return self._raw(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConsumerRecordError(f"string at byte {self.pos - n} is not UTF-8: {e}") from None

    def string(self) -> str:  # non-flexible (keys)
        n = self.i16()
        if n < 0:
            raise ConsumerRecordError(f"null string at byte {self.pos - 2} where one is required")
        return self._text(n)

    def nullable_cstring(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._text(n - 1)

    def cstring(self) -> str:
        s = self.nullable_cstring()
        if s is None:
            raise ConsumerRecordError(f"null string before byte {self.pos} where one is required")
        return s

    def count(self, min_item_bytes: int) -> int:
        n = self.uvarint() - 1
        if n < 0:
            raise ConsumerRecordError(f"null array before byte {self.pos} where one is required")
        if n * min_item_bytes > len(self.data) - self.pos:
            raise ConsumerRecordError(f"array of {n} items cannot fit the {len(self.data)}-byte record")
        return n

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._raw(16))

    def skip_tags(self) -> None:
        for _ in range(self.count_tags()):
            self.uvarint()  # tag
            self._raw(self.uvarint())

    def count_tags(self) -> int:
        n = self.uvarint()
        if n > len(self.data) - self.pos:
            raise ConsumerRecordError(f"{n} tagged fields cannot fit the {len(self.data)}-byte record")
        return n

    def partitions(self) -> Partitions:
        out = []
        for _ in range(self.count(18)):
            tid = self.uuid()
            ps = tuple(self.i32() for _ in range(self.count(4)))
            self.skip_tags()
            out.append((tid, ps))
        return tuple(out)

    def done(self) -> None:
        if self.pos != len(self.data):
            raise ConsumerRecordError(f"{len(self.data) - self.pos} trailing bytes after the record")


def decode_key(version: int, data: bytes) -> Key:
    """The key of type ``version`` (3..8) whose bytes, version included, are ``data``."""
    cls = _KEY_TYPES.get(version)
    if cls is None:
        raise ConsumerRecordError(f"key version {version} is not a consumer-group record")
    r = _Reader(data)
    r.i16()
    group = r.string()
    key: Key = cls(group, r.string()) if cls in (MemberKey, TargetMemberKey, CurrentAssignmentKey) else cls(group)
    r.done()
    return key


def decode_value(key: Key, data: bytes) -> Value:
    r = _Reader(data)
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
        value = TargetMemberValue(r.partitions())
    else:
        epoch, previous, state = r.i32(), r.i32(), r.i8()
        value = CurrentAssignmentValue(epoch, previous, state, r.partitions(), r.partitions())
    r.skip_tags()
    r.done()
    return value
