"""A diskless partition's log (issue 29, docs/DISKLESS.md): batches in the object store,
coordinates in PostgreSQL. The storage engine (storage/engine.py) of topics created with
``diskless.enable=true``.

Theory of operation. The engine is the store-backed leader log (storage/store_log.py: leader
state, offsets, ``submit``, retention, DeleteRecords, epochs and timestamps, shared with the
PostgreSQL engine) whose committer is the broker's object writer (oncelog/diskless/writer.py,
behind the ``ObjectCommitter`` protocol below): ``submit`` hands it the batch, with its offsets
and leader epoch stamped outside the CRC, as an ``ObjectAppend``; the writer gathers the batches
of every diskless partition the broker leads into one object per interval, uploads it and
commits the coordinates of all its batches in one PostgreSQL transaction (conditional, per
batch, on the leader epoch and the log end: the fence ``oncelog_fence``). The returned
``PendingAppend`` (storage/store_pending.py) completes after that COMMIT. So ``Partition``
(producer state, LSO, markers, aborted index, KIP-890 verification) is the same code for every
engine: transactions on diskless topics need no second implementation. A failed append stops
the partition's appends until its leader is rebuilt from the store (the leader tracker closes a
partition whose engine failed and opens it again at the next view).

Reads never touch PostgreSQL for the tail and never block the event loop on the object store:

1. Coordinates: the tail of the partition (the last ``TAIL_BATCHES`` batches this engine
   committed) is in memory (the writer hands them over at COMMIT); older offsets are
   looked up in ``oncelog_dl_batch`` by primary key, one query per read.
2. Bytes: whole batches from the broker's read cache (``ReadCache``; the writer seeds it; a
   control batch is inline in its coordinates). On a miss the read returns the batches before
   the miss (none if the first one misses) and starts a background load of the missing ones
   (one ranged GET per object, coalesced); when it lands ``on_ready`` is called (the leader
   tracker sets it to ``Partition.wake_waiters``), so a long-polling fetch is answered as soon
   as the bytes are here. A load that failed makes the next read of that object raise its
   KAFKA_STORAGE_ERROR (retriable). A batch the cache found *damaged* when it loaded it (its
   object or bucket gone, the object cut short, or the batch's CRC32C, length or magic wrong:
   oncelog/diskless/cache.py) is never served: a read starting in it raises CORRUPT_MESSAGE (not
   retriable: clients surface it — librdkafka as a consume error, kafka-python by raising, the
   Java consumer by throwing from poll), a read reaching it stops before it, and a read after it
   is served, as the embedded engine serves around a damaged region of a segment
   (storage/engines/local/damage.py); the first read to meet each damaged batch logs one line
   with the partition and offsets.
3. Each batch is served with the base offset and leader epoch of its coordinates (bytes 0-7
   and 12-15, outside the CRC); the rest are the producer's bytes.

Timestamps (ListOffsets) are answered at batch granularity from the coordinates (the record
bytes are not fetched). Retention and DeleteRecords delete coordinates; the objects they
pointed into are deleted by the collector (oncelog/diskless/collector.py). Compaction is refused
at the topic level (oncelog/diskless/topic_rules.py): ``plan_compaction`` answers None. The
database outbox (issue 31) drains into it like into any partition: ``outbox_id`` is the
partition id, and ``submit(..., drained=ids)`` hands the rows' ids to the writer, whose commit
deletes them in the transaction that commits the batch's coordinates. No file on the broker's
disk (``disk_usage`` (-1, -1)) and no segment (constant active base offset).

This module is synchronous, like every engine core: the object store, the writer and the cache
(which use asyncio) are oncelog/diskless/'s, seen here only through the two protocols.
Thread-safety: the writer completes futures on the event loop and calls ``_committed`` there;
the tail is guarded by its own lock (the rest as in storage/store_log.py). Reads and retention
run on the owner's thread (the opener's during recovery, then the event loop's: ``hand_over``).
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol, Sequence

from oncelog.cluster.connection import StoreConnection
from oncelog.cluster.leadership import Leadership
from oncelog.protocol.errors import CorruptMessage, KafkaError, KafkaStorageError
from oncelog.protocol.records import BatchHeader, LOG_OVERHEAD, offset_prefix, parse_header
from oncelog.storage.batch_append import BatchAppend
from oncelog.storage.config import LogConfig
from oncelog.storage.parts import ReadPart
from oncelog.storage.store_log import PendingAppend, StoreLeaderLog, floor_sql

__all__ = ["Committed", "DisklessPartitionLog", "ObjectAppend", "ObjectCommitter", "PendingAppend", "ReadCache"]

log = logging.getLogger(__name__)

#: coordinates of the newest batches kept in memory per partition (~100 bytes each)
TAIL_BATCHES = 1_000
_PAGE_ROWS = 1000
_FLOOR = floor_sql("oncelog_dl_batch")
_COORDS = ("SELECT b.base_offset, b.last_offset, b.size, o.object_key, b.byte_offset, b.leader_epoch, b.inline_data "
           "FROM oncelog_dl_batch b LEFT JOIN oncelog_dl_object o ON o.id = b.object_id "
           "WHERE b.partition_id = %(p)s AND b.base_offset >= " + _FLOOR + " AND b.base_offset < %(u)s "
           "ORDER BY b.base_offset LIMIT %(n)s")
_HEADERS = ("SELECT base_offset, last_offset, size, leader_epoch, attributes, first_timestamp, max_timestamp, "
            "producer_id, producer_epoch, base_sequence, record_count, inline_data FROM oncelog_dl_batch "
            "WHERE partition_id = %(p)s AND base_offset >= " + _FLOOR + " AND last_offset >= %(o)s "
            "AND last_offset < %(u)s ORDER BY base_offset LIMIT " + str(_PAGE_ROWS))


#: one batch for the object writer (the engine-neutral request of storage/batch_append.py)
ObjectAppend = BatchAppend


@dataclass(frozen=True, slots=True)
class Committed:
    """The coordinates of one committed batch, as its engine keeps them for reads."""

    base_offset: int
    last_offset: int
    size: int
    object_key: str | None  # None: inline (a control batch)
    byte_offset: int
    leader_epoch: int
    inline: bytes | None


class ObjectCommitter(Protocol):
    """What the engine needs of the broker's object writer (oncelog/diskless/writer.py)."""

    def submit(self, req: ObjectAppend) -> Future:
        """Queue ``req`` for the next object; its future completes after the COMMIT. Raises
        StoreUnavailable when closed."""
        ...

    def register(self, partition_id: int, listener: Callable[[list[Committed]], None]) -> None:
        """``listener`` gets the coordinates of the partition's committed batches, before their
        futures complete."""
        ...

    def unregister(self, partition_id: int, listener: Callable[[list[Committed]], None]) -> None: ...


class ReadCache(Protocol):
    """What the engine needs of the broker's read cache (oncelog/diskless/cache.py)."""

    max_bytes: int

    def get(self, key: str, offset: int) -> bytes | None:
        """The cached batch at ``offset`` of object ``key``, or None."""
        ...

    def error(self, key: str, offset: int) -> KafkaError | None:
        """Why the batch at ``offset`` of ``key`` cannot be read: CORRUPT_MESSAGE while it is
        known damaged, else the retriable error of the last failed load of ``key``, else None."""
        ...

    def load(self, key: str, ranges: Sequence[tuple[int, int]], on_done: Callable[[], None]) -> None:
        """Start loading ``ranges`` (offset, size) of ``key`` in the background; ``on_done``
        when they landed (or failed)."""
        ...


class DisklessPartitionLog(StoreLeaderLog):
    """One diskless partition's log, led under ``lead.leader_epoch``: the store-backed leader
    log (storage/store_log.py) with its batches' coordinates in rows of ``oncelog_dl_batch`` and
    their bytes in the object store; see the module docstring. ``store`` is the reader connection
    of the thread that owns this object; ``writer`` and ``cache`` are the broker's (one each for
    all its diskless partitions)."""

    BATCHES = "oncelog_dl_batch"

    def __init__(self, store: StoreConnection, writer: ObjectCommitter, lead: Leadership, config: LogConfig,
                 cache: ReadCache) -> None:
        super().__init__(store, writer, lead, config)
        self._writer = writer
        self._cache = cache
        self._tail: deque[Committed] = deque(maxlen=TAIL_BATCHES)
        self._tail_lock = threading.Lock()
        #: base offsets of the damaged batches already logged (bounded: cleared when large)
        self._reported: set[int] = set()
        writer.register(self.partition_id, self._committed)

    def _committed(self, coords: list[Committed]) -> None:
        with self._tail_lock:
            self._tail.extend(coords)

    # -- reading ----------------------------------------------------------------------------

    def _coordinates(self, offset: int, upper: int, max_rows: int = _PAGE_ROWS) -> list[Committed]:
        """Coordinates of the batches from the one holding ``offset`` to ``upper`` (exclusive),
        oldest first: from the in-memory tail when it covers ``offset``, else from the store."""
        with self._tail_lock:
            tail = self._tail
            if tail and tail[0].base_offset <= offset:
                i = max(0, bisect.bisect_right(tail, offset, key=lambda c: c.base_offset) - 1)
                out = []
                for j in range(i, len(tail)):
                    c = tail[j]
                    if c.base_offset >= upper or len(out) >= max_rows:
                        break
                    out.append(c)
                return out
        rows = self._query(_COORDS, {"p": self.partition_id, "o": offset, "u": upper, "n": max_rows}, binary=True)
        return [Committed(base, last, size, key, boff, epoch, None if inline is None else bytes(inline))
                for base, last, size, key, boff, epoch, inline in rows]

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> list[ReadPart]:
        """Whole batches as one in-memory chunk (see the module docstring: a cache miss returns
        the batches before it and loads the rest in the background)."""
        upper = self._upper(offset, max_offset)
        if offset >= upper:
            return []
        out: list[bytes] = []
        total = 0
        missing: dict[str, list[tuple[int, int]]] = {}
        missing_bytes = 0
        for c in self._coordinates(offset, upper):
            if c.last_offset < offset:
                continue  # the batch below ``offset`` when it ends before it (a gap)
            if c.last_offset >= upper:
                break
            if missing:
                # a load brings at most what a quarter of the cache holds (at least the batch
                # missed first), so what it brings is still there when the fetch asks again
                if missing_bytes + c.size > min(max_bytes, self._cache.max_bytes // 4):
                    break
                if c.object_key is not None:
                    missing.setdefault(c.object_key, []).append((c.byte_offset, c.size))
                    missing_bytes += c.size
                continue
            if total + c.size > max_bytes and (out or not min_one_batch):
                break
            data = c.inline if c.inline is not None else self._cache.get(c.object_key, c.byte_offset)  # type: ignore[arg-type]
            if data is None:
                assert c.object_key is not None
                err = self._cache.error(c.object_key, c.byte_offset)
                if err is not None:
                    if out:
                        break  # what came before is served; the next read starts here
                    self._report(err, c)
                    raise err
                missing[c.object_key] = [(c.byte_offset, c.size)]
                missing_bytes = c.size
                continue
            out.append(_stamped(data, c))
            total += c.size
        if missing:
            for key, ranges in missing.items():
                self._cache.load(key, ranges, self.on_ready)
        return [b"".join(out)] if out else []

    def read_batches(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """The batches of ``read`` in memory; a control batch of the header page being walked
        (``iter_headers``, recovery) without a query. Raises KafkaStorageError when bytes are not
        cached (the callers — recovery reading a marker — only need inline control batches)."""
        control = self._page_controls.get(offset)
        if control is not None and len(control) <= max_bytes:
            return control
        upper = self._upper(offset, max_offset)
        out: list[bytes] = []
        total = 0
        for c in self._coordinates(offset, upper):
            if c.last_offset < offset:
                continue
            if c.last_offset >= upper or (out and total + c.size > max_bytes):
                break
            data = c.inline if c.inline is not None else self._cache.get(c.object_key, c.byte_offset)  # type: ignore[arg-type]
            if data is None:
                err = self._cache.error(c.object_key, c.byte_offset)  # type: ignore[arg-type]
                if isinstance(err, CorruptMessage):
                    self._report(err, c)
                    raise err
                raise KafkaStorageError(f"{self.what}: batch at {c.base_offset} is not in the read cache")
            out.append(_stamped(data, c))
            total += c.size
        return b"".join(out)

    def _report(self, err: KafkaError, c: Committed) -> None:
        """One log line per damaged batch (per process): the partition, its offsets, why."""
        if not isinstance(err, CorruptMessage) or c.base_offset in self._reported:
            return
        if len(self._reported) >= 10_000:
            self._reported.clear()
        self._reported.add(c.base_offset)
        log.error("diskless: %s offsets %d..%d cannot be served (CORRUPT_MESSAGE): %s; readers past them go on "
                  "(seek, or DeleteRecords to offset %d)", self.what, c.base_offset, c.last_offset, err,
                  c.last_offset + 1)

    def iter_batches(self, from_offset: int | None = None) -> Iterator[tuple[BatchHeader, bytes]]:
        """Not for diskless partitions (coordinator loading reads internal topics, which are
        never diskless): the batches that are cached, then KafkaStorageError at the first that
        is not."""
        offset = self._start if from_offset is None else max(from_offset, self._start)
        while offset < self.log_end_offset:
            data = self.read_batches(offset, 1 << 20)
            if not data:
                return
            pos = 0
            while pos < len(data):
                h = parse_header(data, pos)
                yield h, data[pos:pos + h.size]
                pos += h.size
                offset = h.next_offset

    def _header_page(self, offset: int, end: int) -> list[BatchHeader]:
        """Headers rebuilt from the coordinates' columns (no object is read); control batches
        from their inline bytes, kept for ``read_batches`` while their page is walked (recovery
        reads each marker next: ``iter_headers``)."""
        rows = self._query(_HEADERS, {"p": self.partition_id, "o": offset, "u": end}, binary=True)
        self._page_controls = {}
        headers = []
        for (base, last, size, epoch, attrs, first_ts, max_ts, pid, pepoch, seq, count, inline) in rows:
            if inline is not None:
                data = bytes(inline)
                h = parse_header(offset_prefix(data, base, epoch) + data[16:])
                self._page_controls[base] = offset_prefix(data, base, epoch) + data[16:]
            else:
                h = BatchHeader(base, size - LOG_OVERHEAD, epoch, 2, 0, attrs, last - base, first_ts, max_ts,
                                pid, pepoch, seq, count)
            headers.append(h)
        return headers

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop receiving coordinates; the writer, cache and connection belong to the broker."""
        self._writer.unregister(self.partition_id, self._committed)


def _stamped(data: bytes, c: Committed) -> bytes:
    """The batch with its coordinates' base offset and leader epoch (outside the CRC)."""
    prefix = offset_prefix(data, c.base_offset, c.leader_epoch)
    if data[:16] == prefix:
        return data
    return prefix + data[16:]
