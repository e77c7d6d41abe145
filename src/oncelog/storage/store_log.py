"""The leader log of the store-backed engines: what the PostgreSQL engine (storage/engines/
postgres/: batches in rows of ``oncelog_batch``) and the diskless engine (storage/engines/
diskless/: batches in an object store, their coordinates in rows of ``oncelog_dl_batch``) share,
written once. Each engine is a subclass that says where batches live: the table of its batch rows
(``BATCHES``), the committer it hands appends to, and its reads.

Theory of operation. The engine leads one partition under one leader epoch (``Leadership`` from
cluster/leadership.py: the partition's row when this broker took the lead). ``submit`` assigns the
next offsets itself, rewriting the 16 bytes of the batch outside its CRC (as the local engine
does), and hands the batch (a ``BatchAppend``) to the engine's committer (the PostgreSQL group
commit, or the diskless object writer), whose COMMIT — conditional on this engine's epoch and on
the store's log end (the fence ``oncelog_fence``, cluster/schema.py) — makes it visible; the
returned ``PendingAppend`` (store_pending.py) completes after it.

Offsets: ``_next`` is the end including batches submitted but not yet committed, so several
batches of one partition (up to five in flight per producer) share a commit; ``log_end_offset``
is the committed end. If an append fails, every later batch of the partition was given offsets
after it and fails too (the store refuses it: log end moved); the engine refuses new appends
(``failed``) until its leader is rebuilt from the store (the leader tracker closes a partition
whose engine failed and opens it again at the next view; the PostgreSQL engine can also
``resync``). A cancelled append's outcome is unknown: it stops appends the same way.

Every batch row is keyed by ``(partition_id, base_offset)`` and carries ``last_offset``, ``size``,
``max_timestamp`` and ``leader_epoch``: retention, DeleteRecords, ListOffsets (by timestamp) and
OffsetForLeaderEpoch are answered from those columns alone, the same SQL for both tables.
Retention deletes whole batches (rows), oldest first, never the newest batch, and moves the log
start in the same transaction, conditional on the epoch; DeleteRecords moves the log start (which
may fall inside a batch, which then stays) likewise. No segment: the active base offset is
constant and ``pending_deletes`` is 0.

Synchronous and asyncio-free, like every engine core. Thread-safety: the committer completes
futures on its own thread (or the loop); the committed end, the in-flight count and the failure
are guarded by a lock. Reads and retention run on the owner's thread with its reader connection
(``hand_over`` moves them from the opener thread to the event loop).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Callable, ClassVar, Iterator, Protocol

from oncelog.cluster.connection import StoreConnection
from oncelog.cluster.errors import LeaderFenced, StoreUnavailable
from oncelog.cluster.leadership import Leadership
from oncelog.protocol.errors import CorruptMessage, KafkaError, MessageTooLarge, OffsetOutOfRange
from oncelog.protocol.records import BatchHeader, iter_records, offset_prefix, record_with_timestamp
from oncelog.storage.batch_append import BatchAppend
from oncelog.storage.config import LogConfig
from oncelog.storage.engine import CompactionPass
from oncelog.storage.store_pending import PendingAppend

__all__ = ["BatchCommitter", "PendingAppend", "StoreLeaderLog", "floor_sql"]


def floor_sql(table: str) -> str:
    """SQL for the base offset of the batch of ``table`` holding ``%(o)s`` (the greatest base
    offset at or below it; ``%(o)s`` itself when none), in partition ``%(p)s``."""
    return (f"coalesce((SELECT max(base_offset) FROM {table} WHERE partition_id = %(p)s "
            f"AND base_offset <= %(o)s), %(o)s)")


class BatchCommitter(Protocol):
    """What the leader log needs of its engine's committer (the PostgreSQL ``GroupCommitter``,
    the diskless ``ObjectCommitter``)."""

    def submit(self, req: BatchAppend) -> Future:
        """Queue ``req``; its future completes after the COMMIT that makes it durable (or fails
        with a KafkaError). Raises StoreUnavailable when closed."""
        ...


class StoreLeaderLog:
    """One partition's log led under ``lead.leader_epoch`` with its leader state in the store; see
    the module docstring. ``store`` is the reader connection of the thread that owns this object
    (it reconnects by itself); ``committer`` is the broker's (one for all its partitions of the
    engine). Subclasses set ``BATCHES`` and implement the reads (``read``, ``read_batches``,
    ``iter_batches``, ``iter_headers``)."""

    #: the table of the engine's batch rows
    BATCHES: ClassVar[str]
    #: the column of a row's batch bytes, when rows hold them: timestamp lookups then decode that
    #: one batch to answer a record; "" (the bytes are elsewhere): answered at batch granularity
    BATCH_DATA: ClassVar[str] = ""
    #: the request a batch is handed to the committer as
    REQUEST: ClassVar[type[BatchAppend]] = BatchAppend

    def __init__(self, store: StoreConnection, committer: BatchCommitter, lead: Leadership,
                 config: LogConfig) -> None:
        self._store = store
        self._committer = committer
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
        #: called (on the loop) when bytes a read missed have been loaded (engines whose reads
        #: may miss: diskless); the leader tracker sets it to ``Partition.wake_waiters``
        self.on_ready: Callable[[], None] = lambda: None

    def hand_over(self, store: StoreConnection) -> None:
        """From now on reads go through ``store`` (the thread that built and recovered this
        log hands it to the event loop, which reads with its own connection)."""
        self._store = store

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
        return 0  # rows are gone at COMMIT (a fetch that read them holds their bytes)

    @property
    def size_bytes(self) -> int:
        """The bytes of the readable batches (DescribeLogDirs); one query."""
        rows = self._query(f"SELECT coalesce(sum(size), 0) FROM {self.BATCHES} WHERE partition_id = %(p)s "
                           "AND last_offset >= %(s)s AND base_offset < %(u)s",
                           {"p": self.partition_id, "s": self._start, "u": self.log_end_offset})
        return int(rows[0][0]) if rows else 0

    def disk_usage(self) -> tuple[int, int]:
        return -1, -1  # no files on the broker's disk (DescribeLogDirs asks ``size_bytes``)

    @property
    def outbox_id(self) -> int:
        """This partition's key in ``oncelog.outbox`` (issue 31): its partition id."""
        return self.partition_id

    @property
    def failed(self) -> KafkaError | None:
        """The error that stopped appends (None while healthy)."""
        with self._lock:
            return self._failed

    # -- writing ----------------------------------------------------------------------------

    def submit(self, batch: bytes | bytearray | memoryview, header: BatchHeader, now_ms: int | None = None, *,
               drained: tuple[int, ...] = ()) -> PendingAppend:
        """The engine contract's append (storage/engine.py): assign the next offsets to a
        validated batch and hand it to the committer; the returned ``PendingAppend`` completes
        after its COMMIT (awaited on the event loop, or ``future.result`` on a thread).
        ``drained``: the ``oncelog.outbox`` rows the batch holds (issue 31), deleted in that same
        COMMIT (all of them, or the batch is refused and nothing of it written). Raises
        MessageTooLarge, ValueError (header does not match), StoreUnavailable (committer
        closed), or the error that stopped an earlier append of this partition."""
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
        req = self.REQUEST(self.partition_id, self.what, self.leader_epoch, base, last, header.max_timestamp,
                           header.producer_id, header.producer_epoch, header.base_sequence,
                           header.is_transactional, header.is_control, data, drained=tuple(drained))
        try:
            fut = self._committer.submit(req)
        except KafkaError as exc:
            self._stop(exc)
            raise
        fut.add_done_callback(lambda f: self._on_done(f, last))
        return PendingAppend(base, last, fut)

    def _on_done(self, fut: Future, last: int) -> None:
        if fut.cancelled():  # never by a committer or PendingAppend; whatever did it, the outcome is unknown
            self._stop(StoreUnavailable(f"{self.what}: an append was cancelled", outcome_unknown=True))
            return
        exc = fut.exception()
        if exc is not None:
            self._stop(exc if isinstance(exc, KafkaError) else StoreUnavailable(str(exc), outcome_unknown=True))
            return
        with self._lock:
            self._inflight -= 1
            self._end = max(self._end, last + 1)

    def _stop(self, exc: KafkaError, *, finished: bool = True) -> None:
        """Stop appends with ``exc`` (the first error is kept); ``finished``: the request is no
        longer in flight (each request is finished exactly once, by its future's callback or a
        refused submit)."""
        with self._lock:
            if finished:
                self._inflight -= 1
            if self._failed is None:
                self._failed = exc

    def flush(self, now_ms: int | None = None) -> None:
        """Nothing to do: an append completes only after COMMIT."""

    # -- reading ----------------------------------------------------------------------------

    def _check_offset(self, offset: int, end: int) -> None:
        if offset < self._start or offset > end:
            raise OffsetOutOfRange(f"{self.what}: offset {offset} outside [{self._start}, {end}]")

    def _query(self, sql: str, params: dict, *, binary: bool = False) -> list[tuple]:
        return self._store.query(sql, params, binary=binary)

    def _upper(self, offset: int, max_offset: int | None) -> int:
        """Where a read from ``offset`` stops (exclusive): the committed end, or ``max_offset``
        below it. Raises OffsetOutOfRange outside [log start, log end]."""
        end = self.log_end_offset
        self._check_offset(offset, end)
        return end if max_offset is None else min(max_offset, end)

    def iter_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        """Headers (with final offsets) of the batches whose last offset >= ``from_offset``,
        oldest first, a page of rows at a time (``_header_page``); the page's control batches
        stay in ``_page_controls`` while it is walked, so ``read_batches`` serves the marker
        recovery reads next without a query."""
        offset = max(from_offset, self._start)
        end = self.log_end_offset
        try:
            while offset < end:
                headers = self._header_page(offset, end)
                if not headers:
                    return
                for h in headers:
                    yield h
                    offset = h.next_offset
        finally:
            self._page_controls = {}

    def _header_page(self, offset: int, end: int) -> list[BatchHeader]:
        """The headers of the next page of batches from the one holding ``offset`` to ``end``
        (whose last offset >= ``offset``), their control batches put in ``_page_controls``."""
        raise NotImplementedError

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the record with the largest timestamp: the first batch with
        the largest max timestamp is found by its column; with ``BATCH_DATA`` that batch is
        decoded to pick the first record carrying it (a batch that does not decode answers its
        base offset), else its base offset is the answer (batch granularity)."""
        rows = self._query(
            f"SELECT max_timestamp, base_offset{self.BATCH_DATA} FROM {self.BATCHES} WHERE partition_id = %(p)s "
            "AND last_offset >= %(s)s AND base_offset < %(u)s ORDER BY max_timestamp DESC, base_offset LIMIT 1",
            {"p": self.partition_id, "s": self._start, "u": self.log_end_offset}, binary=True,
        )
        if not rows:
            return None
        ts, offset, *data = rows[0]
        if data:
            try:
                offset = record_with_timestamp(bytes(data[0]), ts, self.config.max_uncompressed_bytes, self._start)
            except CorruptMessage:
                pass
        return ts, max(offset, self._start)

    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """The first record at or after the log start with timestamp >= ``ts_ms``: the batch is
        found by its max timestamp column; with ``BATCH_DATA`` that one batch is decoded, else
        (or when it does not decode) the answer is the batch's base offset and max timestamp
        (batch granularity, allowed by the engine contract)."""
        rows = self._query(
            f"SELECT base_offset, max_timestamp{self.BATCH_DATA} FROM {self.BATCHES} WHERE partition_id = %(p)s "
            "AND last_offset >= %(s)s AND base_offset < %(u)s AND max_timestamp >= %(t)s "
            "ORDER BY base_offset LIMIT 1",
            {"p": self.partition_id, "s": self._start, "u": self.log_end_offset, "t": ts_ms}, binary=True,
        )
        if not rows:
            return None
        base, ts, *data = rows[0]
        if data:
            try:
                for rec in iter_records(bytes(data[0]), max_uncompressed=self.config.max_uncompressed_bytes):
                    if rec.timestamp >= ts_ms and rec.offset >= self._start:
                        return rec.offset, rec.timestamp
            except CorruptMessage:
                pass
        return max(base, self._start), ts

    # -- leader epochs (KIP-320; storage/leader_epochs.py) ----------------------------------

    def epoch_bounds(self, epoch: int) -> tuple[int | None, int | None]:
        """The largest leader epoch <= ``epoch`` of a stored batch, and the base offset of the
        first batch of a greater epoch: one statement, two probes of the index on
        ``(partition_id, leader_epoch, base_offset)`` (epochs grow along the offsets, so the
        first row of the next epoch in that order is the first batch after ``epoch``)."""
        rows = self._query(
            f"SELECT (SELECT leader_epoch FROM {self.BATCHES} WHERE partition_id = %(p)s AND leader_epoch <= %(e)s "
            "ORDER BY leader_epoch DESC LIMIT 1), "
            f"(SELECT base_offset FROM {self.BATCHES} WHERE partition_id = %(p)s AND leader_epoch > %(e)s "
            "ORDER BY leader_epoch, base_offset LIMIT 1)", {"p": self.partition_id, "e": epoch})
        return (rows[0][0], rows[0][1]) if rows else (None, None)

    def epoch_at(self, offset: int) -> int:
        """The epoch of the batch holding ``offset`` (primary-key probe); this engine's epoch at
        or past the committed end, or when no batch holds it."""
        if offset >= self.log_end_offset:
            return self.leader_epoch
        rows = self._query(
            f"SELECT leader_epoch FROM {self.BATCHES} WHERE partition_id = %(p)s AND base_offset <= %(o)s "
            "ORDER BY base_offset DESC LIMIT 1", {"p": self.partition_id, "o": offset})
        return rows[0][0] if rows else self.leader_epoch

    # -- retention --------------------------------------------------------------------------

    def set_log_start_offset(self, offset: int, now_ms: int | None = None) -> None:
        """DeleteRecords: move the log start up to ``offset`` and delete the batches wholly
        below it, in one transaction conditional on the epoch."""
        self._advance_start(offset)

    def enforce_retention(self, now_ms: int) -> int:
        """Delete the oldest batches breaching retention.ms (by their max timestamp) or
        retention.bytes, never the newest batch; returns how many were deleted."""
        c = self.config
        if "delete" not in c.cleanup_policy.split(","):
            return 0
        p = {"p": self.partition_id, "o": self._start, "u": self.log_end_offset}
        rows = self._query(
            f"SELECT max(base_offset) FROM {self.BATCHES} WHERE partition_id = %(p)s AND base_offset < %(u)s", p)
        newest = rows[0][0] if rows else None
        if newest is None:
            return 0
        keep_from = self._start
        floor = floor_sql(self.BATCHES)
        if c.retention_ms >= 0:
            rows = self._query(
                f"SELECT base_offset FROM {self.BATCHES} WHERE partition_id = %(p)s AND base_offset >= {floor} "
                f"AND max_timestamp >= %(cut)s ORDER BY base_offset LIMIT 1", p | {"cut": now_ms - c.retention_ms})
            keep_from = max(keep_from, rows[0][0] if rows else newest)
        if c.retention_bytes >= 0:
            rows = self._query(
                f"SELECT base_offset FROM (SELECT base_offset, sum(size) OVER (ORDER BY base_offset DESC) - size "
                f"AS after FROM {self.BATCHES} WHERE partition_id = %(p)s AND base_offset >= {floor} "
                f"AND base_offset < %(u)s) s WHERE after < %(r)s ORDER BY base_offset LIMIT 1",
                p | {"r": c.retention_bytes})
            keep_from = max(keep_from, rows[0][0] if rows else newest)
        keep_from = min(keep_from, newest)
        if keep_from <= self._start:
            return 0
        return self._advance_start(keep_from)

    def _advance_start(self, offset: int) -> int:
        """Move the log start to ``offset`` and delete the batch rows wholly below it, in one
        transaction conditional on the epoch (DeleteRecords, retention); returns how many."""
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
                    f"DELETE FROM {self.BATCHES} WHERE partition_id = %s AND base_offset < %s AND last_offset < %s",
                    (self.partition_id, offset, offset)).rowcount
        with self._lock:
            self._start = max(self._start, offset)
        return deleted

    def plan_compaction(self, upper: int, now_ms: int, stop: threading.Event) -> CompactionPass | None:
        """None: this engine does not compact (the PostgreSQL engine does, by its own rules)."""
        return None

    def cleanup_deleted(self, now_ms: int) -> int:
        return 0

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Nothing to release: the connection and the committer belong to the broker."""

    def delete(self, now_ms: int | None = None) -> None:
        """DeleteTopics: remove the partition's row and (cascading) its batch rows, if this
        engine still leads it."""
        with self._store.transaction() as conn:
            conn.execute("DELETE FROM oncelog_partition WHERE id = %s AND leader_epoch = %s",
                         (self.partition_id, self.leader_epoch))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.what}, epoch={self.leader_epoch}, start={self._start}, "
                f"end={self._end})")
