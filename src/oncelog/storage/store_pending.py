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
waiter: a waiter of the loop's own is settled from the future's completion.

One hop to the loop per burst, not per future. A committer completes a round's futures one after
the other on its thread; each completion that finds no hop to the waiter's loop pending schedules
one (``call_soon_threadsafe``: a lock, a write to the loop's self-pipe, a wake-up of the loop) and
the others join it, so a round of N batches costs the loop one wake-up and one callback that
settles the N waiters, in the order their futures completed (``_hand_over``). A future completed
on the loop's own thread (the diskless writer completes there) settles its waiter at once, without
a hop; one complete before it is awaited needs no waiter at all.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
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
        fut = self.future
        if fut.done():  # complete already (late await, or a very fast commit): nothing to wait for
            _outcome(fut)
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        fut.add_done_callback(partial(_completed, loop, threading.get_ident(), waiter))
        yield from waiter.__await__()


def _outcome(fut: Future) -> None:
    """Return or raise as the completed ``fut`` did."""
    if fut.cancelled():
        raise asyncio.CancelledError()
    exc = fut.exception()
    if exc is not None:
        raise exc


def _completed(loop: asyncio.AbstractEventLoop, loop_thread: int, waiter: "asyncio.Future[None]",
               fut: Future) -> None:
    """The append's future completed (on the committer's thread, or the loop's)."""
    if threading.get_ident() == loop_thread:
        _settle(waiter, fut)
    else:
        _hand_over(loop, waiter, fut)


#: the waiters whose futures completed off their loop, by loop, waiting for the one hop to it
#: that the first of them scheduled (an entry exists only while that hop is pending)
_handed: dict[asyncio.AbstractEventLoop, list[tuple["asyncio.Future[None]", Future]]] = {}
_handed_lock = threading.Lock()


def _hand_over(loop: asyncio.AbstractEventLoop, waiter: "asyncio.Future[None]", fut: Future) -> None:
    """Off the loop: queue ``waiter``'s settling for the loop; the first one queued since the
    last hop schedules the next (``_settle_handed``), the others ride with it."""
    with _handed_lock:
        queued = _handed.get(loop)
        if queued is not None:
            queued.append((waiter, fut))
            return
        _handed[loop] = [(waiter, fut)]
    try:
        loop.call_soon_threadsafe(_settle_handed, loop)
    except RuntimeError:  # the loop is closed: nobody waits there any more
        with _handed_lock:
            _handed.pop(loop, None)


def _settle_handed(loop: asyncio.AbstractEventLoop) -> None:
    """On the loop: settle every waiter handed over since the hop was scheduled, in order."""
    with _handed_lock:
        queued = _handed.pop(loop, ())
    for waiter, fut in queued:
        _settle(waiter, fut)


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
