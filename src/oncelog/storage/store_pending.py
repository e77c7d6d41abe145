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

One hop to the loop per round, not per future. A committer completes a round's futures one
after the other on its thread, inside ``one_hop()``: the waiters of those futures are collected
and handed to their loop together when the block ends, with ONE ``call_soon_threadsafe`` (a lock,
a write to the loop's self-pipe, a wake-up of the loop) whose callback settles them all, in the
order their futures completed. A completion off the loop outside such a block hops alone. A
future completed on the loop's own thread (the diskless writer completes there) settles its
waiter at once, without a hop; one complete before it is awaited needs no waiter at all.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, Generator, Iterator

__all__ = ["PendingAppend", "one_hop"]


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


Handed = list[tuple["asyncio.Future[None]", Future]]

#: per thread, inside ``one_hop()``: the waiters collected so far, by loop
_collecting = threading.local()


@contextmanager
def one_hop() -> Iterator[None]:
    """Futures completed on this thread inside the block settle their waiters with ONE hop per
    loop when it ends, in completion order (a committer wraps the completion of a round in it).
    Re-entrant: an inner block joins the outer one."""
    if getattr(_collecting, "by_loop", None) is not None:
        yield
        return
    by_loop: dict[asyncio.AbstractEventLoop, Handed] = {}
    _collecting.by_loop = by_loop
    try:
        yield
    finally:
        _collecting.by_loop = None
        for loop, handed in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle_all, handed)
            except RuntimeError:  # the loop is closed: nobody waits there any more
                pass


def _hand_over(loop: asyncio.AbstractEventLoop, waiter: "asyncio.Future[None]", fut: Future) -> None:
    """Off the loop: inside ``one_hop()`` the waiter goes with the block's hop; otherwise it
    hops alone."""
    by_loop = getattr(_collecting, "by_loop", None)
    if by_loop is not None:
        by_loop.setdefault(loop, []).append((waiter, fut))
        return
    try:
        loop.call_soon_threadsafe(_settle, waiter, fut)
    except RuntimeError:  # the loop is closed: nobody waits there any more
        pass


def _settle_all(handed: Handed) -> None:
    """On the loop: settle the waiters of one hop, in order."""
    for waiter, fut in handed:
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
