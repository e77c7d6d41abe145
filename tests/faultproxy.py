"""A loopback TCP proxy that injects faults between a client and a server (issue 29: slow or
failing object-store calls).

Theory of operation. ``FaultProxy(target_port)`` listens on a free 127.0.0.1 port and forwards
each accepted connection to ``127.0.0.1:target_port``, in an asyncio loop on its own thread (so
synchronous and asynchronous tests use it alike). Its behaviour is set with ``set_mode``:

- ``"pass"``: forward both ways;
- ``"delay"``: forward, but hold every chunk from the client for ``delay_s`` first;
- ``"slow-answer"``: forward, but hold every chunk from the server for ``delay_s`` (the request
  lands, its answer comes late: a client that times out does not know it succeeded);
- ``"drop"``: close each new connection at once (the client sees a reset / an empty answer);
- ``"blackhole"``: accept and read, never answer (the client's timeout is what ends it);
- ``"503"``: read one HTTP request (headers and ``Content-Length`` body) and answer
  ``503 Slow Down`` with S3's ``SlowDown`` error body and ``Connection: close``.

``set_mode`` closes the connections already open, so a client's pooled keep-alive connection
meets the new behaviour on its next request. ``faults_left``: how many connections get the
fault before the proxy turns back to ``"pass"`` by itself (None: until changed). Counters say
how many connections it accepted and how many it faulted. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from concurrent.futures import Future

__all__ = ["FaultProxy"]

MODES = ("pass", "delay", "slow-answer", "drop", "blackhole", "503")
_SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")


class FaultProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.mode = "pass"
        self.delay_s = 0.0
        self.faults_left: int | None = None
        self.accepted = 0
        self.faulted = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        self._server: asyncio.base_events.Server = self._run(self._start())
        self.port: int = self._server.sockets[0].getsockname()[1]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self, coro, timeout: float = 10.0):
        fut: Future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result(timeout)

    async def _start(self):
        return await asyncio.start_server(self._handle, "127.0.0.1", 0, family=socket.AF_INET)

    def set_mode(self, mode: str, *, delay_s: float = 0.0, count: int | None = None) -> None:
        """Change the behaviour for the next connections and close the open ones."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; one of {MODES}")

        async def apply() -> None:
            self.mode, self.delay_s, self.faults_left = mode, delay_s, count
            for w in list(self._writers):
                w.transport.abort()
            self._writers.clear()

        self._run(apply())

    def _take_fault(self) -> str:
        mode = self.mode
        if mode == "pass":
            return mode
        if self.faults_left is not None:
            if self.faults_left <= 0:
                self.mode = "pass"
                return "pass"
            self.faults_left -= 1
        self.faulted += 1
        return mode

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        mode = self._take_fault()
        self._writers.add(writer)
        try:
            if mode == "drop":
                writer.transport.abort()
                return
            if mode == "blackhole":
                while await reader.read(65536):
                    pass
                return
            if mode == "503":
                await self._answer_503(reader, writer)
                return
            await self._pipe(reader, writer, up_delay_s=self.delay_s if mode == "delay" else 0.0,
                             down_delay_s=self.delay_s if mode == "slow-answer" else 0.0)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def _answer_503(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        if length:
            await asyncio.wait_for(reader.readexactly(min(length, 64 << 20)), 10)
        writer.write(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(_SLOWDOWN) + _SLOWDOWN)
        await writer.drain()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, up_delay_s: float,
                    down_delay_s: float) -> None:
        up_r, up_w = await asyncio.wait_for(asyncio.open_connection(*self.target), 5)
        self._writers.add(up_w)

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay: float) -> None:
            try:
                while data := await src.read(65536):
                    if delay:
                        await asyncio.sleep(delay)
                    dst.write(data)
                    await dst.drain()
            finally:
                dst.transport.abort()

        try:
            await asyncio.gather(copy(reader, up_w, up_delay_s), copy(up_r, writer, down_delay_s),
                                 return_exceptions=True)
        finally:
            self._writers.discard(up_w)

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self._run(stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
