"""Leader state of one partition: its log, its producer state, its high watermark, and
fetchers waiting for data.

With a single replica the high watermark is the log end offset: a batch is committed (R2) once
it is in the log. There is one method per kind of append, each the same on every engine:
``append_validated`` takes a producer's batch that the Produce handler has validated
(records.py), checks it against the producer state (R6: duplicates are answered with their
original offsets and not written again; gaps, stale epochs and unknown producers are refused),
appends it whole, and only then updates the producer state (``append_produced``, the Produce
handler's way in, first answers the retry of a written batch and runs the handler's transaction
checks: every producer-state check is made here); ``append_internal`` is the
coordinators' way in, ``append_marker`` writes a transaction marker, ``append_outbox`` a batch
of the transactional outbox (cluster mode). Nothing here looks at single records.

One append path. Each of them goes through the engine contract's one append (``submit``,
storage/engine.py) and returns an awaitable of its result. An engine that completes the append
within ``submit`` (the local one) has it checked, written and applied at the call: awaiting the
result never suspends, and no future or task is made. One that completes later (PostgreSQL, at
its group COMMIT) has the producer state applied when it completes; meanwhile the batch holds
the high watermark below it and owns its producer's line (``_in_line``): the producer's next
append on this partition is checked and written after it, in the order the calls were made —
except a data batch that continues the producer's run of data batches in flight (same epoch,
next sequence, at most 5): that one is checked against the producer state as it will be once
they commit and goes to the engine at once, its producer state applied after theirs (issue 29,
the pending layer: pending_producers.py, which states the invariants).

Producer state survives restarts (R7): a snapshot is written whenever the log rolls a segment and
on clean close; on open the newest snapshot at or below the log end is loaded and the batch
headers after it are replayed (the whole log when no snapshot is usable).

Long-poll fetches register a future with ``waiter()``; every append resolves all of them, so a
fetch parked on min_bytes wakes up as soon as data arrives.

The log is any storage engine (``storage/engine.py``: local segment files, or PostgreSQL in
cluster mode); nothing here asks which.

Single-threaded: called only from the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from operator import itemgetter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Coroutine, Generator, Generic, Iterator, Protocol, TypeVar, Union

import logging

from oncelog.protocol import records
from oncelog.storage.engine import PartitionEngine, PendingAppend
from oncelog.storage.parts import ReadPart
from oncelog.storage.config import LogConfig
from oncelog.storage.engines import LocalSpec, open_engine
from oncelog.protocol.errors import InvalidProducerEpoch, InvalidTxnState, KafkaError, TransactionCoordinatorFenced
from oncelog.storage.producer_state import ProducerStateManager
from oncelog.broker.partitions.pending_producers import PendingProducers
from oncelog.storage.txn_index import AbortedTxn, AbortedTxnIndex
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_start_offset: int
    duplicate: bool = False
    #: the batch's timestamp when the topic uses LogAppendTime (Produce's log_append_time_ms), else -1
    log_append_time: int = -1


@dataclass(frozen=True, slots=True)
class ReadResult:
    slices: list[ReadPart]  # file slices and/or in-memory chunks of whole batches
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[AbortedTxn]


@dataclass(slots=True)
class _Guard:
    """The verification guard of one producer on one partition (Kafka's): a marker that comes
    while a batch is verified ended the transaction the coordinator confirmed, so the batch must
    not open a new one after it (it would hang: no coordinator knows it)."""

    #: the producer's batches waiting here for their verification
    waiting: int = 0
    #: markers for the producer (not stale) that came since the guard was made
    markers: int = 0
    #: the newest producer epoch of those markers (-1: none)
    epoch: int = -1


class ProduceVerifier(Protocol):
    """The Produce handler's transaction checks of one batch (``Partition.append_produced``):
    raise the KafkaError that refuses it, or return None (accepted), or an awaitable to wait
    for before appending it (KIP-890: the coordinator, on another broker or writing the implicit
    add, must answer first)."""

    def __call__(self, tp: TopicPartition, header: records.BatchHeader,
                 partition: "Partition") -> Awaitable[None] | None: ...


class Partition:
    def __init__(
        self,
        tp: TopicPartition,
        log: PartitionEngine,
        config: LogConfig,
        producers: ProducerStateManager,
        aborted: AbortedTxnIndex,
    ) -> None:
        self.tp = tp
        self.log = log
        self.config = config
        self.producers = producers
        self.aborted = aborted
        self._waiters: set[asyncio.Future[None]] = set()
        #: per producer id, its appends that have not completed (pending_producers.py): the tail of
        #: its line (``_in_line``) and its run of pipelined data batches; empty on an engine whose
        #: appends complete within ``submit``
        self._pending = PendingProducers()
        self._inflight_pids = self._pending.lines  # producer id -> the tail of its line
        #: base offsets of batches handed to an engine, not complete yet, whose producer state is not
        #: applied yet, oldest first (an insertion-ordered dict used as an ordered set). The high
        #: watermark never passes the oldest: the engine's committed end moves on the committer's
        #: thread at COMMIT, before the event loop has registered the batch's transaction, and a
        #: read_committed fetch in between would take an open transaction's records as stable.
        self._unapplied: dict[int, None] = {}
        #: per producer id whose batches wait here for their verification (``append_produced``):
        #: Kafka's verification guard. Bounded by the verifications in flight.
        self._verifying: dict[int, _Guard] = {}

    @classmethod
    def open(cls, tp: TopicPartition, path: Path, config: LogConfig, now_ms: int) -> "Partition":
        """Open the local-files log (recovering it) and rebuild the producer state (R7)."""
        return cls.recover(tp, open_engine(LocalSpec(path, config, now_ms)), path, config)

    @classmethod
    def recover(cls, tp: TopicPartition, plog: PartitionEngine, path: Path, config: LogConfig) -> "Partition":
        """Lead ``plog``, an open log of any storage engine (storage/engine.py): rebuild the
        producer state and the aborted-transaction index (R7) from the snapshot in ``path`` and
        the batch headers after it, or from the whole log when no snapshot is usable."""
        producers = ProducerStateManager(path, str(tp))
        end = plog.log_end_offset
        snapshot_ok = producers.load_latest_snapshot(end)
        aborted = AbortedTxnIndex.open(path, plog.log_start_offset, end)
        recorded_last = int(producers.snapshot_extra.get("aborted_last", -1)) if snapshot_ok else -1
        if snapshot_ok and (aborted.damaged or aborted.last_offset < recorded_last):
            # Entries were lost (file deleted, cut, corrupted): re-derive the index, and with it
            # the producer state, from the whole log.
            log.warning("%s: aborted-transaction index damaged; rebuilding it from the whole log", tp)
            snapshot_ok = False
        if not snapshot_ok:
            producers.reset(plog.log_start_offset)
            aborted.reset()
        elif producers.map_end_offset < plog.log_start_offset:
            # The log start moved past the snapshot (retention, DeleteRecords). As Kafka since
            # KIP-360, a producer's state outlives its data (until producer.id.expiration.ms):
            # keep it, and replay from the log start.
            producers.map_end_offset = plog.log_start_offset
        replayed = 0
        for h in plog.iter_headers(producers.map_end_offset):
            coordinator_epoch = _index_marker(plog, producers, aborted, h) if h.is_control else None
            producers.update(h, h.base_offset, coordinator_epoch=coordinator_epoch)
            replayed += 1
        producers.map_end_offset = end
        if replayed:
            log.info("%s: producer state rebuilt, %d batch headers replayed", tp, replayed)
        return cls(tp, plog, config, producers, aborted)

    def set_config(self, config: LogConfig) -> None:
        """Apply changed topic configs live (AlterConfigs): produce checks, retention, roll,
        flush and compaction read the new values from now on; index settings apply to segments
        created from now on."""
        self.config = config
        self.log.config = config

    @property
    def high_watermark(self) -> int:
        """The end of what readers may see: the log end, except while appends complete in the
        background, where it stops at the oldest committed batch the producer state has not
        taken in yet."""
        end = self.log.log_end_offset
        if self._unapplied:
            end = min(end, next(iter(self._unapplied)))
        return end

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, or the high watermark (R15)."""
        first = self.producers.first_unstable_offset()
        if first is None:
            return self.high_watermark
        # An open transaction whose first records were deleted (retention, DeleteRecords) holds
        # the LSO at the log start, never below it (as Kafka clamps it).
        return min(max(first, self.log.log_start_offset), self.high_watermark)

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def disk_usage(self) -> tuple[int, int]:
        """(bytes, segments) of a local-files log, for operators (metrics, console); (-1, -1) on
        an engine with no files to measure (the cluster store)."""
        return self.log.disk_usage()

    def append_validated(self, batch: bytes, header: records.BatchHeader,
                         now_ms: int) -> Awaitable[AppendResult]:
        """Append a producer's batch that ``records.validate_produce_batch`` accepted (``header``
        is its result): checked against the producer state first (R6: a duplicate is answered
        with its original offsets and not written again; gaps, stale epochs and unknown producers
        are refused with their KafkaError), then written whole; await the returned result. Raises
        the append's KafkaError, at the call or when awaited (NOT_LEADER_OR_FOLLOWER when fenced,
        KAFKA_STORAGE_ERROR when the store failed).

        The batch takes its place in its producer's line NOW, at the call (issue 28): a Produce
        request handled while an earlier one of its connection still waits for its COMMIT
        (pipelining, network/server.py) calls this after the earlier one did, so a producer's batches on
        this partition are checked and appended in the order they arrived. On an engine that
        completes later the producer state is updated only after COMMIT (a refused or failed
        append leaves it untouched; the engine then refuses further appends until the leader is
        rebuilt from the store, broker/partitions/leader_tracker.py), and the append runs as its own task,
        never cancelled: cancelling the returned awaitable leaves it running (a submitted batch
        may commit, and the producer state must then take it in)."""
        pid = header.producer_id
        if pid >= 0 and pid in self._inflight_pids:
            before = self._pending.ahead_of(header)
            if before is not None:  # continues the producer's run in flight: at once
                return self._pipelined(batch, header, now_ms, before)
            return self._in_line(pid, functools.partial(self._begin_validated_in_line, batch, header, now_ms))
        step = self._begin_validated(batch, header, now_ms, ())  # the hot path: inline, no partial
        return step if type(step) is Ready else self._in_flight(pid, step, header)

    def append_produced(self, batch: bytes, header: records.BatchHeader, now_ms: int,
                        verify: "ProduceVerifier", *, guarded: bool = True
                        ) -> "Awaitable[AppendResult | Awaitable[AppendResult]]":
        """The Produce handler's append of a client batch that ``records.validate_produce_batch``
        accepted, with every producer-state check made here: a retry of a batch already in the
        log is answered with its original offsets (R6) before anything else — its transaction
        may have ended since, so the transaction checks would refuse a batch that IS written
        (long run 7: librdkafka then reused its sequence numbers and a later batch was dropped
        as its duplicate); any other batch goes to ``verify(tp, header, self)`` (the
        transaction checks: raises to refuse it, or returns an awaitable to wait for first, the
        coordinator's answer from elsewhere), then to ``append_validated``.

        Await the returned value (it never suspends unless there is a verification to wait
        for): it is the ``AppendResult`` when the append completed at once (local files; a
        duplicate), else the started append's awaitable, to await with the request's others
        (the batch has its place in its producer's line already). Raises the refusal's
        KafkaError, at the call or when awaited.

        ``guarded`` (transactions version 1: the verification only checks): a marker for the
        producer that comes here while the batch waits for its verification refuses it,
        INVALID_TXN_STATE (Kafka's verification guard). The coordinator's yes was about the
        transaction that marker ended; appended after it, the batch would open a transaction no
        coordinator knows, and hold the LSO (a client that ends its transaction with a Produce
        still unanswered). Under version 2 the verification is the add itself and the
        coordinator refuses it, retriably, until the previous transaction's markers are
        written, so it is not guarded."""
        dup = self.producers.duplicate_of(header)
        if dup is not None:
            return Ready((AppendResult(dup.first_offset, dup.last_offset, self.log.log_start_offset, duplicate=True),))
        verifying = verify(self.tp, header, self)
        if verifying is not None:
            if not guarded:
                return self._verified_then_appended(verifying, batch, header, now_ms, None, 0)
            guard = self._guard_enter(header.producer_id)
            return self._verified_then_appended(verifying, batch, header, now_ms, guard, guard.markers)
        appended = self.append_validated(batch, header, now_ms)
        return appended if type(appended) is Ready else Ready((appended,))  # type: ignore[return-value]

    async def _verified_then_appended(self, verifying: Awaitable[None], batch: bytes, header: records.BatchHeader,
                                      now_ms: int, guard: "_Guard | None", markers_before: int
                                      ) -> "AppendResult | Awaitable[AppendResult]":
        """Append ``batch`` once ``verifying`` succeeded, unless a marker for its producer came
        meanwhile (``guard``: the producer's entry of ``_verifying``; None: not guarded): then
        INVALID_TXN_STATE, as Kafka's leader answers a batch whose verification guard a marker
        removed."""
        pid = header.producer_id
        try:
            await verifying
        finally:
            if guard is not None:
                self._guard_leave(pid, guard)
        if guard is not None and guard.markers != markers_before:
            raise self._guard_refusal(guard, pid, header.producer_epoch, "batch", InvalidProducerEpoch)
        appended = self.append_validated(batch, header, now_ms)
        return appended[0] if type(appended) is Ready else appended  # type: ignore[index]

    def _guard_refusal(self, guard: _Guard, producer_id: int, producer_epoch: int, what: str,
                       fenced: type[KafkaError]) -> KafkaError:
        """What a write guarded by ``guard`` is told when a marker came while it was verified:
        ``fenced`` when the marker's epoch is newer than the write's (a timeout's abort, or a
        newer producer), else INVALID_TXN_STATE."""
        if guard.epoch > producer_epoch:
            return fenced(f"{self.tp}: a transaction marker of producer {producer_id}'s epoch {guard.epoch} was "
                          f"written while its {what} of epoch {producer_epoch} was being verified")
        return InvalidTxnState(f"{self.tp}: a transaction marker for producer {producer_id} was written while its "
                               f"{what} was being verified; it is not part of an ongoing transaction")

    @contextlib.contextmanager
    def verification_guard(self, producer_id: int, producer_epoch: int, what: str, *,
                           fenced: type[KafkaError] = InvalidProducerEpoch) -> Iterator[Callable[[], None]]:
        """The verification guard (``append_produced``'s) for a transactional write that another
        part of the broker verifies and then appends here: the group coordinator's
        TxnOffsetCommit, whose offsets become a transactional batch of the producer in this
        ``__consumer_offsets`` partition. Made at entry; yields ``check()``, which raises the
        refusal (``fenced`` or INVALID_TXN_STATE; see ``_guard_refusal``) when a marker for the
        producer (not a stale one) came since. The caller calls it with no suspension between
        the check and its ``append_internal`` call (which takes its place in the producer's line
        at the call), so a marker that comes later is written after the batch and ends the
        transaction the batch is part of."""
        guard = self._guard_enter(producer_id)
        markers_before = guard.markers

        def check() -> None:
            if guard.markers != markers_before:
                raise self._guard_refusal(guard, producer_id, producer_epoch, what, fenced)

        try:
            yield check
        finally:
            self._guard_leave(producer_id, guard)

    def _guard_enter(self, producer_id: int) -> _Guard:
        """The producer's guard here, made if there is none, with one more write waiting."""
        guard = self._verifying.setdefault(producer_id, _Guard())
        guard.waiting += 1
        return guard

    def _guard_leave(self, producer_id: int, guard: _Guard) -> None:
        """One write of ``guard`` no longer waits; the guard goes with its last."""
        guard.waiting -= 1
        if guard.waiting == 0 and self._verifying.get(producer_id) is guard:
            del self._verifying[producer_id]

    def _begin_validated_in_line(self, batch: bytes, header: records.BatchHeader,
                                 now_ms: int) -> "_Step[AppendResult]":
        """``_begin_validated`` for a batch that waited in its producer's line (run by the
        line's task): a batch it submits may start a run (pending_producers.py)."""
        step = self._begin_validated(batch, header, now_ms, ())
        if type(step) is not Ready:
            task = asyncio.current_task()
            if task is not None:
                self._pending.started(header.producer_id, task, header)
        return step

    def _pipelined(self, batch: bytes, header: records.BatchHeader, now_ms: int,
                   before: "asyncio.Future[Any]") -> Awaitable[AppendResult]:
        """Submit a batch that continues its producer's run in flight (``PendingProducers.ahead_of``:
        the producer state, once the run has committed, accepts it as the next batch, so it is
        not checked again); its producer state is applied after ``before``'s (the run's tail)
        completed. Raises the engine's KafkaError at the call (e.g. the one that stopped it)."""
        batch, stamped_header, stamped = self._stamp(batch, header, now_ms)
        active = self.log.active_base_offset
        pending = self.log.submit(batch, stamped_header, now_ms)
        self._unapplied[pending.base_offset] = None
        coro = self._complete(pending, stamped_header, now_ms, None, active,
                              lambda base, last: AppendResult(base, last, self.log.log_start_offset,
                                                              log_append_time=stamped), before)
        return self._in_flight(header.producer_id, coro, header, pipelined=True)

    def append_outbox(self, batch: bytes, header: records.BatchHeader, now_ms: int,
                      drained: tuple[int, ...]) -> Awaitable[AppendResult]:
        """Issue 31: append a batch the outbox drainer built (broker/database/outbox_drainer.py) from the
        engine's outbox rows ``drained`` (``PartitionEngine.outbox_id``), which the engine
        removes in the commit that writes the batch. The batch is an idempotent producer's (the
        broker's own producer id) and takes the produce path (``append_validated``): the
        producer state check (a duplicate is answered with its offsets and writes nothing),
        LogAppendTime stamping, the append, the producer state update once it completes."""
        return self._in_line(header.producer_id,
                             functools.partial(self._begin_validated, batch, header, now_ms, drained))

    def _begin_validated(self, batch: bytes, header: records.BatchHeader, now_ms: int,
                         drained: tuple[int, ...]) -> "_Step[AppendResult]":
        dup = self.producers.check(header)
        if dup is not None:
            return Ready((AppendResult(dup.first_offset, dup.last_offset, self.log.log_start_offset, duplicate=True),))
        batch, header, stamped = self._stamp(batch, header, now_ms)
        active = self.log.active_base_offset
        pending = self.log.submit(batch, header, now_ms, drained=drained)
        if pending.done:  # ``_write`` and ``_applied``, written out for the hot path
            base = pending.base_offset
            self.producers.update(header, base, now_ms)
            if self.log.active_base_offset != active:
                self._snapshot()
            if self._waiters:
                self._wake()
            return Ready((AppendResult(base, pending.last_offset, self.log.log_start_offset,
                                        log_append_time=stamped),))
        self._unapplied[pending.base_offset] = None
        return self._complete(pending, header, now_ms, None, active,
                              lambda base, last: AppendResult(base, last, self.log.log_start_offset,
                                                              log_append_time=stamped))

    def _stamp(self, batch: bytes, header: records.BatchHeader, now_ms: int) -> tuple[Any, records.BatchHeader, int]:
        """message.timestamp.type=LogAppendTime: the batch stamped with ``now_ms`` (header fields
        and CRC only, ``records.stamp_log_append_time``), for either storage engine; otherwise
        the batch unchanged. Returns (batch, header, log append time or -1)."""
        if not self.config.log_append_time:
            return batch, header, -1
        stamped, header = records.stamp_log_append_time(batch, header, now_ms)
        return stamped, header, now_ms

    def append_internal(self, batch: bytes, now_ms: int) -> Awaitable[AppendResult]:
        """Append a batch written by the broker's own coordinators (offset commits, group
        metadata, transaction log records, transactional offset commits carrying a producer id
        without sequence numbers): the header is parsed and the producer epoch checked (a fenced
        epoch is refused), sequence numbers are not (as Kafka's ``AppendOrigin.COORDINATOR``).
        Await the result (as ``append_validated``: in its producer's line, taken at the call)."""
        header = records.parse_header(batch)
        return self._in_line(header.producer_id, functools.partial(self._begin_internal, batch, header, now_ms))

    def _begin_internal(self, batch: bytes, header: records.BatchHeader, now_ms: int) -> "_Step[AppendResult]":
        self.producers.check_epoch(header)
        return self._write(batch, header, now_ms,
                           then=lambda base, last: AppendResult(base, last, self.log.log_start_offset))

    def _in_line(self, pid: int, begin: "Callable[[], _Step[_T]]") -> Awaitable[_T]:
        """Run ``begin`` (the checks and the engine's ``submit`` of one append) in producer
        ``pid``'s line: at once when none of its appends is in flight here (always so on an
        engine that completes within ``submit``: the result is then ready, and no future or task
        is made); otherwise after the in-flight ones, as a task. An append that completes later
        becomes the producer's latest in flight: the next one waits for it. Producer id -1 (no
        producer) has no line. The task is never cancelled: cancelling the returned future
        leaves it running (its outcome then retrieved and dropped)."""
        before = self._inflight_pids.get(pid) if pid >= 0 else None
        if before is None:
            step = begin()
            return step if type(step) is Ready else self._in_flight(pid, step)  # type: ignore[return-value]
        return self._in_flight(pid, _after(before, begin))

    def _in_flight(self, pid: int, coro: Coroutine[Any, Any, _T], header: records.BatchHeader | None = None,
                   pipelined: bool = False) -> Awaitable[_T]:
        """Run ``coro`` (an append that completes later) as its own task, the producer's latest
        in flight here; the returned future's cancellation leaves the task running. ``header``:
        the data batch it completes, submitted already, which starts the producer's run or
        (``pipelined``) continues it (pending_producers.py)."""
        task = asyncio.ensure_future(coro)
        if pid >= 0:
            self._pending.queued(pid, task)
            if pipelined:
                self._pending.continued(pid, task, header)  # type: ignore[arg-type]
            elif header is not None:
                self._pending.started(pid, task, header)
        return _detached(task)

    def _write(self, batch: bytes, header: records.BatchHeader, now_ms: int, *, then: Callable[[int, int], _T],
               coordinator_epoch: int | None = None, drained: tuple[int, ...] = ()) -> "_Step[_T]":
        """Submit the batch to the engine (the one append, storage/engine.py). Complete at once:
        the producer state takes it in, ``then(base, last)`` derives the caller's result, and
        the result is ready. Otherwise: the batch holds the high watermark below it
        (``_unapplied``) and the returned coroutine does the same once the engine completes it
        (``then`` runs in the same step as the producer state update, before any reader can see
        the batch without what it derives, e.g. a marker's aborted-index entry)."""
        active = self.log.active_base_offset
        pending = self.log.submit(batch, header, now_ms, drained=drained)
        if pending.done:
            self._applied(pending.base_offset, header, now_ms, coordinator_epoch, active)
            return Ready((then(pending.base_offset, pending.last_offset),))
        self._unapplied[pending.base_offset] = None
        return self._complete(pending, header, now_ms, coordinator_epoch, active, then)

    async def _complete(self, pending: PendingAppend, header: records.BatchHeader, now_ms: int,
                        coordinator_epoch: int | None, active: int, then: Callable[[int, int], _T],
                        before: "asyncio.Future[Any] | None" = None) -> _T:
        """Wait for the engine to complete ``pending``, then (after ``before``, the append ahead
        of a pipelined one, however it ended: producer state in offset order) apply it."""
        try:
            await pending
        except BaseException:
            if before is not None:
                await asyncio.wait((before,))
            del self._unapplied[pending.base_offset]
            self._wake()
            raise
        if before is not None:
            # The engine committed it, so (log end condition) everything ahead of it too; the
            # producer state takes them in in offset order.
            await asyncio.wait((before,))
        del self._unapplied[pending.base_offset]
        self._applied(pending.base_offset, header, now_ms, coordinator_epoch, active)
        return then(pending.base_offset, pending.last_offset)

    def _applied(self, base: int, header: records.BatchHeader, now_ms: int, coordinator_epoch: int | None,
                 active: int) -> None:
        """The producer state takes a complete append in; a segment roll snapshots it; waiting
        fetches wake. The caller derives its result (``then``) before its next ``await``."""
        self.producers.update(header, base, now_ms, coordinator_epoch=coordinator_epoch)
        if self.log.active_base_offset != active:
            self._snapshot()
        self._wake()

    def delete_records(self, offset: int) -> None:
        """DeleteRecords: the log start moves up to ``offset`` (the caller checked it is at most
        the high watermark); segments wholly below it are deleted. A lower offset changes nothing."""
        if offset > self.log.log_start_offset:
            self.log.set_log_start_offset(offset)

    def has_open_transaction(self, producer_id: int, epoch: int | None = None) -> bool:
        """Whether ``producer_id`` has a transaction open here (of ``epoch``, when given: a
        batch of another epoch is not part of it, as Kafka's ``hasOngoingTransaction(pid,
        epoch)``; under transactions version 2 every end bumps the epoch, so the open one may be
        the previous transaction, its marker not written yet)."""
        if producer_id not in self.producers.ongoing:
            return False
        return epoch is None or self.producers.entries[producer_id].epoch == epoch

    def append_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, now_ms: int
    ) -> Awaitable[int | None]:
        """Write a COMMIT or ABORT transaction marker for ``producer_id`` (R14).

        Idempotent: when the producer has no open transaction here (the marker was written
        already, or the transaction never wrote to this partition) nothing is written and None is
        returned; otherwise the marker's offset. An ABORT adds the transaction to the aborted
        index; either way the producer's transaction closes and the LSO may advance. Await the
        result (as ``append_validated``: in its producer's line, taken at the call).

        Raises InvalidProducerEpoch for a marker older than the producer's current epoch, and
        TransactionCoordinatorFenced for one from an older coordinator epoch than the last
        marker of this producer here (a zombie coordinator: its late COMMIT must not close the
        producer's next transaction, which has the same producer epoch under TV1).

        A marker that is not stale also refuses the producer's batches waiting here for their
        verification (``append_produced``), as of the call: they were confirmed as part of the
        transaction this marker ends.
        """
        guard = self._verifying.get(producer_id)
        if guard is not None and not self._stale_marker(producer_id, producer_epoch, coordinator_epoch):
            guard.markers += 1  # the batches of this producer being verified here are refused
            guard.epoch = max(guard.epoch, producer_epoch)
        return self._in_line(producer_id, functools.partial(self._begin_marker, producer_id, producer_epoch, commit,
                                                            coordinator_epoch, now_ms))

    def _begin_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      now_ms: int) -> "_Step[int | None]":
        plan = self._marker_plan(producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
        if plan is None:
            return Ready((None,))
        batch, header, first, lso_before = plan

        def then(base: int, _last: int) -> int:
            self._marker_written(producer_id, commit, first, base, lso_before)
            return base

        return self._write(batch, header, now_ms, coordinator_epoch=coordinator_epoch, then=then)

    def _stale_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> bool:
        """Whether a marker is refused by ``_marker_plan``'s epoch checks as the state is now (a
        zombie coordinator's): such a marker ends nothing, so it removes no verification guard."""
        entry = self.producers.entries.get(producer_id)
        return entry is not None and (producer_epoch < entry.epoch or coordinator_epoch < entry.coordinator_epoch)

    def _marker_plan(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                     now_ms: int) -> tuple[bytes, records.BatchHeader, int, int] | None:
        """The checks of a marker and its control batch; None when there is nothing to mark."""
        first = self.producers.ongoing.get(producer_id)
        if first is None:
            return None
        entry = self.producers.entries[producer_id]
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"{self.tp}: marker for producer {producer_id} has epoch {producer_epoch}, "
                f"older than the producer's epoch {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFenced(
                f"{self.tp}: marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch} of its last marker here"
            )
        batch = records.build_control_batch(
            commit=commit,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp_ms=now_ms,
        )
        return batch, records.parse_header(batch), first, self.last_stable_offset

    def _marker_written(self, producer_id: int, commit: bool, first: int, base: int, lso_before: int) -> None:
        if not commit:
            self.aborted.append(AbortedTxn(producer_id, first, base, lso_before))

    def read(self, offset: int, max_bytes: int, *, read_committed: bool = False, min_one_batch: bool = True) -> ReadResult:
        """Whole batches from ``offset`` up to the high watermark (or the LSO when read_committed).

        Raises OffsetOutOfRange when ``offset`` is outside [log start, log end].
        """
        hw = self.high_watermark
        lso = self.last_stable_offset
        upper = lso if read_committed else hw
        slices = self.log.read(offset, max_bytes, max_offset=upper, min_one_batch=min_one_batch)
        aborted = self.aborted.collect(offset, upper) if read_committed and slices else []
        return ReadResult(slices, hw, lso, self.log.log_start_offset, aborted)

    def enforce_retention(self, now_ms: int) -> int:
        deleted = self.log.enforce_retention(now_ms)
        if deleted:
            self.aborted.trim_below(self.log.log_start_offset)
        self.log.cleanup_deleted(now_ms)
        return deleted

    def waiter(self) -> asyncio.Future[None]:
        """A future resolved by the next append. Cancelling it unregisters it."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(fut)
        fut.add_done_callback(self._waiters.discard)
        return fut

    def wake_waiters(self) -> None:
        self._wake()

    def _wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, set()
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def close(self) -> None:
        """Flush and close the log and snapshot the producer state (a clean shutdown)."""
        self._wake()
        self.log.close()
        self._snapshot()

    def _snapshot(self) -> None:
        # The newest aborted-index entry is recorded so that a later open can tell when index
        # entries were lost (see AbortedTxnIndex).
        self.producers.write_snapshot(extra={"aborted_last": self.aborted.last_offset})


def _index_marker(plog: PartitionEngine, producers: ProducerStateManager, aborted: AbortedTxnIndex,
                  h: records.BatchHeader) -> int | None:
    """During replay: read a marker of an open transaction, index it when it is an ABORT (before
    ``producers.update`` closes the transaction); returns its coordinator epoch (None: no
    transaction was open, nothing to read)."""
    first = producers.ongoing.get(h.producer_id)
    if first is None:
        return None
    marker = records.read_control_marker(plog.read_batches(h.base_offset, h.size, h.base_offset + 1))
    if h.base_offset <= aborted.last_offset:
        return marker.coordinator_epoch
    if not marker.commit:
        lso_before = producers.first_unstable_offset()
        aborted.append(AbortedTxn(h.producer_id, first, h.base_offset, first if lso_before is None else lso_before))
    return marker.coordinator_epoch


class Ready(tuple, Generic[_T]):  # type: ignore[type-arg]
    """What an append method returns when the append completed at the call (on an engine that
    completes within ``submit``, or a duplicate answered from the producer state): its result,
    there already. Awaiting it returns the result without suspending; a caller on a hot path
    may take ``value`` (or ``[0]``) without awaiting. The 1-tuple ``(value,)``, made without
    running Python code."""

    __slots__ = ()
    value = property(itemgetter(0))

    def __await__(self) -> Generator[Any, None, _T]:
        return self[0]  # type: ignore[no-any-return]
        yield  # a generator: awaiting it never suspends


#: what the start of an append gives: its result, or the coroutine that completes it
_Step = Union[Ready[_T], Coroutine[Any, Any, _T]]


async def _after(before: "asyncio.Future[Any]", begin: "Callable[[], _Step[_T]]") -> _T:
    """``begin`` once ``before`` (the producer's previous append here) is over, however it ended."""
    await asyncio.wait((before,))
    step = begin()
    if type(step) is Ready:
        return step.value
    return await step  # type: ignore[misc]


async def await_appends(appends: list[Awaitable[_T]]) -> list["_T | KafkaError"]:
    """Await started appends in order (all were started, so their engine works on them
    together): each one's result, or its KafkaError. Anything else is raised (a bug). Cancelled
    or failing part-way, the appends not awaited yet are cancelled (their tasks run on)."""
    out: list[_T | KafkaError] = []
    try:
        for aw in appends:
            if type(aw) is Ready:  # complete at the call: no await needed
                out.append(aw[0])
                continue
            try:
                out.append(await aw)
            except KafkaError as exc:
                out.append(exc)
    finally:
        if len(out) < len(appends):
            for aw in appends[len(out):]:
                if isinstance(aw, asyncio.Future):
                    aw.cancel()
    return out


def _detached(task: "asyncio.Task[_T]") -> "asyncio.Future[_T]":
    """A future with ``task``'s outcome whose cancellation leaves ``task`` running (its outcome
    then retrieved and dropped)."""
    outer = asyncio.shield(task)
    outer.add_done_callback(lambda f: task.add_done_callback(_drop_outcome) if f.cancelled() else None)
    return outer


def _drop_outcome(task: "asyncio.Future[Any]") -> None:
    if not task.cancelled():
        task.exception()
