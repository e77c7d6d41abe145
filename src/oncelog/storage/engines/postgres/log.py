"""A partition's log in PostgreSQL: the storage engine of cluster mode (storage/engine.py).

Theory of operation. The engine is the store-backed leader log (storage/store_log.py: leader
state, offsets, ``submit``, retention, DeleteRecords, epochs and timestamps, shared with the
diskless engine) with its batches in rows of ``oncelog_batch``, whole. ``submit`` hands a batch
to the broker's ``GroupCommitter``; the batch is visible (``log_end_offset`` moves, reads see
it) only once the transaction that holds it has committed, conditional on this engine's epoch.
``append`` is ``submit`` and wait: it blocks its thread until COMMIT, so callers that must not
block (the event loop) use ``submit`` and its future. After a failed append the engine refuses
new appends until ``resync()`` re-reads the store (after an ``outcome_unknown`` failure the
batch may be there: ``resync`` returns the old end so the leader can replay what it missed).

Reads come from the store with the owner's reader connection (``StoreConnection``: it
reconnects after PostgreSQL restarts), as ``bytes`` chunks of whole batches
(one chunk per read; the fetch path copies them, no sendfile). Every query is by
``(partition_id, base_offset)``, the primary key; the batch holding an offset is the one with
the greatest base offset at or below it. ListOffsets by timestamp decodes the one batch the
``max_timestamp`` column points at.

Compaction (``compact``) rewrites or deletes batches of the cleanable range with the local
cleaner's rules (storage/keep_rules.py), a page per transaction, conditional on the epoch like
retention; reads tolerate the gaps it leaves (a read at an offset of a removed batch serves the
next batch).

Thread-safety: as the store-backed leader log's; ``compact`` runs on another thread with that
thread's own connection, one pass at a time per partition.
"""

from __future__ import annotations

import threading
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Iterator

from oncelog.cluster.connection import StoreConnection
from oncelog.cluster.errors import LeaderFenced, StoreUnavailable
from oncelog.cluster.leadership import CURRENT_SQL, Leadership
from oncelog.protocol.records import BATCH_HEADER_SIZE, BatchHeader, parse_header
from oncelog.storage.config import LogConfig
from oncelog.storage.engine import CompactionPass
from oncelog.storage.engines.postgres.group_commit import AppendRequest, GroupCommitter
from oncelog.storage.keep_rules import MIN_CLEANABLE_DIRTY_RATIO, KeepRules, is_compacted
from oncelog.storage.parts import ReadPart
from oncelog.storage.store_log import PendingAppend, StoreLeaderLog, floor_sql

__all__ = ["CompactResult", "PendingAppend", "PgPartitionLog"]

#: header rows fetched per query when planning a read or walking headers
_PAGE_ROWS = 1000
#: how long ``append`` waits for its COMMIT before giving up (outcome unknown)
APPEND_TIMEOUT_S = 30.0
#: batches (and bytes) read per query, and at most written per transaction, by a compaction pass
COMPACT_PAGE_ROWS = 500
COMPACT_PAGE_BYTES = 4 << 20

_FLOOR = floor_sql("oncelog_batch")


@dataclass
class CompactResult:
    """What one compaction pass (``PgPartitionLog.compact``) did over its range."""

    batches_before: int = 0
    batches_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    pages: int = 0  # transactions that changed something


class PgPartitionLog(StoreLeaderLog):
    """One partition's log in PostgreSQL, led under ``lead.leader_epoch``: the store-backed
    leader log (storage/store_log.py) with its batches in rows of ``oncelog_batch``. See the
    module docstring. ``store`` is the reader connection of the thread that owns this object (it
    reconnects by itself); ``committer`` is the broker's GroupCommitter for this partition."""

    BATCHES = "oncelog_batch"
    BATCH_DATA = ", data"
    REQUEST = AppendRequest

    def __init__(self, store: StoreConnection, committer: GroupCommitter, lead: Leadership, config: LogConfig, *,
                 append_timeout_s: float = APPEND_TIMEOUT_S, compactor: StoreConnection | None = None) -> None:
        super().__init__(store, committer, lead, config)
        #: the connection of the thread that runs compaction passes (``plan_compaction``); None:
        #: this engine does not compact (tests and tools call ``compact`` themselves)
        self._compactor = compactor
        self._append_timeout_s = append_timeout_s
        #: compaction (``compact``; in memory, so a new leader cleans everything once more): the
        #: end of the range the last pass cleaned, and when a kept tombstone or marker goes
        self._clean_end = 0
        self._clean_deadline: int | None = None

    # -- writing (``submit``: StoreLeaderLog's) ----------------------------------------------

    def append(self, batch: bytes | bytearray | memoryview, header: BatchHeader, now_ms: int, *,
               leader_epoch: int | None = None) -> tuple[int, int]:
        """The engine interface: ``submit`` and wait for COMMIT; returns (base, last). The
        batch carries this engine's leader epoch (``leader_epoch``, if given, must equal it).
        Blocks the calling thread; raises the append's KafkaError."""
        if leader_epoch not in (None, 0, self.leader_epoch):
            raise ValueError(f"{self.what}: asked to write leader epoch {leader_epoch}, leading {self.leader_epoch}")
        pending = self.submit(batch, header)
        try:
            pending.future.result(self._append_timeout_s)
        except FutureTimeout:
            err = StoreUnavailable(f"{self.what}: no COMMIT within {self._append_timeout_s}s", outcome_unknown=True)
            self._stop(err, finished=False)  # still in flight: its callback will finish it
            raise err from None
        return pending.base_offset, pending.last_offset

    def resync(self) -> int:
        """After a failed append: re-read the partition's row and accept appends again from the
        store's log end. Returns the committed end this engine had seen before. When every
        failure had a known outcome (nothing written), the store's end equals it and the
        leader's state is intact. After an ``outcome_unknown`` failure the store may hold
        batches the leader never applied (and, with several batches in flight, some after them
        that it did): the leader must then rebuild its state from the store
        (``Partition.recover``) rather than patch it. Raises LeaderFenced (for good) when the
        epoch moved, StoreUnavailable while appends are still in flight or the store is
        unreachable."""
        with self._lock:
            if self._inflight:
                raise StoreUnavailable(f"{self.what}: {self._inflight} append(s) still in flight")
        row = self._row()
        if row.leader_epoch != self.leader_epoch:
            err = LeaderFenced(self.what, self.leader_epoch, row.leader_epoch, row.leader_broker)
            with self._lock:
                self._failed = err
            raise err
        with self._lock:
            old = self._end
            self._start, self._end, self._next = row.log_start_offset, row.log_end_offset, row.log_end_offset
            self._failed = None
        return old

    def _row(self) -> Leadership:
        rows = self._store.query(CURRENT_SQL, (self.partition_id,))
        if not rows:
            raise LeaderFenced(self.what, self.leader_epoch, -1, -1)
        return Leadership(*rows[0])

    # -- reading ----------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> list[ReadPart]:
        """Whole batches as one in-memory chunk (see the engine interface for the contract)."""
        upper = self._upper(offset, max_offset)
        if offset >= upper:
            return []
        p = {"p": self.partition_id, "o": offset, "u": upper}
        rows = self._query(
            f"SELECT base_offset, last_offset, size FROM oncelog_batch WHERE partition_id = %(p)s "
            f"AND base_offset >= {_FLOOR} AND base_offset < %(u)s ORDER BY base_offset LIMIT {_PAGE_ROWS}", p)
        total, first, last_base = 0, None, None
        for base, last, size in rows:
            if last < offset:
                continue  # the batch below ``offset`` when it ends before it (a gap)
            if last >= upper or (total + size > max_bytes and (first is not None or not min_one_batch)):
                break
            total += size
            first = base if first is None else first
            last_base = base
        if first is None:
            return []
        data = self._query(
            "SELECT data FROM oncelog_batch WHERE partition_id = %(p)s AND base_offset BETWEEN %(a)s AND %(b)s "
            "AND last_offset >= %(o)s AND last_offset < %(u)s ORDER BY base_offset",
            p | {"a": first, "b": last_base}, binary=True,
        )
        chunk = b"".join(bytes(r[0]) for r in data)
        return [chunk] if chunk else []

    def read_batches(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        control = self._page_controls.get(offset)
        if control is not None and len(control) <= max_bytes:
            return control  # a control batch of the header page being walked (iter_headers)
        return b"".join(self.read(offset, max_bytes, max_offset))  # type: ignore[arg-type]

    def iter_batches(self, from_offset: int | None = None) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every batch from ``from_offset`` (default: the log start) to the committed end, as
        the end is when each page is read: a batch committed while a coordinator loads this
        partition (a transaction marker) is read too, as the local engine's walk does."""
        offset = self._start if from_offset is None else max(from_offset, self._start)
        while offset < (end := self.log_end_offset):
            rows = self._query(
                f"SELECT data FROM oncelog_batch WHERE partition_id = %(p)s AND base_offset >= {_FLOOR} "
                f"AND last_offset >= %(o)s AND last_offset < %(u)s ORDER BY base_offset LIMIT 100",
                {"p": self.partition_id, "o": offset, "u": end}, binary=True,
            )
            if not rows:
                return
            for (data,) in rows:
                data = bytes(data)
                h = parse_header(data)
                yield h, data
                offset = h.next_offset

    def _header_page(self, offset: int, end: int) -> list[BatchHeader]:
        """The first 61 bytes of each row only (``data`` is stored uncompressed out of line, so
        only those are read), and the whole of each control batch (a marker: one record, ~80
        bytes), which recovery reads next: one query per page of 1,000 headers, not one more per
        transaction marker (``iter_headers``)."""
        rows = self._query(
            f"SELECT CASE WHEN is_control THEN data ELSE substring(data FROM 1 FOR {BATCH_HEADER_SIZE}) END "
            f"FROM oncelog_batch WHERE partition_id = %(p)s "
            f"AND base_offset >= {_FLOOR} AND last_offset >= %(o)s AND last_offset < %(u)s "
            f"ORDER BY base_offset LIMIT {_PAGE_ROWS}",
            {"p": self.partition_id, "o": offset, "u": end}, binary=True,
        )
        self._page_controls = {}
        for (prefix,) in rows:
            data = bytes(prefix)
            h = parse_header(data)
            if h.is_control:
                self._page_controls[h.base_offset] = data
        return [parse_header(bytes(prefix[:BATCH_HEADER_SIZE])) for (prefix,) in rows]

    # -- compaction (cleanup.policy=compact; storage/keep_rules.py) ----------------------------

    def plan_compaction(self, upper: int, now_ms: int, stop: threading.Event) -> CompactionPass | None:
        """The engine contract's compaction (storage/engine.py): a pass whose ``build`` runs
        ``compact`` with the compactor connection this engine was given (None without one, or
        when the topic is not compacted). Whether the range is dirty enough is decided by
        ``compact`` itself, in the pass's thread (it reads the store)."""
        if self._compactor is None or not is_compacted(self.config.cleanup_policy):
            return None
        return _StorePass(self, self._compactor, upper, now_ms, stop)

    def compact(self, store: StoreConnection, upper: int, now_ms: int, *, force: bool = False,
                page_rows: int = COMPACT_PAGE_ROWS, stop: threading.Event | None = None) -> "CompactResult | None":
        """One compaction pass, with the keep rules of the local cleaner (``KeepRules``), over the
        cleanable range: the batches ending below ``upper`` (the partition's LSO, read on the
        event loop), below the newest batch of the log (the local engine never cleans its active
        segment; here the newest batch stays untouched, as retention never deletes it), up to the
        first batch younger than min.compaction.lag.ms. None when the topic is not compacted or
        the range is not dirty enough (``MIN_CLEANABLE_DIRTY_RATIO``, or a kept tombstone or
        marker has become removable).

        Pass 1 reads the range (pages of ``page_rows`` rows and at most ``COMPACT_PAGE_BYTES``,
        no lock). Pass 2 reads it again,
        page by page, and writes each page's changes in one transaction that first locks the
        partition's row and checks the leader epoch (LeaderFenced: a deposed leader changes
        nothing): a batch that loses records is rewritten in place (``data`` and ``size``; its
        base and last offsets, max timestamp and producer fields stay), a batch that loses all
        is deleted unless it is its producer's last (then its header alone stays). Pages commit
        in offset order, so a pass stopped half way (crash, fencing) leaves a log that an older
        pass could have left: nothing dropped in an earlier page depends on a later one.

        Runs on the caller's thread with ``store``, which must be that thread's own connection
        (not the reader of the event loop). Rows in the range never change but by compaction,
        retention and DeleteRecords (which only delete: an UPDATE or DELETE of a row they took
        changes nothing). ``stop`` set: InterruptedError before the next page (broker stopping)."""
        c = self.config
        if not is_compacted(c.cleanup_policy):
            return None
        p = {"p": self.partition_id, "s": self._start, "u": min(upper, self.log_end_offset)}
        rows = store.query("SELECT max(base_offset) FROM oncelog_batch WHERE partition_id = %(p)s "
                           "AND base_offset < %(e)s", p | {"e": self.log_end_offset})
        newest = rows[0][0] if rows else None
        if newest is None:
            return None
        p["n"] = newest
        where = ("partition_id = %(p)s AND last_offset >= %(s)s AND last_offset < %(u)s "
                 "AND base_offset < %(n)s")
        total, dirty = store.query(
            f"SELECT coalesce(sum(size), 0), coalesce(sum(size) FILTER (WHERE base_offset >= %(c)s), 0) "
            f"FROM oncelog_batch WHERE {where}", p | {"c": self._clean_end})[0]
        due = self._clean_deadline is not None and now_ms >= self._clean_deadline
        if total == 0 or (not force and not due and (dirty == 0 or dirty < MIN_CLEANABLE_DIRTY_RATIO * total)):
            return None
        rules = KeepRules(now_ms, c.delete_retention_ms, self.what)
        lag_cut = now_ms - c.min_compaction_lag_ms if c.min_compaction_lag_ms > 0 else None
        end = None  # base offset of the first batch not in the range (None: the range is all of it)
        cleaned_to = self._clean_end  # the next offset after the range's last batch
        for h, data in self._range_pages(store, where, p, page_rows):
            if lag_cut is not None and h.max_timestamp > lag_cut:
                end = h.base_offset
                break
            rules.observe(h, data)
            cleaned_to = h.next_offset
        result = CompactResult()
        for page in self._range_pages(store, where, p, page_rows, by_page=True, stop=end):
            if stop is not None and stop.is_set():
                raise InterruptedError("compaction stopping")
            updates: list[tuple[bytes, int, int, int]] = []
            deletes: list[int] = []
            for h, data in page:
                new = rules.decide(h, data)
                result.batches_before += 1
                result.bytes_before += len(data)
                if new is None:
                    deletes.append(h.base_offset)
                    continue
                result.batches_after += 1
                result.bytes_after += len(new)
                if new is not data and new != data:
                    updates.append((new, len(new), self.partition_id, h.base_offset))
            if updates or deletes:
                self._write_page(store, updates, deletes)
                result.pages += 1
        self._clean_end = cleaned_to  # batches from here on (above the LSO, too young) stay dirty
        self._clean_deadline = rules.next_deadline
        return result

    def _range_pages(self, store: StoreConnection, where: str, p: dict, page_rows: int, *, by_page: bool = False,
                     stop: int | None = None) -> Iterator:
        """The batches of the compaction range in offset order (``(header, data)``), or lists of
        them a page at a time (``by_page``); below ``stop`` if given. A page is at most
        ``page_rows`` batches and ``COMPACT_PAGE_BYTES`` (but at least one batch): its sizes are
        read first, then its data."""
        after = -1
        while True:
            heads = store.query(
                f"SELECT base_offset, size FROM oncelog_batch WHERE {where} AND base_offset > %(a)s "
                f"ORDER BY base_offset LIMIT {int(page_rows)}", p | {"a": after})
            total, last, done = 0, None, len(heads) < page_rows
            for base, size in heads:
                if stop is not None and base >= stop:
                    done = True
                    break
                if last is not None and total + size > COMPACT_PAGE_BYTES:
                    done = False
                    break
                total += size
                last = base
            if last is None:
                return
            rows = store.query(
                f"SELECT data FROM oncelog_batch WHERE {where} AND base_offset > %(a)s AND base_offset <= %(b)s "
                f"ORDER BY base_offset", p | {"a": after, "b": last}, binary=True)
            page = [(parse_header(d), d) for d in (bytes(r[0]) for r in rows)]
            if by_page:
                if page:
                    yield page
            else:
                yield from page
            after = last
            if done:
                return

    def _write_page(self, store: StoreConnection, updates: list[tuple[bytes, int, int, int]], deletes: list[int]) -> None:
        """One page of a compaction pass in one transaction, conditional on the epoch."""
        with store.transaction() as conn:
            row = conn.execute("SELECT leader_broker, leader_epoch FROM oncelog_partition WHERE id = %s FOR UPDATE",
                               (self.partition_id,)).fetchone()
            if row is None:
                raise LeaderFenced(self.what, self.leader_epoch, -1, -1)
            if row[1] != self.leader_epoch:
                raise LeaderFenced(self.what, self.leader_epoch, row[1], row[0])
            if updates:
                with conn.cursor() as cur:
                    cur.executemany("UPDATE oncelog_batch SET data = %s, size = %s "
                                    "WHERE partition_id = %s AND base_offset = %s", updates)
            if deletes:
                conn.execute("DELETE FROM oncelog_batch WHERE partition_id = %s AND base_offset = ANY(%s)",
                             (self.partition_id, deletes))


class _StorePass:
    """One compaction pass of the PostgreSQL engine as the contract's ``CompactionPass``: all the
    work (reading, rewriting rows, each page committed conditional on the leader epoch) happens
    in ``build``, on the caller's worker thread with the compactor connection; ``commit`` only
    reports. A deposed leader's pass stops (LeaderFenced) and is reported, not raised: the
    leader tracker closes the partition."""

    def __init__(self, plog: PgPartitionLog, store: StoreConnection, upper: int, now_ms: int,
                 stop: threading.Event) -> None:
        self._plog, self._store, self._upper, self._now_ms, self._stop = plog, store, upper, now_ms, stop
        self._result: CompactResult | None = None
        self._fenced: LeaderFenced | None = None

    def build(self) -> None:
        try:
            self._result = self._plog.compact(self._store, self._upper, self._now_ms, stop=self._stop)
        except LeaderFenced as exc:
            self._fenced = exc

    def commit(self) -> str | None:
        if self._fenced is not None:
            return f"stopped, this broker no longer leads it: {self._fenced}"
        res = self._result
        if res is None or res.bytes_after == res.bytes_before:
            return None
        return (f"{res.batches_before} batches, {res.bytes_before} bytes -> {res.batches_after} batches, "
                f"{res.bytes_after} bytes ({res.pages} transaction(s))")

    def abort(self) -> None:
        """Nothing to discard: every page the pass wrote is committed."""
