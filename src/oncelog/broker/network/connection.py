"""One client connection's transport side: bytes in, request frames out, flow control both ways.

``Connection`` is the asyncio Protocol of a client socket. ``data_received`` cuts the byte
stream into frames as it arrives; the connection's serving task (server.py) takes them with
``next_frame`` and writes responses through the transport.

Invariants (R22: one client can neither exhaust the broker nor hold it up):

* Complete frames wait in ``frames``; reading pauses while more than ``MAX_QUEUED_BYTES`` or
  ``MAX_QUEUED_FRAMES`` of them are queued, and resumes when the serving task has taken half.
  The frame still arriving is not counted: it is bounded by ``socket.request.max.bytes`` (its
  size prefix is checked first), so a request of any allowed size is always read whole (a
  5 MB produce used to stall at the 4 MiB mark forever). Before a connection on a SASL listener
  is authenticated the bound is ``sasl.server.max.receive.size`` instead (512 KB, Kafka's): the
  server lowers ``max_bytes`` (``limit`` names the property in the error) until it is, so an
  unauthenticated client can make the broker hold at most that much for it (issue 26).
* A connection the client closed, or half-closed (EOF: Kafka closes on it too), is closed at
  once: the transport (and its descriptor) is released, queued frames are dropped, and
  ``closed`` (a future) is resolved so a request parked on purpose (a Fetch long poll) returns
  at once instead of holding the connection in CLOSE_WAIT.
* ``partial_since`` is when the frame still arriving started (None when none is), and
  ``last_active`` when bytes last moved either way; the server closes connections that take
  too long to send one request (slowloris) or stay idle past ``connections.max.idle.ms``.
* With a ``RequestMemory`` (request_memory.py: ``queued.max.request.bytes``, one for all the
  broker's connections) every frame's bytes are taken from it when its size prefix has arrived,
  before the frame is read; while it has none to give, reading pauses and the connection waits
  in line (the receive timeout does not run meanwhile). The bytes of a frame taken by the
  serving task are given back by it (``release``) once the request is handled; those of frames
  still queued, and of the frame being read, when the connection closes.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Callable

from oncelog.broker.auth.tls_transport import let_go
from oncelog.broker.network.request_memory import RequestMemory
from oncelog.protocol import apis, framing

#: Stop reading from a connection while this many request bytes, or frames, are queued unhandled.
MAX_QUEUED_BYTES = 4 * 1024 * 1024
MAX_QUEUED_FRAMES = 1000

_PRODUCE_KEY = apis.PRODUCE.to_bytes(2, "big")
#: requests a cluster broker pipelines on a connection (broker/pipelining.py): Produce, and
#: WriteTxnMarkers from a transaction coordinator on another broker (issue 28)
PIPELINED_KEYS = frozenset({_PRODUCE_KEY, apis.WRITE_TXN_MARKERS.to_bytes(2, "big")})


class Connection(asyncio.Protocol):
    """See the module docstring. ``on_open(conn)`` is called once the transport exists; the
    serving task is started there. Single-threaded: event-loop callbacks only."""

    def __init__(self, on_open: Callable[["Connection"], None], max_request_bytes: int,
                 memory: RequestMemory | None = None) -> None:
        self._on_open = on_open
        self._memory = memory
        #: bytes taken from ``memory`` for the frame being read (None: none taken yet)
        self._reserved: int | None = None
        self._wants_memory = False  # waiting in ``memory``'s line
        self._wanted = 0  # the size of the frame it waits for
        self.max_bytes = max_request_bytes
        self.limit = "socket.request.max.bytes"  # the property behind max_bytes (in the error)
        self._loop = asyncio.get_running_loop()  # the factory runs inside the loop
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.peer_host = "?"
        self.buf = bytearray()
        self.frames: collections.deque[bytes] = collections.deque()
        self.queued = 0
        self.error: framing.FrameError | None = None
        self.closed: asyncio.Future[None] = self._loop.create_future()
        self.partial_since: float | None = None
        self.last_active = self._loop.time()
        self.eof = False  # the peer half-closed (or closed): no more requests will be taken
        self.lost_mid_frame = False  # the peer left in the middle of a request
        self.busy = False  # a request of this connection is being handled (set by its serving task)
        self._reading_paused = False  # the transport is paused (a full queue, or no request memory)
        self._queue_full = False
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None  # set while the transport's buffer is full

    @property
    def is_closed(self) -> bool:
        return self.closed.done()

    @property
    def reading_paused(self) -> bool:
        """The broker stopped reading (too much queued): no receive timeout runs meanwhile."""
        return self._reading_paused

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport
        peername = transport.get_extra_info("peername")
        if peername:
            self.peer_host = str(peername[0])
            self.peer = f"{peername[0]}:{peername[1]}"
        self._on_open(self)

    def data_received(self, data: bytes) -> None:
        if self.error is not None or self.is_closed:
            return
        self.last_active = self._loop.time()
        self.buf += data
        self._cut()

    def _cut(self) -> None:
        """Cut the whole frames off ``buf``; stop at a frame whose bytes the request memory
        cannot give yet (reading pauses until it can)."""
        buf = self.buf
        pos, end = 0, len(buf)
        while end - pos >= 4 and not self._wants_memory:
            try:
                size = framing.frame_size(bytes(buf[pos : pos + 4]), self.max_bytes, self.limit)
            except framing.FrameError as exc:
                self.error = exc
                break
            if self._memory is not None and self._reserved is None:
                if self._memory.take(size):
                    self._reserved = size
                else:
                    self._wants_memory = True
                    self._wanted = size
                    self._memory.wait(self, size, self._granted)
                    break
            if end - pos - 4 < size:
                break
            with memoryview(buf) as view:
                self.frames.append(bytes(view[pos + 4 : pos + 4 + size]))
            self._reserved = None  # the frame's bytes are the serving task's to give back (release)
            self.queued += size
            pos += 4 + size
        if pos:
            del buf[:pos]
        # The receive timeout measures the request being received now: it starts when a frame
        # begins to arrive, so a chunk that completes a frame and begins the next restarts it (a
        # client pipelining a long stream is never taken for a slowloris).
        if not buf:
            self.partial_since = None
        elif pos or self.partial_since is None:
            self.partial_since = self.last_active
        if not self._queue_full and (self.queued > MAX_QUEUED_BYTES or len(self.frames) > MAX_QUEUED_FRAMES):
            self._queue_full = True
        self._pace()
        if self.frames or self.error is not None:
            self._wake()

    def _pace(self) -> None:
        """Pause or resume the transport's reading: paused while the queue is full or the
        request memory has nothing for this connection."""
        pause = self._queue_full or self._wants_memory
        if pause == self._reading_paused or self.transport is None or self.is_closed:
            return
        self._reading_paused = pause
        if pause:
            self.transport.pause_reading()
        else:
            if self.buf:  # the client could not send while we did not read: its time starts again
                self.partial_since = self._loop.time()
            self.transport.resume_reading()

    def _granted(self) -> None:
        """The request memory took this connection's frame bytes for it (called from ``give``)."""
        self._wants_memory = False
        self._reserved = self._wanted
        self._loop.call_soon(self._after_grant)

    def _after_grant(self) -> None:
        if self.is_closed or self.error is not None:
            return
        self._cut()  # what was received before the wait, then reading resumes (``_pace``)

    def release(self, n: int) -> None:
        """The serving task is done with a frame of ``n`` bytes it took (``next_frame``): its
        bytes go back to the request memory."""
        if self._memory is not None:
            self._memory.give(n)

    def eof_received(self) -> bool:
        # As Kafka: a client that stops sending is gone; what it queued is not answered.
        self.eof = True
        return False  # the transport closes itself, then connection_lost runs

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.lost_mid_frame = bool(self.buf)
        if self._memory is not None:  # the frames nobody took, and the one being read
            if self._wants_memory:
                self._memory.cancel(self)
                self._wants_memory = False
            held = self.queued + (self._reserved or 0)
            self._reserved = None
            if held:
                self._memory.give(held)
        self.frames.clear()
        self.queued = 0
        let_go(self.transport)  # a plaintext socket transport's own cycle (auth/tls_transport.py)
        self.buf.clear()
        self.partial_since = None
        if not self.closed.done():
            self.closed.set_result(None)
        self._wake()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        if self._drained is None or self._drained.done():
            self._drained = self._loop.create_future()

    def resume_writing(self) -> None:
        self.last_active = self._loop.time()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # -- used by the serving task --------------------------------------------------------------

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def next_frame(self) -> bytes | None:
        """The next request frame; None once the connection is closed (queued frames are then
        dropped). Raises FrameError for a bad size prefix."""
        while True:
            if self.eof or self.is_closed:
                return None
            if self.frames:
                break
            if self.error is not None:
                raise self.error
            self._waiter = self._loop.create_future()
            await self._waiter
        frame = self.frames.popleft()
        self.queued -= len(frame)
        if self._queue_full and self.queued <= MAX_QUEUED_BYTES // 2 and len(self.frames) <= MAX_QUEUED_FRAMES // 2:
            self._queue_full = False
            self._pace()
        return frame

    def may_get_frame(self) -> bool:
        """No request frame is here yet, and one may come (the connection is open and sound)."""
        return not (self.frames or self.eof or self.is_closed or self.error is not None)

    async def frame_or(self, other: "asyncio.Future[Any]") -> None:
        """Wait until a request frame is here (or the connection is gone) or ``other`` is done,
        whichever comes first; takes nothing (the serving task's ``next_frame`` does)."""
        if not self.may_get_frame() or other.done():
            return
        self._waiter = self._loop.create_future()
        await asyncio.wait((self._waiter, other), return_when=asyncio.FIRST_COMPLETED)

    def next_is_produce(self) -> bool:
        """Whether the next request is here already and is a Produce."""
        return bool(self.frames) and self.frames[0][:2] == _PRODUCE_KEY

    def next_is_pipelined(self) -> bool:
        """Whether the next request is here already and is one of ``PIPELINED_KEYS``."""
        return bool(self.frames) and self.frames[0][:2] in PIPELINED_KEYS

    async def drain(self) -> None:
        if self.is_closed:
            raise ConnectionError("connection lost")
        if self._drained is not None and not self._drained.done():
            await self._drained
            if self.is_closed:
                raise ConnectionError("connection lost")

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
