"""A diskless partition's log (issue 29, docs/DISKLESS.md): batches in the object store,
coordinates in PostgreSQL. The storage engine (storage/engine.py) of topics created with
``diskless.enable=true``.

Theory of operation. The engine is the PostgreSQL engine (cluster/pg_log.py) with another
committer and another table: ``submit`` — inherited unchanged — assigns the next offsets as the
partition's leader, stamps them into the 16 bytes outside the CRC and hands the batch to the
broker's ``ObjectWriter`` (diskless/writer.py), whose future completes after the COMMIT of the
object's coordinates; the in-flight bookkeeping, ``resync`` after a failure and the leader
epoch's fencing are the PostgreSQL engine's. So ``Partition`` (producer state, LSO, markers,
aborted index, KIP-890 verification) is the same code for all three engines: transactions on
diskless topics need no second implementation.

Reads never touch PostgreSQL for the tail and never block the event loop on the object store:

1. Coordinates: the tail of the partition (the last ``TAIL_BATCHES`` batches this engine
   committed) is in memory (the writer hands them over at COMMIT); older offsets are
   looked up in ``oncelog_dl_batch`` by primary key, one query per read.
2. Bytes: whole batches from the broker's ``ByteCache`` (the writer seeds it; a control batch
   is inline in its coordinates). On a miss the read returns the batches before the miss (none
   if the first one misses) and starts a background load of the missing ones (one ranged GET
   per object, coalesced); when it lands the partition's parked fetches are woken
   (``on_ready``, set by the leader tracker to ``Partition.wake_waiters``), so a long-polling
   fetch is answered as soon as the bytes are here. A load that failed makes the next read of
   that object raise its KAFKA_STORAGE_ERROR (retriable).
3. Each batch is served with the base offset and leader epoch of its coordinates (bytes 0-7
   and 12-15, outside the CRC); the rest are the producer's bytes.

Timestamps (ListOffsets) are answered at batch granularity from the coordinates (the record
bytes are not fetched): ``offset_for_timestamp`` gives the first batch whose max timestamp
reaches the time, ``max_timestamp_offset`` the base offset of the batch holding the largest one.
Retention and DeleteRecords delete coordinates as the PostgreSQL engine deletes rows; the
objects they pointed into are deleted by the collector (diskless/collector.py). Compaction is
refused at the topic level (diskless/topic_rules.py): ``compact`` does nothing.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from typing import Callable, Iterator

from oncelog.cluster.connection import StoreConnection
from oncelog.cluster.errors import LeaderFenced
from oncelog.cluster.leadership import Leadership
from oncelog.cluster.pg_log import PgPartitionLog
from oncelog.diskless.cache import ByteCache
from oncelog.diskless.writer import Committed, ObjectWriter
from oncelog.protocol.errors import KafkaStorageError, OffsetOutOfRange
from oncelog.protocol.records import BatchHeader, LOG_OVERHEAD, offset_prefix, parse_header
from oncelog.storage.engine import ReadPart
from oncelog.storage.log import LogConfig

__all__ = ["DisklessPartitionLog"]

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


class DisklessPartitionLog(PgPartitionLog):
    """One diskless partition's log, led under ``lead.leader_epoch``; see the module docstring."""

    def __init__(self, store: StoreConnection, writer: ObjectWriter, lead: Leadership, config: LogConfig,
                 cache: ByteCache) -> None:
        super().__init__(store, writer, lead, config)  # type: ignore[arg-type]
        self._writer = writer
        self._cache = cache
        self._tail: deque[Committed] = deque(maxlen=TAIL_BATCHES)
        self._tail_lock = threading.Lock()
        #: called (on the loop) when bytes a read missed have been loaded
        self.on_ready: Callable[[], None] = lambda: None
        writer.register(self.partition_id, self._committed)

    def _committed(self, coords: list[Committed]) -> None:
        with self._tail_lock:
            self._tail.extend(coords)

    # -- state ------------------------------------------------------------------------------

    @property
    def size_bytes(self) -> int:
        rows = self._query("SELECT coalesce(sum(size), 0) FROM oncelog_dl_batch WHERE partition_id = %(p)s "
                           "AND last_offset >= %(s)s AND base_offset < %(u)s",
                           {"p": self.partition_id, "s": self._start, "u": self.log_end_offset})
        return int(rows[0][0]) if rows else 0

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
                err = self._cache.error(c.object_key)
                if err is not None and not out:
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
                raise KafkaStorageError(f"{self.what}: batch at {c.base_offset} is not in the read cache")
            out.append(_stamped(data, c))
            total += c.size
        return b"".join(out)

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

    def compact(self, *args: object, **kwargs: object) -> None:  # type: ignore[override]
        """Diskless topics are never compacted (refused at creation and alteration)."""
        return None

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        self._writer.unregister(self.partition_id, self._committed)

    def __repr__(self) -> str:
        return f"DisklessPartitionLog({self.what}, epoch={self.leader_epoch}, start={self._start}, end={self._end})"


def _stamped(data: bytes, c: Committed) -> bytes:
    """The batch with its coordinates' base offset and leader epoch (outside the CRC)."""
    prefix = offset_prefix(data, c.base_offset, c.leader_epoch)
    if data[:16] == prefix:
        return data
    return prefix + data[16:]
