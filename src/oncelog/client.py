"""A small synchronous Kafka protocol client on kio: one connection, one request at a time.

For the CLI's admin commands and for protocol-level tests that need to craft requests a normal
client would never send (duplicate batches, stale epochs, garbage). Versions are negotiated with
ApiVersions: each request uses the highest version both sides and kio know.
"""

from __future__ import annotations

import itertools
import socket
import struct
from typing import Any

from oncelog.protocol import apis, framing


class ProtocolClient:
    def __init__(self, bootstrap: str, *, timeout: float = 10.0, client_id: str = "oncelog-cli",
                 source_host: str | None = None) -> None:
        """``source_host``: the local address to connect from (host-based ACLs, issue 18)."""
        host, port = parse_host_port(bootstrap)
        self.sock = socket.create_connection((host, port), timeout=timeout,
                                             source_address=(source_host, 0) if source_host else None)
        self.client_id = client_id
        self._corr = itertools.count(1)
        self.versions: dict[int, tuple[int, int]] = {}
        body = self.request(apis.API_VERSIONS, apis.message_class(apis.API_VERSIONS, 3, False)(
            client_software_name="oncelog", client_software_version="0"), version=3)
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}

    def version_for(self, api_key: int) -> int:
        lo, hi = apis.SUPPORTED_VERSIONS[api_key]
        blo, bhi = self.versions.get(api_key, (lo, hi))
        v = min(hi, bhi)
        if v < max(lo, blo):
            raise RuntimeError(f"no common version for {apis.api_name(api_key)}")
        return v

    def classes(self, api_key: int, version: int | None = None) -> dict[str, type]:
        return apis.message_module_classes(api_key, version if version is not None else self.version_for(api_key), False)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(size)

    def request(self, api_key: int, body: Any, *, version: int | None = None, expect_response: bool = True) -> Any:
        v = version if version is not None else self.version_for(api_key)
        corr = next(self._corr)
        self.sock.sendall(framing.encode_request(api_key, v, corr, self.client_id, body))
        if not expect_response:
            return None
        got, resp = framing.decode_response(api_key, v, self.recv_frame())
        if got != corr:
            raise RuntimeError(f"correlation id {got} received, {corr} expected")
        return resp

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "ProtocolClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_host_port(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6addr]:port``."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest.lstrip(":"))
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)
