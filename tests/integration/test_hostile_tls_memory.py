"""What closed TLS connections leave behind (docs/RELIABILITY.md, "Fetch sizes, diskless damage
and the request memory"; R22).

Issue 26 took an idle TLS connection from ~280 KiB to ~22 KiB, but most of what thousands of
them used stayed with the broker after they closed: 2,000 idle connections kept ~32 MiB of
their 44, 9,000 kept 125 MiB. The pieces: each closed connection's two memory BIOs (a BIO keeps
the largest buffer it held) lived on until the cyclic garbage collector found the TLS protocol
and its transport; asyncio's socket transport, too, stays in a reference cycle after it closes;
and the interpreter's free lists of small objects pinned whole arenas. Now a connection lets go
of its SSL object, its BIOs and every cycle when it closes, and after many closes the server runs
a full collection (free lists emptied) and ``malloc_trim``, at most every 5 s.

A broker of its own (memory freed by other tests would hide the cost); ``make test`` uses 600
connections, the ``long`` version 2,000 idle and 9,000 stalled, as found.
"""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path

import pytest

from oncelog.process import BrokerProcess, free_port
from oncelog_tools.tls_certs import make_pki
from proc_memory import MIB, rss

pytestmark = pytest.mark.integration
#: These tests measure the broker's memory: no spare broker starts next to them (conftest.py).
START_SPARE_BROKER_DURING_TESTS = False

_CLIENT_HELLO_START = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"


def _settled(pid: int, base: int, target: int, timeout: float = 15.0) -> int:
    """The broker's RSS above ``base`` once it is at most ``target``, or after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        kept = rss(pid) - base
        if kept <= target or time.monotonic() > deadline:
            return kept
        time.sleep(0.5)


@pytest.mark.parametrize("idle, stalled", [pytest.param(600, 600, id="600"),
                                           pytest.param(2000, 9000, marks=pytest.mark.long, id="2000-9000")])
def test_closed_tls_connections_give_their_memory_back(tmp_path: Path, idle: int, stalled: int) -> None:
    pki = make_pki(tmp_path / "pki")
    plain, tls_port = free_port(), free_port()
    b = BrokerProcess(tmp_path / "broker", port=plain, overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls_port}",
        "ssl.keystore.location": str(pki.server), "ssl.handshake.timeout.ms": "600000"})
    b.start()
    try:
        pid = b.pid
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        for _ in range(20):  # the first handshakes' one-time allocations are not what is measured
            ctx.wrap_socket(socket.create_connection(("127.0.0.1", tls_port), timeout=20),
                            server_hostname="localhost").close()
        time.sleep(2.0)
        base = rss(pid)
        socks: list[socket.socket] = []
        try:
            for _ in range(idle):
                raw = socket.create_connection(("127.0.0.1", tls_port), timeout=20)
                socks.append(ctx.wrap_socket(raw, server_hostname="localhost"))
            time.sleep(1.0)
            grew = rss(pid) - base
        finally:
            for s in socks:
                s.close()
        kept = _settled(pid, base, grew // 4)
        assert kept <= grew * 0.4, f"{kept / MIB:.1f} of {grew / MIB:.1f} MiB kept after {idle} TLS connections closed"
        socks = []
        try:
            for _ in range(stalled):
                s = socket.create_connection(("127.0.0.1", tls_port), timeout=20)
                s.sendall(_CLIENT_HELLO_START)
                socks.append(s)
            time.sleep(1.0)
            stalled_grew = rss(pid) - base
        finally:
            for s in socks:
                s.close()
        bound = grew * 0.4 + stalled_grew * 0.05
        kept = _settled(pid, base, int(bound) // 2)
        assert kept <= bound, (
            f"{kept / MIB:.1f} MiB kept after {stalled} stalled handshakes closed too (peak +{stalled_grew / MIB:.1f})")
    finally:
        assert b.stop() == 0, b.log_tail()
