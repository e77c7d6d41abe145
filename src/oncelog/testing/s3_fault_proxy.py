"""An HTTP-aware fault proxy on loopback between S3 clients (the brokers' object-store client) and
an S3 server (SeaweedFS): issue 29's "calls delayed or failed through a loopback proxy".

Theory of operation. ``S3FaultProxy(upstream_port).start()`` listens on a free 127.0.0.1 port
(``endpoint``: what the brokers get as ``diskless.storage.endpoint``) and runs its own asyncio loop
on a daemon thread, so the fault scheduler of ``oncelog verify copy`` and synchronous tests drive it
alike. Each client connection gets its own upstream connection (opened at its first forwarded
request, again if the server closed it between requests); the proxy reads one HTTP/1.1
request at a time (head, then the body framed by ``Content-Length`` or chunked), forwards its bytes
untouched (the requests are SigV4-signed), reads the whole answer the same way and passes it back,
keep-alive included. Because it sees whole requests and answers, a fault hits one S3 operation:

- ``delay``: the request waits ``delay_s`` before it is forwarded (shorter or longer than the
  client's request timeout; a client that gave up meanwhile still has its request forwarded late,
  as a network may deliver it);
- ``slowdown``: answered ``503 Slow Down`` with S3's XML ``SlowDown`` error, NOT forwarded;
- ``internal-error``: forwarded (the server acts: a PUT writes the object), and the server's answer
  replaced by ``500 Internal Server Error`` with S3's XML ``InternalError`` — the client is told
  its write failed when it happened, the hard case for a conditional create;
- ``reset-request``: the connection is reset once the request head is read, before its body is
  forwarded (nothing reaches the server);
- ``reset-response``: forwarded, and the connection reset after half of the server's answer has
  been passed back (the server acted, the client sees a broken answer).

``set_fault(kind, probability=…, delay_s=(lo, hi), ops=…)`` turns a fault on (in place of any
other) for the requests of the given operations (``PUT``, ``GET``, ``HEAD``, ``LIST``,
``DELETE``: the last covers S3's batch delete ``POST ?delete``), each hit with ``probability``;
``count=N``: only the next N requests it picks; ``clear()`` turns every fault off. ``window(kind,
seconds, …)`` adds a fault for ``seconds``, then removes it by itself (a timer on the proxy's
loop: a scheduler that dies cannot leave a fault on); windows may overlap, the newest one that
picks a request applies. ``counts`` says how many requests each kind hit (``hits``: by kind and operation),
``requests`` how many were seen in all.

Bounds: at most ``max_connections`` client connections (more are reset at once and counted in
``refused``); one message (request or answer) at most ``max_message_bytes``, and all messages held
at once at most ``max_buffered_bytes`` (over either: the connection is reset); a request head at
most 64 KiB; every read waits at most ``io_timeout_s`` and every upstream connect 5 s. ``close()``
cancels everything and joins the thread within 10 s. Nothing here can hang its caller.

The framing is written here rather than taken from an HTTP library: the proxy must pass the bytes
on unchanged (signatures) and cut an answer at an exact byte, and only ``Content-Length``, chunked
and read-to-close bodies occur between obstore and an S3 server. ``Expect: 100-continue`` is
answered by the proxy itself (the header is passed on; S3 servers ignore it once the body follows).
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import threading
from concurrent.futures import Future
from dataclasses import dataclass

__all__ = ["FAULTS", "OPS", "S3FaultProxy"]

log = logging.getLogger(__name__)

FAULTS = ("delay", "slowdown", "internal-error", "reset-request", "reset-response")
OPS = ("PUT", "GET", "HEAD", "LIST", "DELETE")
_HEAD_LIMIT = 64 << 10


def _s3_error(status: bytes, code: str, message: str) -> bytes:
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
            f"<RequestId>oncelog-fault-proxy</RequestId></Error>").encode()
    return (b"HTTP/1.1 " + status + b"\r\nContent-Type: application/xml\r\nContent-Length: %d\r\n\r\n"
            % len(body) + body)


_SLOWDOWN = _s3_error(b"503 Slow Down", "SlowDown", "Please reduce your request rate.")
_INTERNAL = _s3_error(b"500 Internal Server Error", "InternalError",
                      "We encountered an internal error. Please try again.")


class _Reset(Exception):
    """The connection must be reset (a bound was passed, or a peer misbehaved)."""


@dataclass(eq=False)  # identity: two windows alike are still two windows
class _Fault:
    kind: str
    probability: float
    delay_s: tuple[float, float]
    ops: frozenset[str]
    left: int | None  # requests it may still hit (None: no limit)


def _parse_head(head: bytes) -> tuple[bytes, dict[bytes, bytes]]:
    lines = head.split(b"\r\n")
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            raise _Reset(f"malformed header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers


def op_of(method: str, target: str) -> str:
    """The S3 operation of a request: ``LIST`` for a GET with ``list-type``, ``DELETE`` for a
    DELETE or the batch delete ``POST ?delete``, else the method."""
    query = target.partition("?")[2]
    params = {p.partition("=")[0] for p in query.split("&") if p}
    if method == "GET" and ("list-type" in params or "prefix" in params or "delimiter" in params):
        return "LIST"
    if method == "DELETE" or (method == "POST" and "delete" in params):
        return "DELETE"
    return method


class S3FaultProxy:
    """See the module docstring. Thread-safe: the public methods may be called from any thread."""

    def __init__(self, upstream_port: int, *, upstream_host: str = "127.0.0.1", seed: int | None = None,
                 max_connections: int = 256, max_message_bytes: int = 64 << 20,
                 max_buffered_bytes: int = 256 << 20, io_timeout_s: float = 120.0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.max_connections = max_connections
        self.max_message_bytes = max_message_bytes
        self.max_buffered_bytes = max_buffered_bytes
        self.io_timeout_s = io_timeout_s
        self.counts: dict[str, int] = {k: 0 for k in FAULTS}
        #: requests hit, by fault and operation
        self.hits: dict[tuple[str, str], int] = {}
        self.requests = 0
        self.refused = 0
        self.port = 0
        self._rng = random.Random(seed)
        self._faults: list[_Fault] = []  # the faults on, oldest first (touched on the loop only)
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._buffered = 0
        self._open: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="s3-fault-proxy")

    # -- control (any thread) -------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "S3FaultProxy":
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._on_connect, "127.0.0.1", 0, family=socket.AF_INET,
                                                       limit=_HEAD_LIMIT))
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def _call(self, coro, timeout: float = 10.0):  # type: ignore[no-untyped-def]
        fut: Future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result(timeout)

    def _make(self, kind: str, probability: float, delay_s: tuple[float, float], ops, count: int | None) -> _Fault:
        if kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}; one of {FAULTS}")
        unknown = set(ops) - set(OPS)
        if (unknown or not 0.0 <= probability <= 1.0 or not 0.0 <= delay_s[0] <= delay_s[1]
                or (count is not None and count <= 0)):
            raise ValueError(f"fault {kind}: ops {sorted(ops)} (known {OPS}), probability {probability}, "
                             f"delay {delay_s}, count {count}")
        return _Fault(kind, probability, delay_s, frozenset(ops), count)

    def set_fault(self, kind: str, *, probability: float = 1.0, delay_s: tuple[float, float] = (0.0, 0.0),
                  ops: tuple[str, ...] | frozenset[str] = OPS, count: int | None = None) -> None:
        """From now on, and in place of every fault on before (windows included), hit each request
        of ``ops`` with ``kind`` at ``probability``, until ``clear()`` or until ``count`` requests
        were hit. ``delay_s``: a delay's bounds (drawn uniformly per request)."""
        fault = self._make(kind, probability, delay_s, ops, count)

        async def apply() -> None:
            self._clear_now()
            self._faults.append(fault)

        self._call(apply())

    def window(self, kind: str, seconds: float, *, probability: float = 1.0,
               delay_s: tuple[float, float] = (0.0, 0.0), ops: tuple[str, ...] | frozenset[str] = OPS) -> None:
        """A fault on for ``seconds`` (then off by itself, on the proxy's loop), next to the others
        on: windows may overlap, and the newest one that picks a request applies to it."""
        fault = self._make(kind, probability, delay_s, ops, None)

        async def arm() -> None:
            self._faults.append(fault)
            self._timers[id(fault)] = self._loop.call_later(seconds, self._remove, fault)

        self._call(arm())

    def clear(self) -> None:
        """Every fault off."""
        async def off() -> None:
            self._clear_now()

        self._call(off())

    @property
    def active(self) -> str | None:
        """The kind of the newest fault on (None: none)."""
        faults = list(self._faults)
        return faults[-1].kind if faults else None

    def _remove(self, fault: _Fault) -> None:
        timer = self._timers.pop(id(fault), None)
        if timer is not None:
            timer.cancel()
        if fault in self._faults:
            self._faults.remove(fault)

    def _clear_now(self) -> None:
        for fault in list(self._faults):
            self._remove(fault)

    def close(self) -> None:
        async def stop() -> None:
            self._clear_now()
            if self._server is not None:
                self._server.close()
            for w in list(self._open):
                w.transport.abort()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        if not self._thread.is_alive():
            return
        try:
            self._call(stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> "S3FaultProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the proxy (its loop) -------------------------------------------------------------------

    def _draw(self, op: str) -> tuple[str | None, float]:
        for f in reversed(self._faults):
            if op in f.ops and self._rng.random() < f.probability:
                break
        else:
            return None, 0.0
        if f.left is not None:
            f.left -= 1
            if f.left <= 0:
                self._remove(f)
        self.counts[f.kind] += 1
        self.hits[(f.kind, op)] = self.hits.get((f.kind, op), 0) + 1
        return f.kind, self._rng.uniform(*f.delay_s)

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if len(self._tasks) >= self.max_connections:
            self.refused += 1
            writer.transport.abort()
            return
        assert task is not None
        self._tasks.add(task)
        self._open.add(writer)
        up: list = []  # [reader, writer] of the upstream connection, opened when a request is to go
        try:
            while await self._one_exchange(reader, writer, up):
                pass
        except (_Reset, OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ValueError) as exc:
            log.debug("s3 fault proxy: connection ends: %s", exc)
        except asyncio.CancelledError:
            pass
        finally:
            for w in (writer, up[1] if up else None):
                if w is not None:
                    self._open.discard(w)
                    w.transport.abort()
            self._tasks.discard(task)

    async def _one_exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            up: list) -> bool:
        """One request and its answer; False when the connection is to end (cleanly)."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.io_timeout_s)
        except asyncio.IncompleteReadError:
            return False  # the client closed between requests
        first, headers = _parse_head(head)
        parts = first.split(b" ")
        if len(parts) != 3:
            raise _Reset(f"malformed request line {first[:80]!r}")
        method, target = parts[0].decode("ascii", "replace"), parts[1].decode("ascii", "replace")
        self.requests += 1
        kind, delay = self._draw(op_of(method, target))
        if kind == "reset-request":
            raise _Reset("fault: reset mid-request")
        if headers.get(b"expect", b"").lower() == b"100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        async with self._held(len(head)) as hold:
            body = await self._read_body(reader, headers, hold, response=False)
            if kind == "slowdown":
                writer.write(_SLOWDOWN)
                await asyncio.wait_for(writer.drain(), self.io_timeout_s)
                return True
            if kind == "delay":
                await asyncio.sleep(delay)
            if not up or up[0].at_eof() or up[1].is_closing():  # first request, or the server closed it idle
                if up:
                    self._open.discard(up[1])
                    up[1].transport.abort()
                up[:] = await asyncio.wait_for(asyncio.open_connection(*self.upstream, limit=_HEAD_LIMIT), 5.0)
                self._open.add(up[1])
            up_r, up_w = up
            up_w.write(head + body)
            await asyncio.wait_for(up_w.drain(), self.io_timeout_s)
            ans_head = await asyncio.wait_for(up_r.readuntil(b"\r\n\r\n"), self.io_timeout_s)
            status_line, ans_headers = _parse_head(ans_head)
            status = int(status_line.split(b" ")[1]) if len(status_line.split(b" ")) > 1 else 0
            if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
                ans_body = b""
            else:
                ans_body = await self._read_body(up_r, ans_headers, hold, response=True)
            answer = ans_head + ans_body
            close = (ans_headers.get(b"connection", b"").lower() == b"close"
                     or (b"content-length" not in ans_headers and b"transfer-encoding" not in ans_headers
                         and ans_body != b""))
            if kind == "internal-error":
                answer, close = _INTERNAL, False
            elif kind == "reset-response":
                writer.write(answer[: max(1, len(answer) // 2)])
                await asyncio.wait_for(writer.drain(), self.io_timeout_s)
                raise _Reset("fault: reset mid-response")
            writer.write(answer)
            await asyncio.wait_for(writer.drain(), self.io_timeout_s)
            return not close

    def _held(self, n: int) -> "_Hold":
        return _Hold(self, n)

    async def _read_body(self, reader: asyncio.StreamReader, headers: dict[bytes, bytes], hold: "_Hold", *,
                         response: bool) -> bytes:
        """The body's bytes as framed on the wire (chunk lines included)."""
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            out = bytearray()
            while True:
                line = await asyncio.wait_for(reader.readuntil(b"\r\n"), self.io_timeout_s)
                size = int(line.split(b";")[0].strip() or b"x", 16)
                hold.add(len(line) + size + 2)
                out += line
                if size == 0:  # trailers until an empty line
                    while True:
                        t = await asyncio.wait_for(reader.readuntil(b"\r\n"), self.io_timeout_s)
                        hold.add(len(t))
                        out += t
                        if t == b"\r\n":
                            return bytes(out)
                out += await asyncio.wait_for(reader.readexactly(size + 2), self.io_timeout_s)
        if b"content-length" in headers:
            n = int(headers[b"content-length"])
            if n < 0:
                raise _Reset(f"negative Content-Length {n}")
            hold.add(n)
            return await asyncio.wait_for(reader.readexactly(n), self.io_timeout_s) if n else b""
        if not response:
            return b""  # a request without either has no body
        out = bytearray()  # an answer read to the connection's close
        while chunk := await asyncio.wait_for(reader.read(65536), self.io_timeout_s):
            hold.add(len(chunk))
            out += chunk
        return bytes(out)


class _Hold:
    """Bytes one exchange holds, against the message and the proxy-wide bounds."""

    def __init__(self, proxy: S3FaultProxy, n: int) -> None:
        self.proxy = proxy
        self.n = 0
        self.add(n)

    def add(self, n: int) -> None:
        p = self.proxy
        if self.n + n > p.max_message_bytes or p._buffered + n > p.max_buffered_bytes:
            raise _Reset(f"over the proxy's bounds: message {self.n + n} (max {p.max_message_bytes}), "
                         f"held {p._buffered + n} (max {p.max_buffered_bytes})")
        self.n += n
        p._buffered += n

    async def __aenter__(self) -> "_Hold":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.proxy._buffered -= self.n
        self.n = 0
