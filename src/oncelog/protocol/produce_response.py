"""Produce responses encoded straight to bytes: the answer on the broker's hottest path.

librdkafka sends one partition's batch per Produce request, so a producer writing to many
partitions makes the broker build one small response per batch. Building and encoding that
response with kio's generic objects and writers cost about 33 µs, nearly half of the broker's
whole work per request (``python -m bench.request_path``); this module does it in about 2 µs.

Contract: ``encode_body(version, topics)`` returns exactly the bytes kio's writer produces for
the equivalent ``ProduceResponse`` object (throttle time 0, no tagged fields), for every version the broker advertises (3..13; v10+ only add tagged fields, never sent here:
the current leader hint of KIP-951 goes with NOT_LEADER_OR_FOLLOWER, which we answer without it;
v13 names each topic by its id, KIP-516, instead of its name).
tests/unit/test_produce_response.py holds it to that, with Hypothesis, against kio itself, so
kio stays the reference for the wire format.

Layout (Kafka's ProduceResponse schema):
  responses: [name (v3-v12) | topic_id uuid (v13+), partition_responses: [index i32, error_code i16, base_offset i64,
              log_append_time_ms i64 (v2+), log_start_offset i64 (v5+),
              record_errors [] (v8+), error_message nullable string (v8+)]]
  throttle_time_ms i32 (v1+)
Versions 9+ are flexible: compact arrays and strings (unsigned varint length + 1) and an empty
tagged-field section after every struct.
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple, Sequence

MIN_VERSION = 3
MAX_VERSION = 13
FLEXIBLE_FROM = 9
#: Produce v13+ names topics by id (KIP-516)
TOPIC_ID_FROM = 13

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PART_V3 = struct.Struct(">ihqq")  # index, error, base offset, log append time
_PART_V5 = struct.Struct(">ihqqq")  # ... log start offset
_NO_THROTTLE = _I32.pack(0)
_NULL_STRING = _I16.pack(-1)


class PartitionResult(NamedTuple):
    index: int
    error_code: int
    base_offset: int
    log_start_offset: int
    error_message: str | None = None
    log_append_time: int = -1
    #: (batch index, message) of each record refused (v8+ record_errors)
    record_errors: tuple[tuple[int, str | None], ...] = ()


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(text: str, flexible: bool) -> bytes:
    data = text.encode()
    return (_uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def _nullable_string(text: str | None, flexible: bool) -> bytes:
    if text is None:
        return b"\x00" if flexible else _NULL_STRING
    return _string(text, flexible)


def _array_length(n: int, flexible: bool) -> bytes:
    return _uvarint(n + 1) if flexible else _I32.pack(n)


def encode_body(version: int, topics: Sequence[tuple[str | uuid.UUID, Sequence[PartitionResult]]]) -> bytes:
    """The body of a ProduceResponse ``version`` (without response header) for ``topics``:
    (topic, partition results) pairs in request order, the topic being its name below v13 and
    its id (``uuid.UUID``) from v13. Raises ValueError for a version outside
    MIN_VERSION..MAX_VERSION or a topic of the wrong kind for the version."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce response v{version} is not supported here")
    flexible = version >= FLEXIBLE_FROM
    part = _PART_V5 if version >= 5 else _PART_V3
    out = [_array_length(len(topics), flexible)]
    by_id = version >= TOPIC_ID_FROM
    for topic, results in topics:
        if by_id:
            if not isinstance(topic, uuid.UUID):
                raise ValueError(f"Produce response v{version} names topics by id, not {topic!r}")
            out.append(topic.bytes)
        else:
            if not isinstance(topic, str):
                raise ValueError(f"Produce response v{version} names topics by name, not {topic!r}")
            out.append(_string(topic, flexible))
        out.append(_array_length(len(results), flexible))
        for r in results:
            if version >= 5:
                out.append(part.pack(r.index, r.error_code, r.base_offset, r.log_append_time, r.log_start_offset))
            else:
                out.append(part.pack(r.index, r.error_code, r.base_offset, r.log_append_time))
            if version >= 8:
                out.append(_array_length(len(r.record_errors), flexible))
                for batch_index, message in r.record_errors:
                    out.append(_I32.pack(batch_index))
                    out.append(_nullable_string(message, flexible))
                    if flexible:
                        out.append(b"\x00")  # tagged fields of the record error
                out.append(_nullable_string(r.error_message, flexible))
            if flexible:
                out.append(b"\x00")  # tagged fields of the partition response
        if flexible:
            out.append(b"\x00")  # tagged fields of the topic response
    out.append(_NO_THROTTLE)
    if flexible:
        out.append(b"\x00")  # tagged fields of the response
    return b"".join(out)
