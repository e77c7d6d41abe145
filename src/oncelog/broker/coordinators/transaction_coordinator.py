"""The transaction coordinator service (R8–R14, R19–R21): one ``TransactionShard`` per partition
of ``__transaction_state`` on the coordinator runtime, markers through a ``MarkerWriter``.

Every request follows the runtime's order: the shard decides (``TxnResult``: records, markers,
answer); the records are appended as one batch and replayed into the shard; the markers are
written, every partition at once through the ``MarkerWriter`` (locally, or to each partition's
leader in a cluster; a ``__consumer_offsets`` marker settles the group coordinator's pending
offsets there, R13); the shard is told which were written and, when
all are, the transaction is Complete* (below); then the answer goes out.

EndTxn: Prepare* is appended first — from then on the outcome is fixed — then the markers,
then Complete*. **Difference from Kafka:** the markers are written before EndTxn answers, so
when a producer's commit returns, read_committed consumers can already read its data (Kafka
answers after Prepare* and writes the markers afterwards).

The Complete* record is not appended on its own: the shard applies it at once
(``TransactionShard.complete_unwritten``: the id may start its next transaction) and the record
goes at the front of the partition's next batch — usually the producer's next AddPartitionsToTxn
or InitProducerId, which so costs no extra append (one store COMMIT fewer per transaction in a
cluster) — or by itself after COMPLETE_FLUSH_S, at the periodic retry after a failure, and at
``flush`` (the broker's stop). A coordinator that loads the log before it is written finds the
Prepare* and sends the markers again (R19), exactly as after a crash right after the markers;
they write nothing (a leader writes a marker only for an open transaction,
``Partition.append_marker``), and no batch of the id's next transaction can be anywhere: that
transaction's first record would have carried the Complete* into the log before it.

A marker that fails is retried after MARKER_RETRY_FIRST_S, doubling up to MARKER_RETRY_MAX_S,
and at every transaction.abort.timed.out.transaction.cleanup.interval.ms, without holding up the
other partitions; meanwhile the transaction stays Prepare* and new requests for it are told
CONCURRENT_TRANSACTIONS.

Loading: at start, before the broker listens, every partition is replayed (the same replay as
live writes), then every transaction left between states is pushed on (R19): the abort after
an epoch fence, the markers and the completion of a Prepare*.

Cluster mode (issue 15): ``lead(partition, leader_epoch)`` loads one partition of
``__transaction_state`` when this broker becomes its leader (the leader epoch is the
coordinator epoch of its markers) and finishes what the previous coordinator left (R19 across
brokers); ``resign`` drops it. Markers go to each partition's leader (markers.ClusterMarkerWriter).

Crash points (``oncelog.faults``): ``end_txn.before_prepare``, ``end_txn.after_prepare``,
``end_txn.after_markers``, ``end_txn.after_complete``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Iterable, NamedTuple

from oncelog.broker.coordinators.coordinator_runtime import CoordinatorRuntime
from oncelog.broker.coordinators.txn_remote import TxnRemote
from oncelog.broker.partitions.markers import MarkerWriter
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.clock import Clock
from oncelog.coordinator.placement import partition_for
from oncelog.coordinator.producer_ids import ProducerIdSource  # embedded blocks, or the store's
from oncelog.coordinator.transaction import log as txnlog
from oncelog.coordinator.transaction.loader import replay_batch
from oncelog.coordinator.transaction.shard import MarkerJob, TransactionShard, TxnResult, TxnSettings
from oncelog.coordinator.transaction.state import TxnState
from oncelog.faults import CrashPoints
from oncelog.protocol import records
from oncelog.protocol.errors import (ConcurrentTransactions, CoordinatorNotAvailable, InvalidProducerEpoch, KafkaError,
                                     NotEnoughReplicas, UnknownTopicOrPartition)
from oncelog.types import TopicPartition
from oncelog.internal_topics import OFFSETS_TOPIC, TXN_TOPIC

log = logging.getLogger(__name__)


class InitAnswer(NamedTuple):
    """InitProducerId's answer; the ongoing pair is KIP-939's OngoingTxnProducerId/Epoch (-1: none)."""

    producer_id: int
    producer_epoch: int
    ongoing_producer_id: int = -1
    ongoing_producer_epoch: int = -1

TXN_TOPIC_SEGMENT_BYTES = 100 * 1024 * 1024
#: first and longest wait before markers that failed are tried again (doubling in between);
#: the periodic cleanup (transaction.abort.timed.out.transaction.cleanup.interval.ms) also retries
MARKER_RETRY_FIRST_S = 0.25
MARKER_RETRY_MAX_S = 4.0
#: how long a Complete* record may wait for the next batch of its partition before it is written
#: by itself (a producer that commits back to back starts its next transaction well within it)
COMPLETE_FLUSH_S = 0.2


class TransactionCoordinator:
    def __init__(self, replicas: ReplicaManager, clock: Clock, settings: TxnSettings, *,
                 producer_ids: ProducerIdSource, markers: MarkerWriter, remote: TxnRemote,
                 coordinator_epoch: int = 0, crash: CrashPoints | None = None) -> None:
        """``remote``: the coordinators on other brokers (txn_remote.py: ``LocalOnly`` on the
        embedded broker, ``RemoteVerifier`` in cluster mode), chosen by the membership."""
        self.settings = settings
        self.clock = clock
        self.producer_ids = producer_ids
        self.markers = markers
        self.remote = remote
        self.coordinator_epoch = coordinator_epoch
        #: transactions ended since start (issue 19's metrics read them): by EndTxn, by the timeout
        self.committed = self.aborted = self.timed_out = 0
        self.crash = crash or CrashPoints("")
        self.runtime: CoordinatorRuntime[TransactionShard] = CoordinatorRuntime("transaction coordinator", TXN_TOPIC, replicas, clock, logger=log)
        self._marker_retries: dict[str, int] = {}  # transactional id -> failed marker rounds in a row
        self._retry_timers: dict[str, asyncio.TimerHandle] = {}
        self._retry_tasks: set[asyncio.Task[None]] = set()
        self._flush_timers: dict[int, asyncio.TimerHandle] = {}  # partition -> the pending flush

    # -- lifecycle ------------------------------------------------------------------------------

    async def load(self) -> int:
        """Create ``__transaction_state`` if missing, replay every partition, then finish what
        was left between states (R19). Returns the number of transactional ids loaded."""
        self.runtime.replicas.ensure_internal_topic(
            TXN_TOPIC, self.settings.num_partitions,
            {"cleanup.policy": "compact", "segment.bytes": str(TXN_TOPIC_SEGMENT_BYTES)},
        )
        await self.runtime.load(range(self.settings.num_partitions), self._new_shard, replay_batch)
        for shard in list(self.runtime.shards.values()):
            await self._finish_left(shard)
        return sum(len(s.txns) for s in self.runtime.shards.values())

    def _new_shard(self, partition: int, coordinator_epoch: int | None = None) -> TransactionShard:
        return TransactionShard(partition, self.settings, new_producer_id=self.producer_ids.next_producer_id,
                                coordinator_epoch=self.coordinator_epoch if coordinator_epoch is None else coordinator_epoch,
                                offsets_partition=self.offsets_partition)

    def lead(self, partition: int, leader_epoch: int) -> None:
        """Cluster mode: this broker now leads ``__transaction_state-<partition>`` under
        ``leader_epoch``: load it in the background, with the leader epoch as the coordinator
        epoch of its markers, then finish every transaction the previous coordinator left
        between states (R19 across brokers)."""
        self.runtime.load_one(partition, lambda p: self._new_shard(p, leader_epoch), replay_batch, self._finish_left)

    def resign(self, partition: int) -> None:
        """Cluster mode: this broker stopped leading ``partition``: stop serving its ids."""
        if self.runtime.unload(partition) is not None:
            log.info("transaction coordinator resigned %s-%d", TXN_TOPIC, partition)

    async def _finish_left(self, shard: TransactionShard) -> None:
        for tid in shard.in_between():
            log.info("finishing transaction %r left in %s", tid, shard.txns[tid].state.kafka_name)
            await self._advance(shard, tid)

    # -- placement --------------------------------------------------------------------------------

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.settings.num_partitions)

    def offsets_partition(self, group_id: str) -> TopicPartition:
        return TopicPartition(OFFSETS_TOPIC, partition_for(group_id, self.settings.offsets_partitions))

    def serves(self, transactional_id: str) -> bool:
        """Whether this broker coordinates ``transactional_id`` (or is loading its partition).
        Always true on the embedded single node."""
        p = self.partition_of(transactional_id)
        return p in self.runtime.shards or p in self.runtime.loading

    def shard_of(self, transactional_id: str) -> TransactionShard:
        return self.runtime.shard(self.partition_of(transactional_id), f"transactional id {transactional_id!r}")

    @property
    def skipped_on_load(self) -> dict[int, int]:
        """partition -> records or batches the load skipped there (R22)."""
        return self.runtime.skipped_on_load

    @property
    def txns(self) -> dict:
        """Every transactional id's metadata, across partitions (tools and tests)."""
        return {tid: m for s in self.runtime.shards.values() for tid, m in s.txns.items()}

    # -- the requests ------------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_pid: int = -1,
                               expected_epoch: int = -1) -> tuple[int, int]:
        """(producer id, epoch) for a producer that does not use two-phase commit."""
        answer = await self.initialize(transactional_id, timeout_ms, expected_pid, expected_epoch)
        return answer.producer_id, answer.producer_epoch

    async def initialize(self, transactional_id: str, timeout_ms: int, expected_pid: int = -1,
                         expected_epoch: int = -1, *, enable_2pc: bool = False,
                         keep_prepared: bool = False) -> InitAnswer:
        """InitProducerId, every version: (producer id, epoch, and with ``keep_prepared`` the
        kept transaction's producer id and epoch). Whether 2PC is allowed at all is checked by
        the caller (``broker/coordinators/two_phase_commit.py``); see ``TransactionShard.init_producer_id``."""
        shard = self.shard_of(transactional_id)
        now = self.clock.now_ms()
        try:
            result = shard.init_producer_id(transactional_id, timeout_ms, now, expected_pid, expected_epoch,
                                            enable_2pc=enable_2pc, keep_prepared=keep_prepared)
        except ConcurrentTransactions:
            meta = shard.txns.get(transactional_id)
            if meta is not None and meta.state.is_prepare:
                await self._advance(shard, transactional_id)  # retry its markers; the client retries
            raise
        await self._execute(shard, result, now)
        if result.error is not None:
            raise result.error
        pid, epoch = result.response  # type: ignore[misc]
        return InitAnswer(pid, epoch, *result.ongoing)

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             partitions: Iterable[TopicPartition]) -> None:
        shard = self.shard_of(transactional_id)
        now = self.clock.now_ms()
        await self._execute(shard, shard.add_partitions(transactional_id, producer_id, epoch, partitions, now), now)

    async def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> None:
        shard = self.shard_of(transactional_id)
        now = self.clock.now_ms()
        await self._execute(shard, shard.add_offsets(transactional_id, producer_id, epoch, group_id, now), now)

    def verify_produce(self, transactional_id: str, producer_id: int, epoch: int, tp: TopicPartition) -> None:
        self.shard_of(transactional_id).verify_produce(transactional_id, producer_id, epoch, tp)

    async def add_implicitly(self, transactional_id: str, producer_id: int, epoch: int, tp: TopicPartition, *,
                             older: type[KafkaError] = InvalidProducerEpoch,
                             retriable: type[KafkaError] = NotEnoughReplicas) -> None:
        """Transactions version 2: add ``tp`` to the producer's transaction for its first Produce
        v12+ (or, for ``__consumer_offsets``, TxnOffsetCommit v5+) there (the shard's
        ``add_implicitly``); nothing is written for the later ones. On another broker's
        coordinator (cluster mode) the add goes there as AddPartitionsToTxn v4+ without
        ``verify_only``, as Kafka's leaders send it. A move under way, or a coordinator that
        cannot answer, is ``retriable`` (what the client retries)."""
        if not self.serves(transactional_id):
            await self.remote.verify(transactional_id, producer_id, epoch, tp, retriable=retriable, add=True)
            return
        shard = self.shard_of(transactional_id)
        now = self.clock.now_ms()
        try:
            result = shard.add_implicitly(transactional_id, producer_id, epoch, tp, now, older=older)
        except ConcurrentTransactions as exc:
            raise retriable(f"{tp}: {exc}") from None
        if result:
            await self._execute(shard, result, now)

    async def verify_remotely(self, transactional_id: str, producer_id: int, epoch: int, tp: TopicPartition, *,
                              retriable: type[KafkaError] = NotEnoughReplicas) -> None:
        """Cluster mode: verify a write to ``tp`` (a produce; or ``__consumer_offsets`` for a
        TxnOffsetCommit) with the coordinator on another broker (txn_verifier.py); ``retriable``
        is what the client is told when the coordinator cannot answer now. Nothing to do on the
        embedded broker (``LocalOnly``: it serves every transactional id itself)."""
        await self.remote.verify(transactional_id, producer_id, epoch, tp, retriable=retriable)

    def verify_txn_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> None:
        self.shard_of(transactional_id).verify_txn_offsets(transactional_id, producer_id, epoch, group_id)

    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool, *,
                      v2: bool = False) -> tuple[int, int]:
        """Commit or abort (R14). Returns once the outcome is fixed and, normally, once every
        marker is written. A retried EndTxn of a finished transaction succeeds (R19).

        ``v2`` (EndTxn v5+, transactions version 2): the end bumps the epoch, and the answer is
        the producer id and epoch the client goes on with. Returns them (for an older EndTxn:
        the transaction's current ones, which the v0..v4 answer does not carry)."""
        shard = self.shard_of(transactional_id)
        now = self.clock.now_ms()
        try:
            result = shard.end_txn(transactional_id, producer_id, epoch, commit, now, v2=v2)
        except ConcurrentTransactions:
            # A retried EndTxn while the markers are still being written: try them again, and
            # answer success if that finished the transaction the way it asks (R19).
            meta = shard.txns.get(transactional_id)
            if meta is None or not meta.state.is_prepare:
                raise
            await self._advance(shard, transactional_id)
            if meta.state is not (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
                raise
            return meta.client_ids()
        if result.records:
            self.crash.reached("end_txn.before_prepare")
        await self._execute(shard, result, now, end_txn=True)
        if result.records:  # a transaction ended now (not the retry of a finished one)
            if commit:
                self.committed += 1
            else:
                self.aborted += 1
        return shard.txns[transactional_id].client_ids()

    # -- the coordinator's own work --------------------------------------------------------------

    async def abort_timed_out(self) -> list[str]:
        """Fence and abort every Ongoing transaction past its transaction.timeout.ms (R20)."""
        aborted: list[str] = []
        for result in await self._scan(TransactionShard.timed_out, "abort timed-out transactions"):
            for tid, why in result.response:  # type: ignore[union-attr]
                log.info("aborting transaction %r: %s", tid, why)
                aborted.append(tid)
        self.timed_out += len(aborted)
        return aborted

    async def retry_unfinished(self) -> int:
        """Push on every transaction left between states, and write the Complete* records a
        failed batch left unwritten; returns how many transactions remain between states."""
        left = 0
        for shard in list(self.runtime.shards.values()):
            await self._flush_unwritten(shard)
            for tid in shard.in_between():
                await self._advance(shard, tid)
            left += len(shard.in_between())
        return left

    async def expire_transactional_ids(self) -> list[str]:
        """Tombstone ids idle past transactional.id.expiration.ms (R21)."""
        expired: list[str] = []
        for result in await self._scan(TransactionShard.expired, "expire transactional ids"):
            expired.extend(result.response)  # type: ignore[arg-type]
        return expired

    async def _scan(self, decide: Callable[[TransactionShard, int], TxnResult], what: str) -> list[TxnResult]:
        """One housekeeping scan: ask every shard what ``decide`` says at one ``now`` and execute
        it; returns the results executed. A shard whose records cannot be written is logged and
        left for the next scan."""
        done: list[TxnResult] = []
        now = self.clock.now_ms()
        for shard in list(self.runtime.shards.values()):
            result = decide(shard, now)
            if not result:
                continue
            try:
                await self._execute(shard, result, now)
            except KafkaError as exc:
                log.warning("cannot %s yet: %s", what, exc)
                continue
            done.append(result)
        return done

    # -- the one write path -------------------------------------------------------------------------

    async def _execute(self, shard: TransactionShard, result: TxnResult, now: int, *, end_txn: bool = False) -> None:
        """Append ``result``'s records — after the shard's unwritten Complete* records, in one
        batch — and replay them, then write its markers and what follows from them. Raises
        CoordinatorNotAvailable (nothing changed) if the records cannot be appended; marker
        failures are left to the retry."""
        if result.records:
            unwritten = shard.take_unwritten()
            try:
                await self._append(shard, unwritten + result.records, now)
            except KafkaError as exc:
                shard.abandon(result)
                shard.keep_unwritten(unwritten)
                raise CoordinatorNotAvailable(f"cannot write the transaction log {TXN_TOPIC}-{shard.partition}: {exc}") from None
            for tid, rec in result.records:
                shard.replay(tid, rec)
            if end_txn:
                self.crash.reached("end_txn.after_prepare")
            for tid, rec in result.records:
                if rec is not None and rec.state is TxnState.PREPARE_EPOCH_FENCE:
                    await self._advance(shard, tid)  # the abort with the new epoch
        for job in result.markers:
            await self._write_markers(shard, job, now, end_txn=end_txn)

    async def _write_markers(self, shard: TransactionShard, job: MarkerJob, now: int, *, end_txn: bool) -> None:
        """Write ``job``'s markers on every partition at once (``MarkerWriter.write_all``: in a
        cluster each goes to its partition's leader, one request per leader; one slow or moving
        leader does not hold up the others)."""
        tps = sorted(job.partitions)
        outcomes = await self.markers.write_all(job, tps, now)
        done: list[TopicPartition] = []
        failed: list[TopicPartition] = []
        for tp, out in zip(tps, outcomes):
            if out is None or isinstance(out, UnknownTopicOrPartition):  # written, or deleted: nothing to mark
                done.append(tp)
            else:
                log.warning("marker for %r on %s failed, will retry: %s", job.transactional_id, tp, out)
                failed.append(tp)
        if end_txn:
            self.crash.reached("end_txn.after_markers")
        if failed:
            self._retry_soon(shard, job.transactional_id)
        else:
            self._marker_retries.pop(job.transactional_id, None)
        follow = shard.markers_written(job.transactional_id, done, failed, now)
        if follow:
            if shard.complete_unwritten(follow):  # Complete*: in effect now, in the log with the next batch
                self._flush_soon(shard)
            else:
                await self._execute(shard, follow, now)
            if end_txn:
                self.crash.reached("end_txn.after_complete")

    async def _append(self, shard: TransactionShard,
                      entries: list[tuple[str, txnlog.TxnRecord | None]], now: int) -> None:
        """Append ``entries`` (transactional id, record or None) to the shard's partition as
        one batch, once durable."""
        batch = records.build_batch(
            [(txnlog.encode_key(tid), None if rec is None else txnlog.encode_value(rec), ()) for tid, rec in entries],
            timestamp_ms=now,
        )
        await self.runtime.append(shard.partition, batch, now)

    def _flush_soon(self, shard: TransactionShard) -> None:
        """Append the shard's unwritten Complete* records after COMPLETE_FLUSH_S unless a batch
        of the partition takes them first (the producer's next request usually does)."""
        if shard.partition in self._flush_timers:
            return

        def fire() -> None:
            self._flush_timers.pop(shard.partition, None)
            if self.runtime.shards.get(shard.partition) is not shard:
                return  # resigned: the new coordinator finishes from the log's Prepare*
            task = asyncio.get_running_loop().create_task(self._flush_unwritten(shard))
            self._retry_tasks.add(task)
            task.add_done_callback(self._retry_tasks.discard)

        self._flush_timers[shard.partition] = asyncio.get_running_loop().call_later(COMPLETE_FLUSH_S, fire)

    async def _flush_unwritten(self, shard: TransactionShard) -> None:
        """Append what the shard left unwritten, if anything; a failure is logged and the records
        are kept for the next try (the periodic retry, or the partition's next batch)."""
        unwritten = shard.take_unwritten()
        if not unwritten:
            return
        try:
            await self._append(shard, unwritten, self.clock.now_ms())
        except KafkaError as exc:
            shard.keep_unwritten(unwritten)
            log.warning("cannot write %d completed transaction(s) to %s-%d yet: %s", len(unwritten), TXN_TOPIC,
                        shard.partition, exc)

    async def flush(self) -> None:
        """Write every shard's unwritten Complete* records now (at stop: a coordinator loading
        the log then finds the transactions complete and sends no marker again)."""
        for handle in self._flush_timers.values():
            handle.cancel()
        self._flush_timers.clear()
        for shard in list(self.runtime.shards.values()):
            await self._flush_unwritten(shard)

    def _retry_soon(self, shard: TransactionShard, transactional_id: str) -> None:
        """Try the markers of ``transactional_id`` again after a short, doubling wait (a
        partition moving between brokers usually has its new leader within a second or two;
        read_committed consumers wait at the LSO meanwhile), unless a retry is already due."""
        if transactional_id in self._retry_timers:
            return
        rounds = self._marker_retries.get(transactional_id, 0)
        self._marker_retries[transactional_id] = rounds + 1
        delay = min(MARKER_RETRY_MAX_S, MARKER_RETRY_FIRST_S * 2 ** rounds)

        def fire() -> None:
            self._retry_timers.pop(transactional_id, None)
            if self.runtime.shards.get(shard.partition) is not shard:
                return  # the partition moved: its new coordinator finishes the transaction
            task = asyncio.get_running_loop().create_task(self._advance(shard, transactional_id))
            self._retry_tasks.add(task)
            task.add_done_callback(self._retry_tasks.discard)

        self._retry_timers[transactional_id] = asyncio.get_running_loop().call_later(delay, fire)

    async def _advance(self, shard: TransactionShard, transactional_id: str) -> None:
        """The next step of a transaction left between states, if it has one. Failures are
        logged and left for the next retry."""
        now = self.clock.now_ms()
        result = shard.advance(transactional_id, now)
        if not result:
            return
        try:
            await self._execute(shard, result, now)
        except KafkaError as exc:
            log.warning("completing %r failed, will retry: %s", transactional_id, exc)
