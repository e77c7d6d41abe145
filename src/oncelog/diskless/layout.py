"""The objects of diskless topics (issue 29, docs/DISKLESS.md §2.4): keys and content.

Key: ``v1/<uuid7>-b<broker>-<incarnation8>.olo`` (relative to the store's prefix). The UUIDv7
is time-ordered, so keys list in creation order (the orphan collector reads the time back with
``key_time_ms``); the broker id and the first 8 hex digits of its process incarnation are for
operators. A key is never reused, so ``put_if_absent`` also guards against a double upload.

Content: a 32-byte header — magic ``OLDL``, format version 1, flags 0, broker id, creation time
(ms), batch count, footer length, CRC32C of the 28 bytes before it — then the batches back to
back exactly as the leader stamped them (base offset and leader epoch assigned, the rest the
producer's bytes), then the footer: per batch (partition id, byte offset, size). PostgreSQL's
coordinates are what readers use; header and footer let a tool (and a test) tell what an object
holds without the database (``parse``).
"""

from __future__ import annotations

import os
import struct
import uuid
from dataclasses import dataclass
from typing import Sequence

import crc32c as _crc32c

__all__ = ["HEADER_SIZE", "MAGIC", "ObjectEntry", "build", "key_time_ms", "new_key", "parse"]

MAGIC = b"OLDL"
VERSION = 1
_HEADER = struct.Struct(">4sHHiqII")  # magic, version, flags, broker, created ms, batch count, footer length
_CRC = struct.Struct(">I")
HEADER_SIZE = _HEADER.size + _CRC.size  # 32
_ENTRY = struct.Struct(">qqi")  # partition id, byte offset, size
KEY_PREFIX = "v1/"
SUFFIX = ".olo"


@dataclass(frozen=True, slots=True)
class ObjectEntry:
    """Where one batch lies in an object."""

    partition_id: int
    byte_offset: int
    size: int


def _uuid7(now_ms: int) -> uuid.UUID:
    """A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then random bits."""
    rand = int.from_bytes(os.urandom(10), "big")
    value = (now_ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= (rand >> 68 & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return uuid.UUID(int=value)


def new_key(broker: int, incarnation: str, now_ms: int) -> str:
    """A fresh object key (unique: 74 random bits under one millisecond)."""
    inc = incarnation.replace("-", "")[:8] or "0"
    return f"{KEY_PREFIX}{_uuid7(now_ms)}-b{broker}-{inc}{SUFFIX}"


def key_time_ms(key: str) -> int | None:
    """The creation time written in a key made by ``new_key`` (None: not such a key)."""
    name = key.rsplit("/", 1)[-1]
    if not key.startswith(KEY_PREFIX) and f"/{KEY_PREFIX}" not in key or not name.endswith(SUFFIX):
        return None
    try:
        u = uuid.UUID(name[:36])
    except ValueError:
        return None
    if u.version != 7:
        return None
    return u.int >> 80


def build(broker: int, now_ms: int, batches: Sequence[tuple[int, bytes]]) -> tuple[bytes, list[ObjectEntry]]:
    """The object holding ``batches`` (partition id, bytes) in order, and each batch's place."""
    entries: list[ObjectEntry] = []
    pos = HEADER_SIZE
    for pid, data in batches:
        entries.append(ObjectEntry(pid, pos, len(data)))
        pos += len(data)
    footer = b"".join(_ENTRY.pack(e.partition_id, e.byte_offset, e.size) for e in entries)
    head = _HEADER.pack(MAGIC, VERSION, 0, broker, now_ms, len(entries), len(footer))
    parts = [head, _CRC.pack(_crc32c.crc32c(head))]
    parts.extend(data for _, data in batches)
    parts.append(footer)
    return b"".join(parts), entries


def parse(obj: bytes) -> tuple[int, int, list[ObjectEntry]]:
    """(broker, creation ms, entries) of an object made by ``build``; ValueError if it is not one."""
    if len(obj) < HEADER_SIZE:
        raise ValueError("object shorter than its header")
    magic, version, _flags, broker, created, count, footer_len = _HEADER.unpack_from(obj)
    (crc,) = _CRC.unpack_from(obj, _HEADER.size)
    if magic != MAGIC or version != VERSION or crc != _crc32c.crc32c(obj[:_HEADER.size]):
        raise ValueError("not a diskless object (magic, version or header CRC)")
    if footer_len != count * _ENTRY.size or footer_len > len(obj) - HEADER_SIZE:
        raise ValueError("footer length does not match the batch count")
    base = len(obj) - footer_len
    entries = [ObjectEntry(*_ENTRY.unpack_from(obj, base + i * _ENTRY.size)) for i in range(count)]
    pos = HEADER_SIZE
    for e in entries:  # the batches lie back to back between the header and the footer
        if e.byte_offset != pos or e.size <= 0:
            raise ValueError(f"footer entry {e} does not follow the batch before it (at {pos})")
        pos += e.size
    if pos != base:
        raise ValueError(f"the batches end at {pos}, the footer starts at {base}")
    return broker, created, entries
