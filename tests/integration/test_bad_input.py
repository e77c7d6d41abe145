"""R22: bad input never crashes the broker; it answers with an error code or closes that one
connection, and goes on serving every other client."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from kafka_clients import consume, create_topic, produce
from oncelog.client import ProtocolClient
from oncelog.protocol import apis, framing

pytestmark = pytest.mark.integration


def _connect(broker) -> socket.socket:
    s = socket.create_connection((broker.host, broker.port), timeout=5)
    return s


def _closed_by_peer(s: socket.socket, timeout: float = 5.0) -> bool:
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def _still_serving(broker, topic: str) -> None:
    produce("confluent", broker.bootstrap, topic, [(0, b"k", b"still alive")])
    got = consume("confluent", broker.bootstrap, topic, [0], expected=1, timeout=30)
    assert got[-1][3] == b"still alive"


def test_garbage_bytes_close_only_that_connection(broker) -> None:
    create_topic("confluent", broker.bootstrap, "alive", 1)
    bystander = ProtocolClient(broker.bootstrap)
    for garbage in (b"\xff" * 64, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", struct.pack(">i", 12) + b"\x00" * 12):
        s = _connect(broker)
        s.sendall(garbage)
        assert _closed_by_peer(s)
        s.close()
    # an unrelated, already-open connection is unaffected
    assert bystander.request(apis.API_VERSIONS, apis.message_class(18, 3, False)(
        client_software_name="x", client_software_version="1"), version=3).error_code == 0
    bystander.close()
    _still_serving(broker, "alive")
    assert "closing connection" in broker.log_tail()


def test_oversize_frame_is_refused_without_reading_it(broker) -> None:
    s = _connect(broker)
    s.sendall(struct.pack(">i", 2_000_000_000))
    assert _closed_by_peer(s)
    assert "socket.request.max.bytes" in broker.log_tail()


def test_negative_frame_size(broker) -> None:
    s = _connect(broker)
    s.sendall(struct.pack(">i", -5))
    assert _closed_by_peer(s)


def test_unknown_api_key_and_version(broker) -> None:
    s = _connect(broker)
    body = struct.pack(">hhi", 999, 0, 1) + struct.pack(">h", -1)  # api key 999
    s.sendall(struct.pack(">i", len(body)) + body)
    assert _closed_by_peer(s)
    s = _connect(broker)
    body = struct.pack(">hhi", apis.PRODUCE, 42, 9) + b"\x00\x00"
    s.sendall(struct.pack(">i", len(body)) + body)
    assert _closed_by_peer(s)


def test_api_versions_newer_than_ours_gets_v0_answer_with_our_list(broker) -> None:
    """KIP-511: a client asking ApiVersions v99 gets UNSUPPORTED_VERSION and our ranges in v0."""
    s = _connect(broker)
    body = struct.pack(">hhi", apis.API_VERSIONS, 99, 77) + struct.pack(">h", -1) + b"\x00\x00\x00"
    s.sendall(struct.pack(">i", len(body)) + body)
    s.settimeout(5)
    size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
    corr, resp = framing.decode_response(apis.API_VERSIONS, 0, s.recv(size, socket.MSG_WAITALL))
    assert corr == 77 and resp.error_code == 35
    assert any(k.api_key == apis.PRODUCE for k in resp.api_keys)


def test_disconnect_mid_request(broker) -> None:
    create_topic("confluent", broker.bootstrap, "alive2", 1)
    for _ in range(20):
        s = _connect(broker)
        raw = framing.encode_request(apis.API_VERSIONS, 3, 1, "x", apis.message_class(18, 3, False)(
            client_software_name="x", client_software_version="1"))
        s.sendall(raw[: len(raw) // 2])
        s.close()
    time.sleep(0.2)
    _still_serving(broker, "alive2")


def test_corrupt_record_batch_gets_corrupt_message_and_log_is_untouched(broker) -> None:
    from oncelog.protocol import records

    create_topic("confluent", broker.bootstrap, "crc", 1)
    good = records.build_batch([(b"k", b"v", [])], timestamp_ms=1)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    with ProtocolClient(broker.bootstrap) as c:
        m = c.classes(apis.PRODUCE)

        def send(batch: bytes) -> int:
            req = m["ProduceRequest"](transactional_id=None, acks=-1, timeout=__import__("datetime").timedelta(seconds=5),
                                      topic_data=(m["TopicProduceData"](name="crc", partition_data=(
                                          m["PartitionProduceData"](index=0, records=batch),)),))
            return c.request(apis.PRODUCE, req).responses[0].partition_responses[0].error_code

        assert send(bytes(bad)) == 2  # CORRUPT_MESSAGE
        assert send(good[:30]) in (2, 87)  # torn header: CORRUPT_MESSAGE / INVALID_RECORD
        assert send(good) == 0
    got = consume("confluent", broker.bootstrap, "crc", [0], expected=1, timeout=30, settle=0.5)
    assert [(o, v) for _, o, _, v in got] == [(0, b"v")]
