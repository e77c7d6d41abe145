"""The receive timeout (``socket.request.receive.timeout.ms``, the slowloris guard) measures the
request being received, and never the time the broker itself stopped reading.

Found when a client pipelining 200k requests on a loaded machine was closed as a slowloris after
60 s although its frames kept completing: the partial frame at the end of each chunk kept the
time the first partial frame began, and the clock ran while the broker had paused reading."""

from __future__ import annotations

import asyncio
import struct

from oncelog.broker.network import connection as connection_mod
from oncelog.broker.network.connection import Connection


class _Transport(asyncio.Transport):
    """The few transport calls a Connection makes, recorded (a real loop drives the protocol)."""

    def __init__(self) -> None:
        super().__init__()
        self.paused = False

    def get_extra_info(self, name, default=None):  # type: ignore[no-untyped-def]
        return ("127.0.0.1", 1) if name == "peername" else default

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def _frame(n: int) -> bytes:
    body = b"x" * n
    return struct.pack(">i", len(body)) + body


def test_a_chunk_that_completes_a_frame_restarts_the_receive_clock() -> None:
    async def go() -> None:
        conn = Connection(lambda c: None, 1 << 20)
        conn.connection_made(_Transport())
        stream = _frame(100) * 3
        conn.data_received(stream[:150])  # frame 1 whole, frame 2 begun
        first = conn.partial_since
        assert first is not None
        await asyncio.sleep(0.05)
        conn.data_received(stream[150:250])  # frame 2 whole, frame 3 begun: a new request's clock
        assert conn.partial_since is not None and conn.partial_since > first
        conn.data_received(stream[250:])  # frame 3 whole: nothing partial
        assert conn.partial_since is None and len(conn.frames) == 3

    asyncio.run(go())


def test_no_receive_clock_while_the_broker_does_not_read(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    async def go() -> None:
        monkeypatch.setattr(connection_mod, "MAX_QUEUED_FRAMES", 2)
        conn = Connection(lambda c: None, 1 << 20)
        t = _Transport()
        conn.connection_made(t)
        stream = _frame(10) * 4
        conn.data_received(stream[:-5])  # three frames queued (over the limit), the fourth begun
        assert t.paused and conn.reading_paused
        began = conn.partial_since
        await asyncio.sleep(0.05)
        for _ in range(2):
            await conn.next_frame()  # the broker catches up and reads again
        assert not t.paused and not conn.reading_paused
        assert conn.partial_since is not None and began is not None and conn.partial_since > began

    asyncio.run(go())
