"""TLS on one accepted connection with small buffers (issue 26): ``TlsProtocol`` runs an
``ssl.SSLObject`` over two ``ssl.MemoryBIO`` on the loop's plain socket transport and gives the
connection's protocol (connection.Connection) a transport of plaintext (``TlsTransport``).

Why not asyncio's own TLS (``connect_accepted_socket(ssl=...)``): its SSL protocol allocates a
256 KiB read buffer per connection for the connection's whole life (uvloop's does the same), so
2,000 idle TLS clients cost 550 MB, and glibc, after such blocks are freed, raises its mmap
threshold and serves the next ones from its heap, where they stay (1.2–1.4 GB kept after every
client left). Here a connection holds no buffer of its own: ciphertext that arrives goes into the
incoming BIO (OpenSSL's, sized to what is pending: empty while idle), plaintext is taken out in
pieces of at most ``READ_CHUNK`` bytes and handed to the connection at once, and only the frame
being read grows (Connection.buf, bounded by the listener's frame limit). An idle TLS connection
costs the SSL object and its BIOs: tens of KB.

Contract:

* The handshake (server side) starts with the first bytes and must finish within
  ``handshake_timeout_s`` (``ssl.handshake.timeout.ms``); otherwise, or when it fails (a
  plaintext client, an untrusted or missing client certificate), ``on_failed(reason)`` is called
  once, the alert (if any) is flushed and the socket closed: the connection's protocol never
  sees it. When it succeeds ``on_ready(self)`` is called, then the connection protocol's
  ``connection_made`` with the plaintext transport.
* Reading: ``pause_reading`` stops both the socket and the decryption (what was received stays
  in the BIO, at most one socket read); ``resume_reading`` continues (decrypting what waits from
  the loop, never inside the caller).
* Writing: ``write`` encrypts at once and passes the records to the socket transport, whose
  flow control (``pause_writing``/``resume_writing``) reaches the connection protocol unchanged.
* A close_notify or EOF from the peer is ``eof_received`` (the protocol closes, as Kafka does);
  ``close`` sends our close_notify after what is written and closes; ``abort`` drops all.

Single-threaded: event-loop callbacks only.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, Callable

__all__ = ["READ_CHUNK", "TlsProtocol", "TlsTransport", "let_go"]

#: Plaintext is taken out of the SSL object at most this many bytes at a time (one TLS record).
READ_CHUNK = 16 * 1024
#: Plaintext is encrypted this many bytes at a time, each piece passed on to the socket at once
#: (a 50 MB fetch response is never held twice, as plaintext and as ciphertext).
WRITE_CHUNK = 256 * 1024


#: what a closed connection's TLS protocol points to instead of the connection protocol
_DETACHED = asyncio.Protocol()


def let_go(transport: object) -> None:
    """Break the reference cycle a closed asyncio socket transport keeps (call it from its
    protocol's ``connection_lost``): the standard selector transport holds a bound method of its
    own (``_read_ready_cb``) after it closed, so it, its socket objects and its extra-info dict
    are freed only by a full run of the cyclic garbage collector, and meanwhile pin the heap
    pages around them (9,000 closed TLS connections: 32 MB that ``malloc_trim`` could not give
    back). Nothing else reads the attribute once the transport is closed; on other loops
    (uvloop) there is none and this does nothing."""
    if getattr(transport, "_read_ready_cb", None) is not None:
        try:
            transport._read_ready_cb = None  # type: ignore[attr-defined]
        except AttributeError:  # pragma: no cover - a transport with slots
            pass


class TlsTransport(asyncio.Transport):
    """The plaintext side of one TLS connection, as the connection protocol sees it."""

    def __init__(self, tls: "TlsProtocol") -> None:
        super().__init__()
        self._tls = tls

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._tls.extra(name, default)

    def is_closing(self) -> bool:
        return self._tls.closing

    def close(self) -> None:
        self._tls.close()

    def abort(self) -> None:
        self._tls.abort()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._tls.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self._tls.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self._tls.pause_reading()

    def resume_reading(self) -> None:
        self._tls.resume_reading()

    def is_reading(self) -> bool:
        return not self._tls.reading_paused

    def get_write_buffer_size(self) -> int:
        raw = self._tls.raw
        return raw.get_write_buffer_size() if raw is not None else 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if self._tls.raw is not None:
            self._tls.raw.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        raw = self._tls.raw
        return raw.get_write_buffer_limits() if raw is not None else (0, 0)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._tls.app = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._tls.app


class TlsProtocol(asyncio.Protocol):
    """See the module docstring. ``app``: the connection's protocol (plaintext)."""

    def __init__(self, context: ssl.SSLContext, app: asyncio.Protocol, handshake_timeout_s: float,
                 on_ready: Callable[["TlsProtocol"], None], on_failed: Callable[["TlsProtocol", str], None]) -> None:
        self.app = app
        self._context = context
        self._timeout_s = handshake_timeout_s
        self._on_ready = on_ready
        self._on_failed = on_failed
        self._loop = asyncio.get_running_loop()
        self._incoming: ssl.MemoryBIO | None = ssl.MemoryBIO()
        self._outgoing: ssl.MemoryBIO | None = ssl.MemoryBIO()
        self.ssl_object: ssl.SSLObject | None = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.raw: asyncio.Transport | None = None
        self.transport: TlsTransport | None = TlsTransport(self)
        self.handshake_done = False
        self._app_open = False  # the connection protocol was told connection_made, not yet connection_lost
        self.closing = False
        self.reading_paused = False
        self._lost = False
        self._failed_reported = False  # on_failed was called
        self._pending: list[bytes] = []  # plaintext the SSL object could not take yet (WantRead)
        self._timer: asyncio.TimerHandle | None = None
        self._drain_scheduled = False

    # -- from the socket transport ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = transport  # type: ignore[assignment]
        self._timer = self._loop.call_later(self._timeout_s, self._handshake_timed_out)

    def data_received(self, data: bytes) -> None:
        if self.ssl_object is None or self._incoming is None:
            return
        self._incoming.write(data)
        if not self.handshake_done:
            self._handshake()
        if self.handshake_done and not self.reading_paused:
            self._decrypt()

    def eof_received(self) -> bool:
        if self.handshake_done and self.ssl_object is not None and self._incoming is not None:
            self._incoming.write_eof()
            self._decrypt()  # what came before the EOF, then the EOF itself
            return False
        if not self.handshake_done:
            self._fail("the client closed the connection during the TLS handshake")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self.closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._app_open:
            self._lose_app(exc)
        elif not self.handshake_done and not self._failed_reported:
            self._failed_reported = True
            self._on_failed(self, f"the connection was lost during the TLS handshake ({exc or 'EOF'})")
        # The SSL object and both BIOs go now, not when the cyclic garbage collector finds this
        # protocol (it and its transport refer to each other): a memory BIO keeps the largest
        # buffer it ever held, and thousands of closed connections kept tens of MB that way.
        self.ssl_object = None
        self._incoming = self._outgoing = None
        self._pending.clear()
        # No cycle is left for the collector: the connection protocol, the socket transport
        # and the plaintext transport are let go (the latter still refers to this protocol).
        self.app = _DETACHED
        let_go(self.raw)
        self.raw = None
        self.transport = None

    def pause_writing(self) -> None:
        if self.handshake_done:
            self.app.pause_writing()

    def resume_writing(self) -> None:
        if self.handshake_done:
            self.app.resume_writing()

    # -- the handshake ---------------------------------------------------------------------------

    def _handshake(self) -> None:
        assert self.ssl_object is not None
        try:
            self.ssl_object.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            return
        except (ssl.SSLError, ValueError) as exc:
            self._flush()  # the alert, so the client learns why
            self._fail(f"TLS handshake failed: {getattr(exc, 'reason', None) or exc}")
            return
        self._flush()
        self.handshake_done = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._on_ready(self)
        self._app_open = True
        assert self.transport is not None
        self.app.connection_made(self.transport)

    def _lose_app(self, exc: Exception | None) -> None:
        if self._app_open:
            self._app_open = False
            self.app.connection_lost(exc)

    def _handshake_timed_out(self) -> None:
        self._timer = None
        if not self.handshake_done and not self.closing:
            self._fail(f"the TLS handshake did not finish within ssl.handshake.timeout.ms={int(self._timeout_s * 1000)}",
                       abort=True)

    def _fail(self, reason: str, *, abort: bool = False) -> None:
        if not self._failed_reported:
            self._failed_reported = True
            self._on_failed(self, reason)
        self.closing = True
        if self.raw is not None:
            if abort:
                self.raw.abort()
            else:
                self.raw.close()

    # -- reading ---------------------------------------------------------------------------------

    def _decrypt(self) -> None:
        sslobj = self.ssl_object
        while sslobj is not None and not self.reading_paused and not self.closing:
            try:
                chunk = sslobj.read(READ_CHUNK)
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):  # close_notify, or EOF without one
                chunk = b""
            except ssl.SSLError as exc:
                self._flush()
                self.abort()
                self._lose_app(ConnectionError(f"TLS error: {getattr(exc, 'reason', None) or exc}"))
                return
            if not chunk:
                self.app.eof_received()
                self.close()
                break
            self.app.data_received(chunk)
            sslobj = self.ssl_object
        if self._pending:
            self._retry_pending()
        self._flush()  # a TLS 1.3 key update or a session ticket may want an answer

    def pause_reading(self) -> None:
        if not self.reading_paused:
            self.reading_paused = True
            if self.raw is not None and not self._lost:
                self.raw.pause_reading()

    def resume_reading(self) -> None:
        if self.reading_paused:
            self.reading_paused = False
            if self.raw is not None and not self._lost:
                self.raw.resume_reading()
            if not self._drain_scheduled:  # what waits in the BIO, from the loop
                self._drain_scheduled = True
                self._loop.call_soon(self._drain_later)

    def _drain_later(self) -> None:
        self._drain_scheduled = False
        if self.handshake_done and not self.reading_paused:
            self._decrypt()

    # -- writing ---------------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closing or self.ssl_object is None or not data:
            return
        if self._pending:
            self._pending.append(bytes(data))
            return
        with memoryview(data) as view:
            for pos in range(0, len(view), WRITE_CHUNK):
                piece = view[pos:pos + WRITE_CHUNK]
                try:
                    self.ssl_object.write(piece)
                except ssl.SSLWantReadError:  # renegotiation in progress: the rest after the next read
                    self._pending.append(bytes(view[pos:]))
                    break
                except ssl.SSLError as exc:
                    self.abort()
                    self._lose_app(ConnectionError(f"TLS error: {exc}"))
                    return
                self._flush()

    def _retry_pending(self) -> None:
        pending, self._pending = self._pending, []
        for i, data in enumerate(pending):
            try:
                self.ssl_object.write(data)  # type: ignore[union-attr]
            except ssl.SSLWantReadError:
                self._pending = pending[i:]
                return
            except ssl.SSLError:
                self.abort()
                return

    def _flush(self) -> None:
        out = self._outgoing
        if out is not None and out.pending and self.raw is not None and not self._lost:
            self.raw.write(out.read())

    # -- closing ---------------------------------------------------------------------------------

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        if self.ssl_object is not None and self.handshake_done:
            try:
                self.ssl_object.unwrap()  # queues our close_notify
            except ssl.SSLError:
                pass
            self._flush()
        if self.raw is not None:
            self.raw.close()

    def abort(self) -> None:
        self.closing = True
        if self.raw is not None:
            self.raw.abort()

    def extra(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self.ssl_object
        if name == "sslcontext":
            return self._context
        if name == "peercert":
            return self.ssl_object.getpeercert() if self.ssl_object is not None else default
        if name == "cipher":
            return self.ssl_object.cipher() if self.ssl_object is not None else default
        if name == "compression":
            return self.ssl_object.compression() if self.ssl_object is not None else default
        return self.raw.get_extra_info(name, default) if self.raw is not None else default
