"""``__consumer_offsets`` record encoding (R3): round trips of every key and value we write, the
older versions we read, Kafka's byte layout, malformed input, placement (Java's hashCode)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncelog.coordinator.group import records as rec
from oncelog.coordinator.group import consumer_records as crec
from oncelog.coordinator.group.consumer_protocol import (
    assigned_partitions,
    encode_assignment,
    encode_subscription,
    subscribed_topics,
)
from oncelog.coordinator.placement import java_string_hash, partition_for

text = st.text(max_size=40)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)

members = st.builds(
    rec.MemberValue,
    member_id=text,
    group_instance_id=st.none() | text,
    client_id=text,
    client_host=text,
    rebalance_timeout=i32,
    session_timeout=i32,
    subscription=st.binary(max_size=64),
    assignment=st.binary(max_size=64),
)


@given(text, text, i32)
def test_offset_key_round_trip(group: str, topic: str, partition: int) -> None:
    key = rec.OffsetKey(group, topic, partition)
    data = rec.encode_key(key)
    assert data[:2] == b"\x00\x01", "written as key version 1"
    assert rec.decode_key(data) == key


@given(text)
def test_group_key_round_trip(group: str) -> None:
    data = rec.encode_key(rec.GroupKey(group))
    assert data[:2] == b"\x00\x02"
    assert rec.decode_key(data) == rec.GroupKey(group)


@given(i64, text, i64, i32)
def test_offset_value_v3_round_trip(offset: int, metadata: str, ts: int, epoch: int) -> None:
    value = rec.OffsetValue(offset, metadata, ts, epoch)
    data = rec.encode_value(value)
    assert data is not None and data[:2] == b"\x00\x03"
    assert rec.decode_value(rec.OffsetKey("g", "t", 0), data) == value


@given(i64, text, i64, st.integers(0, 2**63 - 1))
def test_offset_value_with_expiry_is_written_as_v1(offset: int, metadata: str, ts: int, expire: int) -> None:
    value = rec.OffsetValue(offset, metadata, ts, -1, expire)
    data = rec.encode_value(value)
    assert data is not None and data[:2] == b"\x00\x01"
    assert rec.decode_value(rec.OffsetKey("g", "t", 0), data) == value


@given(text, i32, st.none() | text, st.none() | text, i64, st.lists(members, max_size=4))
def test_group_value_v3_round_trip(ptype: str, gen: int, proto: str | None, leader: str | None, ts: int,
                                   ms: list[rec.MemberValue]) -> None:
    value = rec.GroupValue(ptype, gen, proto, leader, ts, tuple(ms))
    data = rec.encode_value(value)
    assert data is not None and data[:2] == b"\x00\x03"
    assert rec.decode_value(rec.GroupKey("g"), data) == value


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack(">h", len(b)) + b


def test_kafka_offset_commit_layout_v3() -> None:
    """Byte for byte what Kafka's OffsetCommitValue v3 is."""
    data = rec.encode_value(rec.OffsetValue(42, "meta", 1000, 7))
    assert data == struct.pack(">hqi", 3, 42, 7) + _s("meta") + struct.pack(">q", 1000)
    key = rec.encode_key(rec.OffsetKey("grp", "top", 5))
    assert key == struct.pack(">h", 1) + _s("grp") + _s("top") + struct.pack(">i", 5)


def test_older_versions_are_read() -> None:
    okey = rec.OffsetKey("g", "t", 1)
    v0 = struct.pack(">hq", 0, 9) + _s("m") + struct.pack(">q", 5)
    assert rec.decode_value(okey, v0) == rec.OffsetValue(9, "m", 5)
    v2 = struct.pack(">hq", 2, 9) + _s("m") + struct.pack(">q", 5)
    assert rec.decode_value(okey, v2) == rec.OffsetValue(9, "m", 5)
    legacy_key = struct.pack(">h", 0) + _s("g") + _s("t") + struct.pack(">i", 1)
    assert rec.decode_key(legacy_key) == okey
    member_v0 = _s("m1") + _s("cid") + _s("host") + struct.pack(">i", 3000) + struct.pack(">i", 1) + b"s" + struct.pack(">i", 1) + b"a"
    g0 = struct.pack(">h", 0) + _s("consumer") + struct.pack(">i", 4) + _s("range") + _s("m1") + struct.pack(">i", 1) + member_v0
    value = rec.decode_value(rec.GroupKey("g"), g0)
    assert value.generation == 4 and value.current_state_timestamp == -1
    m = value.members[0]
    assert (m.member_id, m.session_timeout, m.rebalance_timeout, m.subscription, m.assignment) == ("m1", 3000, 3000, b"s", b"a")
    member_v1 = _s("m1") + _s("cid") + _s("host") + struct.pack(">ii", 9000, 3000) + struct.pack(">i", 0) + struct.pack(">i", 0)
    g2 = struct.pack(">h", 2) + _s("consumer") + struct.pack(">i", 4) + struct.pack(">h", -1) + struct.pack(">h", -1) + struct.pack(">q", 77) + struct.pack(">i", 1) + member_v1
    value = rec.decode_value(rec.GroupKey("g"), g2)
    assert value.protocol is None and value.leader is None and value.current_state_timestamp == 77
    assert value.members[0].rebalance_timeout == 9000


def test_tombstones() -> None:
    assert rec.encode_value(None) is None
    assert rec.decode_value(rec.GroupKey("g"), None) is None


@pytest.mark.parametrize(
    "key, data",
    [
        (None, struct.pack(">h", 99) + _s("g")),
        (None, struct.pack(">h", 3) + _s("g") + b"x"),
        (crec.GroupEpochKey("g"), b"\x00\x01"),  # a consumer-group value of an unknown version
        (crec.MemberKey("g", "m"), b"\x00\x00\x00"),  # truncated
        (None, struct.pack(">h", 1) + _s("g")),
        (None, struct.pack(">h", 2) + _s("g") + b"x"),
        (rec.OffsetKey("g", "t", 0), struct.pack(">hq", 9, 1)),
        (rec.OffsetKey("g", "t", 0), struct.pack(">hq", 3, 1)),
        (rec.GroupKey("g"), struct.pack(">h", 4)),
        (rec.GroupKey("g"), struct.pack(">h", 3) + _s("c") + struct.pack(">i", 1) + struct.pack(">hh", -1, -1) + struct.pack(">qi", 0, 99999)),
    ],
)
def test_malformed_records_raise_record_format_error(key: rec.Key | None, data: bytes) -> None:
    with pytest.raises(rec.RecordFormatError):
        if key is None:
            rec.decode_key(data)
        else:
            rec.decode_value(key, data)


@given(st.binary(max_size=80))
def test_arbitrary_bytes_never_raise_anything_else(data: bytes) -> None:
    for fn in (lambda: rec.decode_key(data), lambda: rec.decode_value(rec.GroupKey("g"), data),
               lambda: rec.decode_value(rec.OffsetKey("g", "t", 0), data)):
        try:
            fn()
        except rec.RecordFormatError:
            pass


def test_java_string_hash_and_placement() -> None:
    # values of Java's "...".hashCode()
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99_162_322
    assert java_string_hash("polygenelubricants") == -2**31  # Integer.MIN_VALUE: Utils.abs maps it to 0
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("console-consumer-12345", 50) == abs(_java("console-consumer-12345")) % 50
    assert java_string_hash("\U0001F600") == _java("\U0001F600"), "UTF-16 code units, surrogates included"


def _java(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) % 2**32
    return h - 2**32 if h >= 2**31 else h


def test_consumer_protocol_helpers() -> None:
    assert subscribed_topics(encode_subscription(["a", "b"])) == frozenset({"a", "b"})
    assert subscribed_topics(b"\x00") is None
    assert assigned_partitions(encode_assignment({"a": [0, 2], "b": [1]})) == {"a": [0, 2], "b": [1]}
    assert assigned_partitions(b"") == {}
    assert assigned_partitions(b"\x00\x00\x00\x00\x00\x05") is None
