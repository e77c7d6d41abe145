"""Fetch responses sent from the log files (server.py): byte-exact, in order, under concurrency,
on both event loops (asyncio: sendfile(2); uvloop: pread + write), and robust to a client that
goes away in the middle of a large response (R1, R22)."""

from __future__ import annotations

import datetime
import socket
import struct
import threading

import pytest

from kafka_clients import create_topic, produce
from oncelog.client import ProtocolClient
from oncelog.process import BrokerProcess
from oncelog.protocol import apis, framing

pytestmark = pytest.mark.integration

RECORDS = 6000
VALUE = 1000  # ~6 MB of log: fetches of several MB, whole batches of ~1 MB


def _fetch_request(c: ProtocolClient, topic: str, offset: int, max_bytes: int) -> object:
    m = c.classes(apis.FETCH, 11)
    return m["FetchRequest"](
        replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=0, max_bytes=max_bytes,
        isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
        topics=(m["FetchTopic"](topic=topic, partitions=(m["FetchPartition"](
            partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
            partition_max_bytes=max_bytes),)),),
    )


def _log_bytes(b: BrokerProcess, topic: str) -> bytes:
    segments = sorted((b.data_dir / f"{topic}-0").glob("*.log"))
    assert len(segments) == 1
    return segments[0].read_bytes()


@pytest.fixture(params=["asyncio", "uvloop"])
def loaded(request, broker_factory):  # type: ignore[no-untyped-def]
    b: BrokerProcess = broker_factory(env={"ONCELOG_EVENT_LOOP": request.param})
    topic = "big"
    create_topic("confluent", b.bootstrap, topic, 1)
    produce("confluent", b.bootstrap, topic, [(0, None, f"{i:08d}".encode().ljust(VALUE, b"#")) for i in range(RECORDS)],
            extra={"linger.ms": 50})
    sent_by = "sendfile(2)" if request.param == "asyncio" else "pread + write"
    assert f"fetch data sent by {sent_by}" in b.log_tail(100_000)
    return b, topic


def test_fetch_bytes_equal_the_log_under_concurrency(loaded) -> None:  # type: ignore[no-untyped-def]
    """Six clients, each with 3 pipelined fetches of the whole log in flight, get exactly the
    log file's bytes every time."""
    b, topic = loaded
    log = _log_bytes(b, topic)
    errors: list[str] = []

    def client(k: int) -> None:
        try:
            with ProtocolClient(b.bootstrap, timeout=60) as c:
                for _round in range(3):
                    corr = []
                    for _ in range(3):  # pipelined: 3 requests before reading any answer
                        cid = 1000 * k + len(corr) + 10 * _round
                        c.send_raw(framing.encode_request(apis.FETCH, 11, cid, "t", _fetch_request(c, topic, 0, 64 << 20)))
                        corr.append(cid)
                    for cid in corr:
                        got, res = framing.decode_response(apis.FETCH, 11, c.recv_frame())
                        if got != cid:
                            errors.append(f"client {k}: correlation id {got}, expected {cid}")
                        data = res.responses[0].partitions[0].records
                        if data != log:
                            errors.append(f"client {k}: {len(data)} bytes differ from the {len(log)}-byte log")
        except Exception as exc:  # reported below
            errors.append(f"client {k}: {exc!r}")

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:5]


def test_client_gone_in_mid_response(loaded) -> None:  # type: ignore[no-untyped-def]
    """A client asks for megabytes and closes its socket (with a reset) without reading them;
    the broker logs one line and keeps serving everyone else."""
    b, topic = loaded
    log = _log_bytes(b, topic)
    for _ in range(5):
        with ProtocolClient(b.bootstrap) as c:
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            c.send_raw(framing.encode_request(apis.FETCH, 11, 7, "t", _fetch_request(c, topic, 0, 64 << 20)))
            c.sock.recv(100)  # the response has started
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
    with ProtocolClient(b.bootstrap, timeout=60) as c:
        res = c.request(apis.FETCH, _fetch_request(c, topic, 0, 64 << 20), version=11)
        assert res.responses[0].partitions[0].records == log
    tail = b.log_tail(100_000)
    assert "Traceback" not in tail and "bug:" not in tail
