"""Group commit: the batches of many partitions that are waiting, written in ONE PostgreSQL
transaction, each caller told only after COMMIT.

Theory of operation. Callers (the partition logs, on the broker's event loop or any thread)
``submit`` an ``AppendRequest`` — a batch whose offsets the partition's leader has already
assigned — and get a ``concurrent.futures.Future``. One thread owns one database connection and
loops: take every request waiting (at most ``max_bytes`` of batch data, at least one; after
waiting up to ``linger_s`` for more when that is set), then in one transaction

1. lock the rows of the partitions concerned (``SELECT … FOR UPDATE``, in id order, so two
   brokers never deadlock),
2. accept, per partition in submission order, the requests whose leader epoch is the store's
   and whose base offset is the store's log end (refusing the rest: ``LeaderFenced``,
   ``LogEndMoved``; nothing of theirs is written),
3. COPY the accepted batches into ``oncelog_batch`` and move each partition's log end,
4. COMMIT; then complete the accepted futures (in submission order) and fail the refused ones.

Batching is natural: while one transaction commits (an fsync of the WAL), the next requests
queue up, and the next transaction takes them all; ``linger_s`` trades latency for larger
transactions. Because the epoch check and the writes are one transaction under the row lock,
a leader whose epoch moved (it lost its lease, paused, was cut off) cannot write afterwards.

Failures. A database error before COMMIT rolls everything back: every request of the round
fails with ``StoreUnavailable`` (nothing written). An error during COMMIT leaves the outcome
unknown: ``StoreUnavailable(outcome_unknown=True)``; the partition's leader must re-read the log
end before appending again (``PgPartitionLog.resync``). The connection is then re-opened for the
next round (a failed connect fails that round's requests, retriable, after a short pause).

Thread-safety: ``submit``, ``stats`` and ``close`` may be called from any thread. Futures are
completed on the committer's thread; callers that live on an asyncio loop wrap them
(``asyncio.wrap_future``) or hop with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from oncelog.cluster.errors import LeaderFenced, LogEndMoved, StoreUnavailable
from oncelog.protocol.errors import KafkaError, UnknownTopicOrPartition

__all__ = ["AppendRequest", "CommitStats", "GroupCommitter"]

log = logging.getLogger(__name__)

_COPY = (
    "COPY oncelog_batch (partition_id, base_offset, last_offset, max_timestamp, producer_id, producer_epoch, "
    "base_sequence, is_transactional, is_control, size, leader_epoch, data) FROM STDIN (FORMAT BINARY)"
)
_COPY_TYPES = ["int8", "int8", "int8", "int8", "int8", "int2", "int4", "bool", "bool", "int4", "int4", "bytea"]
_LOCK = (
    "SELECT id, leader_broker, leader_epoch, log_end_offset FROM oncelog_partition "
    "WHERE id = ANY(%s) ORDER BY id FOR UPDATE"
)
_MOVE_END = (
    "UPDATE oncelog_partition AS p SET log_end_offset = v.leo "
    "FROM unnest(%s::int8[], %s::int8[]) AS v(id, leo) WHERE p.id = v.id"
)
#: pause after a failed connect before the next round (bounded retry, no busy loop)
RECONNECT_PAUSE_S = 0.2


@dataclass(slots=True)
class AppendRequest:
    """One batch to append, offsets already assigned. ``data`` is the whole v2 batch with its
    base offset and partition leader epoch rewritten; the other fields are its header's."""

    partition_id: int
    what: str  # "topic-partition", for messages
    leader_epoch: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    is_control: bool
    data: bytes
    future: Future = field(default_factory=Future)

    def row(self) -> tuple:
        return (self.partition_id, self.base_offset, self.last_offset, self.max_timestamp, self.producer_id,
                self.producer_epoch, self.base_sequence, self.is_transactional, self.is_control, len(self.data),
                self.leader_epoch, self.data)


@dataclass(slots=True)
class CommitStats:
    """Counters since start (read with ``GroupCommitter.stats()``, a copy)."""

    transactions: int = 0  # committed transactions that wrote at least one batch
    appends: int = 0  # batches committed
    bytes: int = 0
    refused: int = 0  # requests refused (fenced, log end moved, unknown partition)
    failed_rounds: int = 0  # rounds that failed on a database error
    max_batches_per_transaction: int = 0


class GroupCommitter:
    """The one writer thread of a broker. ``connect`` returns a new psycopg connection in
    autocommit mode (the committer opens explicit transactions)."""

    def __init__(self, connect: Callable[[], Any], *, max_bytes: int = 8 << 20, linger_s: float = 0.0,
                 monotonic: Callable[[], float] = time.monotonic, name: str = "oncelog-group-commit") -> None:
        if max_bytes < 1 or linger_s < 0:
            raise ValueError("max_bytes must be >= 1 and linger_s >= 0")
        self._connect = connect
        self._max_bytes = max_bytes
        self._linger_s = linger_s
        self._monotonic = monotonic
        self._queue: deque[AppendRequest] = deque()
        self._queued_bytes = 0
        self._cond = threading.Condition()
        self._closing = False
        self._conn: Any = None
        self._stats = CommitStats()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> "GroupCommitter":
        self._thread.start()
        return self

    def submit(self, req: AppendRequest) -> Future:
        """Queue ``req``; its future completes (None) after the COMMIT that holds it, or fails
        with a KafkaError. Raises StoreUnavailable once closing."""
        with self._cond:
            if self._closing:
                raise StoreUnavailable(f"{req.what}: the group committer is closed")
            self._queue.append(req)
            self._queued_bytes += len(req.data)
            self._cond.notify()
        return req.future

    def stats(self) -> CommitStats:
        with self._cond:
            s = self._stats
            return CommitStats(s.transactions, s.appends, s.bytes, s.refused, s.failed_rounds,
                               s.max_batches_per_transaction)

    def close(self, timeout_s: float = 30.0) -> None:
        """Write what is queued, then stop the thread and close the connection."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        with self._cond:  # only if the thread never ran or did not finish in time
            stranded = list(self._queue)
            self._queue.clear()
        for req in stranded:
            _fail(req, StoreUnavailable(f"{req.what}: the group committer closed before writing it"))
        self._drop_connection()

    # -- the writer thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            reqs = self._take_round()
            if reqs is None:
                return
            try:
                self._commit_round(reqs)
            except Exception as exc:  # a bug: never leave a caller waiting
                log.exception("bug in the group commit round")
                for req in reqs:
                    _fail(req, StoreUnavailable(f"{req.what}: group commit failed ({type(exc).__name__})",
                                                outcome_unknown=True))

    def _take_round(self) -> list[AppendRequest] | None:
        """The requests of the next transaction (None: closing and nothing left)."""
        with self._cond:
            while not self._queue:
                if self._closing:
                    return None
                self._cond.wait(1.0)
            if self._linger_s > 0 and not self._closing:
                deadline = self._monotonic() + self._linger_s
                while self._queued_bytes < self._max_bytes and not self._closing:
                    left = deadline - self._monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            taken: list[AppendRequest] = []
            size = 0
            while self._queue and (not taken or size + len(self._queue[0].data) <= self._max_bytes):
                req = self._queue.popleft()
                size += len(req.data)
                taken.append(req)
            self._queued_bytes -= size
            return taken

    def _commit_round(self, reqs: list[AppendRequest]) -> None:
        try:
            conn = self._connection()
        except Exception as exc:
            with self._cond:
                self._stats.failed_rounds += 1
            for req in reqs:
                _fail(req, StoreUnavailable(f"{req.what}: cannot reach the store: {exc}"))
            time.sleep(RECONNECT_PAUSE_S)
            return
        accepted: list[AppendRequest] = []
        refused: list[tuple[AppendRequest, KafkaError]] = []
        body_done = False
        try:
            with conn.transaction():
                ids = sorted({r.partition_id for r in reqs})
                rows = conn.execute(_LOCK, (ids,)).fetchall()
                state = {pid: [leader, epoch, end] for pid, leader, epoch, end in rows}
                for r in reqs:
                    st = state.get(r.partition_id)
                    if st is None:
                        refused.append((r, UnknownTopicOrPartition(f"{r.what}: the partition is not in the store")))
                    elif st[1] != r.leader_epoch:
                        refused.append((r, LeaderFenced(r.what, r.leader_epoch, st[1], st[0])))
                    elif st[2] != r.base_offset:
                        refused.append((r, LogEndMoved(r.what, r.base_offset, st[2])))
                    else:
                        accepted.append(r)
                        st[2] = r.last_offset + 1
                if accepted:
                    with conn.cursor() as cur, cur.copy(_COPY) as copy:
                        copy.set_types(_COPY_TYPES)
                        for r in accepted:
                            copy.write_row(r.row())
                    moved = sorted({r.partition_id for r in accepted})
                    conn.execute(_MOVE_END, (moved, [state[pid][2] for pid in moved]))
                body_done = True
        except Exception as exc:
            self._drop_connection()
            with self._cond:
                self._stats.failed_rounds += 1
            unknown = body_done  # the error came from COMMIT itself
            log.warning("group commit of %d batch(es) failed%s: %s", len(reqs),
                        " (outcome unknown)" if unknown else "", exc)
            for req in reqs:
                _fail(req, StoreUnavailable(f"{req.what}: the store failed ({type(exc).__name__}: {exc})",
                                            outcome_unknown=unknown))
            return
        with self._cond:
            s = self._stats
            if accepted:
                s.transactions += 1
                s.appends += len(accepted)
                s.bytes += sum(len(r.data) for r in accepted)
                s.max_batches_per_transaction = max(s.max_batches_per_transaction, len(accepted))
            s.refused += len(refused)
        for r in accepted:
            if r.future.set_running_or_notify_cancel():
                r.future.set_result(None)
        for r, err in refused:
            _fail(r, err)

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        return self._conn

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass


def _fail(req: AppendRequest, exc: KafkaError) -> None:
    if req.future.set_running_or_notify_cancel():
        req.future.set_exception(exc)
