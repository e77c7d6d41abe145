"""One bound on the request bytes all of a broker's connections hold together:
``queued.max.request.bytes`` (Kafka's memory pool for requests).

Why. Each connection bounds what it holds (connection.py: 4 MiB of queued frames, one frame of
at most ``socket.request.max.bytes`` being read; server.py: at most ``MAX_PIPELINED`` Produce
requests in flight in cluster mode), but nothing bounded them all: 20 connections pipelining
8 Produce requests of 16 MB each held 2.5 GB of requests (and their copies on the way to the
store) at once, and the event loop spent seconds on them while everyone else waited.

How, as Kafka's ``SimpleMemoryPool`` (not strict). A connection takes a frame's bytes from the
pool when the frame's size prefix has arrived, before the frame is read; the bytes go back when
the request has been handled (its answer built: for a pipelined Produce, after its COMMIT) or
dropped (its connection closed). While the pool is used up, a connection that wants bytes stops
reading from its socket and waits in line; bytes given back go to the waiting connections in
the order they asked, each taking its frame's size, then they read on. A frame is admitted
while *any* bytes are left, even if it is larger than what is left: a request of any allowed
size is always read whole, so the pool is overdrawn by at most one frame
(``socket.request.max.bytes``), and a pool smaller than the largest request never blocks it for
ever. Small frames (at most ``SMALL_FRAME`` bytes: metadata, heartbeats, fetches, commits, small
produces) may also use a headroom of an eighth of the pool past it, without waiting behind the
large ones: a client filling the pool with large requests does not hold up everyone else's small
ones (Kafka's pool has no such headroom: there every request waits).

Giving memory back to the system: when the bytes in use have come down from a high mark
(``TRIM_AFTER_BYTES`` or more) to a quarter of it, ``trim_due`` says so once; the server then
calls ``heap.trim`` (glibc keeps the freed pages of large requests in its heaps otherwise).

``capacity`` None: no bound (``queued.max.request.bytes=-1``); the bytes are still counted.
Single-threaded: the event loop only.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Hashable

__all__ = ["RequestMemory", "SMALL_FRAME", "TRIM_AFTER_BYTES"]

#: a high mark of the bytes in use at least this large is followed by a heap trim once they drain
TRIM_AFTER_BYTES = 16 * 1024 * 1024
#: frames up to this size may use the headroom (an eighth of the pool) past a used-up pool
SMALL_FRAME = 64 * 1024


class RequestMemory:
    """See the module docstring."""

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity if capacity is not None and capacity > 0 else None
        self._small_limit = None if self.capacity is None else self.capacity + max(self.capacity // 8, SMALL_FRAME)
        self.used = 0
        #: the most in use at once since the last trim (``trim_due``)
        self.high = 0
        #: times a connection had to wait for bytes (observability, tests)
        self.waits = 0
        self._waiting: OrderedDict[Hashable, tuple[int, Callable[[], None]]] = OrderedDict()

    @property
    def exhausted(self) -> bool:
        return self.capacity is not None and self.used >= self.capacity

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def take(self, n: int) -> bool:
        """Take ``n`` bytes if any are left and nobody waits before us, or if ``n`` is a small
        frame that fits in the headroom (see the module docstring)."""
        if (self.exhausted or self._waiting) and not (
                n <= SMALL_FRAME and self._small_limit is not None and self.used + n <= self._small_limit):
            return False
        self._use(n)
        return True

    def has_room(self) -> bool:
        """Whether a ``take`` of a frame that is not small would succeed now."""
        return not self.exhausted and not self._waiting

    def add(self, n: int) -> None:
        """Take ``n`` bytes whatever is left (for a request already admitted: the server's
        bookkeeping of a pipelined request it checked ``has_room`` for; given back with ``give``)."""
        self._use(n)

    def wait(self, key: Hashable, n: int, granted: Callable[[], None]) -> None:
        """Queue ``key`` for ``n`` bytes: ``granted()`` is called (synchronously, from ``give``)
        once they are taken for it. One wait per key."""
        self.waits += 1
        self._waiting[key] = (n, granted)

    def cancel(self, key: Hashable) -> None:
        """``key`` no longer waits (its connection closed); nothing was taken for it."""
        self._waiting.pop(key, None)

    def give(self, n: int) -> None:
        """``n`` bytes taken earlier are free again; waiting connections are served in order."""
        self.used -= n
        if self.used < 0:  # a bug in the accounting: never block everyone for ever because of it
            self.used = 0
        while self._waiting and not self.exhausted:
            _key, (want, granted) = self._waiting.popitem(last=False)
            self._use(want)
            granted()

    def _use(self, n: int) -> None:
        self.used += n
        if self.used > self.high:
            self.high = self.used

    def trim_due(self) -> bool:
        """True once after the bytes in use came down from a high mark of ``TRIM_AFTER_BYTES``
        or more to under a quarter of it (then the mark starts again from what is in use)."""
        if self.high >= TRIM_AFTER_BYTES and self.used <= self.high // 4:
            self.high = self.used
            return True
        return False
