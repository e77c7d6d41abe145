"""The records of ``__share_group_state`` (KIP-932): share-partition snapshots and share-group
configs, to and from bytes. Pure.

A compacted topic keyed per share partition, as Kafka's share coordinator keeps it:

* ``SnapshotKey`` (key version 0, Kafka's ShareSnapshotKey: group, topic id, partition) ->
  ``partition.Snapshot`` (value version 0: the state epoch, the start offset and the state
  batches (first offset, last offset, delivery state, delivery count)). Each write is a whole
  snapshot, so compaction keeps the latest and a replay of the compacted log is the state.
  Kafka also writes ShareUpdate deltas between snapshots; here every write is a snapshot.
* ``ConfigKey`` (key version 100, oncelog's own: Kafka keeps group configs in its metadata log) ->
  the group's configs (``share.auto.offset.reset``, ``share.isolation.level`` ...), a sorted
  list of (name, value) strings.

A tombstone (value None) deletes the key. Bad bytes raise ``RecordFormatError``; the loader
skips such a record and reports it (R22).
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from oncelog.coordinator.share.partition import RecordState, Snapshot, StateBatch

__all__ = ["ConfigKey", "RecordFormatError", "SnapshotKey", "decode_key", "decode_value", "encode_key",
           "encode_value"]

SNAPSHOT_KEY = 0
CONFIG_KEY = 100
_MAX_BATCHES = 1 << 20
#: the most offsets a snapshot's state batches may span: a share partition has at most
#: ``group.share.partition.max.record.locks`` records in flight (2,000 by default); a record
#: spanning more is garbage, refused before a load would iterate it (R22)
MAX_SPAN = 1 << 20


class RecordFormatError(ValueError):
    pass


class SnapshotKey(NamedTuple):
    group: str
    topic_id: uuid.UUID
    partition: int


class ConfigKey(NamedTuple):
    group: str


Key = SnapshotKey | ConfigKey
Value = Snapshot | tuple[tuple[str, str], ...]


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = memoryview(data), 0

    def take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise RecordFormatError(f"record ends at byte {len(self.data)}, {self.pos + size} needed")
        out = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return out

    def str(self) -> str:
        (n,) = self.take(">h")
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError(f"string of {n} bytes at byte {self.pos} does not fit")
        s = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        try:
            return s.decode()
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"string is not UTF-8: {exc}") from None

    def end(self) -> None:
        if self.pos != len(self.data):
            raise RecordFormatError(f"{len(self.data) - self.pos} byte(s) left after the record")


def encode_key(key: Key) -> bytes:
    if isinstance(key, SnapshotKey):
        return struct.pack(">h", SNAPSHOT_KEY) + _str(key.group) + key.topic_id.bytes + struct.pack(">i", key.partition)
    return struct.pack(">h", CONFIG_KEY) + _str(key.group)


def decode_key(data: bytes) -> Key:
    r = _Reader(data)
    (version,) = r.take(">h")
    group = r.str()
    if version == SNAPSHOT_KEY:
        (raw, partition) = r.take(">16si")
        r.end()
        return SnapshotKey(group, uuid.UUID(bytes=raw), partition)
    if version == CONFIG_KEY:
        r.end()
        return ConfigKey(group)
    raise RecordFormatError(f"unknown __share_group_state key version {version}")


def encode_value(value: Value) -> bytes:
    if isinstance(value, Snapshot):
        out = [struct.pack(">hiqi", 0, value.state_epoch, value.start_offset, len(value.batches))]
        out += [struct.pack(">qqbh", b.first_offset, b.last_offset, int(b.state), b.delivery_count) for b in value.batches]
        return b"".join(out)
    return struct.pack(">hi", 0, len(value)) + b"".join(_str(k) + _str(v) for k, v in value)


def decode_value(key: Key, data: bytes | None) -> Value | None:
    if data is None:
        return None
    r = _Reader(data)
    if isinstance(key, SnapshotKey):
        version, state_epoch, start, count = r.take(">hiqi")
        if version != 0 or not 0 <= count <= _MAX_BATCHES or start < 0:
            raise RecordFormatError(f"share snapshot version {version}, start {start}, {count} batch(es)")
        batches = []
        for _ in range(count):
            first, last, state, delivered = r.take(">qqbh")
            try:
                st = RecordState(state)
            except ValueError:
                raise RecordFormatError(f"unknown delivery state {state}") from None
            if last < first or first < start or last - start >= MAX_SPAN:
                raise RecordFormatError(f"state batch {first}..{last} below start {start}, reversed, or more than "
                                        f"{MAX_SPAN} offsets past it")
            batches.append(StateBatch(first, last, st, delivered))
        r.end()
        return Snapshot(start, state_epoch, tuple(batches))
    version, count = r.take(">hi")
    if version != 0 or not 0 <= count <= 1024:
        raise RecordFormatError(f"group config version {version} with {count} entries")
    items = tuple((r.str(), r.str()) for _ in range(count))
    r.end()
    return items
