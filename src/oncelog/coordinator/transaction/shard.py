"""The transaction coordinator state machine of one ``__transaction_state`` partition (R8–R14,
R19–R21). Pure: no I/O, no asyncio, time passed in as ``now``.

Theory of operation (STYLE habit 7, as the group shard). Every request is decided here and
answered with a ``TxnResult``: the records to append to this partition, the marker writes to
perform once they are durable, and the answer. The runtime (``broker/coordinators/transaction_coordinator.py``)
appends the records, then feeds each one to ``replay`` — the only code that changes a
transactional id's state, and the code that loading the partition runs too — then writes the
markers, then answers.

What a request does in a state is its cell in ``rules.row(state, ...)`` (``RULES``, or a 2PC row
for an Ongoing transaction of a 2PC producer) and nothing else. Checked
before the table (who asks, and what):

* the producer (AddPartitions, EndTxn, produce, TxnOffsetCommit): an unknown or expired
  transactional id, or another producer id, is INVALID_PRODUCER_ID_MAPPING; another epoch is
  PRODUCER_FENCED (INVALID_PRODUCER_EPOCH for an older epoch on produce) (R9);
* a move already under way for the id (its record prepared, not yet replayed):
  CONCURRENT_TRANSACTIONS (R11);
* InitProducerId: transaction.timeout.ms within 1..transaction.max.timeout.ms (not checked with
  enable_2pc: the id's timeout becomes ``log.TWO_PC_TIMEOUT_MS``, none); keep_prepared_txn
  without enable_2pc is INVALID_REQUEST (whether 2PC is *allowed* is the broker's question,
  asked before: ``broker/coordinators/two_phase_commit.py``); KIP-360's
  expected producer id and epoch (a retry of an InitProducerId that succeeded gets the same
  answer); a new producer id when the epoch would pass 32767;
* AddPartitions on an Ongoing transaction that already has every partition: no record;
* produce and TxnOffsetCommit: the partition (the group's offsets partition) must be in the
  transaction (R12, R13);
* transactions version 2 (KIP-890 part 2): an EndTxn v5+ is COMMIT_V2/ABORT_V2 with the current
  epoch, COMMIT_RETRY_V2/ABORT_RETRY_V2 with the epoch its last end replaced (``end_request``);
  a Produce v12+ or TxnOffsetCommit v5+ adds its partition itself (``add_implicitly``), and an
  older epoch there is a write of an ended transaction.

Transactions version 2: a cell with ``bump`` raises the epoch as it moves (``_bumped``): the
Prepare* record, its markers and the Complete* record carry the new epoch, so nothing the client
sent under the old one — a late EndTxn, a late produce — can touch the next transaction. At the
last usable epoch (32766) the end draws the next producer id (NextProducerId in the record), the
markers go out with 32767, and Complete* moves to the new id at epoch 0.

Markers (R14): a cell with ``markers`` puts a ``MarkerJob`` in the result: COMMIT or ABORT for
every partition of the transaction, with the producer's current epoch and this coordinator's
epoch. The runtime reports back with ``markers_written``; when none is left the transaction
moves on as MARKERS_WRITTEN says (Complete*). A partition whose marker failed stays in
``unfinished`` and is retried by ``advance`` (the runtime's periodic retry, and load, R19).

The epoch fence (R11, R20): InitProducerId on an Ongoing transaction, and the timeout scan,
bump the epoch (PrepareEpochFence: the old producer is fenced), then ``advance`` aborts with
the new epoch (PrepareAbort, markers, CompleteAbort).

Two-phase commit (KIP-939; the rows are rules.TWO_PC_ONGOING / TWO_PC_KEPT): InitProducerId with
keep_prepared_txn on a 2PC transaction bumps the epoch the client gets but keeps the
transaction, recording the (producer id, epoch) its data was written with as the *kept* pair
(answered as OngoingTxnProducerId/Epoch; the first one is kept over later recoveries). Its
markers carry the kept producer id; their epoch is the client's current one when the producer
id is the same (a marker above the data's epoch also fences the old instance on the partition),
else — the client moved to a new producer id when the epoch ran out — the kept epoch. The kept
pair is cleared when the transaction completes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from oncelog.coordinator.transaction import log as txnlog
from oncelog.coordinator.transaction.metadata import MAX_EPOCH, TxnMetadata
from oncelog.coordinator.transaction import rules
from oncelog.coordinator.transaction.rules import Request
from oncelog.coordinator.transaction.state import TxnState
from oncelog.protocol.errors import (
    ConcurrentTransactions,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTransactionTimeout,
    InvalidTxnState,
    KafkaError,
    ProducerFenced,
)
from oncelog.types import NO_PRODUCER_ID, ProducerEpoch, ProducerId, TopicPartition, TransactionalId

__all__ = ["MarkerJob", "TxnResult", "TxnSettings", "TransactionShard"]


@dataclass(frozen=True)
class TxnSettings:
    num_partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms
    offsets_partitions: int = 50  # offsets.topic.num.partitions


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """COMMIT or ABORT markers to write for one transaction, one per partition."""

    transactional_id: TransactionalId
    producer_id: ProducerId
    producer_epoch: ProducerEpoch
    commit: bool
    coordinator_epoch: int
    partitions: frozenset[TopicPartition]


@dataclass
class TxnResult:
    """What a request decided: records to append (transactional id, record; None: tombstone),
    markers to write after them, and the answer (``response``, or ``error`` to raise)."""

    records: list[tuple[TransactionalId, txnlog.TxnRecord | None]] = field(default_factory=list)
    markers: list[MarkerJob] = field(default_factory=list)
    response: object = None
    error: KafkaError | None = None
    #: InitProducerId(keep_prepared_txn): the (producer id, epoch) of the kept transaction, or
    #: (-1, -1) when no transaction is ongoing (KIP-939's OngoingTxnProducerId/Epoch)
    ongoing: tuple[int, int] = (-1, -1)

    def __bool__(self) -> bool:
        return bool(self.records or self.markers)


class TransactionShard:
    def __init__(self, partition: int, settings: TxnSettings, *, new_producer_id: Callable[[], int],
                 coordinator_epoch: int = 0, offsets_partition: Callable[[str], TopicPartition]) -> None:
        """``new_producer_id`` hands out a fresh, never reused producer id (the broker's
        producer-id blocks); ``offsets_partition(group)`` is the group's __consumer_offsets
        partition."""
        self.partition = partition
        self.settings = settings
        self.new_producer_id = new_producer_id
        self.coordinator_epoch = coordinator_epoch
        self.offsets_partition = offsets_partition
        self.txns: dict[str, TxnMetadata] = {}
        #: transactional.id -> partitions whose marker is still to be written
        self.unfinished: dict[str, set[TopicPartition]] = {}
        #: Complete* records replayed before they are appended (``complete_unwritten``), in the
        #: order they were decided; they go at the front of this partition's next batch
        self.unwritten: list[tuple[TransactionalId, txnlog.TxnRecord | None]] = []

    # -- replay: the only code that changes a transactional id's state ------------------------------

    def replay(self, transactional_id: str, rec: txnlog.TxnRecord | None) -> None:
        """Apply one record of this partition (a live write once appended, or the log on load).
        None is a tombstone: the id expired (R21)."""
        meta = self.txns.get(transactional_id)
        if rec is None:
            self.txns.pop(transactional_id, None)
            self.unfinished.pop(transactional_id, None)
            return
        if meta is None:
            meta = self.txns[transactional_id] = TxnMetadata(transactional_id)
        if meta.pending is not None and meta.pending == rec:
            meta.pending = None
        meta.apply(rec)
        if rec.state.is_prepare:
            self.unfinished.setdefault(transactional_id, set(rec.partitions))
        else:
            self.unfinished.pop(transactional_id, None)

    def replay_bytes(self, key: bytes | None, value: bytes | None) -> None:
        """``replay`` for a record read from the log. Raises TxnLogFormatError, changing nothing,
        for a record that does not decode."""
        if key is None:
            raise txnlog.TxnLogFormatError("record without a key")
        tid = txnlog.decode_key(key)
        self.replay(tid, None if value is None else txnlog.decode_value(value))

    def complete_unwritten(self, result: TxnResult) -> bool:
        """Apply ``result`` now and leave its records to be appended later, when it is the
        Complete* move that ``markers_written`` decided (records only, each a Complete*, no
        markers). Returns whether it did; any other result is left alone (append it first).

        Why this is safe: a Complete* follows Prepare* once every marker is durable, and it
        changes no partition, only what the coordinator lets the id do next. Until the record is
        in the log the log says Prepare*, and a coordinator that loads it finishes the
        transaction again (its markers once more, R19), as after a crash before the append.
        ``take_unwritten`` puts the records at the front of the partition's next batch, so a
        later record of the same id is never in the log before its Complete*: whatever the log
        holds after the Prepare* is the state this shard acted on."""
        if result.markers or not result.records or not all(
                rec is not None and rec.state.is_complete for _tid, rec in result.records):
            return False
        for tid, rec in result.records:
            self.replay(tid, rec)
            self.unwritten.append((tid, rec))
        return True

    def take_unwritten(self) -> list[tuple[TransactionalId, txnlog.TxnRecord | None]]:
        """The records ``complete_unwritten`` left, oldest first, to append at the front of the
        next batch; they are no longer this shard's to write (``keep_unwritten`` gives back
        those of a batch that failed)."""
        taken, self.unwritten = self.unwritten, []
        return taken

    def keep_unwritten(self, records: list[tuple[TransactionalId, txnlog.TxnRecord | None]]) -> None:
        """The batch that carried ``records`` (from ``take_unwritten``) was not appended: they
        go back in front of any left since."""
        self.unwritten[:0] = records

    def abandon(self, result: TxnResult) -> None:
        """The records of ``result`` could not be appended: forget the moves they prepared."""
        for tid, _rec in result.records:
            meta = self.txns.get(tid)
            if meta is not None:
                meta.pending = None
                if meta.state is TxnState.EMPTY and meta.producer_epoch < 0:
                    del self.txns[tid]  # created by this very request, never written

    # -- the table ---------------------------------------------------------------------------------

    def _cell(self, meta: TxnMetadata, request: Request) -> rules.Cell:
        return rules.row(meta.state, two_pc=meta.is_2pc, kept=meta.kept)[request]

    def _move(self, meta: TxnMetadata, cell: rules.Cell, now: int, result: TxnResult, **changes: object) -> None:
        """Carry out ``cell`` on ``meta`` into ``result``: its record, its markers, its error."""
        assert cell.target is not None
        if cell.bump:
            changes.update(self._bumped(meta))
        rec = meta.prepare(cell.target, now, **changes)
        result.records.append((meta.transactional_id, rec))
        if cell.markers:
            result.markers.append(self._marker_job(meta.transactional_id, rec))
        if cell.error is not None:
            result.error = cell.error(f"transaction {meta.transactional_id!r}: {_why(meta.state, cell)}")

    def _bumped(self, meta: TxnMetadata) -> dict[str, object]:
        """The changes of a TV2 end (a cell with ``bump``): the epoch goes up by one, the client
        is recorded as TV2; at an exhausted epoch (32766, as Kafka's ``isEpochExhausted``: 32767
        stays the coordinator's, to fence with) the next producer id is drawn now and taken by
        the Complete* record, once the markers — written with epoch 32767 — are in."""
        nxt = self.new_producer_id() if meta.producer_epoch >= MAX_EPOCH - 1 else NO_PRODUCER_ID
        return {"producer_epoch": meta.producer_epoch + 1, "last_producer_epoch": meta.producer_epoch,
                "last_producer_id": meta.producer_id, "next_producer_id": nxt, "client_version": 2}

    def _marker_job(self, tid: str, rec: txnlog.TxnRecord, only: Iterable[TopicPartition] | None = None) -> MarkerJob:
        pid, epoch = rec.producer_id, rec.producer_epoch
        if rec.kept and rec.kept_producer_id != rec.producer_id:  # the client moved to a new producer id
            pid, epoch = rec.kept_producer_id, rec.kept_producer_epoch
        return MarkerJob(tid, pid, epoch, rec.state is TxnState.PREPARE_COMMIT,
                         self.coordinator_epoch, frozenset(rec.partitions if only is None else only))

    @staticmethod
    def _refused(meta: TxnMetadata, cell: rules.Cell) -> KafkaError:
        assert cell.error is not None
        return cell.error(f"transaction {meta.transactional_id!r} is {meta.state.kafka_name}: {_why(meta.state, cell)}")

    # -- InitProducerId ------------------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, now: int, expected_pid: int = -1,
                         expected_epoch: int = -1, *, enable_2pc: bool = False, keep_prepared: bool = False) -> TxnResult:
        """(producer id, epoch) in ``response`` (R8): the epoch is bumped every time, fencing older
        instances; an Ongoing transaction of the previous instance is fenced and aborted first
        and the answer is CONCURRENT_TRANSACTIONS, so the client retries (R11).

        ``enable_2pc`` (KIP-939): the id's transactions never time out (its timeout becomes
        ``TWO_PC_TIMEOUT_MS``). ``keep_prepared`` (needs ``enable_2pc``): an Ongoing 2PC
        transaction is kept instead of aborted, and ``ongoing`` names its (producer id, epoch);
        see the module doc. Raises InvalidRequest, InvalidTransactionTimeout, ProducerFenced,
        ConcurrentTransactions, InvalidTxnState (keep_prepared on a transaction not begun with 2PC)."""
        if not transactional_id:
            raise InvalidRequest("transactional.id must not be empty")
        if keep_prepared and not enable_2pc:
            raise InvalidRequest(
                f"transactional id {transactional_id!r}: keep_prepared_txn is only for producers that enable 2PC"
            )
        if enable_2pc:
            timeout_ms = txnlog.TWO_PC_TIMEOUT_MS
        elif timeout_ms <= 0 or timeout_ms > self.settings.max_timeout_ms:
            raise InvalidTransactionTimeout(
                f"transaction.timeout.ms={timeout_ms} is outside 1..{self.settings.max_timeout_ms} (transaction.max.timeout.ms)"
            )
        meta = self._live(transactional_id)
        if meta is None:
            meta = TxnMetadata(transactional_id, producer_id=self.new_producer_id(), timeout_ms=timeout_ms)
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
                return TxnResult(response=(meta.producer_id, meta.producer_epoch))  # a retry that succeeded
        cell = self._cell(meta, Request.INIT_KEEP if keep_prepared else Request.INIT)
        if cell.target is None:
            if cell.error is InvalidTxnState and keep_prepared:
                raise InvalidTxnState(
                    f"transaction {transactional_id!r} is {meta.state.kafka_name} but was not begun with 2PC: "
                    f"it cannot be kept (InitProducerId without keep_prepared_txn aborts it)"
                )
            raise self._refused(meta, cell)
        result = TxnResult()
        if cell.target is TxnState.PREPARE_EPOCH_FENCE:
            self._fence(meta, cell, now, result)
            return result
        pid, epoch = meta.producer_id, meta.producer_epoch + 1
        if epoch >= MAX_EPOCH:
            pid, epoch = self.new_producer_id(), 0
        bump = dict(producer_id=pid, producer_epoch=epoch, last_producer_id=meta.producer_id,
                    last_producer_epoch=meta.producer_epoch, timeout_ms=timeout_ms,
                    next_producer_id=NO_PRODUCER_ID, client_version=0)
        if cell.target is TxnState.ONGOING:  # kept (KIP-939): the transaction and its partitions stay
            kept = ((meta.kept_producer_id, meta.kept_producer_epoch) if meta.kept
                    else (meta.producer_id, meta.producer_epoch))
            self._move(meta, cell, now, result, **bump, kept_producer_id=kept[0], kept_producer_epoch=kept[1])
            result.ongoing = kept
        else:
            self._move(meta, cell, now, result, **bump, partitions=frozenset(), start_ms=-1,
                       kept_producer_id=-1, kept_producer_epoch=-1)
        result.response = (pid, epoch)
        return result

    def _fence(self, meta: TxnMetadata, cell: rules.Cell, now: int, result: TxnResult) -> None:
        """PrepareEpochFence: the epoch goes up by one, so the current producer is fenced; the
        abort that follows (``advance``) uses the new epoch. At the last epoch there is nothing
        to bump: the transaction is aborted with its own epoch, and the next InitProducerId moves
        to a new producer id."""
        if meta.producer_epoch + 1 >= MAX_EPOCH:
            abort = self._cell(meta, Request.ABORT)
            self._move(meta, abort, now, result, client_version=0)
            if cell.error is not None:
                result.error = cell.error(f"transaction {meta.transactional_id!r} of the previous producer is aborting")
            return
        self._move(meta, cell, now, result, producer_epoch=meta.producer_epoch + 1,
                   last_producer_epoch=meta.producer_epoch, last_producer_id=meta.producer_id, client_version=0)

    # -- the producer's requests ----------------------------------------------------------------------

    def _live(self, transactional_id: str) -> TxnMetadata | None:
        """The id's metadata, or None when the coordinator does not know it: never seen, or Dead
        (expired, R21: only InitProducerId starts it afresh)."""
        meta = self.txns.get(transactional_id)
        return None if meta is None or meta.state is TxnState.DEAD else meta

    def _known(self, transactional_id: str, producer_id: int | None = None) -> TxnMetadata:
        """The id's metadata; InvalidProducerIdMapping when it is unknown or Dead (``_live``),
        or, given ``producer_id``, when another producer holds it."""
        meta = self._live(transactional_id)
        if meta is None:
            raise InvalidProducerIdMapping(f"transactional id {transactional_id!r} is unknown to the coordinator")
        if producer_id is not None and meta.producer_id != producer_id:
            raise InvalidProducerIdMapping(
                f"transactional id {transactional_id!r} belongs to producer {meta.producer_id}, not {producer_id}"
            )
        return meta

    def _lookup(self, transactional_id: str, producer_id: int, epoch: int) -> TxnMetadata:
        meta = self._known(transactional_id, producer_id)
        if meta.producer_epoch != epoch:
            raise ProducerFenced(
                f"transactional id {transactional_id!r}: producer {producer_id} epoch {epoch} is fenced, "
                f"the current epoch is {meta.producer_epoch}"
            )
        if meta.pending is not None:
            raise ConcurrentTransactions(f"transaction {transactional_id!r} is changing state")
        return meta

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: Iterable[TopicPartition], now: int, *, implicit: bool = False) -> TxnResult:
        """Partitions join the transaction; it becomes Ongoing, and its timer starts with the first
        partition (R12). ``implicit``: the add of a TV2 client's first write to a partition
        (``add_implicitly``), recorded as client version 2."""
        meta = self._lookup(transactional_id, producer_id, epoch)
        cell = self._cell(meta, Request.ADD)
        if cell.target is None:
            raise self._refused(meta, cell)
        wanted = frozenset(partitions)
        result = TxnResult()
        version = {"client_version": 2} if implicit else {}
        if meta.state is TxnState.ONGOING:
            if wanted <= meta.partitions:
                return result
            self._move(meta, cell, now, result, partitions=meta.partitions | wanted, **version)
        else:
            self._move(meta, cell, now, result, partitions=wanted, start_ms=now, next_producer_id=NO_PRODUCER_ID,
                       **version)
        return result

    def add_implicitly(self, transactional_id: str, producer_id: int, epoch: int, tp: TopicPartition, now: int, *,
                       older: type[KafkaError] = InvalidProducerEpoch) -> TxnResult:
        """Transactions version 2 (KIP-890 part 2): the first Produce v12+ (or TxnOffsetCommit v5+)
        of a transaction to ``tp`` adds it, with no AddPartitionsToTxn from the client; the
        leader (or group coordinator) asks for it before appending. Nothing to write when ``tp``
        is already in this epoch's Ongoing transaction (every later batch). An epoch older than
        the current one is the previous transaction's late write: ``older`` (INVALID_PRODUCER_EPOCH
        for a produce, as Kafka's leader answers; PRODUCER_FENCED for offsets). Otherwise as
        ``add_partitions``."""
        meta = self._known(transactional_id, producer_id)
        if epoch < meta.producer_epoch:
            raise older(f"transactional id {transactional_id!r}: producer {producer_id} epoch {epoch} is older than "
                        f"the current epoch {meta.producer_epoch} (a write of an ended transaction)")
        if (meta.state is TxnState.ONGOING and epoch == meta.producer_epoch and tp in meta.partitions
                and meta.pending is None):
            return TxnResult()
        return self.add_partitions(transactional_id, producer_id, epoch, [tp], now, implicit=True)

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str, now: int) -> TxnResult:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        return self.add_partitions(transactional_id, producer_id, epoch, [self.offsets_partition(group_id)], now)

    def verify_produce(self, transactional_id: str, producer_id: int, epoch: int, tp: TopicPartition) -> None:
        """A transactional batch may go to ``tp`` only inside an Ongoing transaction of this
        producer and epoch that added it (R12, as Kafka 3.6+'s verification). Raises
        InvalidProducerEpoch for an older epoch, InvalidTxnState otherwise."""
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise InvalidProducerIdMapping(f"producer {producer_id} is not the producer of {transactional_id!r}")
        if epoch < meta.producer_epoch:
            raise InvalidProducerEpoch(
                f"producer {producer_id} epoch {epoch} is older than the current epoch {meta.producer_epoch}"
            )
        cell = self._cell(meta, Request.PRODUCE)
        if cell.error is not None or tp not in meta.partitions or epoch != meta.producer_epoch:
            raise InvalidTxnState(
                f"partition {tp} is not part of an ongoing transaction of {transactional_id!r} "
                f"(state {meta.state.kafka_name}); call AddPartitionsToTxn first"
            )

    def verify_txn_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> None:
        """TxnOffsetCommit may write pending offsets only for the current producer of an Ongoing
        transaction that added the group's offsets partition (R9, R13). Raises ProducerFenced for
        another epoch (a zombie), InvalidTxnState otherwise."""
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise InvalidProducerIdMapping(f"producer {producer_id} is not the producer of {transactional_id!r}")
        if epoch != meta.producer_epoch:
            raise ProducerFenced(
                f"transactional id {transactional_id!r}: producer {producer_id} epoch {epoch} is fenced, "
                f"the current epoch is {meta.producer_epoch}"
            )
        cell = self._cell(meta, Request.TXN_OFFSETS)
        if cell.error is not None or self.offsets_partition(group_id) not in meta.partitions:
            raise InvalidTxnState(
                f"offsets of group {group_id!r} are not part of an ongoing transaction of {transactional_id!r} "
                f"(state {meta.state.kafka_name}); call AddOffsetsToTxn first"
            )

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool, now: int, *,
                v2: bool = False) -> TxnResult:
        """Commit or abort (R14): Prepare* is written — from then on the outcome is fixed — with
        the markers to write. A retried EndTxn of a finished transaction succeeds (R19).

        ``v2``: an EndTxn v5+ (transactions version 2): the end bumps the epoch (the Prepare*
        record carries it, and so do the markers); its retry carries the epoch before the bump,
        which also identifies the previous transaction's late EndTxn (``end_request``). The
        client's next producer id and epoch are then ``TxnMetadata.client_ids``."""
        if v2:
            meta, request = self.end_request(transactional_id, producer_id, epoch, commit)
        else:
            meta = self._lookup(transactional_id, producer_id, epoch)
            request = Request.COMMIT if commit else Request.ABORT
        cell = self._cell(meta, request)
        if cell.target is None:
            if cell.error is not None:
                raise self._refused(meta, cell)
            return TxnResult()
        result = TxnResult()
        self._move(meta, cell, now, result)
        return result

    def end_request(self, transactional_id: str, producer_id: int, epoch: int,
                    commit: bool) -> tuple[TxnMetadata, Request]:
        """Who sends this EndTxn v5+ (the checks before the table, TV2): the current producer and
        epoch (COMMIT_V2 / ABORT_V2), or the epoch the last TV2 end replaced — the same
        producer id at epoch - 1, or after an end at the last epoch the previous producer id at
        32766 — (COMMIT_RETRY_V2 / ABORT_RETRY_V2). Raises InvalidProducerIdMapping for another
        producer id, ProducerFenced for any other epoch, ConcurrentTransactions while a move is
        under way."""
        meta = self._known(transactional_id)
        if producer_id == meta.producer_id and epoch == meta.producer_epoch:
            request = Request.COMMIT_V2 if commit else Request.ABORT_V2
        elif _previous_of_v2_end(meta, producer_id, epoch):
            request = Request.COMMIT_RETRY_V2 if commit else Request.ABORT_RETRY_V2
        elif producer_id != meta.producer_id:
            raise InvalidProducerIdMapping(
                f"transactional id {transactional_id!r} belongs to producer {meta.producer_id}, not {producer_id}"
            )
        else:
            raise ProducerFenced(
                f"transactional id {transactional_id!r}: producer {producer_id} epoch {epoch} is fenced, "
                f"the current epoch is {meta.producer_epoch}"
            )
        if meta.pending is not None:
            raise ConcurrentTransactions(f"transaction {transactional_id!r} is changing state")
        return meta, request

    # -- the coordinator's own steps ------------------------------------------------------------------

    def markers_written(self, transactional_id: str, done: Iterable[TopicPartition],
                        failed: Iterable[TopicPartition], now: int) -> TxnResult:
        """The runtime wrote the markers of ``done`` (``failed`` will be retried). When no marker
        is left, the transaction moves on (Complete*)."""
        meta = self.txns.get(transactional_id)
        left = self.unfinished.get(transactional_id)
        if meta is None or left is None:
            return TxnResult()
        left.difference_update(done)
        left.update(failed)
        if left or meta.pending is not None:
            return TxnResult()
        cell = self._cell(meta, Request.MARKERS_WRITTEN)
        result = TxnResult()
        if cell.target is not None:
            rotate: dict[str, object] = {}
            if meta.next_producer_id != NO_PRODUCER_ID:  # a TV2 end at the last epoch: the next id starts at 0
                rotate = {"producer_id": meta.next_producer_id, "producer_epoch": 0, "next_producer_id": NO_PRODUCER_ID,
                          "last_producer_id": meta.producer_id, "last_producer_epoch": meta.producer_epoch}
            self._move(meta, cell, now, result, **rotate, kept_producer_id=-1, kept_producer_epoch=-1)
        return result

    def advance(self, transactional_id: str, now: int) -> TxnResult:
        """The next step of a transaction left between states (after an epoch fence; markers not
        all written, after a failure or on load, R19): empty when there is none."""
        meta = self.txns.get(transactional_id)
        if meta is None or meta.pending is not None:
            return TxnResult()
        cell = self._cell(meta, Request.ADVANCE)
        result = TxnResult()
        if cell.target is not None:
            self._move(meta, cell, now, result)
        elif cell.markers:
            left = self.unfinished.get(transactional_id, set(meta.partitions))
            result.markers.append(self._marker_job(transactional_id, meta.record(), left))
        return result

    def in_between(self) -> list[str]:
        """Transactional ids whose transaction waits for its next step (``advance``)."""
        return [tid for tid, m in self.txns.items() if m.state.is_prepare or m.state is TxnState.PREPARE_EPOCH_FENCE]

    def timed_out(self, now: int) -> TxnResult:
        """Fence every Ongoing transaction older than its transaction.timeout.ms (R20); the abort
        follows through ``advance``. ``response`` lists (id, why) of each."""
        result = TxnResult(response=[])
        for meta in list(self.txns.values()):
            if meta.pending is None and meta.state is TxnState.ONGOING and now - meta.start_ms > meta.timeout_ms:
                cell = self._cell(meta, Request.TIMEOUT)
                if cell.target is not None:
                    self._fence(meta, cell, now, result)
                    result.response.append((meta.transactional_id,  # type: ignore[attr-defined]
                                            f"open for {now - meta.start_ms} ms, timeout {meta.timeout_ms} ms"))
        return result

    def expired(self, now: int) -> TxnResult:
        """Tombstones for ids idle longer than transactional.id.expiration.ms with no transaction
        in flight (R21), so compaction drops them. ``response`` lists the ids."""
        result = TxnResult(response=[])
        for tid, meta in list(self.txns.items()):
            if meta.pending is not None or now - meta.last_update_ms < self.settings.id_expiration_ms:
                continue
            cell = self._cell(meta, Request.EXPIRE)
            if cell.target is TxnState.DEAD:
                meta.prepare(TxnState.DEAD, now)
                result.records.append((tid, None))
                result.response.append(tid)  # type: ignore[attr-defined]
        return result


def _previous_of_v2_end(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
    """Whether (producer_id, epoch) is what the client held before the last TV2 end of ``meta``
    bumped it (Kafka's ``endTxnEpochBumped`` and its retry-on-overflow case)."""
    if meta.client_version < 2 or meta.state is TxnState.PREPARE_EPOCH_FENCE:
        return False
    if producer_id == meta.producer_id:
        return epoch >= 0 and epoch + 1 == meta.producer_epoch and epoch == meta.last_producer_epoch
    return (producer_id == meta.last_producer_id and epoch == MAX_EPOCH - 1 and meta.producer_epoch == 0
            and meta.state.is_complete)


def _why(state: TxnState, cell: rules.Cell) -> str:
    if cell.error is ConcurrentTransactions:
        return f"a move is under way ({state.kafka_name}); retry"
    return f"not allowed in state {state.kafka_name}"
