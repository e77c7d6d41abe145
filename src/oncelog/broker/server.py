"""The asyncio shell: sockets in, frames to the dispatcher, response parts out.

One task per connection. Requests on a connection are handled one at a time, in arrival order,
so responses go out in request order; this is what Kafka does too (it mutes a connection while
one of its requests is in flight). ``_Connection`` (an asyncio Protocol) cuts the byte stream
into frames as it arrives and stops reading from a client that is more than
``MAX_QUEUED_BYTES`` ahead.

Coalescing. A producer keeps up to five Produce requests in flight on one connection. When the
next request is already here and is a Produce, the response just built is held back and sent
together with the next one(s): one send(2) and one wake-up of the client for several answers,
instead of one each. Holding back is bounded (``MAX_HELD_BYTES``) and never waits for the
network: the moment no further Produce is queued, everything held goes out. Requests that may
wait on purpose (a Fetch long poll, a JoinGroup) never have answers held behind them.

Bad input never takes the broker down: an oversize or malformed frame, an unknown API or version,
or a peer that disconnects mid-request ends that one connection with one log line.

Sending responses. A response is a list of parts (``framing.encode_response``): ``bytes`` and
file slices of the log (``storage.log.FileSlice``: fd, position, length). Slices are sent one of
two ways, chosen once per event loop:

* zero-copy: on a loop that implements ``loop.sendfile`` (the standard selector loop), a slice
  of at least ``SENDFILE_MIN_BYTES`` goes from the page cache to the socket with ``sendfile(2)``
  after the bytes before it have been flushed, so order is kept. Smaller slices are copied: for
  them the fixed cost of a sendfile (flush, pause/resume of the transport, one more syscall)
  outweighs a copy.
* copy: elsewhere (uvloop does not implement ``loop.sendfile``) every slice is read with
  ``os.pread`` and written through the transport.

Which one the ``oncelog broker`` process runs is decided by measurement (docs/PERFORMANCE.md,
``cli._run``). Either way a slice is read while its descriptor is valid: the storage layer keeps
a retired segment's file open for file.delete.delay.ms after it is deleted, and log files only
grow under a live slice (whole batches below the log end), so a short read means the file was
cut under us; the frame size is already promised, so the connection is closed.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
from typing import TYPE_CHECKING, Any

from oncelog.broker.dispatch import CloseConnection, dispatch
from oncelog.protocol import apis, framing

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker

log = logging.getLogger(__name__)

#: File slices at least this long are sent with sendfile(2) when the loop supports it.
SENDFILE_MIN_BYTES = 16 * 1024


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


#: Stop reading from a connection while this many request bytes are queued, unhandled.
MAX_QUEUED_BYTES = 4 * 1024 * 1024
#: Hold back Produce responses (coalescing) only up to this many bytes.
MAX_HELD_BYTES = 256 * 1024


class _Connection(asyncio.Protocol):
    """One client connection's transport side: frames in, flow control both ways.

    ``data_received`` appends to a buffer and moves every complete frame to ``frames``; a bad
    size prefix is kept as ``error`` and ends the connection when the serving task reaches it.
    Invariant: ``queued`` is the total size of ``frames``; reading is paused exactly while
    ``queued + len(buf)`` exceeded MAX_QUEUED_BYTES and the serving task has not yet caught up.
    """

    def __init__(self, server: "Server", max_bytes: int) -> None:
        self.server = server
        self.max_bytes = max_bytes
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.buf = bytearray()
        self.frames: collections.deque[bytes] = collections.deque()
        self.queued = 0
        self.error: framing.FrameError | None = None
        self.closed = False  # connection lost
        self.eof = False  # the client half-closed: no more requests will come
        self._reading_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None  # set while the transport's buffer is full
        self._loop = asyncio.get_running_loop()  # the factory runs inside the loop

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport (uvloop's is no subclass)
        peername = transport.get_extra_info("peername")
        self.peer = f"{peername[0]}:{peername[1]}" if peername else "?"
        self.server._start_serving(self)

    def data_received(self, data: bytes) -> None:
        if self.error is not None:
            return
        buf = self.buf
        buf += data
        pos, end = 0, len(buf)
        while end - pos >= 4:
            try:
                size = framing.frame_size(bytes(buf[pos:pos + 4]), self.max_bytes)
            except framing.FrameError as exc:
                self.error = exc
                break
            if end - pos - 4 < size:
                break
            with memoryview(buf) as view:
                self.frames.append(bytes(view[pos + 4:pos + 4 + size]))
            self.queued += size
            pos += 4 + size
        if pos:
            del buf[:pos]
        if self.queued + len(buf) > MAX_QUEUED_BYTES and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()  # type: ignore[union-attr]
        if self.frames or self.error is not None:
            self._wake()

    def eof_received(self) -> bool:
        # The client will send nothing more; requests already here are still answered (the
        # serving task closes the transport when it runs out of them).
        self.eof = True
        self._wake()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        if self._drained is None or self._drained.done():
            self._drained = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # -- used by the serving task --------------------------------------------------------------

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def next_frame(self) -> bytes | None:
        """The next request frame; None at a clean end of stream. Raises FrameError for a bad
        size prefix and IncompleteReadError when the peer left in the middle of a frame."""
        while not self.frames:
            if self.error is not None:
                raise self.error
            if self.closed or self.eof:
                if self.buf:
                    raise asyncio.IncompleteReadError(bytes(self.buf), None)
                return None
            self._waiter = self._loop.create_future()
            await self._waiter
        frame = self.frames.popleft()
        self.queued -= len(frame)
        if self._reading_paused and self.queued + len(self.buf) <= MAX_QUEUED_BYTES // 2:
            self._reading_paused = False
            if not self.closed:
                self.transport.resume_reading()  # type: ignore[union-attr]
        return frame

    def next_is_produce(self) -> bool:
        """Whether the next request is here already and is a Produce."""
        return bool(self.frames) and self.frames[0][:2] == _PRODUCE_KEY

    async def drain(self) -> None:
        if self.closed:
            raise ConnectionError("connection lost")
        if self._drained is not None and not self._drained.done():
            await self._drained
            if self.closed:
                raise ConnectionError("connection lost")


_PRODUCE_KEY = apis.PRODUCE.to_bytes(2, "big")


class Server:
    def __init__(self, broker: "Broker", host: str, port: int, *, sendfile: bool | None = None) -> None:
        """``sendfile``: None (default) uses sendfile(2) when the loop supports it; False never
        (for measurements)."""
        self.broker = broker
        self.host = host
        self.port = port
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._sendfile_wanted = sendfile
        self.sendfile = False  # decided in start(), once the loop is known

    async def start(self) -> tuple[str, int]:
        """Listen; returns the bound (host, port) (port 0 picks a free one)."""
        loop = asyncio.get_running_loop()
        self.sendfile = self._sendfile_wanted is not False and loop_supports_sendfile(loop)
        log.info("event loop %s.%s; fetch data sent by %s", type(loop).__module__, type(loop).__name__,
                 "sendfile(2)" if self.sendfile else "pread + write")
        max_bytes = self.broker.config.socket_request_max_bytes
        self._server = await loop.create_server(lambda: _Connection(self, max_bytes), self.host, self.port,
                                                reuse_address=True)
        sock = self._server.sockets[0]
        self.host, self.port = sock.getsockname()[:2]
        return self.host, self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _start_serving(self, conn: _Connection) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(conn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, conn: _Connection) -> None:
        peer = conn.peer
        held: list[Any] = []  # response parts not sent yet (coalescing)
        held_bytes = 0
        try:
            while True:
                frame = await conn.next_frame()
                if frame is None:
                    return
                parts = await dispatch(self.broker, frame, peer)
                if parts is not None:
                    held.extend(parts)
                    held_bytes += sum(len(p) if isinstance(p, bytes) else p.length for p in parts)
                if held and (held_bytes >= MAX_HELD_BYTES or not conn.next_is_produce()):
                    await self._send(conn, held)
                    held, held_bytes = [], 0
        except asyncio.IncompleteReadError as exc:
            if len(exc.partial) < 4:
                log.info("connection from %s closed inside a frame size prefix", peer)
            else:
                log.info("connection from %s closed in the middle of a request", peer)
        except (framing.FrameError, CloseConnection) as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except (ConnectionError, TimeoutError) as exc:
            log.info("connection from %s lost: %s", peer, exc)
        except asyncio.CancelledError:
            pass
        finally:
            assert conn.transport is not None
            conn.transport.close()

    async def _send(self, conn: _Connection, parts: list[Any]) -> None:
        """Write responses' parts in order, then wait for the transport to drain."""
        transport = conn.transport
        assert transport is not None
        pending: list[bytes] = []  # consecutive copied parts, written together
        for part in parts:
            if isinstance(part, bytes):
                pending.append(part)
            elif self.sendfile and part.length >= SENDFILE_MIN_BYTES:
                if pending:
                    transport.write(b"".join(pending))
                    pending = []
                await self._sendfile(transport, part)
            else:  # a FileSlice to copy
                pending.append(_pread(part))
        if pending:
            transport.write(pending[0] if len(pending) == 1 else b"".join(pending))
        await conn.drain()

    async def _sendfile(self, transport: asyncio.Transport, part: Any) -> None:
        """Send one slice with sendfile(2); falls back to a copy if the kernel refuses."""
        loop = asyncio.get_running_loop()
        if transport.is_closing():
            raise ConnectionError("connection closed before a fetch response was sent")
        try:
            sent = await loop.sendfile(transport, _Fd(part.fd), part.position, part.length, fallback=False)
        except asyncio.SendfileNotAvailableError as exc:  # nothing was sent
            log.warning("sendfile unavailable (%s); copying fetch data from now on", exc)
            self.sendfile = False
            transport.write(_pread(part))
            return
        if sent != part.length:
            raise ConnectionError(f"log file shrank under a fetch ({sent} of {part.length} bytes sent)")


def _pread(part: Any) -> bytes:
    data = os.pread(part.fd, part.length, part.position)
    if len(data) != part.length:
        raise ConnectionError(f"log file shrank under a fetch ({len(data)} of {part.length} bytes)")
    return data
