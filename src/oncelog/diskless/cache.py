"""The broker's byte cache of diskless batches, shared by all its fetches (issue 29,
docs/DISKLESS.md §2.7).

Entries are whole batches keyed by (object key, byte offset), least recently used evicted first,
at most ``max_bytes`` in all. The object writer puts every batch it commits (a consumer at the
tail reads without a GET); a fetch that misses asks for a *load*: the missing batches of one
object, coalesced into one ranged GET when they lie close together (gaps under
``coalesce_gap``), split into batches and put. Loads are single-flight (one GET per range,
however many fetches miss it), at most ``max_inflight`` GETs run at once and at most
``max_pending`` loads wait (a miss beyond that is simply not loaded now: the fetch asks again),
so nothing a client sizes grows without bound. A load that fails records its error against the
object for ``error_ttl_s``; reads of that object raise it (KAFKA_STORAGE_ERROR, retriable).

``get``/``put`` are thread-safe (a lock); ``load`` must be called on the event loop that runs
the GETs (the broker's).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from typing import Callable, Sequence

from oncelog.diskless.object_store import ObjectStore
from oncelog.protocol.errors import KafkaError, KafkaStorageError

__all__ = ["ByteCache"]

log = logging.getLogger(__name__)


class ByteCache:
    def __init__(self, store: ObjectStore | None, max_bytes: int, *, max_inflight: int = 32, max_pending: int = 256,
                 coalesce_gap: int = 64 << 10, error_ttl_s: float = 1.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self.max_bytes = max_bytes
        self._max_pending = max_pending
        self._gap = coalesce_gap
        self._error_ttl_s = error_ttl_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._bytes = 0
        self._loading: dict[tuple[str, int, int], asyncio.Task] = {}
        self._errors: dict[str, tuple[KafkaError, float]] = {}
        self._max_inflight = max_inflight
        self._sem: asyncio.Semaphore | None = None
        #: counters (observability, tests)
        self.hits = 0
        self.misses = 0
        self.gets = 0

    @property
    def size(self) -> int:
        with self._lock:
            return self._bytes

    def get(self, key: str, offset: int) -> bytes | None:
        with self._lock:
            data = self._entries.get((key, offset))
            if data is None:
                self.misses += 1
                return None
            self._entries.move_to_end((key, offset))
            self.hits += 1
            return data

    def put(self, key: str, offset: int, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop((key, offset), None)
            if old is not None:
                self._bytes -= len(old)
            self._entries[(key, offset)] = data
            self._bytes += len(data)
            while self._bytes > self.max_bytes:
                _, gone = self._entries.popitem(last=False)
                self._bytes -= len(gone)

    def error(self, key: str) -> KafkaError | None:
        """The error of the last failed load of object ``key``, while it is recent."""
        with self._lock:
            found = self._errors.get(key)
            if found is None:
                return None
            if self._monotonic() >= found[1]:
                del self._errors[key]
                return None
            return found[0]

    def load(self, key: str, ranges: Sequence[tuple[int, int]], on_done: Callable[[], None]) -> None:
        """Fetch the batches ``ranges`` ((byte offset, size), in byte order) of object ``key``
        into the cache in the background, then call ``on_done`` (on the loop)."""
        if self._store is None or not ranges:
            return
        loop = asyncio.get_running_loop()
        if self._sem is None:
            self._sem = asyncio.Semaphore(self._max_inflight)
        for group in self._coalesce(ranges):
            start = group[0][0]
            end = group[-1][0] + group[-1][1]
            ident = (key, start, end)
            task = self._loading.get(ident)
            if task is None:
                if len(self._loading) >= self._max_pending:
                    return  # bounded: the fetch asks again later
                task = loop.create_task(self._load(key, start, end, group))
                self._loading[ident] = task
                task.add_done_callback(lambda _t, ident=ident: self._loading.pop(ident, None))
            task.add_done_callback(lambda _t: on_done())

    def _coalesce(self, ranges: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]]:
        groups: list[list[tuple[int, int]]] = []
        for off, size in ranges:
            if groups and off - (groups[-1][-1][0] + groups[-1][-1][1]) <= self._gap and off >= groups[-1][-1][0]:
                groups[-1].append((off, size))
            else:
                groups.append([(off, size)])
        return groups

    async def _load(self, key: str, start: int, end: int, group: list[tuple[int, int]]) -> None:
        assert self._store is not None and self._sem is not None
        try:
            async with self._sem:
                self.gets += 1
                data = await self._store.get_range(key, start, end)
        except KafkaError as exc:
            log.warning("diskless: reading object %s [%d, %d) failed: %s", key, start, end, exc)
            with self._lock:
                self._errors[key] = (exc, self._monotonic() + self._error_ttl_s)
            return
        except Exception as exc:  # noqa: BLE001 - never lose a load's end (the fetch waits on it)
            log.exception("diskless: reading object %s failed", key)
            with self._lock:
                self._errors[key] = (KafkaStorageError(f"reading object {key}: {exc}"),
                                     self._monotonic() + self._error_ttl_s)
            return
        for off, size in group:
            self.put(key, off, data[off - start: off - start + size])
