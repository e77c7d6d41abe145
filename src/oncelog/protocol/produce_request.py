"""The Produce request (v3–v13) read straight from bytes: the broker's hottest decode. Sans-IO.

A Produce request is a few fixed fields and, per topic and partition, one ``records`` blob;
reading it with a generic schema walk costs more than the rest of the request. This reader
knows the layout, bounds every length against the bytes that remain before it slices anything
(no allocation follows an announced size that does not fit), and returns light named tuples
with the same attribute names as kio's classes, so the handler does not care which reader ran.
A Hypothesis test holds it equal to kio's own decoding for every version, and to the bounded
schema reader on malformed input (both refuse).

Layout (Kafka's ProduceRequest.json)::

    v3-v8: transactional_id nullable string16 | acks int16 | timeout_ms int32 |
           topic_data array32 [ name string16 | partition_data array32 [ index int32 |
           records nullable bytes32 ] ]
    v9:    the same in the flexible encoding (compact strings, arrays and bytes: unsigned
           varint length + 1) with a tagged-field section after each structure; unknown tags
           are skipped (v10-v12 are the same layout).
    v13:   the flexible layout with each topic named by its ``topic_id`` (uuid, 16 bytes) instead
           of its name (KIP-516): ``TopicProduceData.name`` is then "" and the handler resolves
           the id.

Raises ``ValueError`` on anything malformed (the caller closes the connection), and
``schema_reader.TooManyEntries`` when the topics and partitions together pass
``schema_reader.MAX_REQUEST_ENTRIES`` (the bound every request has, issue 26 row 9).
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from oncelog.protocol.schema_reader import MAX_REQUEST_ENTRIES, spend
from oncelog.protocol.varint import read_uvarint as _uvarint

__all__ = ["PartitionProduceData", "ProduceRequest", "TopicProduceData", "read_produce_request"]

FIRST_FLEXIBLE_VERSION = 9
#: v13+ names topics by id (KIP-516)
FIRST_TOPIC_ID_VERSION = 13

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_MIN_TOPIC = (2 + 4, 1 + 1 + 1)  # (legacy, flexible): name + empty array (+ tags)
_MIN_PARTITION = (4 + 4, 4 + 1 + 1)  # index + null records (+ tags)


class PartitionProduceData(NamedTuple):
    index: int
    records: bytes | None


class TopicProduceData(NamedTuple):
    name: str
    partition_data: tuple[PartitionProduceData, ...]
    #: v13+: the topic's id (``name`` is then "")
    topic_id: uuid.UUID | None = None


class ProduceRequest(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]


def _skip_tags(buf: bytes, pos: int) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise ValueError(f"tagged field of {size} bytes runs past the end")
    return pos


def _string16(buf: bytes, pos: int, nullable: bool) -> tuple[str | None, int]:
    if len(buf) - pos < 2:
        raise ValueError("buffer ends inside a string length")
    (n,) = _I16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise ValueError(f"string length {n}")
    end = pos + n
    if end > len(buf):
        raise ValueError(f"string of {n} bytes runs past the end")
    return buf[pos:end].decode(), end


def _compact_string(buf: bytes, pos: int, nullable: bool) -> tuple[str | None, int]:
    n, pos = _uvarint(buf, pos)
    if n == 0:
        if nullable:
            return None, pos
        raise ValueError("null string where one is required")
    end = pos + n - 1
    if end > len(buf):
        raise ValueError(f"string of {n - 1} bytes runs past the end")
    return buf[pos:end].decode(), end


def _count(buf: bytes, pos: int, flexible: bool, item_min: int, what: str) -> tuple[int, int]:
    if flexible:
        n, pos = _uvarint(buf, pos)
        n -= 1
    else:
        if len(buf) - pos < 4:
            raise ValueError(f"buffer ends inside the {what} array length")
        (n,) = _I32.unpack_from(buf, pos)
        pos += 4
    if n < 0:
        raise ValueError(f"null {what} array")
    if n * item_min > len(buf) - pos:
        raise ValueError(f"{what} array of {n} items cannot fit in {len(buf) - pos} bytes")
    return n, pos


def read_produce_request(buf: bytes, offset: int, version: int,
                         budget: list[int] | None = None) -> tuple[ProduceRequest, int]:
    """Read a Produce request body of ``version`` at ``buf[offset]``: (request, bytes used).
    ``budget``: the array entries still allowed (``schema_reader.check_message``)."""
    if budget is None:
        budget = [MAX_REQUEST_ENTRIES]
    flexible = version >= FIRST_FLEXIBLE_VERSION
    string = _compact_string if flexible else _string16
    pos = offset
    txn_id, pos = string(buf, pos, True)
    if len(buf) - pos < 6:
        raise ValueError("buffer ends inside acks/timeout")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, pos)
    pos += 6
    by_id = version >= FIRST_TOPIC_ID_VERSION
    n_topics, pos = _count(buf, pos, flexible, 16 + 1 + 1 if by_id else _MIN_TOPIC[flexible], "topic_data")
    spend(budget, n_topics)
    topics = []
    for _ in range(n_topics):
        topic_id = None
        if by_id:
            if len(buf) - pos < 16:
                raise ValueError("buffer ends inside a topic id")
            name, topic_id = "", uuid.UUID(bytes=bytes(buf[pos:pos + 16]))
            pos += 16
        else:
            name, pos = string(buf, pos, False)
        n_parts, pos = _count(buf, pos, flexible, _MIN_PARTITION[flexible], "partition_data")
        spend(budget, n_parts)
        parts = []
        for _ in range(n_parts):
            if len(buf) - pos < 4:
                raise ValueError("buffer ends inside a partition index")
            (index,) = _I32.unpack_from(buf, pos)
            pos += 4
            if flexible:
                n, pos = _uvarint(buf, pos)
                n -= 1
            else:
                if len(buf) - pos < 4:
                    raise ValueError("buffer ends inside a records length")
                (n,) = _I32.unpack_from(buf, pos)
                pos += 4
            if n < 0:
                if n != -1:
                    raise ValueError(f"records length {n}")
                data = None
            else:
                end = pos + n
                if end > len(buf):
                    raise ValueError(f"records of {n} bytes run past the end")
                data = buf[pos:end]
                pos = end
            if flexible:
                pos = _skip_tags(buf, pos)
            parts.append(PartitionProduceData(index, data))
        if flexible:
            pos = _skip_tags(buf, pos)
        topics.append(TopicProduceData(name, tuple(parts), topic_id))  # type: ignore[arg-type]
    if flexible:
        pos = _skip_tags(buf, pos)
    return ProduceRequest(txn_id, acks, timeout_ms, tuple(topics)), pos - offset
