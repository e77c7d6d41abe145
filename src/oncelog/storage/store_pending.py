"""The awaitable of an append submitted to a store-backed engine (storage/store_log.py: the
PostgreSQL engine, completed at its group COMMIT on the committer's thread; the diskless engine,
completed after the COMMIT of its object's coordinates by the object writer): the one place those
engines meet the event loop (the storage/engine.py contract's ``PendingAppend``). Awaiting a
``PendingAppend`` waits for the append's ``concurrent.futures.Future`` on the event loop
(``asyncio.wrap_future``) and raises the append's error; a thread that is not an event loop waits
with ``future.result(timeout)`` instead (``PgPartitionLog.append``).

Cancelling the awaiting task never cancels the append: the batch is with the committer and may
commit, so its future must complete and the engine must learn the outcome
(``asyncio.wrap_future`` alone would cancel the ``concurrent.futures.Future`` with its waiter).
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

    #: never complete within ``submit``: the COMMIT happens later, on another thread or task
    done: ClassVar[bool] = False

    def __await__(self) -> Generator[Any, None, None]:
        yield from asyncio.shield(asyncio.wrap_future(self.future)).__await__()
