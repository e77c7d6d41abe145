"""The group coordinator service: one ``GroupShard`` per partition of ``__consumer_offsets`` on
the coordinator runtime (R3, R13).

Theory of operation. A group lives on partition ``abs(hash(group.id)) % N`` (placement.py) and
is served by that partition's shard. Every operation follows the runtime's order
(coordinator_runtime.py), under the shard's lock (``runtime.lock``): ask the shard (pure,
synchronous) for a ``Result``; append its records to the partition as one batch (transactional
for TxnOffsetCommit) and wait until it is durable (in cluster mode: the store's COMMIT); replay
them into the shard; deliver the shard's outbox (answers to parked JoinGroup/SyncGroup requests,
which wait here on futures); answer. The lock makes decide-append-replay one step for every
operation that writes, so no decision is taken on a state missing an earlier decision's records;
operations that write nothing (Heartbeat, OffsetFetch, DescribeGroups) take no lock and see the
state of the last replayed write. The answer always goes out after the append returned.

Start: ``__consumer_offsets`` is created if missing (compacted, internal); every partition is
loaded in the background by replaying its log through the same ``replay`` (loader.py); until a
partition is loaded its groups get COORDINATOR_LOAD_IN_PROGRESS. A timer task fires the shards'
timers (sessions, rebalance and sync timeouts, the delayed initial rebalance); another expires
offsets (offsets.retention.minutes, checked every offsets.retention.check.interval.ms).

Transactions: the transaction coordinator writes a COMMIT/ABORT marker into a
``__consumer_offsets`` partition and then calls ``complete_transaction``.

Cluster mode (issue 15): ``lead(p)`` / ``resign(p)`` load and drop one partition's shard as
this broker gains and loses the leadership of ``__consumer_offsets-<p>``; requests parked on a
resigned shard are answered NOT_COORDINATOR, so their clients find the new coordinator.

Single-threaded: everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from typing import Any, Awaitable, Callable

from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.configuration.group_config import GroupConfigs
from oncelog.broker.coordinators.coordinator_runtime import CoordinatorRuntime
from oncelog.broker.coordinators.offset_inbox import OffsetInbox
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.clock import Clock
from oncelog.coordinator.group import consumer_group as cg
from oncelog.coordinator.group import records as rec
from oncelog.coordinator.group.loader import replay_batch
from oncelog.coordinator.group.offsets import CommittedOffset
from oncelog.coordinator.group.shard import GroupShard, _random_member_id
from oncelog.coordinator.group.types import (
    GroupSettings,
    GroupSummary,
    JoinRequest,
    JoinResult,
    OffsetCommitData,
    Parked,
    Result,
    SyncResult,
)
from oncelog.coordinator.placement import partition_for
from oncelog.protocol import records
from oncelog.protocol.errors import (
    CoordinatorLoadInProgress,
    CoordinatorNotAvailable,
    ErrorCode,
    InvalidCommitOffsetSize,
    KafkaError,
    NotCoordinator,
    ProducerFenced,
    UnknownServerError,
)
from oncelog.types import TopicPartition
from oncelog.internal_topics import OFFSETS_TOPIC

log = logging.getLogger(__name__)

OFFSETS_TOPIC_SEGMENT_BYTES = 100 * 1024 * 1024  # offsets.topic.segment.bytes
TICK_SECONDS = 0.05
#: the records of one operation go in batches of about this size at most (message.max.bytes of
#: __consumer_offsets is 1,048,588 by default; a single larger record cannot be written)
BATCH_BYTES = 512 * 1024


#: append failures that the same records would meet again (too large, not encodable)
_NEVER_WRITTEN = (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size,
                  ErrorCode.unknown_server_error)


def _coordinator_error(exc: KafkaError, *, offsets: bool) -> KafkaError:
    """What a client is told when an append to ``__consumer_offsets`` failed (as Kafka maps it)."""
    code = exc.code
    if code in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas, ErrorCode.request_timed_out):
        return CoordinatorNotAvailable(f"cannot write __consumer_offsets: {exc}")
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return NotCoordinator(f"cannot write __consumer_offsets: {exc}")
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        if offsets:
            return InvalidCommitOffsetSize(f"offset commit too large for __consumer_offsets: {exc}")
        return UnknownServerError(f"group metadata too large for __consumer_offsets: {exc}")
    return exc


def _consumer_settings(config: BrokerConfig) -> cg.ConsumerSettings:
    """The group.consumer.* configs (KIP-848): the session timeout and heartbeat interval held
    within their min/max as Kafka requires, the assignors by name (unknown ones dropped)."""
    session = min(max(config.group_consumer_session_timeout_ms, config.group_consumer_min_session_timeout_ms),
                  config.group_consumer_max_session_timeout_ms)
    interval = min(max(config.group_consumer_heartbeat_interval_ms, config.group_consumer_min_heartbeat_interval_ms),
                   config.group_consumer_max_heartbeat_interval_ms)
    names = tuple(n.strip() for n in config.group_consumer_assignors.split(",") if n.strip() in cg.ASSIGNORS)
    return cg.ConsumerSettings(session_timeout_ms=session, heartbeat_interval_ms=interval,
                               assignors=names or ("uniform",), max_size=config.group_consumer_max_size)


class GroupCoordinator:
    """See the module docstring. ``replicas`` is the broker's ReplicaManager."""

    def __init__(self, replicas: ReplicaManager, config: BrokerConfig, clock: Clock, *, inbox: OffsetInbox,
                 configs: GroupConfigs,
                 num_partitions: int | None = None, new_member_id: Callable[[str], str] = _random_member_id) -> None:
        """``inbox``: offsets committed outside the Kafka protocol (offset_inbox.py: ``NoInbox``,
        or in cluster mode the database inbox), and ``configs``, the groups' own configs kept in
        the data dir or the store, both chosen by the membership. ``num_partitions``:
        the partition count of ``__consumer_offsets`` (default offsets.topic.num.partitions; an
        existing topic keeps its own, in cluster mode the store's)."""
        self.replicas = replicas
        self.clock = clock
        self.config = config
        self.num_partitions = config.offsets_topic_num_partitions if num_partitions is None else num_partitions
        #: the groups' own consumer group configs (KIP-848: consumer.session.timeout.ms ...,
        #: broker/configuration/group_config.py), kept where the membership chose (the data dir's
        #: file or the store); loaded by the membership's ``start_coordinators``
        self.configs = configs
        self.settings = GroupSettings(
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            offsets_retention_ms=config.offsets_retention_minutes * 60_000,
            max_metadata_bytes=config.offset_metadata_max_bytes,
            max_group_size=config.group_max_size,
            consumer=_consumer_settings(config),
        )
        self.retention_check_ms = config.offsets_retention_check_interval_ms
        self.new_member_id = new_member_id
        self.runtime: CoordinatorRuntime[GroupShard] = CoordinatorRuntime("group coordinator", OFFSETS_TOPIC, replicas, clock, logger=log)
        self._reply_ids = itertools.count(1)
        self._replies: dict[int, asyncio.Future[Any]] = {}
        self._reply_partition: dict[int, int] = {}  # reply id -> the partition whose shard parked it
        #: partition -> markers (producer id, commit, epoch) that arrived while it was loading
        self._deferred: dict[int, list[tuple[int, bool, int | None]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.inbox = inbox
        #: the topics consumer groups see, and the replicas' topics_version it was built from
        self._image: cg.TopicImage | None = None
        self._image_of = -1

    @property
    def shards(self) -> dict[int, GroupShard]:
        return self.runtime.shards

    @property
    def loading(self) -> set[int]:
        return self.runtime.loading

    @property
    def loaded(self) -> asyncio.Event:
        return self.runtime.loaded

    @property
    def skipped_on_load(self) -> dict[int, int]:
        return self.runtime.skipped_on_load

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self, *, load_all: bool = True) -> None:
        """Create ``__consumer_offsets`` if missing and start loading it (in the background).
        ``load_all=False`` (cluster mode): partitions are loaded as they are led (``lead``)."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._timer_loop()), loop.create_task(self._retention_loop())]
        if not load_all:
            return
        meta = self.replicas.ensure_internal_topic(
            OFFSETS_TOPIC,
            self.num_partitions,
            {"cleanup.policy": "compact", "segment.bytes": str(OFFSETS_TOPIC_SEGMENT_BYTES)},
        )
        self.num_partitions = meta.num_partitions  # an existing topic keeps its partition count
        self.runtime.loading.update(range(self.num_partitions))
        self._tasks.append(loop.create_task(self._load_all()))

    def lead(self, partition: int) -> None:
        """Cluster mode: this broker now leads ``__consumer_offsets-<partition>``: load it."""
        self._deferred.pop(partition, None)
        self.runtime.load_one(partition, self._new_shard, replay_batch, self._settle_deferred)

    async def _settle_deferred(self, shard: GroupShard) -> None:
        """After a load: the markers that arrived while it ran (complete_transaction); the
        inbox's mirror of the partition's groups rewritten."""
        for producer_id, commit, epoch in self._deferred.pop(shard.partition, []):
            self.complete_transaction(shard.partition, producer_id, commit, epoch)
        async with self.runtime.lock(shard.partition):
            if self.shards.get(shard.partition) is shard:
                await self.inbox.mirror_partition(shard)

    def resign(self, partition: int) -> None:
        """Cluster mode: this broker stopped leading ``partition``: drop its shard and answer
        the requests parked there NOT_COORDINATOR."""
        self._deferred.pop(partition, None)  # in the log: the next leader's load replays them
        self.inbox.forget(partition)
        if self.runtime.unload(partition) is None:
            return
        for reply_id in [r for r, p in self._reply_partition.items() if p == partition]:
            self._deliver(reply_id, NotCoordinator(f"{OFFSETS_TOPIC}-{partition} moved to another broker"))
        log.info("group coordinator resigned %s-%d", OFFSETS_TOPIC, partition)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.configs.close()
        for fut in self._replies.values():
            if not fut.done():
                fut.set_exception(CoordinatorNotAvailable("the broker is shutting down"))
        self._replies.clear()

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def _shard(self, group_id: str) -> GroupShard:
        return self.runtime.shard(self.partition_for(group_id), f"group {group_id}")

    def check_coordinator(self, group_id: str) -> None:
        """Raises NotCoordinator (COORDINATOR_LOAD_IN_PROGRESS while loading) unless this broker
        coordinates ``group_id`` (a share group's membership is kept where its coordinator is)."""
        self._shard(group_id)

    def is_loading(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.loading

    # -- loading --------------------------------------------------------------------------------

    async def _load_all(self) -> None:
        started = self.clock.monotonic_ms()
        await self.runtime.load(range(self.num_partitions), self._new_shard, replay_batch)
        for shard in list(self.shards.values()):
            await self._settle_deferred(shard)
        log.info("group coordinator loaded %d group(s) from %d partition(s) in %d ms",
                 sum(len(s.groups) for s in self.shards.values()), self.num_partitions,
                 self.clock.monotonic_ms() - started)

    def _new_shard(self, p: int) -> GroupShard:
        return GroupShard(p, self.settings, reply_ids=self._reply_ids, new_member_id=self.new_member_id,
                          consumer_settings_of=self.consumer_settings_of)

    def consumer_settings_of(self, group_id: str) -> cg.ConsumerSettings:
        """A consumer group's settings: its own group configs over the broker's group.consumer.*."""
        return self.configs.consumer_settings(group_id, self.settings.consumer, self.config)

    # -- the one write path -----------------------------------------------------------------------

    @staticmethod
    def _encoded(recs: list[Any], split: bool) -> list[list[tuple[bytes, bytes | None, tuple]]]:
        """``recs`` encoded; with ``split``, in batches of about ``BATCH_BYTES`` at most (a
        record larger than that alone in its batch): the records of one operation on a large
        consumer group (thousands of members leaving at once) fit no single batch. Offset
        commits (transactional or not) stay one batch: all or nothing, as in Kafka. Raises
        UnknownServerError for a record that cannot be encoded (a bug: the state machines refuse
        what no record can hold before they change)."""
        try:
            encoded = [(rec.encode_key(k), rec.encode_value(v), ()) for k, v in recs]
        except ValueError as exc:
            raise UnknownServerError(f"a __consumer_offsets record cannot be encoded: {exc}") from None
        if not split:
            return [encoded]
        batches: list[list[tuple[bytes, bytes | None, tuple]]] = [[]]
        size = 0
        for r in encoded:
            n = len(r[0]) + (len(r[1]) if r[1] is not None else 0) + 24
            if batches[-1] and size + n > BATCH_BYTES:
                batches.append([])
                size = 0
            batches[-1].append(r)
            size += n
        return batches

    async def _append(self, partition: int, encoded: list[tuple[bytes, bytes | None, tuple]], now: int,
                      producer: tuple[int, int] | None) -> int:
        pid, epoch = producer if producer is not None else (-1, -1)
        batch = records.build_batch(encoded, timestamp_ms=now, producer_id=pid, producer_epoch=epoch,
                                    transactional=producer is not None)
        return await self.runtime.append(partition, batch, now)

    async def _run(self, group_id: str, decide: Callable[[GroupShard, int], Result], *, offsets: bool = False,
                   drain: bool = False, removes: bool = False, check: Callable[[], None] | None = None) -> Any:
        """One operation that may write: under the shard's lock, ``decide(shard, now)`` then
        ``_execute``. Returns the response (a future for a parked one). ``drain``: an offset
        write, which first moves the group's database inbox commits into the log (issue 31);
        checked before the lock: a database commit after the check is the newer one, and its
        drain comes after this write. A group id the database inbox cannot keep is refused
        (InvalidGroupId) before anything changes, unless the operation only ``removes`` (a
        member, offsets, the group: such a group can only come from an older log). ``check()``
        (raises to refuse) runs under the lock, right before ``decide``: nothing suspends between
        it and the first append of the operation's records."""
        if not removes:
            self.inbox.check_group_id(group_id)
        try:
            pending = drain and await self.inbox.has_pending(group_id)
        except KafkaError as exc:  # the store: the client retries, as after a failed append
            raise _coordinator_error(exc, offsets=offsets) from None
        async with self.runtime.lock(self.partition_for(group_id)):
            shard = self._shard(group_id)
            if pending:
                await self._drain_inbox_locked(shard, group_id)
            if check is not None:
                check()
            now = self.clock.now_ms()
            return await self._execute(shard, decide(shard, now), now, offsets=offsets, group_id=group_id)

    async def _drain_inbox_locked(self, shard: GroupShard, group_id: str) -> None:
        async def execute(shard: GroupShard, result: Result, now: int) -> Any:
            return await self._execute(shard, result, now, offsets=True, group_id=group_id)
        await self.inbox.drain_locked(shard, group_id, execute, self.clock.now_ms())

    async def drain_inbox(self, group_id: str) -> None:
        """Issue 31: move ``group_id``'s commits from the database inbox into the log (woken by
        the inbox's NOTIFY and poll). Raises NotCoordinator / CoordinatorLoadInProgress."""
        async with self.runtime.lock(self.partition_for(group_id)):
            await self._drain_inbox_locked(self._shard(group_id), group_id)

    async def _execute(self, shard: GroupShard, result: Result, now: int, *, offsets: bool = False,
                       group_id: str | None = None) -> Any:
        """Append ``result``'s records, replay them, deliver the outbox. Returns the response (a
        future for a parked one). If the append fails, parked requests of this operation fail
        too and the (mapped) error is raised. The caller holds the shard's lock."""
        fut: asyncio.Future[Any] | None = None
        if isinstance(result.response, Parked):
            fut = asyncio.get_running_loop().create_future()
            self._replies[result.response.reply_id] = fut
            self._reply_partition[result.response.reply_id] = shard.partition
        failure: KafkaError | None = None
        if result.records:
            pid, epoch = result.producer if result.producer is not None else (-1, -1)
            done = 0
            try:
                for encoded in self._encoded(result.records, split=not offsets and result.producer is None):
                    base = await self._append(shard.partition, encoded, now, result.producer)
                    for i, (key, value) in enumerate(result.records[done:done + len(encoded)]):
                        shard.replay(key, value, record_offset=base + i, now=now, producer_id=pid,
                                     producer_epoch=epoch, transactional=result.producer is not None)
                    done += len(encoded)
            except KafkaError as exc:
                failure = _coordinator_error(exc, offsets=offsets)
                log.warning("__consumer_offsets-%d: append failed: %s", shard.partition, exc)
                groups = {k.group for k, _ in result.records[done:] if isinstance(k, rec.GroupKey)}
                shard.store_failed(groups, failure, now)
                if exc.code in _NEVER_WRITTEN:
                    shard.consumer_records_refused(result.records[done:], now)
        await self.inbox.mirror(shard, group_id, result.records)  # its fencing learns of it before any answer
        outbox, shard.outbox[:] = list(shard.outbox), []
        for reply_id, payload in outbox:
            self._deliver(reply_id, failure if failure is not None else payload)
        if failure is not None:
            if fut is not None:
                self._replies.pop(result.response.reply_id, None)
                self._reply_partition.pop(result.response.reply_id, None)
            raise failure
        return fut if fut is not None else result.response

    def _deliver(self, reply_id: int, payload: object) -> None:
        fut = self._replies.pop(reply_id, None)
        self._reply_partition.pop(reply_id, None)
        if fut is None or fut.done():
            return  # the requester went away
        if isinstance(payload, BaseException):
            fut.set_exception(payload)
        else:
            fut.set_result(payload)

    async def _wait(self, response: Any) -> Any:
        if isinstance(response, asyncio.Future):
            return await response
        return response

    # -- membership -------------------------------------------------------------------------------

    async def join_group(self, req: JoinRequest) -> JoinResult:
        return await self._wait(await self._run(req.group_id, lambda shard, now: shard.join_group(req, now)))

    async def sync_group(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: dict[str, bytes]) -> SyncResult:
        return await self._wait(await self._run(group_id, lambda shard, now: shard.sync_group(
            group_id, generation, member_id, instance_id, protocol_type, protocol_name, assignments, now)))

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> None:
        shard = self._shard(group_id)
        shard.heartbeat(group_id, generation, member_id, instance_id, self.clock.now_ms())

    async def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> list[KafkaError | None]:
        return await self._run(group_id, lambda shard, now: shard.leave_group(group_id, members, now), removes=True)

    # -- offsets ------------------------------------------------------------------------------------

    async def commit_offsets(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                             offsets: dict[TopicPartition, OffsetCommitData], *,
                             retention_ms: int = -1, api_version: int | None = None) -> dict[TopicPartition, KafkaError | None]:
        def decide(shard: GroupShard, now: int) -> Result:
            expire = now + retention_ms if retention_ms >= 0 else -1
            return shard.commit_offsets(group_id, generation, member_id, instance_id, offsets, now,
                                        expire_timestamp=expire, api_version=api_version)
        return await self._run(group_id, decide, offsets=True, drain=True)

    async def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, generation: int,
                                 member_id: str, instance_id: str | None,
                                 offsets: dict[TopicPartition, OffsetCommitData], *,
                                 verify: Callable[[], Awaitable[None]] | None = None,
                                 guarded: bool = True) -> dict[TopicPartition, KafkaError | None]:
        """TxnOffsetCommit: the offsets become pending offsets of the producer (a transactional
        batch in the group's ``__consumer_offsets`` partition) until its transaction's marker.
        ``verify()``: the transaction coordinator's check that this partition is in the
        producer's ongoing transaction (or, under transactions version 2, its add), awaited
        here. ``guarded`` (version 1): under the partition's verification guard, from before
        ``verify`` until the batch takes its place in the log: a marker for the producer that
        comes meanwhile (the client ended its transaction without waiting for this answer; its
        verification went to another broker, or the request waited for the group's lock) ended
        the transaction ``verify`` confirmed, and the offsets are refused (INVALID_TXN_STATE;
        PRODUCER_FENCED when the marker's epoch is newer), as Kafka's group coordinator refuses
        them, instead of staying pending after it, with no marker to come but the producer's
        next transaction's. Version 2 needs no guard: every marker bumps the epoch, which then
        refuses the batch."""
        part = None
        if guarded:
            try:
                part = self.replicas.partition(OFFSETS_TOPIC, self.partition_for(group_id))
            except KafkaError:
                part = None  # not led here: ``_run`` answers NOT_COORDINATOR
        guard = (contextlib.nullcontext(None) if part is None
                 else part.verification_guard(producer_id, producer_epoch, "offsets", fenced=ProducerFenced))
        with guard as check:
            if verify is not None:
                await verify()
            return await self._run(group_id, lambda shard, now: shard.txn_commit_offsets(
                group_id, producer_id, producer_epoch, generation, member_id, instance_id, offsets, now),
                offsets=True, drain=True, check=check)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None, require_stable: bool,
                      member_id: str | None = None, member_epoch: int = -1,
                      ) -> list[tuple[TopicPartition, CommittedOffset | None, KafkaError | None]]:
        rows = self._shard(group_id).fetch_offsets(group_id, partitions, require_stable, member_id, member_epoch)
        try:  # issue 31: commits of database transactions not drained yet
            return self.inbox.overlay(group_id, rows, partitions, require_stable)
        except KafkaError as exc:  # the store: the client retries, as after a failed append
            raise _coordinator_error(exc, offsets=True) from None

    # -- consumer groups (KIP-848) ------------------------------------------------------------------

    def _topics(self) -> cg.TopicImage:
        """The topics a consumer group may subscribe to (name -> topic id, partition count), as
        an image built again only when the broker's topics changed (``topics_version``)."""
        version = self.replicas.topics_version
        if self._image is None or self._image_of != version:
            topics = {name: (meta.topic_id, meta.num_partitions) for name, meta in self.replicas.topics.items()
                      if not meta.internal}
            self._image, self._image_of = cg.TopicImage.following(topics, self._image), version
        return self._image

    def describe_consumer_group(self, group_id: str) -> cg.ConsumerGroup:
        """The consumer group as the shard has it (read only: the caller must not change it)."""
        return self._shard(group_id).describe_consumer_group(group_id)

    async def consumer_heartbeat(self, req: cg.HeartbeatRequest,
                                 may_describe: Callable[[str], bool] | None = None) -> cg.HeartbeatAnswer:
        """``may_describe``: the member's DESCRIBE on a topic (None: ACLs off), for the topics
        its group's regexes resolve to (as Kafka filters them)."""
        return await self._run(req.group_id, lambda shard, now: shard.consumer_heartbeat(
            req, self._topics(), now, may_describe))

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> dict[TopicPartition, KafkaError | None]:
        return await self._run(group_id, lambda shard, now: shard.delete_offsets(group_id, partitions, now), drain=True,
                               removes=True)

    def complete_transaction(self, offsets_partition: int, producer_id: int, commit: bool,
                             producer_epoch: int | None = None) -> None:
        """The entry point of the transaction coordinator (R13, R14): call it after a COMMIT or
        ABORT marker of ``producer_id`` was appended to ``__consumer_offsets-<offsets_partition>``.
        COMMIT makes the producer's pending offsets on that partition the groups' committed
        offsets; ABORT drops them. Idempotent (a repeated call finds nothing pending). While the
        partition is still loading, nothing is done here: the loader replays the marker from the
        log. ``producer_epoch`` defaults to the epoch in the partition's producer state."""
        if offsets_partition in self.loading:
            # The load may have read the log before this marker was appended: settle it again
            # once the shard is installed (idempotent: nothing pending, nothing done).
            self._deferred.setdefault(offsets_partition, []).append((producer_id, commit, producer_epoch))
            return
        shard = self.shards.get(offsets_partition)
        if shard is None:
            return
        if producer_epoch is None:
            entry = self.replicas.partition(OFFSETS_TOPIC, offsets_partition).producers.entries.get(producer_id)
            producer_epoch = entry.epoch if entry is not None else -1
        shard.replay_marker(producer_id, producer_epoch, commit)

    # -- administration ---------------------------------------------------------------------------

    def list_groups(self) -> tuple[list[tuple[str, str, str, str]], bool]:
        """Every loaded group (id, protocol type, state, group type: classic or consumer), and
        whether some partition is loading."""
        out = []
        for shard in self.shards.values():
            out.extend((*row, "classic") for row in shard.list_groups())
            out.extend((*row, "consumer") for row in shard.list_consumer_groups())
        return out, bool(self.loading)

    def describe_group(self, group_id: str) -> GroupSummary:
        return self._shard(group_id).describe_group(group_id)

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups of one group. The sessions that ended before it are ended first, even
        when the timer (every ``TICK_SECONDS``) has not come round yet: a group whose last
        member's session timed out is empty, as it is on a Kafka broker, whose timers fire at
        the deadline (librdkafka's 0081 deletes groups exactly one session timeout after
        closing their static members)."""
        async with self.runtime.lock(self.partition_for(group_id)):
            shard = self._shard(group_id)
            now = self.clock.now_ms()
            deadline = shard.group_deadline(group_id)  # this group's alone: no walk of the partition's
            if deadline is not None and deadline <= now:
                await self._execute(shard, shard.tick(now), now)
        await self._run(group_id, lambda shard, now: shard.delete_group(group_id, now), drain=True, removes=True)

    # -- timers ---------------------------------------------------------------------------------------

    async def _timer_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            now = self.clock.now_ms()
            for p, shard in list(self.shards.items()):
                deadline = shard.next_deadline()
                if p in self.loading or deadline is None or deadline > now:
                    continue
                try:
                    async with self.runtime.lock(p):
                        if self.shards.get(p) is shard:
                            await self._execute(shard, shard.tick(now), now)
                except KafkaError as exc:
                    log.warning("__consumer_offsets-%d: timers: %s", p, exc)
                except Exception:
                    log.exception("bug: group timers of __consumer_offsets-%d failed", p)

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retention_check_ms / 1000)
            await self.expire_offsets()

    async def expire_offsets(self) -> int:
        """One offsets-retention pass over every loaded partition; returns the tombstones written."""
        now = self.clock.now_ms()
        written = 0
        for p, shard in list(self.shards.items()):
            try:
                async with self.runtime.lock(p):
                    if self.shards.get(p) is not shard:
                        continue
                    result = shard.expire_offsets(now)
                    await self._execute(shard, result, now)
                written += len(result.records)
            except KafkaError as exc:
                log.warning("__consumer_offsets-%d: offsets expiry: %s", p, exc)
            except Exception:
                log.exception("bug: offsets expiry of __consumer_offsets-%d failed", p)
        if written:
            log.info("offsets retention wrote %d tombstone(s)", written)
        return written
