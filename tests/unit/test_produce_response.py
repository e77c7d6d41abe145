"""The hand-encoded Produce response equals kio's encoding, byte for byte, in every version
the broker advertises (produce_response's contract; kio is the reference for the wire format)."""

from __future__ import annotations

import datetime
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol.messages import Builder
from oncelog.protocol import apis, framing
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.produce_response import MAX_VERSION, MIN_VERSION, PartitionResult, encode_body

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)

results = st.builds(
    PartitionResult,
    index=st.integers(0, 2**31 - 1),
    error_code=st.sampled_from([0, 2, 10, 47, 48, 87]),
    base_offset=st.integers(-1, 2**63 - 1),
    log_start_offset=st.integers(-1, 2**63 - 1),
    error_message=st.none() | st.text(max_size=300),
    log_append_time=st.just(-1) | st.integers(0, 2**41),
    record_errors=st.lists(st.tuples(st.integers(0, 2**31 - 1), st.none() | st.text(max_size=50)), max_size=3).map(tuple),
)
topics = st.lists(
    st.tuples(st.text(min_size=1, max_size=249), st.lists(results, max_size=5)),
    max_size=4,
)
ids = st.lists(st.tuples(st.uuids(), st.lists(results, max_size=5)), max_size=4)
TOPIC_ID_FROM = 13  # Produce v13 names topics by id (KIP-516)


def body_for(version: int, draw_names: list, draw_ids: list) -> list:
    return draw_ids if version >= TOPIC_ID_FROM else draw_names


def kio_bytes(version: int, correlation_id: int, body: list[tuple[str, list[PartitionResult]]]) -> bytes:
    m = Builder(apis.PRODUCE, version)
    response = m.ProduceResponse(responses=tuple(
        m.TopicProduceResponse(**({"topic_id": name} if version >= TOPIC_ID_FROM else {"name": name}), partition_responses=tuple(
            m.PartitionProduceResponse(
                index=r.index, error_code=ErrorCode(r.error_code), base_offset=r.base_offset,
                log_append_time=None if r.log_append_time < 0 else
                datetime.datetime.fromtimestamp(r.log_append_time / 1000, datetime.timezone.utc),
                log_start_offset=r.log_start_offset, error_message=r.error_message,
                record_errors=tuple(m.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=e)
                                    for i, e in r.record_errors) if version >= 8 else (),
            ) for r in rs))
        for name, rs in body))
    return framing.encode_response_bytes(apis.PRODUCE, version, correlation_id, response)


def fast_bytes(version: int, correlation_id: int, body: list[tuple[str, list[PartitionResult]]]) -> bytes:
    encoded = framing.EncodedBody(encode_body(version, body))
    return b"".join(framing.encode_response(apis.PRODUCE, version, correlation_id, encoded))


@pytest.mark.parametrize("version", VERSIONS)
def test_typical_response_matches_kio(version: int) -> None:
    topic = uuid.UUID(int=0x1234) if version >= TOPIC_ID_FROM else "orders"
    body = [(topic, [PartitionResult(3, 0, 1_234_567, 0)])]
    assert fast_bytes(version, 42, body) == kio_bytes(version, 42, body)


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(VERSIONS), correlation_id=st.integers(-(2**31), 2**31 - 1), names=topics, by_id=ids)
def test_any_response_matches_kio(version: int, correlation_id: int, names: list, by_id: list) -> None:
    body = body_for(version, names, by_id)
    assert fast_bytes(version, correlation_id, body) == kio_bytes(version, correlation_id, body)


def test_response_decodes_with_kio() -> None:
    body = [("t", [PartitionResult(0, 0, 10, 0), PartitionResult(1, 47, -1, -1, "fenced")])]
    frame = fast_bytes(9, 7, body)
    cid, decoded = framing.decode_response(apis.PRODUCE, 9, frame[4:])
    assert cid == 7
    parts = decoded.responses[0].partition_responses
    assert [(p.index, p.error_code, p.base_offset, p.error_message) for p in parts] == [
        (0, 0, 10, None), (1, 47, -1, "fenced")]


@pytest.mark.parametrize("version", [MIN_VERSION - 1, MAX_VERSION + 1])
def test_unsupported_version_is_refused(version: int) -> None:
    with pytest.raises(ValueError):
        encode_body(version, [])


def test_topic_of_the_wrong_kind_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_body(13, [("by-name", [])])
    with pytest.raises(ValueError):
        encode_body(12, [(uuid.UUID(int=1), [])])
