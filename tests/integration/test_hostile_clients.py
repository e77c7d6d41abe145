"""R22, issue 12: what a broken or malicious client can do to the connection layer — pipeline
without reading, park requests and leave, send slowly, send big, open too many connections —
never freezes the broker for anyone else, never leaks descriptors, never fills the log."""

from __future__ import annotations

import datetime
import socket
import struct
import threading
import time

import psutil
import pytest

from bystander import Bystander  # noqa: F401 - also imported from here by test_fuzz_broker.py
from kafka_clients import consume, create_topic, produce
from oncelog.protocol.messages import make
from oncelog.client import ProtocolClient
from oncelog.protocol import apis, framing
from oncelog.protocol import records as R

pytestmark = pytest.mark.integration
#: These tests measure how fast the broker answers: no spare broker starts next to them (conftest.py).
START_SPARE_BROKER_DURING_TESTS = False


def _metadata_v1_frame(corr: int) -> bytes:
    body = struct.pack(">hhih", apis.METADATA, 1, corr, -1) + struct.pack(">i", 0)  # no topics
    return struct.pack(">i", len(body)) + body


def _broker_proc(broker) -> psutil.Process:
    return psutil.Process(broker.pid)


def test_pipelining_megabytes_then_closing_does_not_freeze_the_broker(broker) -> None:
    """Five connections each push ~4 MB of 14-byte Metadata v1 requests and close without
    reading. Before: the broker froze for a minute (5 connections) and ignored SIGTERM."""
    blob = b"".join(_metadata_v1_frame(i) for i in range(4 * 1024 * 1024 // 18))
    with Bystander(broker.bootstrap) as bystander:
        time.sleep(0.2)
        for _ in range(5):
            s = socket.create_connection((broker.host, broker.port))
            s.setblocking(False)
            sent = 0
            deadline = time.monotonic() + 20
            while sent < len(blob) and time.monotonic() < deadline:
                try:
                    sent += s.send(blob[sent:sent + 65536])
                except BlockingIOError:
                    time.sleep(0.001)
            s.close()
        time.sleep(2)
    assert len(bystander.latencies) > 50
    assert bystander.worst < 1.0, f"bystander waited {bystander.worst:.2f} s"


@pytest.mark.parametrize("n", [50_000, pytest.param(200_000, marks=pytest.mark.long)], ids=["50k", "200k"])
def test_a_client_pipelining_many_requests_does_not_starve_a_bystander(broker, n: int) -> None:
    """50,000 requests (``make test``) are 50 times the 1,000 frames a connection may have
    queued, so the cap and the yielding are exercised; 200,000 (``make test-long``) is the size
    that, on a loaded machine, found the receive-timeout bug of 2026-11-24 (docs/RELIABILITY.md;
    its regression test is tests/unit/test_connection_receive_timeout.py)."""
    blob = b"".join(_metadata_v1_frame(i) for i in range(n))
    s = socket.create_connection((broker.host, broker.port))
    received = 0

    def reader() -> None:
        nonlocal received
        s.settimeout(120)
        while received < n:
            size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
            s.recv(size, socket.MSG_WAITALL)
            received += 1

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    with Bystander(broker.bootstrap) as bystander:
        s.sendall(blob)
        t.join(timeout=300)  # bounded; a loaded 2-core machine answers 200k requests in 30-150 s
    s.close()
    assert received == n
    assert bystander.worst < 1.0, f"bystander waited {bystander.worst:.2f} s"


def _fetch_frame(corr: int, topic: str, max_wait_ms: int, min_bytes: int) -> bytes:
    m = apis.message_module_classes(apis.FETCH, 12, False)
    req = make(m["FetchRequest"], max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
               max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
               topics=(make(m["FetchTopic"], topic=topic, partitions=(
                   make(m["FetchPartition"], partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
               forgotten_topics_data=(), rack_id="")
    return framing.encode_request(apis.FETCH, 12, corr, "parker", req)


def test_parked_fetches_do_not_outlive_their_connection(broker) -> None:
    """800 connections each park a Fetch asking to wait 24.8 days for 2 GB, and close. Before:
    every socket stayed in CLOSE_WAIT, descriptors ran out, new clients timed out."""
    create_topic("confluent", broker.bootstrap, "parked", 1)
    proc = _broker_proc(broker)
    fds_before = proc.num_fds()
    frame = _fetch_frame(1, "parked", 2**31 - 1, 2**31 - 1)
    for _ in range(800):
        s = socket.create_connection((broker.host, broker.port))
        s.sendall(frame)
        s.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        close_wait = [c for c in proc.net_connections(kind="tcp") if c.status == psutil.CONN_CLOSE_WAIT]
        if not close_wait and proc.num_fds() <= fds_before + 20:
            break
        time.sleep(0.2)
    assert not close_wait, f"{len(close_wait)} sockets in CLOSE_WAIT"
    assert proc.num_fds() <= fds_before + 20
    produce("confluent", broker.bootstrap, "parked", [(0, None, b"after")])
    assert consume("kafka-python", broker.bootstrap, "parked", [0], expected=1, timeout=30)[-1][3] == b"after"


def test_fetch_wait_is_bounded_by_the_broker(broker) -> None:
    create_topic("confluent", broker.bootstrap, "longpoll", 1)
    with ProtocolClient(broker.bootstrap, timeout=30) as c:
        t0 = time.monotonic()
        c.send_raw(_fetch_frame(77, "longpoll", 60_000, 1))
        corr, resp = framing.decode_response(apis.FETCH, 12, c.recv_frame())
        assert corr == 77 and resp.error_code == 0
        assert time.monotonic() - t0 < 3  # fetch.max.wait.ms (500 ms), not the 60 s asked for


def _produce_frame(topic: str, batch: bytes, corr: int = 1) -> bytes:
    m = apis.message_module_classes(apis.PRODUCE, 9, False)
    req = m["ProduceRequest"](transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
                              topic_data=(m["TopicProduceData"](name=topic, partition_data=(
                                  m["PartitionProduceData"](index=0, records=batch),)),))
    return framing.encode_request(apis.PRODUCE, 9, corr, "big", req)


def test_a_request_larger_than_the_read_buffer_is_answered(broker) -> None:
    """A 5 MB produce to a topic allowing 20 MB. Before: reading paused at 4 MiB queued, before
    the frame was complete, and the request was never answered."""
    create_topic("confluent", broker.bootstrap, "big", 1, {"max.message.bytes": str(20 * 1024 * 1024)})
    batch = R.build_batch([(None, b"x" * (1024 * 1024), ()) for _ in range(5)], timestamp_ms=int(time.time() * 1000))
    assert len(batch) > 5 * 1024 * 1024
    with ProtocolClient(broker.bootstrap, timeout=30) as c:
        c.send_raw(_produce_frame("big", batch))
        _, resp = framing.decode_response(apis.PRODUCE, 9, c.recv_frame())
        assert resp.responses[0].partition_responses[0].error_code == 0
    got = consume("confluent", broker.bootstrap, "big", [0], expected=5, timeout=60)
    assert [len(r[3]) for r in got] == [1024 * 1024] * 5


def _closed_within(s: socket.socket, seconds: float) -> bool:
    s.settimeout(seconds)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_slowloris_and_idle_connections_are_closed(broker_factory) -> None:
    b = broker_factory(overrides={"socket.request.receive.timeout.ms": "1500", "connections.max.idle.ms": "2000"})
    slow = socket.create_connection((b.host, b.port))
    slow.sendall(struct.pack(">i", 1000) + struct.pack(">hhi", apis.METADATA, 1, 1))  # 1000 bytes announced
    t0 = time.monotonic()
    closed = False
    for _ in range(40):  # one more byte every 0.25 s: never a whole request
        if _closed_within(slow, 0.25):
            closed = True
            break
        try:
            slow.sendall(b"\0")
        except OSError:
            closed = True
            break
    assert closed and time.monotonic() - t0 < 6
    idle = socket.create_connection((b.host, b.port))
    assert _closed_within(idle, 8)
    assert "socket.request.receive.timeout.ms" in b.log_tail(20_000)
    produce("confluent", b.bootstrap, "alive", [(0, None, b"ok")])


def test_connection_limits_refuse_at_once(broker_factory) -> None:
    b = broker_factory(overrides={"max.connections.per.ip": "5"})
    held = [socket.create_connection((b.host, b.port)) for _ in range(5)]
    for s in held:  # each is really served
        s.sendall(_metadata_v1_frame(1))
        s.settimeout(10)
        assert len(s.recv(4, socket.MSG_WAITALL)) == 4
    extra = socket.create_connection((b.host, b.port))
    t0 = time.monotonic()
    assert _closed_within(extra, 5)
    assert time.monotonic() - t0 < 2
    for s in held:
        s.close()
    time.sleep(0.5)
    with ProtocolClient(b.bootstrap) as c:  # a slot is free again
        assert c.versions
    assert "max.connections.per.ip=5" in b.log_tail(20_000)
