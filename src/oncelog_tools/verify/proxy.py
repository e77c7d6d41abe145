"""A small TCP proxy on loopback that can cut or delay the connections it carries (fault injection
for ``oncelog verify queue``).

It listens on ``listen_port`` and forwards every connection to ``upstream_port`` on 127.0.0.1.
The broker must advertise the proxy's address (``advertised.host`` / ``advertised.port``) so
clients keep going through it after their first Metadata request.

Faults, callable from any thread:

* ``cut()``: closes every open connection at once (both directions), as a network partition that
  heals immediately: clients see a disconnect mid-request and reconnect.
* ``set_delay(seconds)``: every chunk forwarded from now on waits this long first (0 removes it).
* ``block()`` / ``unblock()``: a partition that lasts: ``block()`` closes every open connection
  (as ``cut()``) and, until ``unblock()``, closes every new connection as soon as it is accepted
  and forwards nothing (the client's connect fails at once: the upstream looks unreachable).
  Used to cut one broker from PostgreSQL for longer than its session (issue 15).

With ``record=True`` it also keeps every request frame the clients sent (size prefix included)
in ``requests``, in arrival order per connection: the corpus of the bad-input fuzz test is
recorded this way from real clients.

The proxy runs its own asyncio loop in a daemon thread; ``close()`` stops it. If the upstream
is down, an accepted connection is closed at once (the client sees a refused-like disconnect).
"""

from __future__ import annotations

import asyncio
import threading


class Proxy:
    def __init__(self, listen_port: int, upstream_port: int, host: str = "127.0.0.1", *, record: bool = False) -> None:
        self.host = host
        self.record = record
        self.requests: list[bytes] = []
        self.listen_port = listen_port
        self.upstream_port = upstream_port
        self.delay = 0.0
        self.blocked = False
        self.connections = 0
        self.refused = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="verify-proxy")

    def start(self) -> "Proxy":
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        fut.result(10)
        return self

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._on_connect, self.host, self.listen_port, reuse_address=True)

    async def _on_connect(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        if self.blocked:
            self.refused += 1
            c_writer.transport.abort()
            return
        try:
            u_reader, u_writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.upstream_port), 5)
        except (OSError, asyncio.TimeoutError):
            c_writer.close()
            return
        if self.blocked:  # blocked while connecting upstream
            self.refused += 1
            c_writer.transport.abort()
            u_writer.transport.abort()
            return
        self.connections += 1
        self._writers.update((c_writer, u_writer))
        try:
            await asyncio.gather(self._pipe(c_reader, u_writer, recorder=self._recorder() if self.record else None),
                                 self._pipe(u_reader, c_writer))
        finally:
            for w in (c_writer, u_writer):
                self._writers.discard(w)
                w.close()

    def _recorder(self):  # type: ignore[no-untyped-def]
        """A per-connection sink that cuts the client's byte stream into frames."""
        buf = bytearray()

        def feed(data: bytes) -> None:
            buf.extend(data)
            while len(buf) >= 4:
                size = int.from_bytes(buf[:4], "big", signed=True)
                if size < 0 or len(buf) < 4 + size:
                    return
                self.requests.append(bytes(buf[: 4 + size]))
                del buf[: 4 + size]

        return feed

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, recorder=None) -> None:  # type: ignore[no-untyped-def]
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if recorder is not None:
                    recorder(data)
                if self.delay:
                    await asyncio.sleep(self.delay)
                if self.blocked:
                    break
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def cut(self) -> int:
        """Close every open connection; returns how many sockets were closed."""

        def close_all() -> int:
            ws = list(self._writers)
            for w in ws:
                w.transport.abort()
            self._writers.clear()
            return len(ws)

        return asyncio.run_coroutine_threadsafe(_call(close_all), self._loop).result(10)

    def block(self) -> int:
        """Close every open connection and refuse new ones until ``unblock()``; returns how many
        sockets were closed."""

        def block_all() -> int:
            self.blocked = True
            ws = list(self._writers)
            for w in ws:
                w.transport.abort()
            self._writers.clear()
            return len(ws)

        return asyncio.run_coroutine_threadsafe(_call(block_all), self._loop).result(10)

    def unblock(self) -> None:
        """Accept and forward connections again."""
        self.blocked = False

    def set_delay(self, seconds: float) -> None:
        self.delay = seconds

    def close(self) -> None:
        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._writers):
                w.transport.abort()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


async def _call(fn):  # type: ignore[no-untyped-def]
    return fn()
