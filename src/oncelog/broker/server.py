"""The asyncio shell: sockets in, frames to the dispatcher, response parts out.

One task per connection. Requests on a connection are handled one at a time, in arrival order,
so responses go out in request order and pipelined requests simply wait in the socket buffer;
this is what Kafka does too (it mutes a connection while one of its requests is in flight).

Bad input never takes the broker down: an oversize or malformed frame, an unknown API or version,
or a peer that disconnects mid-request ends that one connection with one log line.
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


class Server:
    def __init__(self, broker: "Broker", host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> tuple[str, int]:
        """Listen; returns the bound (host, port) (port 0 picks a free one)."""
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
                    self._write(writer, parts)
                    await writer.drain()
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

    @staticmethod
    def _write(writer: asyncio.StreamWriter, parts: list[Any]) -> None:
        for part in parts:
            if isinstance(part, bytes):
                writer.write(part)
            else:  # a FileSlice: record batches straight from the log file
                data = os.pread(part.fd, part.length, part.position)
                if len(data) != part.length:
                    raise ConnectionError(f"log file shrank under a fetch ({len(data)} of {part.length} bytes)")
                writer.write(data)
