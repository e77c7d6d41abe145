"""The sans-IO protocol layer: request decoding, response encoding, bad input (R22)."""

from __future__ import annotations

import datetime
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.protocol import messages
from oncelog.protocol import apis, framing
from oncelog.protocol.errors import ErrorCode, UnsupportedVersion


def produce_request(version: int = 9, records: bytes = b"x" * 10):
    m = apis.message_module_classes(apis.PRODUCE, version, False)
    return m["ProduceRequest"](
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(milliseconds=100),
        topic_data=(m["TopicProduceData"](name="t", partition_data=(m["PartitionProduceData"](index=0, records=records),)),),
    )


@pytest.mark.parametrize("version", range(3, 10))
def test_request_roundtrip_every_produce_version(version: int) -> None:
    raw = framing.encode_request(apis.PRODUCE, version, 42, "client", produce_request(version))
    assert struct.unpack(">i", raw[:4])[0] == len(raw) - 4
    req = framing.decode_request(raw[4:])
    assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == (0, version, 42, "client")
    assert req.body.topic_data[0].partition_data[0].records == b"x" * 10


def test_unknown_tagged_fields_are_ignored() -> None:
    raw = framing.encode_request(apis.PRODUCE, 9, 1, "c", produce_request())[4:]
    assert raw[-1] == 0  # no tagged fields at the end of the body
    tagged = raw[:-1] + bytes([2, 99, 2, 0xAA, 0xBB, 100, 0])  # two unknown tags
    req = framing.decode_request(tagged)
    assert req.body.topic_data[0].name == "t"


def test_unknown_tagged_field_in_request_header() -> None:
    raw = framing.encode_request(apis.PRODUCE, 9, 1, "c", produce_request())[4:]
    # header v2: api key, version, correlation id (8 bytes), client id (int16 len + 1), tag count.
    pos = 8 + 2 + 1
    assert raw[pos] == 0
    tagged = raw[:pos] + bytes([1, 7, 1, 0x55]) + raw[pos + 1 :]
    assert framing.decode_request(tagged).correlation_id == 1


def test_truncated_request_is_a_frame_error() -> None:
    raw = framing.encode_request(apis.PRODUCE, 9, 1, "c", produce_request())[4:]
    for cut in range(8, len(raw)):
        with pytest.raises(framing.FrameError):
            framing.decode_request(raw[:cut])


def test_trailing_bytes_are_ignored_as_kafka_does() -> None:
    raw = framing.encode_request(apis.PRODUCE, 9, 1, "c", produce_request())[4:]
    assert framing.decode_request(raw + b"\x00").body == framing.decode_request(raw).body


def test_librdkafka_all_topics_metadata_v12_request() -> None:
    """librdkafka 2.16's all-topics Metadata v12 request carries 3 bytes after its body."""
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    req = framing.decode_request(frame)
    assert (req.api_key, req.api_version, req.client_id) == (3, 12, "rdkafka")
    assert req.body.topics is None


def test_unknown_api_version_is_unsupported() -> None:
    frame = struct.pack(">hhi", apis.PRODUCE, 99, 5) + b"\x00\x00"
    with pytest.raises(UnsupportedVersion):
        framing.decode_request(frame)


@pytest.mark.parametrize("size", [-1, 0, 7, framing.DEFAULT_MAX_REQUEST_BYTES + 1])
def test_frame_size_limits(size: int) -> None:
    with pytest.raises(framing.FrameError):
        framing.frame_size(struct.pack(">i", size))


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    api_key=st.sampled_from(sorted(apis.SUPPORTED_VERSIONS)),
    version=st.integers(0, 12),
    body=st.binary(max_size=200),
)
def test_fuzz_decoder_raises_only_protocol_errors(api_key: int, version: int, body: bytes) -> None:
    frame = struct.pack(">hhi", api_key, version, 1) + body
    try:
        framing.decode_request(frame)
    except (framing.FrameError, UnsupportedVersion):
        pass


@settings(max_examples=300)
@given(data=st.data())
def test_fuzz_mutated_valid_requests(data: st.DataObject) -> None:
    raw = bytearray(framing.encode_request(apis.PRODUCE, 9, 1, "c", produce_request())[4:])
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(8, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    try:
        framing.decode_request(bytes(raw))
    except (framing.FrameError, UnsupportedVersion):
        pass


@pytest.mark.parametrize("api_key", sorted(apis.SUPPORTED_VERSIONS))
def test_error_response_encodes_for_every_api_version(api_key: int) -> None:
    lo, hi = apis.SUPPORTED_VERSIONS[api_key]
    for v in range(lo, hi + 1):
        body = messages.error_response(api_key, v, ErrorCode.unknown_server_error)
        raw = framing.encode_response_bytes(api_key, v, 7, body)
        corr, decoded = framing.decode_response(api_key, v, raw[4:])
        assert corr == 7
        assert type(decoded) is type(body)


def test_file_records_placeholder_emits_slices() -> None:
    class Slice:
        def __init__(self, n: int) -> None:
            self.length = n

    m = messages.Builder(apis.FETCH, 12)
    a, b = Slice(100), Slice(50)
    body = m.FetchResponse(
        error_code=ErrorCode.none,
        session_id=0,
        responses=(
            m.FetchableTopicResponse(
                topic="t",
                partitions=(
                    m.PartitionData(
                        partition_index=0, error_code=ErrorCode.none, high_watermark=5, last_stable_offset=5,
                        log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
                        records=framing.FileRecords([a, b]),
                    ),
                ),
            ),
        ),
    )
    parts = framing.encode_response(apis.FETCH, 12, 3, body)
    assert a in parts and b in parts
    total = sum(len(p) if isinstance(p, bytes) else p.length for p in parts)
    assert struct.unpack(">i", parts[0][:4])[0] == total - 4
    # Replacing the slices with real bytes yields a response kio decodes.
    raw = b"".join(p if isinstance(p, bytes) else b"\x00" * p.length for p in parts)
    _, decoded = framing.decode_response(apis.FETCH, 12, raw[4:])
    assert len(decoded.responses[0].partitions[0].records) == 150


def test_file_records_carry_in_memory_chunks_between_slices() -> None:
    """A database engine reads batches into memory: bytes parts are copied into the response,
    file slices still pass through, and the records field is their concatenation (issue 15)."""

    class Slice:
        def __init__(self, n: int) -> None:
            self.length = n

    m = messages.Builder(apis.FETCH, 12)
    chunk1, s, chunk2 = b"A" * 30, Slice(20), b"B" * 10
    body = m.FetchResponse(
        error_code=ErrorCode.none,
        session_id=0,
        responses=(
            m.FetchableTopicResponse(
                topic="t",
                partitions=(
                    m.PartitionData(
                        partition_index=0, error_code=ErrorCode.none, high_watermark=5, last_stable_offset=5,
                        log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
                        records=framing.FileRecords([chunk1, s, chunk2]),
                    ),
                ),
            ),
        ),
    )
    parts = framing.encode_response(apis.FETCH, 12, 3, body)
    assert [p for p in parts if not isinstance(p, bytes)] == [s]
    assert len(parts) == 3  # bytes (header + chunk1), the slice, bytes (chunk2 + the rest)
    raw = b"".join(p if isinstance(p, bytes) else b"C" * p.length for p in parts)
    assert struct.unpack(">i", raw[:4])[0] == len(raw) - 4
    _, decoded = framing.decode_response(apis.FETCH, 12, raw[4:])
    assert decoded.responses[0].partitions[0].records == b"A" * 30 + b"C" * 20 + b"B" * 10
