"""server.py, issue 16: one failed sendfile (a client's reset reported by asyncio as "sendfile
not available") costs a copy of that one slice on that one connection; it never turns zero-copy
off for the broker. (Fixed in issue 12; this holds it.)"""

from __future__ import annotations

import asyncio
import os
import tempfile
from dataclasses import dataclass

from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.network.server import Server


@dataclass
class _Slice:
    fd: int
    position: int
    length: int


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))


def test_a_failed_sendfile_copies_one_slice_and_keeps_zero_copy_on() -> None:
    async def run() -> None:
        server = Server(lambda *a: None, "127.0.0.1", 0, BrokerConfig(data_dir=tempfile.mkdtemp()))  # type: ignore[arg-type]
        server.sendfile = True
        loop = asyncio.get_running_loop()
        calls: list[int] = []

        async def sendfile(transport, file, offset, count, *, fallback=True):  # type: ignore[no-untyped-def]
            calls.append(offset)
            if len(calls) == 1:
                raise asyncio.SendfileNotAvailableError("os.sendfile call failed")  # a peer reset, as asyncio says it
            return count

        loop.sendfile = sendfile  # type: ignore[method-assign]
        with tempfile.TemporaryFile() as f:
            f.write(b"0123456789" * 10_000)
            f.flush()
            part = _Slice(f.fileno(), 10, 50_000)
            first, second = _Transport(), _Transport()
            await server._sendfile(first, part)  # type: ignore[arg-type]
            assert first.written == [os.pread(f.fileno(), 50_000, 10)]  # copied, this slice only
            assert server.sendfile
            await server._sendfile(second, part)  # type: ignore[arg-type]
            assert calls == [10, 10] and second.written == []  # the next connection: zero-copy again

    asyncio.run(run())
