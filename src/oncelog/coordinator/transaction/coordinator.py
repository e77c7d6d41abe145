"""The transaction coordinator (R8–R14, R19): InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, the markers, and loading ``__transaction_state`` on start.

Theory of operation. Each transactional.id has a ``TxnMetadata`` that changes only by records of
``__transaction_state`` (partition ``abs(hash(id)) % N``): a request prepares the next state
(metadata.py; illegal moves and concurrent moves are refused there), the record is appended, and
only then is the state applied and the answer given. On start ``load`` replays the log through the
same ``apply`` and finishes every transaction it finds in PrepareCommit / PrepareAbort /
PrepareEpochFence (R19).

EndTxn: PrepareCommit/PrepareAbort is appended first — from then on the outcome is fixed — then a
COMMIT/ABORT marker is appended to every partition of the transaction (``Partition.append_marker``;
idempotent, so re-sending after a crash is harmless), ``__consumer_offsets`` included (the group
coordinator then materialises or drops the pending offsets), and finally CompleteCommit /
CompleteAbort. All partitions live on this broker, so the markers are written before EndTxn
answers: when a producer's commit returns, read_committed consumers can already see the data
(Kafka answers after Prepare* and writes markers afterwards). A partition whose marker fails is
retried in the background (``retry_markers``) without holding up the others; the transaction
stays in Prepare* until every marker is in, and meanwhile new requests for it get
CONCURRENT_TRANSACTIONS.

Fencing (R9): every InitProducerId bumps the epoch; a request with an older epoch is refused with
PRODUCER_FENCED (INVALID_PRODUCER_EPOCH for request versions that predate it, see handlers), and
markers written with the new epoch fence the old producer on every data partition too.

Crash points (``oncelog.faults``): ``end_txn.before_prepare``, ``end_txn.after_prepare``,
``end_txn.after_markers``, ``end_txn.after_complete``.

Single-threaded: every method runs on the broker's event loop and none awaits, so a prepared
transition is never observed half-done by another request.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

from oncelog.coordinator.load_report import SkipReport
from oncelog.coordinator.placement import partition_for
from oncelog.coordinator.producer_ids import ProducerIdManager
from oncelog.coordinator.transaction import log as txnlog
from oncelog.coordinator.transaction.metadata import MAX_EPOCH, TxnMetadata
from oncelog.coordinator.transaction.state import TxnState
from oncelog.faults import CrashPoints
from oncelog.protocol import records
from oncelog.protocol.errors import (
    ConcurrentTransactions,
    CoordinatorNotAvailable,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTransactionTimeout,
    InvalidTxnState,
    KafkaError,
    ProducerFenced,
    UnknownTopicOrPartition,
)
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"


class PartitionLike(Protocol):
    def append(self, batch: bytes, now_ms: int, *, from_client: bool = True) -> object: ...
    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, now_ms: int) -> int | None: ...


@dataclass(frozen=True)
class TxnSettings:
    num_partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms
    offsets_partitions: int = 50  # offsets.topic.num.partitions


class TransactionCoordinator:
    def __init__(
        self,
        *,
        settings: TxnSettings,
        partition: Callable[[str, int], PartitionLike],
        producer_ids: ProducerIdManager,
        now_ms: Callable[[], int],
        on_offsets_marker: Callable[[int, int, bool], None] | None = None,
        crash: CrashPoints | None = None,
        coordinator_epoch: int = 0,
    ) -> None:
        self.settings = settings
        self._partition = partition
        self.producer_ids = producer_ids
        self.now_ms = now_ms
        self.on_offsets_marker = on_offsets_marker
        self.crash = crash or CrashPoints("")
        self.coordinator_epoch = coordinator_epoch
        self.txns: dict[str, TxnMetadata] = {}
        #: partition -> records or batches the last ``load`` skipped there (R22)
        self.skipped_on_load: dict[int, int] = {}
        #: transactional.id -> partitions whose marker is still to be written
        self.unfinished_markers: dict[str, set[TopicPartition]] = {}

    # -- loading -----------------------------------------------------------------------------

    def load(self, batches_of_partition: Callable[[int], Iterable[tuple[records.BatchHeader, bytes]]]) -> int:
        """Replay every ``__transaction_state`` partition, then finish what was in flight (R19).

        ``batches_of_partition(p)`` yields (header, bytes) of partition p's batches. A record that
        does not decode, a batch whose records do not parse or decompress, and a control batch
        (a marker has no place here) are skipped and logged with their topic-partition and
        offset (``SkipReport``, R22): one bad record never keeps the broker from starting.
        Finishing a Prepare* transaction that cannot be written now (the log is not writable)
        is logged and left to ``retry_markers``. Returns the number of transactional ids loaded."""
        self.skipped_on_load = {}
        for p in range(self.settings.num_partitions):
            report = SkipReport(f"{TXN_TOPIC}-{p}", log)
            for h, batch in batches_of_partition(p):
                self._replay_batch(h, batch, report)
            if report.finish():
                self.skipped_on_load[p] = report.skipped
        if self.skipped_on_load:
            log.warning("transaction coordinator: %s", SkipReport.total_line(TXN_TOPIC, self.skipped_on_load))
        for meta in [m for m in self.txns.values() if self._is_unfinished(m)]:
            log.info("finishing transaction %r left in %s", meta.transactional_id, meta.state.kafka_name)
            self._finish(meta)
        return len(self.txns)

    def _replay_batch(self, h: records.BatchHeader, batch: bytes, report: SkipReport) -> None:
        if h.is_control:
            report.skip(h.base_offset, "control batch", "a transaction marker has no place in the transaction log")
            return
        try:
            recs = list(records.iter_records(batch))
        except KafkaError as exc:
            report.skip(h.base_offset, f"batch of {h.records_count} record(s) (offsets {h.base_offset}..{h.last_offset})", exc)
            return
        for rec in recs:
            try:
                self.replay(rec.key, rec.value)
            except txnlog.TxnLogFormatError as exc:
                report.skip(rec.offset, "record", exc)

    def replay(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one ``__transaction_state`` record (the load path; live writes apply the same
        records through ``TxnMetadata.complete``). A null value is a tombstone (R21). Raises
        TxnLogFormatError, changing nothing, for a record that does not decode (null key
        included)."""
        if key is None:
            raise txnlog.TxnLogFormatError("record without a key")
        tid = txnlog.decode_key(key)
        if value is None:
            self.txns.pop(tid, None)
            return
        rec = txnlog.decode_value(value)
        meta = self.txns.get(tid)
        if meta is None:
            meta = self.txns[tid] = TxnMetadata(tid)
        meta.apply(rec)

    # -- the log -------------------------------------------------------------------------------

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.settings.num_partitions)

    def _append(self, meta: TxnMetadata, rec: txnlog.TxnRecord) -> None:
        now = self.now_ms()
        batch = records.build_batch([(txnlog.encode_key(meta.transactional_id), txnlog.encode_value(rec), [])], timestamp_ms=now)
        try:
            self._partition(TXN_TOPIC, self.partition_of(meta.transactional_id)).append(batch, now, from_client=False)
        except KafkaError as exc:
            meta.cancel(rec)
            raise CoordinatorNotAvailable(f"cannot write the transaction log for {meta.transactional_id!r}: {exc}") from None
        meta.complete(rec)

    def _transition(self, meta: TxnMetadata, target: TxnState, **changes: object) -> None:
        self._append(meta, meta.prepare(target, self.now_ms(), **changes))

    # -- InitProducerId --------------------------------------------------------------------------

    def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected_pid: int = -1, expected_epoch: int = -1
    ) -> tuple[int, int]:
        """(producer id, epoch) for a transactional producer (R8). Bumps the epoch every time,
        fencing older instances; an unfinished transaction of the previous instance is aborted
        first, answering CONCURRENT_TRANSACTIONS so the client retries (R11)."""
        if not transactional_id:
            raise InvalidRequest("transactional.id must not be empty")
        if timeout_ms <= 0 or timeout_ms > self.settings.max_timeout_ms:
            raise InvalidTransactionTimeout(
                f"transaction.timeout.ms={timeout_ms} is outside 1..{self.settings.max_timeout_ms} (transaction.max.timeout.ms)"
            )
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state is TxnState.DEAD:
            meta = TxnMetadata(transactional_id, producer_id=self.producer_ids.next_producer_id(), timeout_ms=timeout_ms)
            self.txns[transactional_id] = meta
        if meta.pending is not None:
            raise ConcurrentTransactions(f"transaction {transactional_id!r} is changing state")
        if expected_pid != -1:
            current = (meta.producer_id, meta.producer_epoch)
            last = (meta.last_producer_id, meta.last_producer_epoch)
            if (expected_pid, expected_epoch) not in (current, last) or (
                (expected_pid, expected_epoch) == last and meta.state is TxnState.ONGOING
            ):
                raise ProducerFenced(
                    f"transactional id {transactional_id!r}: producer {expected_pid} epoch {expected_epoch} is not the "
                    f"current producer {meta.producer_id} epoch {meta.producer_epoch}"
                )
            if (expected_pid, expected_epoch) == last and meta.state is TxnState.EMPTY and meta.producer_epoch >= 0:
                return meta.producer_id, meta.producer_epoch  # a retry of an InitProducerId that succeeded
        if meta.state.is_prepare or meta.state is TxnState.PREPARE_EPOCH_FENCE:
            self._retry_unfinished(meta)
            raise ConcurrentTransactions(f"transaction {transactional_id!r} is completing ({meta.state.kafka_name})")
        if meta.state is TxnState.ONGOING:
            self._fence_and_abort(meta, "a new producer instance called InitProducerId")
            raise ConcurrentTransactions(
                f"transaction {transactional_id!r} of the previous producer instance was aborted; retry"
            )
        pid, epoch = meta.producer_id, meta.producer_epoch + 1
        if epoch >= MAX_EPOCH:
            pid, epoch = self.producer_ids.next_producer_id(), 0
        self._transition(
            meta,
            TxnState.EMPTY,
            producer_id=pid,
            producer_epoch=epoch,
            last_producer_id=meta.producer_id,
            last_producer_epoch=meta.producer_epoch,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_ms=-1,
        )
        return pid, epoch

    # -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------

    def _lookup(self, transactional_id: str, producer_id: int, epoch: int) -> TxnMetadata:
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state is TxnState.DEAD:
            raise InvalidProducerIdMapping(f"transactional id {transactional_id!r} is unknown to the coordinator")
        if meta.producer_id != producer_id:
            raise InvalidProducerIdMapping(
                f"transactional id {transactional_id!r} belongs to producer {meta.producer_id}, not {producer_id}"
            )
        if meta.producer_epoch != epoch:
            raise ProducerFenced(
                f"transactional id {transactional_id!r}: producer {producer_id} epoch {epoch} is fenced, "
                f"the current epoch is {meta.producer_epoch}"
            )
        if meta.pending is not None:
            raise ConcurrentTransactions(f"transaction {transactional_id!r} is changing state")
        return meta

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int, partitions: set[TopicPartition]) -> None:
        """Record partitions in the transaction; the transaction becomes Ongoing and its timer
        starts with the first partition (R12)."""
        meta = self._lookup(transactional_id, producer_id, epoch)
        if meta.state.is_prepare or meta.state is TxnState.PREPARE_EPOCH_FENCE:
            raise ConcurrentTransactions(f"transaction {transactional_id!r} is completing ({meta.state.kafka_name})")
        if meta.state is TxnState.ONGOING:
            if partitions <= meta.partitions:
                return
            self._transition(meta, TxnState.ONGOING, partitions=meta.partitions | frozenset(partitions))
        else:
            self._transition(meta, TxnState.ONGOING, partitions=frozenset(partitions), start_ms=self.now_ms())

    def offsets_partition(self, group_id: str) -> TopicPartition:
        return TopicPartition(OFFSETS_TOPIC, partition_for(group_id, self.settings.offsets_partitions))

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> None:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        self.add_partitions(transactional_id, producer_id, epoch, {self.offsets_partition(group_id)})

    def verify_produce(self, transactional_id: str, producer_id: int, epoch: int, tp: TopicPartition) -> None:
        """A transactional batch may go to ``tp`` only inside an Ongoing transaction that added
        it (R12). Raises InvalidProducerEpoch for an old epoch, InvalidTxnState otherwise."""
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise InvalidProducerIdMapping(f"producer {producer_id} is not the producer of {transactional_id!r}")
        if epoch < meta.producer_epoch:
            raise InvalidProducerEpoch(
                f"producer {producer_id} epoch {epoch} is older than the current epoch {meta.producer_epoch}"
            )
        if meta.state is not TxnState.ONGOING or tp not in meta.partitions or epoch != meta.producer_epoch:
            raise InvalidTxnState(
                f"partition {tp} is not part of an ongoing transaction of {transactional_id!r} "
                f"(state {meta.state.kafka_name}); call AddPartitionsToTxn first"
            )

    def verify_txn_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> None:
        """TxnOffsetCommit may write pending offsets only for the current producer of an Ongoing
        transaction that added the group's offsets partition (R9, R13). Raises ProducerFenced for
        an older epoch (a zombie), InvalidTxnState otherwise."""
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise InvalidProducerIdMapping(f"producer {producer_id} is not the producer of {transactional_id!r}")
        if epoch != meta.producer_epoch:
            raise ProducerFenced(
                f"transactional id {transactional_id!r}: producer {producer_id} epoch {epoch} is fenced, "
                f"the current epoch is {meta.producer_epoch}"
            )
        tp = self.offsets_partition(group_id)
        if meta.state is not TxnState.ONGOING or tp not in meta.partitions:
            raise InvalidTxnState(
                f"offsets of group {group_id!r} are not part of an ongoing transaction of {transactional_id!r} "
                f"(state {meta.state.kafka_name}); call AddOffsetsToTxn first"
            )

    # -- EndTxn --------------------------------------------------------------------------------

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> None:
        """Commit or abort (R14). Returns once the outcome is fixed and, normally, once every
        marker is written. A retried EndTxn for a finished transaction succeeds (R19)."""
        meta = self._lookup(transactional_id, producer_id, epoch)
        state = meta.state
        wanted = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if state is TxnState.ONGOING:
            self.crash.reached("end_txn.before_prepare")
            self._transition(meta, preparing)
            self.crash.reached("end_txn.after_prepare")
            self._write_markers_and_complete(meta)
            return
        if state is wanted:
            return
        if state is preparing:
            self._retry_unfinished(meta)
            if meta.state is wanted:
                return
            raise ConcurrentTransactions(f"transaction {transactional_id!r} is still writing its markers")
        action = "commit" if commit else "abort"
        raise InvalidTxnState(f"cannot {action} transaction {transactional_id!r} in state {state.kafka_name}")

    def _write_markers_and_complete(self, meta: TxnMetadata) -> bool:
        """Write the markers of a Prepare* transaction; complete it if all are in."""
        commit = meta.state is TxnState.PREPARE_COMMIT
        todo = self.unfinished_markers.pop(meta.transactional_id, None) or set(meta.partitions)
        failed: set[TopicPartition] = set()
        now = self.now_ms()
        for tp in sorted(todo):
            try:
                part = self._partition(tp.topic, tp.partition)
            except UnknownTopicOrPartition:
                continue  # the topic was deleted: nothing left to mark
            try:
                part.append_marker(meta.producer_id, meta.producer_epoch, commit, self.coordinator_epoch, now)
            except KafkaError as exc:
                log.warning("marker for %r on %s failed, will retry: %s", meta.transactional_id, tp, exc)
                failed.add(tp)
                continue
            if tp.topic == OFFSETS_TOPIC and self.on_offsets_marker is not None:
                self.on_offsets_marker(tp.partition, meta.producer_id, commit)
        self.crash.reached("end_txn.after_markers")
        if failed:
            self.unfinished_markers[meta.transactional_id] = failed
            return False
        self._transition(meta, TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
        self.crash.reached("end_txn.after_complete")
        return True

    def _retry_unfinished(self, meta: TxnMetadata) -> None:
        if meta.pending is None and meta.state.is_prepare:
            try:
                self._write_markers_and_complete(meta)
            except KafkaError as exc:
                log.warning("completing %r failed, will retry: %s", meta.transactional_id, exc)

    @staticmethod
    def _is_unfinished(meta: TxnMetadata) -> bool:
        return meta.state.is_prepare or meta.state is TxnState.PREPARE_EPOCH_FENCE

    def _finish(self, meta: TxnMetadata) -> None:
        """Push a transaction left between states (on load, or because its markers or its next
        record could not be written) one step further: the abort after an epoch fence, the
        markers and the completion of a Prepare*. Failures are logged, left for the next retry."""
        if meta.pending is not None:
            return
        if meta.state is TxnState.PREPARE_EPOCH_FENCE:
            try:
                self._abort_after_fence(meta)
            except KafkaError as exc:
                log.warning("aborting %r after its epoch fence failed, will retry: %s", meta.transactional_id, exc)
            return
        self._retry_unfinished(meta)

    def retry_markers(self) -> int:
        """Retry every unfinished transaction (markers not all written, or an abort after an
        epoch fence not yet logged); returns how many remain."""
        for meta in [m for m in self.txns.values() if self._is_unfinished(m)]:
            self._finish(meta)
        return sum(1 for m in self.txns.values() if self._is_unfinished(m))

    # -- fencing and aborting --------------------------------------------------------------------

    def _fence_and_abort(self, meta: TxnMetadata, why: str) -> None:
        """Bump the epoch (PrepareEpochFence, fencing the current producer), then abort with the
        new epoch (R11, R20)."""
        log.info("aborting transaction %r of producer %d epoch %d: %s", meta.transactional_id, meta.producer_id,
                 meta.producer_epoch, why)
        if meta.producer_epoch + 1 >= MAX_EPOCH:
            # The epoch cannot be bumped further: abort with the current one; the next
            # InitProducerId moves to a new producer id.
            self._transition(meta, TxnState.PREPARE_ABORT)
        else:
            self._transition(
                meta,
                TxnState.PREPARE_EPOCH_FENCE,
                producer_epoch=meta.producer_epoch + 1,
                last_producer_epoch=meta.producer_epoch,
                last_producer_id=meta.producer_id,
            )
            self._abort_after_fence(meta)
            return
        self._write_markers_and_complete(meta)

    def _abort_after_fence(self, meta: TxnMetadata) -> None:
        self._transition(meta, TxnState.PREPARE_ABORT)
        self._write_markers_and_complete(meta)

    def abort_timed_out(self) -> list[str]:
        """Abort every Ongoing transaction older than its transaction.timeout.ms, fencing its
        producer first (R20): a hanging transaction never holds the LSO for long."""
        now = self.now_ms()
        aborted = []
        for meta in list(self.txns.values()):
            if meta.state is TxnState.ONGOING and meta.pending is None and now - meta.start_ms > meta.timeout_ms:
                try:
                    self._fence_and_abort(meta, f"open for {now - meta.start_ms} ms, timeout {meta.timeout_ms} ms")
                    aborted.append(meta.transactional_id)
                except KafkaError as exc:
                    log.warning("cannot abort timed-out transaction %r yet: %s", meta.transactional_id, exc)
        return aborted

    def expire_transactional_ids(self) -> list[str]:
        """Remove ids idle for longer than transactional.id.expiration.ms with no transaction in
        flight, writing a tombstone so compaction drops them (R21)."""
        now = self.now_ms()
        expired = []
        for tid, meta in list(self.txns.items()):
            idle = now - meta.last_update_ms
            if meta.pending is None and meta.state.can_start_new and idle >= self.settings.id_expiration_ms:
                rec = meta.prepare(TxnState.DEAD, now)
                batch = records.build_batch([(txnlog.encode_key(tid), None, [])], timestamp_ms=now)
                try:
                    self._partition(TXN_TOPIC, self.partition_of(tid)).append(batch, now, from_client=False)
                except KafkaError as exc:
                    meta.cancel(rec)
                    log.warning("cannot expire transactional id %r yet: %s", tid, exc)
                    continue
                meta.complete(rec)
                del self.txns[tid]
                expired.append(tid)
        return expired
