"""The asyncio shell: sockets in, frames to the dispatcher, response parts out.

One task per connection. Requests on a connection are handled one at a time, in arrival order,
so responses go out in request order and pipelined requests simply wait in the socket buffer;
this is what Kafka does too (it mutes a connection while one of its requests is in flight).

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
import logging
import os
from typing import TYPE_CHECKING, Any

from oncelog.broker.dispatch import CloseConnection, dispatch
from oncelog.protocol import framing

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
        self._server = await asyncio.start_server(self._on_connect, self.host, self.port, reuse_address=True)
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

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        finally:
            self._tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if peername else "?"
        max_bytes = self.broker.config.socket_request_max_bytes
        try:
            while True:
                try:
                    prefix = await reader.readexactly(4)
                except asyncio.IncompleteReadError as exc:
                    if exc.partial:
                        log.info("connection from %s closed inside a frame size prefix", peer)
                    return
                size = framing.frame_size(prefix, max_bytes)
                frame = await reader.readexactly(size)
                parts = await dispatch(self.broker, frame, peer)
                if parts is not None:
                    await self._send(writer, parts)
        except asyncio.IncompleteReadError:
            log.info("connection from %s closed in the middle of a request", peer)
        except (framing.FrameError, CloseConnection) as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except (ConnectionError, TimeoutError) as exc:
            log.info("connection from %s lost: %s", peer, exc)
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()

    async def _send(self, writer: asyncio.StreamWriter, parts: list[Any]) -> None:
        """Write one response's parts in order, then wait for the transport to drain."""
        pending: list[bytes] = []  # consecutive copied parts, written together
        for part in parts:
            if isinstance(part, bytes):
                pending.append(part)
            elif self.sendfile and part.length >= SENDFILE_MIN_BYTES:
                if pending:
                    writer.writelines(pending)
                    pending = []
                await self._sendfile(writer, part)
            else:  # a FileSlice to copy
                pending.append(_pread(part))
        if pending:
            writer.writelines(pending)
        await writer.drain()

    async def _sendfile(self, writer: asyncio.StreamWriter, part: Any) -> None:
        """Send one slice with sendfile(2); falls back to a copy if the kernel refuses."""
        loop = asyncio.get_running_loop()
        if writer.transport.is_closing():
            raise ConnectionError("connection closed before a fetch response was sent")
        try:
            sent = await loop.sendfile(writer.transport, _Fd(part.fd), part.position, part.length, fallback=False)
        except asyncio.SendfileNotAvailableError as exc:  # nothing was sent
            log.warning("sendfile unavailable (%s); copying fetch data from now on", exc)
            self.sendfile = False
            writer.write(_pread(part))
            return
        if sent != part.length:
            raise ConnectionError(f"log file shrank under a fetch ({sent} of {part.length} bytes sent)")


def _pread(part: Any) -> bytes:
    data = os.pread(part.fd, part.length, part.position)
    if len(data) != part.length:
        raise ConnectionError(f"log file shrank under a fetch ({len(data)} of {part.length} bytes)")
    return data
