"""The awaitable of an append submitted to a store-backed engine (storage/store_log.py: the
PostgreSQL engine, completed at its group COMMIT on the committer's thread; the diskless engine,
completed after the COMMIT of its object's coordinates by the object writer): the one place those
engines meet the event loop (the storage/engine.py contract's ``PendingAppend``). Awaiting a
``PendingAppend`` waits on the event loop for the append's ``concurrent.futures.Future`` and
raises the append's error; a thread that is not an event loop waits with
``future.result(timeout)`` instead (``PgPartitionLog.append``).

Cancelling the awaiting task never cancels the append: the batch is with the committer and may
commit, so its future must complete and the engine must learn the outcome. So the future is not
awaited through ``asyncio.wrap_future``, which cancels the ``concurrent.futures.Future`` with its
waiter: a waiter of the loop's own is settled from the future's completion (one hop to the loop,
as ``wrap_future`` makes, and less work than ``wrap_future`` under ``asyncio.shield``).
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
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()

        def completed(fut: Future) -> None:  # on the committer's thread (or the loop's)
            if not loop.is_closed():
                loop.call_soon_threadsafe(_settle, waiter, fut)

        self.future.add_done_callback(completed)
        yield from waiter.__await__()


def _settle(waiter: "asyncio.Future[None]", fut: Future) -> None:
    """On the loop: the append's outcome into its waiter, unless the waiter is gone (cancelled:
    the append goes on, and the engine learns its outcome through its own callback)."""
    if waiter.done():
        return
    if fut.cancelled():
        waiter.cancel()
        return
    exc = fut.exception()
    if exc is not None:
        waiter.set_exception(exc)
    else:
        waiter.set_result(None)
