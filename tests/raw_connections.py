"""Raw connections to a broker, for the connection limits (``max.connections.per.ip`` ...): how
many of ``n`` connections opened side by side (all kept open) the broker serves, and which it
refuses (accepts and closes at once)."""

from __future__ import annotations

import socket
import struct
import time


def _answered(sock: socket.socket) -> bool:
    """ApiVersions v0 on ``sock``: True when answered, False when the broker closed it."""
    client_id = b"limits"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    try:
        sock.sendall(struct.pack(">i", len(body)) + body)
        return len(sock.recv(4)) == 4
    except OSError:  # reset, broken pipe, timeout
        return False


def served(bootstrap: str, n: int, source: str | None = None) -> list[bool]:
    """Open ``n`` connections one after the other (from the address ``source``: 127.0.0.2 is
    another loopback address), keeping them all open; whether each was served."""
    host, port = bootstrap.rsplit(":", 1)
    socks: list[socket.socket] = []
    try:
        out = []
        for _ in range(n):
            s = socket.create_connection((host, int(port)), timeout=5,
                                         source_address=None if source is None else (source, 0))
            socks.append(s)
            out.append(_answered(s))
        return out
    finally:
        for s in socks:
            s.close()


def served_once(bootstrap: str, n: int, expected: list[bool], timeout_s: float = 10.0,
                source: str | None = None) -> list[bool]:
    """``served`` until it gives ``expected`` (connections just closed elsewhere, such as an admin
    client's, take the broker a moment to count out; a limit set through another broker comes
    with its next view), at most ``timeout_s``; the last answer."""
    deadline = time.monotonic() + timeout_s
    got = served(bootstrap, n, source)
    while got != expected and time.monotonic() < deadline:
        time.sleep(0.1)
        got = served(bootstrap, n, source)
    return got
