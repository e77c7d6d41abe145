"""The asyncio shell: accept connections, serve each one's requests in order, send responses.

Accepting. The broker runs its own accept loop on the listening socket, so it can refuse a
connection at once instead of letting it time out in the backlog: past ``max.connections`` or
``max.connections.per.ip`` (Kafka's properties, also set dynamically: connection_quotas.py, with
``max.connections.per.ip.overrides`` and ``max.connection.creation.rate``), and when the process is out of file
descriptors (one descriptor is held in reserve for exactly that: released, the waiting
connection accepted and closed, the reserve taken again). Every such refusal is logged; the
broker's log handler cuts repeats (``oncelog.logs``), so an attack is never a log storm.

Serving. One task per connection (``connection.Connection`` cuts frames and does flow control).
Requests on a connection are handled one at a time, in arrival order, so responses go out in
request order; this is what Kafka does too (it mutes a connection while one of its requests is
in flight). One exception, in cluster mode (``pipeline_produce``): a Produce waits for a
PostgreSQL COMMIT, so once it has submitted its batches the connection's next Produce is
started too (up to ``MAX_PIPELINED``, the request memory permitting; broker/pipelining.py) — at
once when it is there already, else as soon as it arrives if that is before the oldest answer is
ready (issue 29) — and their
answers still go out in request order; a WriteTxnMarkers from another broker's transaction
coordinator is pipelined the same way (issue 28); any other request waits until every earlier
one is answered. A connection that has requests queued gives the event loop back at least every
``YIELD_AFTER`` seconds, so a client pipelining thousands of requests cannot starve the others;
a closed connection's queued requests are dropped at once (connection.py). The request bytes
all connections hold together (read, queued, or being handled: a pipelined Produce until its
COMMIT) are bounded by ``queued.max.request.bytes`` (request_memory.py, one for all listeners):
while they are used up, connections stop reading and wait in line. A sweep closes
connections idle past ``connections.max.idle.ms`` and connections that take longer than
``socket.request.receive.timeout.ms`` to send one whole request (slowloris).

Coalescing. A producer keeps up to five Produce requests in flight on one connection. When the
next request is already here and is a Produce, the response just built is held back and sent
together with the next one(s): one send(2) and one wake-up of the client for several answers,
instead of one each. Holding back is bounded (``MAX_HELD_BYTES``) and never waits for the
network: the moment no further Produce is queued, everything held goes out. Requests that may
wait on purpose (a Fetch long poll, a JoinGroup) never have answers held behind them.

Listeners and authentication (issue 18). One ``Server`` per listener (broker/network/listeners.py).
On a TLS listener TLS is run by the broker's own small protocol (auth/tls_transport.py: no
256 KiB buffer per connection, as asyncio's and uvloop's have); the handshake is driven by the
client's bytes and bounded by ``ssl.handshake.timeout.ms``, so a client that stalls mid-handshake
holds up nobody and is dropped; a client that speaks plaintext to it fails the handshake and is
closed. A connection still in its handshake counts against ``max.connections`` and
``max.connections.per.ip`` like any other. The client's principal is its certificate's subject
(auth/tls.py). On a SASL listener every frame goes through the connection's SASL gate
(auth/gate.py) until the connection is authenticated; then ``Client.principal`` is the
authenticated user, on every later request of that connection. Until then a frame may not be
longer than ``sasl.server.max.receive.size`` (checked on its size prefix, before it is read: the
connection is closed, as Kafka's InvalidReceiveException), so an unauthenticated client can make
the broker hold at most that much.

Bad input never takes the broker down (R22): an oversize or malformed frame, an unknown API or
version, or a peer that disconnects mid-request ends that one connection with one log line.

Sending responses. A response is a list of parts (``framing.encode_response``): ``bytes`` and
file slices of the log (``storage.parts.FileSlice``: fd, position, length). Slices are sent one of
two ways, chosen once per event loop:

* zero-copy: on a loop that implements ``loop.sendfile`` (the standard selector loop), a slice
  of at least ``SENDFILE_MIN_BYTES`` goes from the page cache to the socket with ``sendfile(2)``
  after the bytes before it have been flushed, so order is kept. Smaller slices are copied: for
  them the fixed cost of a sendfile (flush, pause/resume of the transport, one more syscall)
  outweighs a copy. A failed sendfile on one connection (asyncio reports a peer reset on the
  first call as "sendfile not available") falls back to a copy for that slice only.
* copy: elsewhere (uvloop does not implement ``loop.sendfile``) every slice is read with
  ``os.pread`` and written through the transport.

On a TLS listener (SSL, SASL_SSL: issue 18) the bytes are encrypted in the process, so slices
are always copied: sendfile stays the plaintext listeners' path. Whatever is copied (slices, and
the in-memory batches of the PostgreSQL and diskless engines) goes out in pieces of at most
``STREAM_CHUNK`` (256 KiB), each written once the socket has taken the ones before (the
transport's buffer below its high-water mark): a 55 MB fetch answer (``fetch.max.bytes``) to a
TLS client costs a piece at a time, never the answer as plaintext and again as ciphertext.

Either way a slice is read while its descriptor is valid: the storage layer keeps a retired
segment's file open for file.delete.delay.ms after it is deleted, and log files only grow under
a live slice (whole batches below the log end), so a short read means the file was cut under
us; the frame size is already promised, so the connection is closed.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import dataclasses
import errno
import logging
import os
import socket
import ssl
from collections import Counter
from typing import Any, Awaitable, Callable

from oncelog.broker.network import heap
from oncelog.broker import pipelining
from oncelog.broker.auth import tls
from oncelog.broker.auth.gate import gate
from oncelog.broker.auth.sasl import SaslSession
from oncelog.broker.auth.tls_transport import TlsProtocol
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.configuration.dynamic_kafka_configs import ConnectionLimits
from oncelog.broker.network.connection_quotas import ConnectionQuotas
from oncelog.broker.network.connection import PIPELINED_KEYS, Connection
from oncelog.broker.network.request_memory import RequestMemory
from oncelog.broker.context import Client, CloseConnection
from oncelog.protocol import framing
from oncelog.storage.parts import FileSlice, ReadPart

#: The one thing the server knows of the broker: a request frame in, response parts out (None:
#: no response is due). It raises CloseConnection when the connection must be closed.
Handle = Callable[[bytes, Client], Awaitable["list[Any] | None"]]

log = logging.getLogger(__name__)

#: File slices at least this long are sent with sendfile(2) when the loop supports it.
SENDFILE_MIN_BYTES = 16 * 1024
#: What is copied to a socket (TLS listeners, loops without sendfile) goes in pieces of at most this
#: many bytes, each once the socket has taken the ones before (``_send``).
STREAM_CHUNK = 256 * 1024
#: Hold back Produce responses (coalescing) only up to this many bytes.
MAX_HELD_BYTES = 256 * 1024
#: A connection with queued requests yields to the event loop at least this often (seconds).
YIELD_AFTER = 0.002
#: After this many connections have closed, the sweep gives freed memory back
#: (heap.collect_and_trim, at most every heap.COLLECT_EVERY_S): what thousands of TLS
#: connections held is returned once they are gone.
TRIM_AFTER_CLOSES = 200
_HANDSHAKE_KEY = (17).to_bytes(2, "big")  # SaslHandshake
#: At most this many Produce (or WriteTxnMarkers) requests of one connection are handled at once
#: (pipelining). The first ``PIPELINED_FREE`` cost their frame's bytes of the request memory; each
#: one more also takes ``PIPELINED_CHARGE`` bytes for what handling it holds (its task, decoded
#: request, the appends' futures), and is started only while the request memory has room: so the
#: requests a broker handles at once stay bounded by ``queued.max.request.bytes`` however small
#: they are. A client that sends a Produce per partition every few milliseconds (librdkafka
#: without idempotence: a million requests in flight) has them all read and put in the object
#: that is open, instead of eight per commit (its queue then grew without end on a diskless topic).
MAX_PIPELINED = 1024
PIPELINED_FREE = 8
PIPELINED_CHARGE = 8 * 1024
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class _Fd:
    """The file object ``loop.sendfile`` wants: it only calls ``fileno()`` (and lseeks that
    descriptor, which is harmless: segments are written with O_APPEND and read with pread)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


def loop_supports_sendfile(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop.sendfile`` is implemented natively (the standard library's loops: yes;
    uvloop: no, its ``sendfile`` is the abstract one that raises NotImplementedError)."""
    return isinstance(loop, asyncio.BaseEventLoop) and hasattr(os, "sendfile")


class Server:
    def __init__(self, handle: Handle, host: str, port: int, config: BrokerConfig, *, sendfile: bool | None = None,
                 name: str = "PLAINTEXT", ssl_context: ssl.SSLContext | None = None,
                 sasl: Callable[[], SaslSession] | None = None, memory: RequestMemory | None = None,
                 pipeline_produce: bool = False) -> None:
        """``config``: the connection limits and timeouts. ``sendfile``: None (default) uses
        sendfile(2) when the loop supports it; False never (for measurements). ``name``: the
        listener's name (in log lines). ``ssl_context``: TLS on this listener. ``sasl``: a new
        SASL session per connection (a SASL listener); None: no authentication. ``memory``:
        the request memory (``queued.max.request.bytes``) shared by all the broker's listeners;
        None: one of this server's own. ``pipeline_produce``: a connection's Produce requests
        are pipelined (broker/pipelining.py: where appends complete at a store's COMMIT; the
        embedded broker answers a Produce without waiting)."""
        self.handle = handle
        self.memory = memory if memory is not None else RequestMemory(config.queued_max_request_bytes)
        self.name = name
        self.ssl_context = ssl_context
        self.new_sasl_session = sasl
        self.handshake_timeout_s = config.ssl_handshake_timeout_ms / 1000
        self.failed_auth_delay_s = config.connection_failed_authentication_delay_ms / 1000
        self.reauth_s = config.connections_max_reauth_ms / 1000 if sasl is not None else 0.0
        self.host = host
        self.port = port
        cfg = config
        self.max_request_bytes = cfg.socket_request_max_bytes
        self.sasl_max_bytes = min(cfg.sasl_server_max_receive_size, cfg.socket_request_max_bytes)
        #: max.connections, max.connections.per.ip (and the dynamic ones: ``quotas.adopt``)
        self.quotas = ConnectionQuotas(ConnectionLimits(cfg.max_connections, cfg.max_connections_per_ip), name)
        self.idle_s = cfg.connections_max_idle_ms / 1000
        self.receive_timeout_s = cfg.socket_request_receive_timeout_ms / 1000
        self._sock: socket.socket | None = None
        self._reserve_fd: int | None = None
        self._conns: set[Connection] = set()
        self._handshaking: dict[TlsProtocol, str] = {}  # TLS connections not through the handshake -> ip
        self._closed_since_trim = 0  # connections closed since the sweep last gave memory back
        self._closed_since_collect = 0  # ... since it last ran heap.collect_and_trim
        self._collected_at = float("-inf")  # when it did
        self._per_ip: Counter[str] = Counter()
        self._tasks: set[asyncio.Task[None]] = set()
        self._background: list[asyncio.Task[None]] = []
        self._sendfile_wanted = sendfile
        self.sendfile = False  # decided in start(), once the loop is known
        self.pipeline_produce = pipeline_produce

    @property
    def connection_count(self) -> int:
        return len(self._conns) + len(self._handshaking)

    async def start(self, *, accept: bool = True) -> tuple[str, int]:
        """Listen; returns the bound (host, port) (port 0 picks a free one). ``accept=False``:
        bind and listen only; connections wait in the backlog, unanswered, until
        ``start_accepting()`` (a cluster broker registers its bound port before it knows the
        cluster's topics, and must not answer anything meanwhile)."""
        loop = asyncio.get_running_loop()
        self.sendfile = self._sendfile_wanted is not False and loop_supports_sendfile(loop) and self.ssl_context is None
        log.info("listener %s: event loop %s.%s; fetch data sent by %s", self.name, type(loop).__module__,
                 type(loop).__name__, "sendfile(2)" if self.sendfile else "pread + write")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(1024)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self.host, self.port = sock.getsockname()[:2]
        if accept:
            self.start_accepting()
        return self.host, self.port

    def start_accepting(self) -> None:
        """Accept and serve the connections of the socket ``start`` bound (once)."""
        if self._sock is None or self._background:
            return
        loop = asyncio.get_running_loop()
        self._take_reserve()
        self._background.append(loop.create_task(self._accept_loop(self._sock)))
        self._background.append(loop.create_task(self._sweep_loop()))

    async def close(self) -> None:
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._sock is not None:
            self._sock.close()
        for proto in list(self._handshaking):
            proto.abort()
        for conn in list(self._conns):
            conn.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._reserve_fd is not None:
            os.close(self._reserve_fd)
            self._reserve_fd = None

    # -- accepting -------------------------------------------------------------------------------

    def _take_reserve(self) -> None:
        if self._reserve_fd is None:
            try:
                self._reserve_fd = os.open(os.devnull, os.O_RDONLY)
            except OSError:
                pass

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        max_bytes = self.max_request_bytes
        while True:
            try:
                client, addr = await loop.sock_accept(sock)
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    log.warning("accept failed: %s", exc)
                    await asyncio.sleep(0.1)
                    continue
                # Linux's accept(2) fails with EMFILE before it looks at the backlog: wait until
                # a connection is really waiting (never spin), then try again, since descriptors
                # may have been freed meanwhile; refuse it only if they have not.
                await _readable(sock)
                try:
                    client, addr = sock.accept()
                except BlockingIOError:
                    continue
                except OSError as again:
                    if again.errno in _OUT_OF_RESOURCES:
                        await self._refuse_without_descriptors(sock, again)
                    else:
                        log.warning("accept failed: %s", again)
                        await asyncio.sleep(0.1)
                    continue
                client.setblocking(False)
            ip = str(addr[0])
            await self.quotas.throttle()  # max.connection.creation.rate: the next connections wait meanwhile
            reason = self.quotas.refusal(ip, self.connection_count, self._per_ip[ip])
            if reason is not None:
                log.warning("refusing a connection from %s: %s", ip, reason)
                client.close()
                continue
            await self._set_up(client, ip, max_bytes)

    async def _set_up(self, client: socket.socket, ip: str, max_bytes: int) -> None:
        """Make the connection's transport. On a TLS listener the handshake then runs as the
        client's bytes come (TlsProtocol, bounded by ssl.handshake.timeout.ms): nobody waits for it."""
        loop = asyncio.get_running_loop()
        proto: asyncio.Protocol = Connection(self._start_serving, max_bytes, self.memory)
        if self.ssl_context is not None:
            proto = TlsProtocol(self.ssl_context, proto, self.handshake_timeout_s, self._tls_ready, self._tls_failed)
            self._handshaking[proto] = ip
            self._per_ip[ip] += 1
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.connect_accepted_socket(lambda: proto, client)
        except OSError as exc:
            log.warning("could not set up a connection from %s: %s", ip, exc)
            if isinstance(proto, TlsProtocol) and self._handshaking.pop(proto, None) is not None:
                self._release_ip(ip)
            client.close()

    def _tls_ready(self, proto: TlsProtocol) -> None:
        ip = self._handshaking.pop(proto, None)
        if ip is not None:
            self._release_ip(ip)  # counted again as a connection (_start_serving)

    def _tls_failed(self, proto: TlsProtocol, reason: str) -> None:
        ip = self._handshaking.pop(proto, None)
        if ip is not None:
            self._release_ip(ip)
        self._closed_since_trim += 1
        self._closed_since_collect += 1
        log.warning("listener %s: TLS handshake with %s failed: %s", self.name, ip or "?", reason)

    def _release_ip(self, ip: str) -> None:
        self._per_ip[ip] -= 1
        if self._per_ip[ip] <= 0:
            del self._per_ip[ip]

    async def _refuse_without_descriptors(self, sock: socket.socket, exc: OSError) -> None:
        """Out of descriptors with a connection waiting: accept it with the reserve descriptor
        and close it (the client learns at once instead of timing out in the backlog), then
        take the reserve again."""
        if self._reserve_fd is None:
            log.error("cannot accept connections: %s (no descriptor in reserve)", exc)
            await asyncio.sleep(0.1)
            self._take_reserve()
            return
        os.close(self._reserve_fd)
        self._reserve_fd = None
        try:
            client, addr = sock.accept()
            client.close()
            log.error("out of file descriptors (%s): refused a connection from %s", exc, addr[0])
        except OSError:
            pass
        finally:
            self._take_reserve()

    # -- timeouts --------------------------------------------------------------------------------

    async def _sweep_loop(self) -> None:
        interval = max(0.05, min(1.0, self.idle_s / 4, self.receive_timeout_s / 4))
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            may_collect = now - self._collected_at >= heap.COLLECT_EVERY_S
            if self._closed_since_collect >= TRIM_AFTER_CLOSES and may_collect:
                self._closed_since_trim = self._closed_since_collect = 0
                self._collected_at = now
                heap.collect_and_trim()  # what thousands of closed (TLS) connections held (heap.py)
            elif self._closed_since_trim >= TRIM_AFTER_CLOSES or self.memory.trim_due():
                self._closed_since_trim = 0
                heap.trim()
            for conn in list(self._conns):
                if (conn.partial_since is not None and not conn.reading_paused
                        and now - conn.partial_since > self.receive_timeout_s):
                    log.warning(
                        "closing connection from %s: a request of %d bytes so far took longer than "
                        "socket.request.receive.timeout.ms=%d", conn.peer, len(conn.buf), int(self.receive_timeout_s * 1000))
                    conn.close()
                elif not conn.busy and not conn.frames and now - conn.last_active > self.idle_s:
                    log.debug("closing connection from %s: idle past connections.max.idle.ms", conn.peer)
                    conn.close()

    # -- serving ---------------------------------------------------------------------------------

    def _start_serving(self, conn: Connection) -> None:
        if self.new_sasl_session is not None:  # unauthenticated: Kafka's bound until it is
            conn.max_bytes, conn.limit = self.sasl_max_bytes, "sasl.server.max.receive.size"
        self._conns.add(conn)
        self._per_ip[conn.peer_host] += 1
        task = asyncio.get_running_loop().create_task(self._serve(conn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, conn: Connection) -> None:
        peer = conn.peer
        loop = asyncio.get_running_loop()
        client = Client(peer, conn.closed)
        if self.ssl_context is not None and conn.transport is not None:
            client = dataclasses.replace(client, principal=tls.principal_of(conn.transport.get_extra_info("ssl_object")))
            if client.principal != tls.ANONYMOUS:
                log.info("listener %s: %s presented a client certificate: %s", self.name, peer, client.principal)
        session = self.new_sasl_session() if self.new_sasl_session is not None else None
        expires: float | None = None  # KIP-368: when the authenticated session ends
        reauthenticating = False
        held: list[Any] = []  # response parts not sent yet (coalescing)
        held_bytes = 0
        last_yield = loop.time()
        pending: collections.deque[asyncio.Task[Any]] = collections.deque()  # pipelined Produce, oldest first
        try:
            while True:
                if (pending and self._room(pending) and not pending[0].done()
                        and conn.may_get_frame()):
                    # issue 29: the next request is not here yet. Wait for it or for the oldest
                    # answer, whichever comes first: a client that sends its next Produce (or a
                    # coordinator its next WriteTxnMarkers) while
                    # the earlier ones wait for their commit (a Java producer's five in flight,
                    # each sent when its batch is ready) has it started at once, not one commit
                    # later. What is held goes out first.
                    if held:
                        await self._send(conn, held)
                        held, held_bytes = [], 0
                    await conn.frame_or(pending[0])
                    continue
                if pending and not (self._room(pending) and conn.next_is_pipelined()):
                    # answer the oldest pipelined Produce before reading further (in order);
                    # what is held goes out first if that answer is not ready yet
                    if held and not pending[0].done():
                        await self._send(conn, held)
                        held, held_bytes = [], 0
                    parts = await pending[0]
                    pending.popleft()
                    conn.busy = bool(pending)
                    if conn.is_closed:
                        return
                    if parts is not None:
                        held.extend(parts)
                        held_bytes += sum(len(p) if isinstance(p, bytes) else p.length for p in parts)
                    if held and (held_bytes >= MAX_HELD_BYTES or not (conn.next_is_pipelined() or (
                            pending and pending[0].done()))):
                        await self._send(conn, held)
                        held, held_bytes = [], 0
                    continue
                frame = await conn.next_frame()
                if frame is None:
                    if conn.lost_mid_frame:
                        log.info("connection from %s closed in the middle of a request", peer)
                    return
                conn.busy = True
                owned = len(frame)  # its request memory, given back once it is handled
                try:
                    if session is not None and self.reauth_s and session.authenticated and frame[:2] == _HANDSHAKE_KEY:
                        # KIP-368: re-authentication, with the mechanism of the first one
                        mechanism = session.mechanism
                        session = self.new_sasl_session()  # type: ignore[misc]
                        session.enabled = (mechanism,)
                        reauthenticating = True
                    if session is not None and not session.authenticated:
                        parts = await self._authenticate(conn, session, frame, client)
                        if session.authenticated:
                            if reauthenticating and session.principal != client.principal:
                                raise CloseConnection(f"listener {self.name}: re-authentication as {session.principal} "
                                                      f"on a connection of {client.principal}")
                            client = dataclasses.replace(client, principal=session.principal)
                            conn.max_bytes, conn.limit = self.max_request_bytes, "socket.request.max.bytes"
                            expires = loop.time() + self.reauth_s if self.reauth_s else None
                            log.info("listener %s: %s %s as %s with %s", self.name, peer,
                                     "re-authenticated" if reauthenticating else "authenticated",
                                     session.principal, session.mechanism)
                    else:
                        if expires is not None and loop.time() > expires:
                            raise CloseConnection(f"listener {self.name}: the SASL session of {client.principal} "
                                                  "expired (connections.max.reauth.ms) without re-authentication")
                        if self.pipeline_produce and frame[:2] in PIPELINED_KEYS:
                            if len(pending) >= PIPELINED_FREE:  # its bookkeeping, given back with its bytes
                                self.memory.add(PIPELINED_CHARGE)
                                owned += PIPELINED_CHARGE
                            task = await self._start_pipelined(frame, client)
                            task.add_done_callback(lambda _t, n=owned: conn.release(n))  # after its COMMIT
                            owned = 0
                            if pending or not task.done():
                                pending.append(task)  # answered in order above; the next Produce may start
                                continue
                            parts = task.result()
                        else:
                            assert not pending  # only a pipelined request is read while others are pending
                            parts = await self.handle(frame, client)
                finally:
                    conn.busy = bool(pending)
                    if owned:
                        conn.release(owned)
                if conn.is_closed:
                    return  # nobody to answer
                if parts is not None:
                    held.extend(parts)
                    held_bytes += sum(len(p) if isinstance(p, bytes) else p.length for p in parts)
                if held and (held_bytes >= MAX_HELD_BYTES or not conn.next_is_pipelined()):
                    await self._send(conn, held)
                    held, held_bytes = [], 0
                if conn.frames and loop.time() - last_yield > YIELD_AFTER:
                    await asyncio.sleep(0)  # let other connections in
                    last_yield = loop.time()
        except (framing.FrameError, CloseConnection) as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except (ConnectionError, TimeoutError) as exc:
            log.info("connection from %s lost: %s", peer, exc)
        except OSError as exc:  # a read of the log failed while sending (EIO, ...)
            log.error("closing connection from %s: %s", peer, exc)
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug: one rate-limited line (oncelog.logs), never asyncio's unlimited report
            log.exception("bug: closing connection from %s", peer)
        finally:
            for task in pending:  # their appends run on (shielded); nobody waits for the answers
                task.cancel()
                task.add_done_callback(_drop_outcome)
            conn.close()
            self._conns.discard(conn)
            self._release_ip(conn.peer_host)
            self._closed_since_trim += 1
            self._closed_since_collect += 1

    def _room(self, pending: "collections.deque[asyncio.Task[Any]]") -> bool:
        """Whether a connection with ``pending`` pipelined requests may start one more (see
        ``MAX_PIPELINED``)."""
        return len(pending) < PIPELINED_FREE or (len(pending) < MAX_PIPELINED and self.memory.has_room())

    async def _start_pipelined(self, frame: bytes, client: Client) -> "asyncio.Task[Any]":
        """Start handling a Produce frame as a task that may release the connection early
        (broker/pipelining.py); returns it once it is done or has released the connection."""
        loop = asyncio.get_running_loop()
        released: asyncio.Future[None] = loop.create_future()

        def release() -> None:
            if not released.done():
                released.set_result(None)

        ctx = contextvars.copy_context()
        ctx.run(pipelining.release_with, release)
        task = loop.create_task(self.handle(frame, client), context=ctx)
        try:
            await asyncio.wait((task, released), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            task.add_done_callback(_drop_outcome)
            raise
        return task

    async def _authenticate(self, conn: Connection, session: SaslSession, frame: bytes, client: Client) -> list[Any] | None:
        """One frame through the SASL gate (auth/gate.py): ApiVersions is dispatched, the SASL
        requests answered; a failed authentication is answered after
        ``connection.failed.authentication.delay.ms`` (throttling password guessing), and the
        connection closed (CloseConnection) once the answer is out."""
        try:
            outcome = gate(session, frame)
        except Exception as exc:  # a bug: one short line (no traceback: it may hold what the client sent)
            log.error("bug: the SASL gate of listener %s raised %s on a request from %s", self.name,
                      type(exc).__name__, client.peer)
            raise CloseConnection(f"listener {self.name}: internal error in the SASL gate") from None
        if outcome.dispatch:
            return await self.handle(frame, client)
        if outcome.failed and self.failed_auth_delay_s > 0:
            await asyncio.sleep(self.failed_auth_delay_s)
        if outcome.close is not None:
            if outcome.parts and not conn.is_closed:
                await self._send(conn, outcome.parts)
            raise CloseConnection(f"listener {self.name}: {outcome.close}")
        return outcome.parts

    async def _send(self, conn: Connection, parts: list[ReadPart]) -> None:
        """Write responses' parts in order, then wait for the transport to drain. What is copied
        goes out in pieces of at most ``STREAM_CHUNK`` bytes, each once the socket has taken the
        ones before (its write buffer below the high-water mark): a large answer on a TLS
        listener is never held whole, neither as plaintext nor as ciphertext."""
        transport = conn.transport
        assert transport is not None
        pending: list[bytes] = []  # consecutive small copied parts, written together
        pending_bytes = 0
        for part in parts:
            if isinstance(part, (bytes, bytearray, memoryview)):
                if len(part) > STREAM_CHUNK:
                    if pending:
                        await _write(conn, b"".join(pending))
                        pending, pending_bytes = [], 0
                    with memoryview(part) as view:
                        for pos in range(0, len(view), STREAM_CHUNK):
                            await _write(conn, view[pos:pos + STREAM_CHUNK])
                    continue
                pending.append(part)
                pending_bytes += len(part)
            elif self.sendfile and part.length >= SENDFILE_MIN_BYTES:
                if pending:
                    transport.write(b"".join(pending))
                    pending, pending_bytes = [], 0
                await self._sendfile(transport, part)
            elif part.length > STREAM_CHUNK:  # a large FileSlice to copy: read piece by piece
                if pending:
                    await _write(conn, b"".join(pending))
                    pending, pending_bytes = [], 0
                for pos in range(0, part.length, STREAM_CHUNK):
                    await _write(conn, _pread(FileSlice(part.fd, part.position + pos,
                                                        min(STREAM_CHUNK, part.length - pos))))
                continue
            else:  # a small FileSlice to copy
                pending.append(_pread(part))
                pending_bytes += part.length
            if pending_bytes >= STREAM_CHUNK:
                await _write(conn, b"".join(pending))
                pending, pending_bytes = [], 0
        if pending:
            transport.write(pending[0] if len(pending) == 1 else b"".join(pending))
        await conn.drain()

    async def _sendfile(self, transport: asyncio.Transport, part: FileSlice) -> None:
        """Send one slice with sendfile(2); a copy if the kernel refuses it for this socket."""
        loop = asyncio.get_running_loop()
        if transport.is_closing():
            raise ConnectionError("connection closed before a fetch response was sent")
        try:
            sent = await loop.sendfile(transport, _Fd(part.fd), part.position, part.length, fallback=False)
        except asyncio.SendfileNotAvailableError as exc:  # nothing was sent (often: the peer left)
            if transport.is_closing():
                raise ConnectionError(f"connection closed during a fetch response ({exc})") from None
            log.debug("sendfile refused (%s); copying this slice", exc)
            transport.write(_pread(part))
            return
        if sent != part.length:
            raise ConnectionError(f"log file shrank under a fetch ({sent} of {part.length} bytes sent)")


async def _readable(sock: socket.socket) -> None:
    """Wait until ``sock`` is readable (for a listening socket: a connection is waiting)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()
    loop.add_reader(fd, lambda: fut.done() or fut.set_result(None))
    try:
        await fut
    finally:
        loop.remove_reader(fd)


async def _write(conn: Connection, data: bytes | memoryview) -> None:
    """Write ``data``, then wait until the socket has taken enough of what is queued."""
    assert conn.transport is not None
    conn.transport.write(data)
    await conn.drain()


def _pread(part: FileSlice) -> bytes:
    data = os.pread(part.fd, part.length, part.position)
    if len(data) != part.length:
        raise ConnectionError(f"log file shrank under a fetch ({len(data)} of {part.length} bytes)")
    return data


def _drop_outcome(task: "asyncio.Future[Any]") -> None:
    """Retrieve the outcome of a task nobody waits for any more (no 'never retrieved' noise)."""
    if not task.cancelled():
        task.exception()
