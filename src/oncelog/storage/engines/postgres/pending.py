"""The awaitable of an append submitted to the PostgreSQL engine: the one place the engine meets
the event loop (the storage/engine.py contract's ``PendingAppend``). The committer's thread
completes the append's ``concurrent.futures.Future`` at COMMIT; awaiting a ``PendingAppend``
waits for it on the event loop (``asyncio.wrap_future``) and raises the append's error. A thread
that is not an event loop waits with ``future.result(timeout)`` instead (``PgPartitionLog.append``).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, ClassVar, Generator

__all__ = ["PendingAppend"]


@dataclass(frozen=True, slots=True)
class PendingAppend:
    """A submitted batch: its offsets, and the future completed after its COMMIT."""

    base_offset: int
    last_offset: int
    future: Future

    #: never complete within ``submit``: the COMMIT happens on the committer's thread
    done: ClassVar[bool] = False

    def __await__(self) -> Generator[Any, None, None]:
        yield from asyncio.wrap_future(self.future).__await__()
