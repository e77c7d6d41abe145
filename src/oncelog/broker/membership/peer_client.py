"""Requests from this broker to the other brokers of a cluster (issue 15): WriteTxnMarkers from a
transaction coordinator to a partition's leader, AddPartitionsToTxn (verify only) from a
partition's leader to a transaction coordinator.

Theory of operation. ``PeerClients`` keeps at most one connection per peer node and API (a lane),
opened on first use to the address the cluster view gives for that node (``address_of``), and
reopened when the address changes (the node registered again elsewhere). One lane per API
because a broker answers a connection's requests in order (broker/network/server.py): on a
shared connection a verification (AddPartitionsToTxn, answered from memory) would wait behind
every WriteTxnMarkers sent before it, each answered only after the peer's COMMIT (issue 28). A connection pipelines: each request gets
a correlation id and a future, one reader task reads response frames and completes the future
its correlation id names. Every request has a deadline; a request that misses it fails with
RequestTimedOut and the connection is closed (a late answer could otherwise be read as the
answer to a later request, and a peer that stopped answering is treated as gone); a closed or
broken connection fails every request waiting on it with a retriable error. Callers retry.

Security (issue 18): ``PeerSecurity`` says how to reach the peers' inter-broker listener
(``inter.broker.listener.name``): TLS with this broker's own certificate as the client
certificate, and/or a SASL login (PLAIN or SCRAM, ``scramp``'s client) right after connecting,
before the reader task starts, so the peer sees this broker as its principal (``User:<name>``).
A refused login fails the request with a retriable error (logged), like an unreachable peer.

Versions: peers run this same code, so a request is sent at the highest version both this
broker's table and kio know (``version`` argument); no ApiVersions round trip.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
import struct
from dataclasses import dataclass
from typing import Any, Callable

from oncelog.protocol import apis, framing
from oncelog.protocol.errors import CoordinatorNotAvailable, NotLeaderOrFollower, RequestTimedOut

__all__ = ["PeerClients", "PeerConnection", "PeerSecurity"]

log = logging.getLogger(__name__)

#: the largest response frame accepted from a peer (bytes)
MAX_RESPONSE_BYTES = 64 << 20
CONNECT_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class PeerSecurity:
    """How this broker logs in to its peers: ``ssl_context`` (None: plaintext), ``mechanism``
    (None: no SASL) with ``username``/``password``."""

    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""


class PeerConnection:
    """One pipelined connection to one peer. Event loop only."""

    def __init__(self, node_id: int, host: str, port: int, client_id: str,
                 security: PeerSecurity = PeerSecurity()) -> None:
        self.node_id = node_id
        self.security = security
        self.address = (host, port)
        self.client_id = client_id
        self._corr = itertools.count(1)
        self._waiting: dict[int, tuple[int, int, asyncio.Future[Any]]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()
        self.closed = False

    async def request(self, api_key: int, version: int, body: Any, timeout_s: float) -> Any:
        """Send one request and return the decoded response body. Raises RequestTimedOut (the
        connection is closed) or NotLeaderOrFollower-like retriable errors when the peer cannot
        be reached."""
        try:
            await asyncio.wait_for(self._connect(), CONNECT_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise NotLeaderOrFollower(f"connecting to node {self.node_id} timed out") from None
        writer = self._writer
        if writer is None:  # closed between connecting and now (the peer hung up at once)
            raise NotLeaderOrFollower(f"connection to node {self.node_id} closed before the request")
        corr = next(self._corr) & 0x7FFFFFFF
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[corr] = (api_key, version, fut)
        try:
            try:
                writer.write(framing.encode_request(api_key, version, corr, self.client_id, body))
            except (OSError, RuntimeError) as exc:  # the transport is closing
                self.close(f"write failed: {exc!r}")
                raise NotLeaderOrFollower(f"cannot send to node {self.node_id}: {exc}") from None
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except asyncio.TimeoutError:
            self.close(f"no answer from node {self.node_id} in {timeout_s:.1f} s")
            raise RequestTimedOut(f"node {self.node_id} did not answer in {timeout_s:.1f} s") from None
        finally:
            self._waiting.pop(corr, None)
            if fut.done() and not fut.cancelled():
                fut.exception()  # retrieved: a failure after the deadline is reported above, not by asyncio

    async def _connect(self) -> None:
        async with self._connecting:
            if self._writer is not None:
                return
            if self.closed:
                raise CoordinatorNotAvailable(f"connection to node {self.node_id} is closed")
            sec = self.security
            try:
                if sec.ssl_context is not None:
                    reader, writer = await asyncio.open_connection(*self.address, ssl=sec.ssl_context,
                                                                   server_hostname=self.address[0])
                else:
                    reader, writer = await asyncio.open_connection(*self.address)
            except OSError as exc:  # ssl.SSLError too
                raise NotLeaderOrFollower(f"cannot connect to node {self.node_id} at "
                                          f"{self.address[0]}:{self.address[1]}: {exc}") from None
            if sec.mechanism is not None:
                try:
                    await self._login(reader, writer)
                except Exception as exc:  # refused, a broken peer, scramp's verdict on its signature
                    writer.close()
                    log.warning("inter-broker login to node %d as %s with %s failed: %s", self.node_id,
                                sec.username, sec.mechanism, exc)
                    raise NotLeaderOrFollower(f"cannot log in to node {self.node_id}: {exc}") from None
            self._writer = writer
            self._reader_task = asyncio.get_running_loop().create_task(self._read(reader))

    async def _login(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """SaslHandshake v1 and SaslAuthenticate round trips, one at a time, before the reader
        task exists. Raises PermissionError when the peer refuses."""
        import scramp

        sec = self.security
        corr = itertools.count(1)

        async def call(api_key: int, version: int, body: Any) -> Any:
            writer.write(framing.encode_request(api_key, version, next(corr), self.client_id, body))
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            if not 4 <= size <= MAX_RESPONSE_BYTES:
                raise ValueError(f"response frame of {size} bytes")
            return framing.decode_response(api_key, version, await reader.readexactly(size))[1]

        cls = lambda k, v: apis.message_class(k, v, False)  # noqa: E731
        hs = await call(apis.SASL_HANDSHAKE, 1, cls(apis.SASL_HANDSHAKE, 1)(mechanism=sec.mechanism))
        if hs.error_code:
            raise PermissionError(f"mechanism {sec.mechanism} refused (peer has {', '.join(hs.mechanisms)})")

        async def step(token: bytes) -> bytes:
            r = await call(apis.SASL_AUTHENTICATE, 2, cls(apis.SASL_AUTHENTICATE, 2)(auth_bytes=token))
            if r.error_code:
                raise PermissionError(r.error_message or "authentication failed")
            return bytes(r.auth_bytes)

        if sec.mechanism == "PLAIN":
            await step(b"\0" + sec.username.encode() + b"\0" + sec.password.encode())
            return
        client = scramp.ScramClient([sec.mechanism], sec.username, sec.password)
        client.set_server_first((await step(client.get_client_first().encode())).decode())
        client.set_server_final((await step(client.get_client_final().encode())).decode())

    async def _read(self, reader: asyncio.StreamReader) -> None:
        why = "closed by the peer"
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                if not 4 <= size <= MAX_RESPONSE_BYTES:
                    why = f"response frame of {size} bytes"
                    return
                frame = await reader.readexactly(size)
                (corr,) = struct.unpack_from(">i", frame)
                entry = self._waiting.pop(corr, None)
                if entry is None:
                    continue  # its requester gave up (timed out): the connection closes then anyway
                api_key, version, fut = entry
                if fut.done():
                    continue
                try:
                    fut.set_result(framing.decode_response(api_key, version, frame)[1])
                except Exception as exc:  # a response we cannot decode: fail this request, keep going
                    fut.set_exception(CoordinatorNotAvailable(f"undecodable response from node {self.node_id}: {exc}"))
        except (asyncio.IncompleteReadError, OSError) as exc:
            why = f"connection lost: {exc!r}"
        finally:
            self.close(why)

    def close(self, why: str = "closed") -> None:
        """Close the connection and fail every waiting request (retriable). A later request
        opens a new connection unless ``closed`` was set by ``PeerClients.close``."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            log.debug("connection to node %d closed: %s", self.node_id, why)
        task, self._reader_task = self._reader_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        waiting, self._waiting = self._waiting, {}
        for _, _, fut in waiting.values():
            if not fut.done():
                fut.set_exception(NotLeaderOrFollower(f"connection to node {self.node_id} lost ({why})"))


class PeerClients:
    """Connections to the other brokers, by node id. ``address_of(node_id)`` gives a live node's
    advertised (host, port), or None when the node is not live."""

    def __init__(self, node_id: int, address_of: Callable[[int], tuple[str, int] | None],
                 security: PeerSecurity = PeerSecurity()) -> None:
        self.node_id = node_id
        self.address_of = address_of
        self.security = security
        self._peers: dict[tuple[int, int], PeerConnection] = {}  # (node, api key) -> its lane

    async def request(self, node: int, api_key: int, version: int, body: Any, *, timeout_s: float = 5.0) -> Any:
        address = self.address_of(node)
        if address is None:
            raise NotLeaderOrFollower(f"node {node} is not a live broker")
        peer = self._peers.get((node, api_key))
        if peer is None or peer.address != address:
            if peer is not None:
                peer.close("the node's address changed")
            peer = self._peers[(node, api_key)] = PeerConnection(
                node, *address, client_id=f"oncelog-broker-{self.node_id}", security=self.security)
        return await peer.request(api_key, version, body, timeout_s)

    def close(self) -> None:
        for peer in self._peers.values():
            peer.closed = True
            peer.close("broker stopping")
        self._peers.clear()
