"""Just enough of the consumer protocol (protocol type ``consumer``) to read what members
subscribe to and what they were assigned: the broker is otherwise protocol-agnostic (any
client-side assignor works because the broker never interprets assignments).

ConsumerProtocolSubscription (v0..v3, non-flexible): int16 version, array of string topics,
nullable bytes user data, then fields we do not need. ConsumerProtocolAssignment (v0..v3):
int16 version, array of {string topic, array of int32 partitions}, nullable bytes user data.
Both decoders return None for bytes they cannot read instead of raising: these bytes come from
clients and only feed diagnostics (OffsetDelete's subscribed-topic check, ``oncelog groups``).
"""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _string(data: bytes, pos: int) -> tuple[str, int]:
    (n,) = _I16.unpack_from(data, pos)
    pos += 2
    if n < 0 or pos + n > len(data):
        raise ValueError("bad string")
    return data[pos : pos + n].decode("utf-8"), pos + n


def _count(data: bytes, pos: int) -> tuple[int, int]:
    (n,) = _I32.unpack_from(data, pos)
    if n < 0 or n > len(data):
        raise ValueError("bad array length")
    return n, pos + 4


def subscribed_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics of a ConsumerProtocolSubscription, or None if it does not decode."""
    try:
        pos = 2
        n, pos = _count(metadata, pos)
        topics = []
        for _ in range(n):
            topic, pos = _string(metadata, pos)
            topics.append(topic)
        return frozenset(topics)
    except (ValueError, struct.error, UnicodeDecodeError):
        return None


def assigned_partitions(assignment: bytes) -> dict[str, list[int]] | None:
    """topic -> partitions of a ConsumerProtocolAssignment ({} for empty bytes), or None if it
    does not decode."""
    if not assignment:
        return {}
    try:
        pos = 2
        n, pos = _count(assignment, pos)
        out: dict[str, list[int]] = {}
        for _ in range(n):
            topic, pos = _string(assignment, pos)
            k, pos = _count(assignment, pos)
            parts = list(struct.unpack_from(f">{k}i", assignment, pos))
            pos += 4 * k
            out.setdefault(topic, []).extend(parts)
        return out
    except (ValueError, struct.error, UnicodeDecodeError):
        return None


def encode_subscription(topics: list[str], version: int = 0) -> bytes:
    """A v0 ConsumerProtocolSubscription (for tests and tools)."""
    out = bytearray(_I16.pack(version) + _I32.pack(len(topics)))
    for t in topics:
        b = t.encode()
        out += _I16.pack(len(b)) + b
    out += _I32.pack(-1)  # null user data
    return bytes(out)


def encode_assignment(partitions: dict[str, list[int]], version: int = 0) -> bytes:
    """A v0 ConsumerProtocolAssignment (for tests and tools)."""
    out = bytearray(_I16.pack(version) + _I32.pack(len(partitions)))
    for topic, parts in partitions.items():
        b = topic.encode()
        out += _I16.pack(len(b)) + b + _I32.pack(len(parts)) + struct.pack(f">{len(parts)}i", *parts)
    out += _I32.pack(-1)
    return bytes(out)
