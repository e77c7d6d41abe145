"""Request decoding never trusts a length (R22): the bounded checker in front of kio's native
reader, the Python reader for unknown tagged fields, and the hand-written Produce reader."""

from __future__ import annotations

import datetime
import uuid
import struct
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kio.serial.errors import SerialError

from oncelog.protocol import apis, framing, schema_reader
from oncelog.protocol.produce_request import read_produce_request

#: The 26-byte Metadata v12 request that made kio's native reader reserve ~100 GB and abort.
METADATA_BOMB = struct.pack(">hhih", 3, 12, 1, 1) + b"x" + b"\0" + b"\xff\xff\xff\xff\x32" + b"\0" * 5


def test_huge_array_length_is_refused_before_anything_is_allocated() -> None:
    # In a child process: on the old decoder this aborted the interpreter (SIGABRT).
    code = (
        "from oncelog.protocol import framing\n"
        f"frame = {METADATA_BOMB!r}\n"
        "try:\n    framing.decode_request(frame)\nexcept framing.FrameError as e:\n    print('refused:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "refused:" in out.stdout and "cannot fit" in out.stdout


def _flexible_versions() -> list[tuple[int, int]]:
    return [
        (k, v)
        for k, (lo, hi) in sorted(apis.SUPPORTED_VERSIONS.items())
        for v in range(lo, hi + 1)
        if k != apis.PRODUCE and apis.is_flexible(k, v)
    ]


@pytest.mark.parametrize(("api_key", "version"), _flexible_versions())
def test_every_flexible_request_refuses_a_huge_first_length(api_key: int, version: int) -> None:
    """The first length-prefixed field of the body claims 2^32 bytes or items: refused."""
    header = struct.pack(">hhih", api_key, version, 9, 1) + b"c" + b"\0"
    body = b"\0" * 8 + b"\xff\xff\xff\xff\x0f" + b"\0" * 16  # the huge varint lands in the first few fields
    for shift in range(0, 9):
        frame = header + body[8 - shift :]
        try:
            framing.decode_request(frame)
        except framing.FrameError:
            pass


def _metadata_v12(topics: bytes) -> bytes:
    return struct.pack(">hhih", 3, 12, 1, 1) + b"x" + b"\0" + topics + b"\x01\x00\x00"


def test_null_array_is_refused_where_the_schema_forbids_it() -> None:
    # CreateTopics v7: topics (compact array) null -> malformed, not a None for the handler.
    frame = struct.pack(">hhih", 19, 7, 1, 1) + b"x" + b"\0" + b"\x00" + b"\x00\x00\x75\x30" + b"\x00" + b"\x00"
    with pytest.raises(framing.FrameError, match="null"):
        framing.decode_request(frame)
    # Metadata v12 allows a null topic list (all topics).
    assert framing.decode_request(_metadata_v12(b"\x00")).body.topics is None


def test_null_array_in_legacy_encoding_is_refused() -> None:
    # DeleteTopics v1: topic_names array32 = -1, timeout
    frame = struct.pack(">hhih", 20, 1, 1, 1) + b"x" + struct.pack(">ii", -1, 1000)
    with pytest.raises(framing.FrameError, match="null"):
        framing.decode_request(frame)


def test_null_string_where_required_is_refused() -> None:
    # DeleteTopics v4 (flexible): one topic name, compact string length 0 = null.
    frame = struct.pack(">hhih", 20, 4, 1, 1) + b"x" + b"\0" + b"\x02" + b"\x00" + struct.pack(">i", 1000) + b"\0"
    with pytest.raises(framing.FrameError, match="null"):
        framing.decode_request(frame)


def test_unknown_tag_takes_the_python_reader_and_gives_the_same_message() -> None:
    m = apis.message_module_classes(apis.METADATA, 12, False)
    req = m["MetadataRequest"](topics=(m["MetadataRequestTopic"](name="t", topic_id=None),),
                               allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    raw = framing.encode_request(apis.METADATA, 12, 5, "c", req)[4:]
    tagged = raw[:-1] + bytes([1, 42, 3, 1, 2, 3])  # one unknown tag at the end of the body
    assert framing.decode_request(tagged).body == req == framing.decode_request(raw).body


# --- Produce: the hand-written reader equals kio's decoding ---------------------------------

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
partitions = st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.none() | st.binary(max_size=40)), max_size=3)
topics = st.lists(st.tuples(names, partitions), max_size=3)


def _topic_id(name: str) -> uuid.UUID:
    """Produce v13+ names topics by id: a test topic's id, derived from its generated name."""
    return uuid.uuid5(uuid.NAMESPACE_OID, name)


def _topic_key(version: int, name: str) -> dict:
    return {"topic_id": _topic_id(name)} if version >= 13 else {"name": name}


def _kio_produce(version: int, txn: str | None, acks: int, timeout_ms: int, tps: list) -> object:
    m = apis.message_module_classes(apis.PRODUCE, version, False)
    return m["ProduceRequest"](
        transactional_id=txn,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=tuple(
            m["TopicProduceData"](**_topic_key(version, n), partition_data=tuple(
                m["PartitionProduceData"](index=i, records=r) for i, r in ps))
            for n, ps in tps
        ),
    )


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.integers(3, 13), txn=st.none() | names, acks=st.integers(-(2**15), 2**15 - 1),
       timeout_ms=st.integers(0, 2**31 - 1), tps=topics)
def test_produce_reader_equals_kio(version: int, txn: str | None, acks: int, timeout_ms: int, tps: list) -> None:
    req = _kio_produce(version, txn, acks, timeout_ms, tps)
    raw = framing.encode_request(apis.PRODUCE, version, 1, "c", req)[4:]
    header_cls = framing.RequestHeaderV2 if version >= 9 else framing.RequestHeaderV1
    body_at = schema_reader.check_message(header_cls, raw, 0)
    ours, used = read_produce_request(raw, body_at, version)
    assert body_at + used == len(raw)
    assert (ours.transactional_id, ours.acks, ours.timeout_ms) == (txn, acks, timeout_ms)
    assert [(t.topic_id if version >= 13 else t.name, [(p.index, p.records) for p in t.partition_data]) for t in ours.topic_data] == \
        [(_topic_id(n) if version >= 13 else n, [(i, r) for i, r in ps]) for n, ps in tps]


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.integers(3, 13), tps=topics, data=st.data())
def test_produce_reader_refuses_what_the_bounded_reader_refuses(version: int, tps: list, data: st.DataObject) -> None:
    """Mutated Produce bodies: the hand-written reader and the schema reader agree (both refuse,
    or both read the same request)."""
    raw = bytearray(framing.encode_request(apis.PRODUCE, version, 1, "c", _kio_produce(version, None, -1, 100, tps))[4:])
    header_cls = framing.RequestHeaderV2 if version >= 9 else framing.RequestHeaderV1
    body_at = schema_reader.check_message(header_cls, bytes(raw), 0)
    for _ in range(data.draw(st.integers(1, 3))):
        if len(raw) <= body_at:
            break
        i = data.draw(st.integers(body_at, len(raw) - 1))
        raw[i] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, data.draw(st.integers(0, 255))]))
    buf = bytes(raw)
    kio_cls = apis.message_class(apis.PRODUCE, version, False)
    try:
        theirs, _ = schema_reader.read_message(kio_cls, buf, body_at)
    except (ValueError, SerialError):
        theirs = None
    try:
        ours, _ = read_produce_request(buf, body_at, version)
    except ValueError:
        ours = None
    if theirs is None or ours is None:
        assert theirs is None and ours is None, (theirs, ours)
    else:
        assert ours.transactional_id == theirs.transactional_id and ours.acks == theirs.acks
        def key(t: object) -> object:  # kio reads the all-zero topic id as None
            if version < 13:
                return t.name  # type: ignore[attr-defined]
            tid = t.topic_id  # type: ignore[attr-defined]
            return None if tid is None or tid.int == 0 else tid
        assert [(key(t), [(p.index, p.records) for p in t.partition_data]) for t in ours.topic_data] == \
            [(key(t), [(p.index, p.records) for p in t.partition_data]) for t in theirs.topic_data]


def test_produce_with_a_huge_topic_count_is_refused() -> None:
    for version, count in ((8, struct.pack(">i", 2**31 - 1)), (9, b"\xff\xff\xff\xff\x0f")):
        string = b"\x00" if version >= 9 else b"\xff\xff"  # null transactional id
        frame = struct.pack(">hhih", 0, version, 1, 1) + b"x" + (b"\0" if version >= 9 else b"") + string + \
            struct.pack(">hi", -1, 100) + count + b"\0" * 10
        with pytest.raises(framing.FrameError, match="cannot fit"):
            framing.decode_request(frame)


# --- issue 26 row 9: a bound on the array entries of one request ------------------------------

def _many(api_key: int, version: int, n: int) -> bytes:
    """A request of ``api_key`` whose client-sized array holds ``n`` entries."""
    from oncelog.protocol.messages import Builder

    m = Builder(api_key, version, response=False)
    if api_key == apis.LIST_OFFSETS:
        body = m.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(m.ListOffsetsTopic(
            name="t", partitions=tuple(m.ListOffsetsPartition(partition_index=i, timestamp=-1,
                                                              current_leader_epoch=-1) for i in range(n))),))
    elif api_key == apis.DELETE_RECORDS:
        import datetime
        body = m.DeleteRecordsRequest(timeout=datetime.timedelta(seconds=1), topics=(m.DeleteRecordsTopic(
            name="t", partitions=tuple(m.DeleteRecordsPartition(partition_index=i, offset=0) for i in range(n))),))
    elif api_key == apis.DESCRIBE_CONFIGS:
        body = m.DescribeConfigsRequest(include_synonyms=False, include_documentation=False, resources=tuple(
            m.DescribeConfigsResource(resource_type=2, resource_name=f"t{i}", configuration_keys=None)
            for i in range(n)))
    elif api_key == apis.OFFSET_FETCH:
        body = m.OffsetFetchRequest(group_id="g", require_stable=False, topics=(m.OffsetFetchRequestTopic(
            name="t", partition_indexes=tuple(range(n))),))
    else:
        raise AssertionError(api_key)
    return framing.encode_request(api_key, version, 1, "c", body)[4:]


@pytest.mark.parametrize("api_key,version", [(apis.LIST_OFFSETS, 1), (apis.LIST_OFFSETS, 9), (apis.DELETE_RECORDS, 2),
                                             (apis.DESCRIBE_CONFIGS, 4), (apis.OFFSET_FETCH, 7)])
def test_a_request_past_the_entry_bound_is_refused_before_its_entries_are_walked(api_key: int, version: int) -> None:
    """Every request with client-sized arrays gets the same bound (schema_reader): at it, the
    request decodes; one entry more (the outer array counts too) is a FrameError that names it."""
    bound = schema_reader.MAX_REQUEST_ENTRIES
    outer = 0 if api_key == apis.DESCRIBE_CONFIGS else 1  # the one topic entry holding the partitions
    ok = framing.decode_request(_many(api_key, version, bound - outer))
    assert ok.entries == bound
    with pytest.raises(framing.FrameError, match="more than the 100,000 the broker serves in one request"):
        framing.decode_request(_many(api_key, version, bound - outer + 1))
