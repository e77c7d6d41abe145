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

Damage. Every batch a load brings is checked before it is cached, cheaply and per batch: its
length field must match its coordinates' size, its magic must be 2, and the CRC32C of its bytes
from the attributes on must be the one in its header (what a consumer would check, and
confluent-kafka does not by default). A batch that fails, a batch its object no longer holds
(the object, or its bucket, is gone: HTTP 404; or the object ends before it: a short answer or
HTTP 416) is *damaged*: never cached nor served; ``error(key, offset)`` answers
CORRUPT_MESSAGE for it (not retriable: the bytes are not coming back by waiting), as the
embedded engine does for a damaged region of a segment (storage/engines/local/damage.py). The
batches of the same load that are sound are cached and served. A damage record is kept for
``damage_ttl_s`` (then the batch is loaded and checked again: an operator may have restored
the object); each load that finds damage logs one line naming the object and what is wrong,
and counts the damaged batches by kind (``damaged``: missing, truncated, corrupt), which
/metrics shows.

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

import crc32c

from oncelog.diskless.object_store import ObjectNotFound, ObjectStore, ObjectTruncated
from oncelog.protocol.errors import CorruptMessage, KafkaError, KafkaStorageError
from oncelog.protocol.records import CRC_START, LOG_OVERHEAD, MAGIC

__all__ = ["ByteCache", "DAMAGE_KINDS", "unsound"]

#: what a damaged batch is, in the ``damaged`` counters
DAMAGE_KINDS = ("missing", "truncated", "corrupt")
#: damage records kept at most (the oldest are forgotten first: their batches are checked again)
MAX_DAMAGE_RECORDS = 100_000

log = logging.getLogger(__name__)


class ByteCache:
    def __init__(self, store: ObjectStore | None, max_bytes: int, *, max_inflight: int = 32, max_pending: int = 256,
                 coalesce_gap: int = 64 << 10, error_ttl_s: float = 1.0, damage_ttl_s: float = 60.0,
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
        self._damage_ttl_s = damage_ttl_s
        #: (object key, byte offset) -> (CORRUPT_MESSAGE, until when), oldest first
        self._damage: OrderedDict[tuple[str, int], tuple[KafkaError, float]] = OrderedDict()
        #: batches found damaged, by kind (DAMAGE_KINDS): each load that finds one counts it
        self.damaged: dict[str, int] = dict.fromkeys(DAMAGE_KINDS, 0)
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

    def error(self, key: str, offset: int) -> KafkaError | None:
        """Why the batch at ``offset`` of object ``key`` cannot be read: its damage
        (CORRUPT_MESSAGE) while recorded, else the error of the last failed load of the object
        while it is recent (retriable), else None."""
        with self._lock:
            damage = self._damage.get((key, offset))
            if damage is not None:
                if self._monotonic() < damage[1]:
                    return damage[0]
                del self._damage[(key, offset)]
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
        except ObjectNotFound as exc:
            self._damaged(key, [(off, "missing", str(exc)) for off, _ in group])
            return
        except ObjectTruncated as exc:
            data = exc.available  # the batches it still holds are checked and kept below
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
        damaged: list[tuple[int, str, str]] = []
        for off, size in group:
            rel = off - start
            if rel + size > len(data):
                damaged.append((off, "truncated", f"the object ends at byte {start + len(data)}, "
                                                  f"before this batch's end ({off + size})"))
                continue
            piece = data[rel: rel + size]
            why = unsound(piece, size)
            if why is not None:
                damaged.append((off, "corrupt", why))
                continue
            self.put(key, off, piece)
        if damaged:
            self._damaged(key, damaged)

    def _damaged(self, key: str, batches: list[tuple[int, str, str]]) -> None:
        """Record ``batches`` ((byte offset, kind, why)) of object ``key`` as damaged; one log line."""
        until = self._monotonic() + self._damage_ttl_s
        with self._lock:
            for off, kind, why in batches:
                self._damage[(key, off)] = (CorruptMessage(f"diskless object {key}, batch at byte {off}: {why}"), until)
                self._damage.move_to_end((key, off))
                self.damaged[kind] += 1
            while len(self._damage) > MAX_DAMAGE_RECORDS:
                self._damage.popitem(last=False)
        kinds = sorted({kind for _, kind, _ in batches})
        log.error("diskless: object %s is damaged (%s): %d batch(es) from byte %d cannot be served "
                  "(CORRUPT_MESSAGE to readers); first: %s", key, ", ".join(kinds), len(batches), batches[0][0],
                  batches[0][2])


def unsound(batch: bytes, size: int) -> str | None:
    """Why ``batch`` (``size`` bytes, as its coordinates say) is not the batch that was written,
    or None: its length field, its magic and its CRC32C, checked as a consumer would check them
    (one CRC over the batch, no record parsed)."""
    if len(batch) != size or size < CRC_START:
        return f"{len(batch)} bytes, {size} expected"
    length = int.from_bytes(batch[8:12], "big", signed=True)
    if length + LOG_OVERHEAD != size:
        return f"its length field says {length + LOG_OVERHEAD} bytes, its coordinates {size}"
    if batch[16] != MAGIC:
        return f"magic {batch[16]}, expected {MAGIC}"
    stored = int.from_bytes(batch[17:21], "big")
    actual = crc32c.crc32c(memoryview(batch)[CRC_START:])
    if stored != actual:
        return f"CRC32C mismatch: its header says {stored:#010x}, its bytes give {actual:#010x}"
    return None
