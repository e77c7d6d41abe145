"""A small synchronous Kafka protocol client on kio: one connection, one request at a time.

For the CLI's admin commands and for protocol-level tests that need to craft requests a normal
client would never send (duplicate batches, stale epochs, garbage). Versions are negotiated with
ApiVersions: each request uses the highest version both sides and kio know.

``security`` (issue 18): Kafka client properties, as a ``--command-config`` file has them:
``security.protocol`` (SSL / SASL_SSL wrap the socket in TLS: ``ssl.truststore.location`` or
``ssl.ca.location``, optional ``ssl.keystore.location`` (PEM key + chain) or
``ssl.certificate.location`` + ``ssl.key.location``), ``sasl.mechanism`` (PLAIN,
SCRAM-SHA-256/512) with ``sasl.username``/``sasl.password`` or Kafka's ``sasl.jaas.config``
(``… username="u" password="p";``). The login runs right after ApiVersions.
"""

from __future__ import annotations

import itertools
import re
import socket
import ssl
import struct
from typing import Any

from oncelog.hostport import parse_host_port  # noqa: F401  (re-exported)
from oncelog.protocol import apis, framing


#: the highest versions a client speaking transactions version 1 sends (as Kafka's Java client
#: caps them while the broker's ``transaction.version`` feature is below 2): Produce v12, EndTxn
#: v5 and TxnOffsetCommit v5 change what a transactional producer must do (KIP-890 part 2)
TV1_MAX_VERSIONS = {apis.PRODUCE: 11, apis.END_TXN: 4, apis.TXN_OFFSET_COMMIT: 4}


class ProtocolClient:
    """``transaction_version``: 1 (default) never picks the transactions-version-2 versions of
    Produce, EndTxn and TxnOffsetCommit on its own (``TV1_MAX_VERSIONS``); 2 does, when the
    broker advertises them. An explicit ``version=`` is always sent as asked. ``security``: the
    client properties of a TLS / SASL listener (``security.protocol``, ``ssl.*``, ``sasl.*``).
    ``source_host``: the local address to connect from (host-based ACLs, issue 18).
    ``bootstrap`` is ``host:port`` or a comma-separated list of them, as Kafka's tools take: the
    first one that accepts the connection is used."""

    def __init__(self, bootstrap: str, *, timeout: float = 10.0, client_id: str = "oncelog-cli",
                 transaction_version: int = 1, security: dict[str, str] | None = None,
                 source_host: str | None = None) -> None:
        self.transaction_version = transaction_version
        sec = dict(security or {})
        protocol = sec.get("security.protocol", "PLAINTEXT").upper()
        host, self.sock = _connect(bootstrap, timeout, source_host)
        if protocol in ("SSL", "SASL_SSL"):
            self.sock = _tls_context(sec).wrap_socket(self.sock, server_hostname=host)
        self.client_id = client_id
        self._corr = itertools.count(1)
        self.versions: dict[int, tuple[int, int]] = {}
        body = self.request(apis.API_VERSIONS, apis.message_class(apis.API_VERSIONS, 3, False)(
            client_software_name="oncelog", client_software_version="0"), version=3)
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            self._login(sec)

    def _login(self, sec: dict[str, str]) -> None:
        """SaslHandshake v1 + SaslAuthenticate. Raises PermissionError when refused."""
        import scramp

        mech = sec.get("sasl.mechanism", "PLAIN").upper()
        user, password = sec.get("sasl.username"), sec.get("sasl.password")
        jaas = sec.get("sasl.jaas.config", "")
        if user is None:
            m = re.search(r'username\s*=\s*"([^"]*)"', jaas)
            user = m.group(1) if m else None
        if password is None:
            m = re.search(r'password\s*=\s*"([^"]*)"', jaas)
            password = m.group(1) if m else None
        if user is None or password is None:
            raise PermissionError("SASL needs sasl.username and sasl.password (or sasl.jaas.config)")
        cls = lambda k, v: apis.message_class(k, v, False)  # noqa: E731
        hs = self.request(apis.SASL_HANDSHAKE, cls(apis.SASL_HANDSHAKE, 1)(mechanism=mech), version=1)
        if hs.error_code:
            raise PermissionError(f"SASL mechanism {mech} refused (broker has {', '.join(hs.mechanisms)})")

        def step(token: bytes) -> bytes:
            r = self.request(apis.SASL_AUTHENTICATE, cls(apis.SASL_AUTHENTICATE, 2)(auth_bytes=token), version=2)
            if r.error_code:
                raise PermissionError(r.error_message or "SASL authentication failed")
            return bytes(r.auth_bytes)

        if mech == "PLAIN":
            step(b"\0" + user.encode() + b"\0" + password.encode())
            return
        client = scramp.ScramClient([mech], user, password)
        client.set_server_first(step(client.get_client_first().encode()).decode())
        client.set_server_final(step(client.get_client_final().encode()).decode())

    def version_for(self, api_key: int) -> int:
        lo, hi = apis.SUPPORTED_VERSIONS[api_key]
        if self.transaction_version < 2:
            hi = min(hi, TV1_MAX_VERSIONS.get(api_key, hi))
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


def _connect(bootstrap: str, timeout: float, source_host: str | None) -> tuple[str, socket.socket]:
    """(host, connected socket) of the first address of ``bootstrap`` that accepts; raises the
    last OSError when none does, ValueError for a malformed address."""
    addresses = [parse_host_port(a.strip()) for a in bootstrap.split(",") if a.strip()]
    if not addresses:
        raise ValueError(f"expected HOST:PORT[,HOST:PORT...], got {bootstrap!r}")
    last: OSError | None = None
    for host, port in addresses:
        try:
            return host, socket.create_connection((host, port), timeout=timeout,
                                                  source_address=(source_host, 0) if source_host else None)
        except OSError as exc:
            last = exc
    assert last is not None
    raise last


def _tls_context(sec: dict[str, str]) -> ssl.SSLContext:
    ca = sec.get("ssl.truststore.location") or sec.get("ssl.ca.location")
    ctx = ssl.create_default_context(cafile=ca)
    if sec.get("ssl.endpoint.identification.algorithm", "https") == "":
        ctx.check_hostname = False
    if sec.get("ssl.keystore.location"):
        ctx.load_cert_chain(sec["ssl.keystore.location"], password=sec.get("ssl.key.password"))
    elif sec.get("ssl.certificate.location"):
        ctx.load_cert_chain(sec["ssl.certificate.location"], sec.get("ssl.key.location"), password=sec.get("ssl.key.password"))
    return ctx


def read_command_config(path: str | None) -> dict[str, str] | None:
    """A ``--command-config`` file (Java properties) as a dict; None without a path."""
    if path is None:
        return None
    from oncelog.properties import parse_properties
    from pathlib import Path

    return parse_properties(Path(path).read_text())
