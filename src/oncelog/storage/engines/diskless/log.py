"""A diskless partition's log (issue 29, docs/DISKLESS.md): batches in the object store,
coordinates in PostgreSQL. The storage engine (storage/engine.py) of topics created with
``diskless.enable=true``.

Theory of operation. ``submit`` assigns the next offsets as the partition's leader, stamps them
(and its leader epoch) into the 16 bytes outside the CRC and hands the batch, as an
``ObjectAppend``, to the broker's object writer (oncelog/diskless/writer.py, behind the
``ObjectCommitter`` protocol below), which gathers the batches of every diskless partition the
broker leads into one object per interval, uploads it and commits the coordinates of all its
batches in one PostgreSQL transaction (conditional, per batch, on the leader epoch and the log
end). The returned ``PendingAppend`` (pending.py) completes after that COMMIT. So ``Partition``
(producer state, LSO, markers, aborted index, KIP-890 verification) is the same code for every
engine: transactions on diskless topics need no second implementation.

Offsets and failures as in the PostgreSQL engine: ``_next`` is the end including batches
submitted but not yet committed, ``log_end_offset`` the committed end; if an append fails,
every later batch of the partition was given offsets after it and fails too (the store
refuses it: log end moved), and the engine refuses new appends (``failed``) until its leader
is rebuilt from the store (the leader tracker closes a partition whose engine failed and opens
it again at the next view).

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
bytes are not fetched): ``offset_for_timestamp`` gives the first batch whose max timestamp
reaches the time, ``max_timestamp_offset`` the base offset of the batch holding the largest one.
Retention and DeleteRecords delete coordinates in one transaction conditional on the epoch;
the objects they pointed into are deleted by the collector (oncelog/diskless/collector.py).
Compaction is refused at the topic level (oncelog/diskless/topic_rules.py): ``plan_compaction``
answers None. The database outbox (issue 31) drains into it like into any partition:
``outbox_id`` is the partition id, and ``submit(..., drained=ids)`` hands the rows' ids to the
writer, whose commit deletes them in the transaction that commits the batch's coordinates. No file
on the broker's disk (``disk_usage`` (-1, -1)) and no segment (constant active base offset).

This module is synchronous, like every engine core: the object store, the writer and the cache
(which use asyncio) are oncelog/diskless/'s, seen here only through the two protocols.
Thread-safety: the writer completes futures on the event loop and calls ``_committed`` there;
the committed end, the in-flight count and the failure are guarded by a lock, the tail by
another. Reads and retention run on the owner's thread (the opener's during recovery, then the
event loop's: ``hand_over``).
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
from oncelog.cluster.errors import LeaderFenced, StoreUnavailable
from oncelog.cluster.leadership import Leadership
from oncelog.protocol.errors import CorruptMessage, KafkaError, KafkaStorageError, MessageTooLarge, OffsetOutOfRange
from oncelog.protocol.records import BatchHeader, LOG_OVERHEAD, offset_prefix, parse_header
from oncelog.storage.batch_append import BatchAppend
from oncelog.storage.config import LogConfig
from oncelog.storage.engine import CompactionPass
from oncelog.storage.engines.diskless.pending import PendingAppend
from oncelog.storage.parts import ReadPart

__all__ = ["Committed", "DisklessPartitionLog", "ObjectAppend", "ObjectCommitter", "PendingAppend", "ReadCache"]

log = logging.getLogger(__name__)

#: coordinates of the newest batches kept in memory per partition (~100 bytes each)
TAIL_BATCHES = 1_000
_PAGE_ROWS = 1000
_FLOOR = ("coalesce((SELECT max(base_offset) FROM oncelog_dl_batch WHERE partition_id = %(p)s "
          "AND base_offset <= %(o)s), %(o)s)")
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


class DisklessPartitionLog:
    """One diskless partition's log, led under ``lead.leader_epoch``; see the module docstring.
    ``store`` is the reader connection of the thread that owns this object; ``writer`` and
    ``cache`` are the broker's (one each for all its diskless partitions)."""

    def __init__(self, store: StoreConnection, writer: ObjectCommitter, lead: Leadership, config: LogConfig,
                 cache: ReadCache) -> None:
        self._store = store
        self._writer = writer
        self._cache = cache
        self.lead = lead
        self.config = config
        self.what = f"{lead.topic}-{lead.partition}"
        self._lock = threading.Lock()
        self._start = lead.log_start_offset
        self._end = lead.log_end_offset  # committed
        self._next = lead.log_end_offset  # committed + submitted
        self._inflight = 0
        self._failed: KafkaError | None = None
        #: the control batches of the header page ``iter_headers`` is walking, by base offset
        self._page_controls: dict[int, bytes] = {}
        self._tail: deque[Committed] = deque(maxlen=TAIL_BATCHES)
        self._tail_lock = threading.Lock()
        #: called (on the loop) when bytes a read missed have been loaded
        self.on_ready: Callable[[], None] = lambda: None
        #: base offsets of the damaged batches already logged (bounded: cleared when large)
        self._reported: set[int] = set()
        writer.register(self.partition_id, self._committed)

    def hand_over(self, store: StoreConnection) -> None:
        """From now on reads go through ``store`` (the opener thread hands the log to the loop)."""
        self._store = store

    def _committed(self, coords: list[Committed]) -> None:
        with self._tail_lock:
            self._tail.extend(coords)

    # -- state ------------------------------------------------------------------------------

    @property
    def partition_id(self) -> int:
        return self.lead.partition_id

    @property
    def leader_epoch(self) -> int:
        return self.lead.leader_epoch

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        """The committed end: the offset the next committed record gets."""
        with self._lock:
            return self._end

    @property
    def active_base_offset(self) -> int:
        return 0  # no segments: never "rolls"

    @property
    def pending_deletes(self) -> int:
        return 0  # coordinates are gone at COMMIT; objects are the collector's

    @property
    def size_bytes(self) -> int:
        """The bytes of the readable batches (DescribeLogDirs); one query."""
        rows = self._query("SELECT coalesce(sum(size), 0) FROM oncelog_dl_batch WHERE partition_id = %(p)s "
                           "AND last_offset >= %(s)s AND base_offset < %(u)s",
                           {"p": self.partition_id, "s": self._start, "u": self.log_end_offset})
        return int(rows[0][0]) if rows else 0

    def disk_usage(self) -> tuple[int, int]:
        return -1, -1  # no files on the broker's disk

    @property
    def outbox_id(self) -> int:
        """This partition's key in ``oncelog.outbox`` (issue 31): its partition id."""
        return self.partition_id

    @property
    def failed(self) -> KafkaError | None:
        """The error that stopped appends (None while healthy): the leader is rebuilt."""
        with self._lock:
            return self._failed

    # -- writing ----------------------------------------------------------------------------

    def submit(self, batch: bytes | bytearray | memoryview, header: BatchHeader, now_ms: int | None = None, *,
               drained: tuple[int, ...] = ()) -> PendingAppend:
        """The engine contract's append (storage/engine.py): assign the next offsets to a
        validated batch and hand it to the object writer; the ``PendingAppend`` completes after
        the COMMIT of the object's coordinates. ``drained``: the ``oncelog.outbox`` rows the
        batch holds (issue 31), deleted in that same COMMIT (all of them, or the batch is refused
        and nothing of it written). Raises MessageTooLarge, ValueError (header does not match),
        StoreUnavailable (writer closed), or the error that stopped an earlier append of this
        partition."""
        size = header.size
        if len(batch) != size:
            raise ValueError(f"batch has {len(batch)} bytes, its header says {size}")
        if size > self.config.max_message_bytes:
            raise MessageTooLarge(f"record batch of {size} bytes exceeds max.message.bytes {self.config.max_message_bytes}")
        view = batch if isinstance(batch, memoryview) else memoryview(batch)
        with self._lock:
            if self._failed is not None:
                raise self._failed
            base = self._next
            last = base + header.last_offset_delta
            self._next = last + 1
            self._inflight += 1
        data = b"".join((offset_prefix(batch, base, self.leader_epoch), view[16:]))
        req = ObjectAppend(self.partition_id, self.what, self.leader_epoch, base, last, header.max_timestamp,
                           header.producer_id, header.producer_epoch, header.base_sequence,
                           header.is_transactional, header.is_control, data, drained=tuple(drained))
        try:
            fut = self._writer.submit(req)
        except KafkaError as exc:
            self._stop(exc)
            raise
        fut.add_done_callback(lambda f: self._on_done(f, last))
        return PendingAppend(base, last, fut)

    def _on_done(self, fut: Future, last: int) -> None:
        if fut.cancelled():  # never by the writer or PendingAppend; whatever did it, the outcome is unknown
            self._stop(StoreUnavailable(f"{self.what}: an append was cancelled", outcome_unknown=True))
            return
        exc = fut.exception()
        if exc is not None:
            self._stop(exc if isinstance(exc, KafkaError) else StoreUnavailable(str(exc), outcome_unknown=True))
            return
        with self._lock:
            self._inflight -= 1
            self._end = max(self._end, last + 1)

    def _stop(self, exc: KafkaError) -> None:
        """An append finished with ``exc``: stop appends (the first error is kept)."""
        with self._lock:
            self._inflight -= 1
            if self._failed is None:
                self._failed = exc

    def flush(self, now_ms: int | None = None) -> None:
        """Nothing to do: an append completes only after COMMIT."""

    def _check_offset(self, offset: int, end: int) -> None:
        if offset < self._start or offset > end:
            raise OffsetOutOfRange(f"{self.what}: offset {offset} outside [{self._start}, {end}]")

    def _query(self, sql: str, params: dict, *, binary: bool = False) -> list[tuple]:
        return self._store.query(sql, params, binary=binary)

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
        end = self.log_end_offset
        self._check_offset(offset, end)
        upper = end if max_offset is None else min(max_offset, end)
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
        end = self.log_end_offset
        self._check_offset(offset, end)
        upper = end if max_offset is None else min(max_offset, end)
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

    def iter_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        """Headers of the batches whose last offset >= ``from_offset``, rebuilt from the
        coordinates' columns (no object is read); control batches from their inline bytes, kept
        for ``read_batches`` while their page is walked (recovery reads each marker next)."""
        offset = max(from_offset, self._start)
        end = self.log_end_offset
        try:
            while offset < end:
                rows = self._query(_HEADERS, {"p": self.partition_id, "o": offset, "u": end}, binary=True)
                if not rows:
                    return
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
                for h in headers:
                    yield h
                    offset = h.next_offset
        finally:
            self._page_controls = {}

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(largest max timestamp, base offset of its first batch): batch granularity."""
        rows = self._query(
            "SELECT max_timestamp, base_offset FROM oncelog_dl_batch WHERE partition_id = %(p)s "
            "AND last_offset >= %(s)s AND base_offset < %(u)s ORDER BY max_timestamp DESC, base_offset LIMIT 1",
            {"p": self.partition_id, "s": self._start, "u": self.log_end_offset})
        if not rows:
            return None
        ts, base = rows[0]
        return ts, max(base, self._start)

    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """The first batch at or after the log start whose max timestamp >= ``ts_ms``: its base
        offset and max timestamp (batch granularity, allowed by the engine contract)."""
        rows = self._query(
            "SELECT base_offset, max_timestamp FROM oncelog_dl_batch WHERE partition_id = %(p)s "
            "AND last_offset >= %(s)s AND base_offset < %(u)s AND max_timestamp >= %(t)s "
            "ORDER BY base_offset LIMIT 1",
            {"p": self.partition_id, "s": self._start, "u": self.log_end_offset, "t": ts_ms})
        if not rows:
            return None
        base, ts = rows[0]
        return max(base, self._start), ts

    # -- leader epochs ----------------------------------------------------------------------

    def epoch_bounds(self, epoch: int) -> tuple[int | None, int | None]:
        rows = self._query(
            "SELECT (SELECT leader_epoch FROM oncelog_dl_batch WHERE partition_id = %(p)s AND leader_epoch <= %(e)s "
            "ORDER BY leader_epoch DESC LIMIT 1), "
            "(SELECT base_offset FROM oncelog_dl_batch WHERE partition_id = %(p)s AND leader_epoch > %(e)s "
            "ORDER BY leader_epoch, base_offset LIMIT 1)", {"p": self.partition_id, "e": epoch})
        return (rows[0][0], rows[0][1]) if rows else (None, None)

    def epoch_at(self, offset: int) -> int:
        if offset >= self.log_end_offset:
            return self.leader_epoch
        rows = self._query(
            "SELECT leader_epoch FROM oncelog_dl_batch WHERE partition_id = %(p)s AND base_offset <= %(o)s "
            "ORDER BY base_offset DESC LIMIT 1", {"p": self.partition_id, "o": offset})
        return rows[0][0] if rows else self.leader_epoch

    # -- retention --------------------------------------------------------------------------

    def enforce_retention(self, now_ms: int) -> int:
        """Delete the oldest coordinates breaching retention.ms (by max timestamp) or
        retention.bytes, never the newest batch; the objects are the collector's."""
        c = self.config
        if "delete" not in c.cleanup_policy.split(","):
            return 0
        p = {"p": self.partition_id, "o": self._start, "u": self.log_end_offset}
        rows = self._query("SELECT max(base_offset) FROM oncelog_dl_batch WHERE partition_id = %(p)s "
                           "AND base_offset < %(u)s", p)
        newest = rows[0][0] if rows else None
        if newest is None:
            return 0
        keep_from = self._start
        if c.retention_ms >= 0:
            rows = self._query(
                f"SELECT base_offset FROM oncelog_dl_batch WHERE partition_id = %(p)s AND base_offset >= {_FLOOR} "
                f"AND max_timestamp >= %(cut)s ORDER BY base_offset LIMIT 1", p | {"cut": now_ms - c.retention_ms})
            keep_from = max(keep_from, rows[0][0] if rows else newest)
        if c.retention_bytes >= 0:
            rows = self._query(
                f"SELECT base_offset FROM (SELECT base_offset, sum(size) OVER (ORDER BY base_offset DESC) - size "
                f"AS after FROM oncelog_dl_batch WHERE partition_id = %(p)s AND base_offset >= {_FLOOR} "
                f"AND base_offset < %(u)s) s WHERE after < %(r)s ORDER BY base_offset LIMIT 1",
                p | {"r": c.retention_bytes})
            keep_from = max(keep_from, rows[0][0] if rows else newest)
        keep_from = min(keep_from, newest)
        if keep_from <= self._start:
            return 0
        return self._advance_start(keep_from)

    def _advance_start(self, offset: int) -> int:
        """Move the log start to ``offset`` and delete the coordinates wholly below it, in one
        transaction conditional on the epoch (DeleteRecords, retention)."""
        if offset <= self._start:
            return 0
        with self._store.transaction() as conn:
            row = conn.execute(
                "SELECT leader_broker, leader_epoch, log_start_offset, log_end_offset FROM oncelog_partition "
                "WHERE id = %s FOR UPDATE", (self.partition_id,)).fetchone()
            if row is None:
                raise LeaderFenced(self.what, self.leader_epoch, -1, -1)
            leader, epoch, start, end = row
            if epoch != self.leader_epoch:
                raise LeaderFenced(self.what, self.leader_epoch, epoch, leader)
            if offset > end:
                raise OffsetOutOfRange(f"{self.what}: log start {offset} beyond log end {end}")
            if offset <= start:
                deleted, offset = 0, start
            else:
                conn.execute("UPDATE oncelog_partition SET log_start_offset = %s WHERE id = %s",
                             (offset, self.partition_id))
                deleted = conn.execute(
                    "DELETE FROM oncelog_dl_batch WHERE partition_id = %s AND base_offset < %s AND last_offset < %s",
                    (self.partition_id, offset, offset)).rowcount
        with self._lock:
            self._start = max(self._start, offset)
        return deleted

    def set_log_start_offset(self, offset: int, now_ms: int | None = None) -> None:
        """DeleteRecords: move the log start up to ``offset`` and delete the coordinates wholly
        below it, in one transaction conditional on the epoch."""
        self._advance_start(offset)

    def plan_compaction(self, upper: int, now_ms: int, stop: threading.Event) -> CompactionPass | None:
        """None: diskless topics are never compacted (``cleanup.policy=compact`` is refused at
        creation and alteration, oncelog/diskless/topic_rules.py)."""
        return None

    def cleanup_deleted(self, now_ms: int) -> int:
        return 0

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop receiving coordinates; the writer, cache and connection belong to the broker."""
        self._writer.unregister(self.partition_id, self._committed)

    def delete(self, now_ms: int | None = None) -> None:
        """DeleteTopics: remove the partition's row and (cascading) its coordinates, if this
        engine still leads it; the objects are the collector's."""
        with self._store.transaction() as conn:
            conn.execute("DELETE FROM oncelog_partition WHERE id = %s AND leader_epoch = %s",
                         (self.partition_id, self.leader_epoch))

    def __repr__(self) -> str:
        return f"DisklessPartitionLog({self.what}, epoch={self.leader_epoch}, start={self._start}, end={self._end})"


def _stamped(data: bytes, c: Committed) -> bytes:
    """The batch with its coordinates' base offset and leader epoch (outside the CRC)."""
    prefix = offset_prefix(data, c.base_offset, c.leader_epoch)
    if data[:16] == prefix:
        return data
    return prefix + data[16:]
