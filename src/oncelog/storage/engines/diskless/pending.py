"""The awaitable of an append submitted to the diskless engine: the one place the engine meets
the event loop (the storage/engine.py contract's ``PendingAppend``). The object writer
(oncelog/diskless/writer.py) completes the append's ``concurrent.futures.Future`` after the
COMMIT of its object's coordinates; awaiting a ``PendingAppend`` waits for it on the event loop
(``asyncio.wrap_future``) and raises the append's error. Cancelling the awaiting task never
cancels the append: the batch is in the writer and may commit, so its future must complete and
the engine must learn the outcome (``asyncio.wrap_future`` alone would cancel the
``concurrent.futures.Future`` with its waiter).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, ClassVar, Generator

__all__ = ["PendingAppend"]


@dataclass(frozen=True, slots=True)
class PendingAppend:
    """A submitted batch: its offsets, and the future completed after its object's COMMIT."""

    base_offset: int
    last_offset: int
    future: Future

    #: never complete within ``submit``: the object is uploaded and committed later
    done: ClassVar[bool] = False

    def __await__(self) -> Generator[Any, None, None]:
        yield from asyncio.shield(asyncio.wrap_future(self.future)).__await__()
