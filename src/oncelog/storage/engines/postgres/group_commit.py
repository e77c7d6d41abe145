"""Group commit: the batches of many partitions that are waiting, written in ONE PostgreSQL
transaction, each caller told only after COMMIT.

Theory of operation. Callers (the partition logs, on the broker's event loop or any thread)
``submit`` an ``AppendRequest`` — a batch whose offsets the partition's leader has already
assigned — and get a ``concurrent.futures.Future``. One thread owns one database connection and
loops: take every request waiting (at most ``max_bytes`` of batch data, at least one; after
waiting up to ``linger_s`` for more when that is set), then run ONE statement,
``oncelog_append(...)`` (schema.py), on an autocommit connection — one transaction, one round
trip — which

1. locks the rows of the partitions concerned (``SELECT … FOR UPDATE``, in id order, so two
   brokers never deadlock),
2. accepts, per request in submission order, those whose leader epoch is the store's and whose
   base offset is the store's log end, inserting the batch and moving the log end (the rest are
   refused: ``LeaderFenced``, ``LogEndMoved``; nothing of theirs is written),
3. commits; its answer (one row per request) arrives after COMMIT. Then the accepted futures
   complete (in submission order) and the refused ones fail.

Batching is natural: while one transaction commits (an fsync of the WAL), the next requests
queue up, and the next transaction takes them all; ``linger_s`` trades latency for larger
transactions. Because the epoch check and the writes are one transaction under the row lock,
a leader whose epoch moved (it lost its lease, paused, was cut off) cannot write afterwards.

Failures. A database error rolls the statement back: every request of the round fails with
``StoreUnavailable`` (nothing written). A broken connection may have lost the answer of a
committed statement: the committer then asks the store, on a new connection (for up to
``resolve_s``), which of the round's batches are there, and answers accordingly; only when the
store cannot be asked does a request fail with ``StoreUnavailable(outcome_unknown=True)``, and
the partition's leader must re-read the store before appending again (``PgPartitionLog.resync``).
A failed connect fails that round's requests (retriable, nothing written) after a short pause.

Cost. A round is one statement whose 13 array arguments are built column-wise in PostgreSQL's
binary format at C speed (cluster/pg_arrays.py; psycopg would build them one element at a time,
~1.5 µs an element), and its futures are completed inside ``store_pending.one_hop()``: the
waiters on the event loop (``PendingAppend``) are settled by ONE callback per round, not one
``call_soon_threadsafe`` per batch. Measured with ``python -m bench.store_round``.

Thread-safety: ``submit``, ``stats`` and ``close`` may be called from any thread. Futures are
completed on the committer's thread, a round's in submission order; awaiting a ``PendingAppend``
on an event loop settles its waiter there (store_pending.py); a thread waits with
``future.result(timeout)``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable

import psycopg

from oncelog.cluster.connection import StoreConnection
from oncelog.cluster.errors import LeaderFenced, LogEndMoved, StoreUnavailable
from oncelog.cluster.pg_arrays import encoder_for
from oncelog.protocol.errors import KafkaError, UnknownTopicOrPartition
from oncelog.storage.batch_append import BatchAppend
from oncelog.storage.store_pending import one_hop

__all__ = ["AppendRequest", "CommitStats", "GroupCommitter"]

log = logging.getLogger(__name__)

#: the whole round in one statement (schema.py): in autocommit mode its answer follows COMMIT
_APPEND = (
    "SELECT idx, status, store_epoch, store_leader, store_end FROM oncelog_append("
    "%b::int8[], %b::int4[], %b::int8[], %b::int8[], %b::int8[], %b::int8[], %b::int2[], %b::int4[], "
    "%b::bool[], %b::bool[], %b::bytea[], %b::int4[], %b::int8[])"
)
_APPENDED, _NO_PARTITION, _FENCED, _END_MOVED, _NOT_DRAINED = 0, 1, 2, 3, 4
#: which of a round's batches are in the store (after its answer was lost)
_LANDED = (
    "SELECT b.partition_id, b.base_offset FROM oncelog_batch b "
    "JOIN unnest(%s::int8[], %s::int8[], %s::int4[], %s::int8[]) AS r(pid, base, epoch, last) "
    "ON b.partition_id = r.pid AND b.base_offset = r.base AND b.leader_epoch = r.epoch AND b.last_offset = r.last"
)
#: pause after a failed connect before the next round (bounded retry, no busy loop)
RECONNECT_PAUSE_S = 0.2


@dataclass(slots=True)
class AppendRequest(BatchAppend):
    """One batch for the group commit (``BatchAppend``), with its row for ``oncelog_append``."""

    def params(self) -> tuple:
        """This request's elements of the arrays ``oncelog_append`` takes, in its order (the
        drained ids, concatenated over the round, are its last argument: ``_round_params``)."""
        return (self.partition_id, self.leader_epoch, self.base_offset, self.last_offset, self.max_timestamp,
                self.producer_id, self.producer_epoch, self.base_sequence, self.is_transactional, self.is_control,
                self.data, len(self.drained))


#: per argument of ``_APPEND``, in order: the encoder of its array type (cluster/pg_arrays.py),
#: or None where it knows none (psycopg then adapts the plain list)
_ENCODERS = [encoder_for(t) if arr else None for t, arr in re.findall(r"%b(?:::(\w+)(\[\])?)?", _APPEND)]


def _round_params(reqs: list[AppendRequest]) -> list[Any]:
    """The arguments of ``oncelog_append`` for a round: the requests' rows transposed into one
    array per column, each built in PostgreSQL's binary format at C speed (pg_arrays.py), not
    by psycopg one element at a time."""
    cols: list[Any] = list(zip(*map(AppendRequest.params, reqs)))
    cols.append([i for r in reqs for i in r.drained])
    return [col if enc is None else enc(col) for enc, col in zip(_ENCODERS, cols)]


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
                 resolve_s: float = 5.0, monotonic: Callable[[], float] = time.monotonic,
                 name: str = "oncelog-group-commit") -> None:
        if max_bytes < 1 or linger_s < 0:
            raise ValueError("max_bytes must be >= 1 and linger_s >= 0")
        self._store = StoreConnection(connect, name)  # the writer thread's (and close()'s, after it)
        self._max_bytes = max_bytes
        self._linger_s = linger_s
        self._resolve_s = resolve_s
        self._monotonic = monotonic
        self._queue: deque[AppendRequest] = deque()
        self._queued_bytes = 0
        self._cond = threading.Condition()
        self._closing = False
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
        _complete([(req, StoreUnavailable(f"{req.what}: the group committer closed before writing it"))
                   for req in stranded])
        self._store.drop()

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
                _complete([(req, StoreUnavailable(f"{req.what}: group commit failed ({type(exc).__name__})",
                                                  outcome_unknown=True)) for req in reqs if not req.future.done()])

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
            conn = self._store.raw()
        except StoreUnavailable as exc:
            with self._cond:
                self._stats.failed_rounds += 1
            _complete([(req, StoreUnavailable(f"{req.what}: {exc}")) for req in reqs])
            time.sleep(RECONNECT_PAUSE_S)
            return
        accepted: list[AppendRequest] = []
        refused: list[tuple[AppendRequest, KafkaError]] = []
        try:
            rows = conn.execute(_APPEND, _round_params(reqs)).fetchall()
            if len(rows) != len(reqs):
                raise RuntimeError(f"oncelog_append answered {len(rows)} rows for {len(reqs)} requests")
        except Exception as exc:
            # A broken connection may have lost the answer of a committed statement; any other
            # error rolled the statement (the transaction) back.
            unknown = conn.broken or isinstance(exc, psycopg.OperationalError)
            self._store.drop()
            with self._cond:
                self._stats.failed_rounds += 1
            landed = self._resolve(reqs) if unknown else [False] * len(reqs)
            log.warning("group commit of %d batch(es) failed%s: %s", len(reqs),
                        " (outcome unknown)" if landed is None else "", exc)
            if landed is None:
                _complete([(req, StoreUnavailable(f"{req.what}: the store failed ({type(exc).__name__}: {exc}); "
                                                  f"whether the batch was written is unknown", outcome_unknown=True))
                           for req in reqs])
                return
            if not any(landed):
                _complete([(req, StoreUnavailable(f"{req.what}: the store failed ({type(exc).__name__}: {exc}); "
                                                  f"nothing was written")) for req in reqs])
                return
            # The statement committed before the connection broke: answer as if it had replied.
            rows = [(i, _APPENDED if ok else _END_MOVED, r.leader_epoch, -1, -1)
                    for i, (r, ok) in enumerate(zip(reqs, landed))]
        for idx, status, store_epoch, store_leader, store_end in rows:
            r = reqs[idx]
            if status == _APPENDED:
                accepted.append(r)
            elif status == _FENCED:
                refused.append((r, LeaderFenced(r.what, r.leader_epoch, store_epoch, store_leader)))
            elif status == _END_MOVED:
                refused.append((r, LogEndMoved(r.what, r.base_offset, store_end)))
            elif status == _NOT_DRAINED:
                refused.append((r, StoreUnavailable(f"{r.what}: outbox rows of the batch are gone (drained twice?)")))
            else:
                refused.append((r, UnknownTopicOrPartition(f"{r.what}: the partition is not in the store")))
        with self._cond:
            s = self._stats
            if accepted:
                s.transactions += 1
                s.appends += len(accepted)
                s.bytes += sum(len(r.data) for r in accepted)
                s.max_batches_per_transaction = max(s.max_batches_per_transaction, len(accepted))
            s.refused += len(refused)
        _complete([(r, None) for r in accepted] + refused)

    def _resolve(self, reqs: list[AppendRequest]) -> list[bool] | None:
        """After a connection broke during a round: which requests did the store commit? Found
        on a new connection by key, epoch and last offset (only this leader, under this epoch,
        writes at these offsets, and nothing else is in flight for them). None when the store
        cannot be asked within ``resolve_s``."""
        deadline = self._monotonic() + self._resolve_s
        for _attempt in range(int(self._resolve_s / RECONNECT_PAUSE_S) + 1):
            try:
                conn = self._store.raw()
                found = set(conn.execute(_LANDED, [list(c) for c in zip(*(
                    (r.partition_id, r.base_offset, r.leader_epoch, r.last_offset) for r in reqs))]).fetchall())
                return [(r.partition_id, r.base_offset) in found for r in reqs]
            except Exception as exc:
                self._store.drop()
                log.info("asking the store what the last round wrote failed: %s", exc)
            if self._monotonic() + RECONNECT_PAUSE_S > deadline:
                break
            time.sleep(RECONNECT_PAUSE_S)
        return None


def _complete(outcomes: list[tuple[AppendRequest, KafkaError | None]]) -> None:
    """Complete the futures of a round's requests in this order (accepted: None; else the
    error), their waiters on the event loop settled with one hop for them all (store_pending.py
    ``one_hop``)."""
    with one_hop():
        for req, exc in outcomes:
            fut = req.future
            if fut.set_running_or_notify_cancel():
                if exc is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(exc)
