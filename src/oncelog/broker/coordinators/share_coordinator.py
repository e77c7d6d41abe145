"""The share-group service (KIP-932, issue 30): the asyncio shell around the pure core
(coordinator/share/shard.py: share groups, share sessions and share partitions, decided with the
time passed in).

Theory of operation. One service per broker serves the share groups' membership
(ShareGroupHeartbeat), their share sessions and the records they have in flight (ShareFetch,
ShareAcknowledge). Every operation that changes a share partition runs under one lock: decide on
the core, make the changed partitions durable through the persister and wait until they are,
then answer. So an acknowledgement is durable before its answer leaves: after a crash the state
read back holds it, and no record acknowledged is delivered again. Acquisitions are not written
(as in Kafka, a lock does not survive the broker): after a crash the records acquired and not
acknowledged are AVAILABLE again (at-least-once), with the delivery count last written. A share
partition's start offset, chosen at the group's first fetch of it (``share.auto.offset.reset``),
is written before anything is acquired, so ``latest`` does not move past records produced before
a crash.

Where the state is durable is the persister's (share_persister.py), handed in by the membership
when the broker starts: the embedded broker's ``__share_group_state`` (loaded at start; until it
is, the share APIs wait for it: ``ready``), or in cluster mode the store's rows, each share
partition read when this broker, leading its topic partition, first serves it
(share_store_persister.py; docs/ARCHITECTURE.md "share groups"). Who a group's members are is the
``members`` collaborator's (share_members.py): this broker's, or in cluster mode the group
coordinator's, which may be another broker; the sessions of members kept elsewhere are checked
against it every third of a session timeout (those of members gone are closed, their records
released). A session also ends with its connection (as Kafka ties it to the connection) and
after a session timeout unused.

A timer expires acquisition locks (``group.share.record.lock.duration.ms``) and members whose
session timed out (their acquired records are released, their share sessions closed), from the
core's deadline heaps: a tick costs what came due, never a walk of every record or member. A
parked ShareFetch waits on the signals of its own share partitions (records there became
available again) and on its log partitions (new records), so an acknowledgement wakes only the
fetches of its partition.

Bounds: ``group.share.max.groups`` groups with members, ``group.share.max.size`` members each,
``group.share.partition.max.record.locks`` records acquired per share partition (and read per
ShareFetch: ``max_records`` is capped to it, and the log is read only as far as the records
to acquire need). A group whose last member leaves is dropped from memory; its share-partition
state and configs (durable) stay.

Single-threaded: everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Coroutine, Iterable, Iterator, Sequence

from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.coordinators.share_members import ShareMembers
from oncelog.broker.coordinators.share_persister import Records, SharePersister
from oncelog.broker.partitions.partition import Partition
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.clock import Clock
from oncelog.coordinator.share import records as srec
from oncelog.coordinator.share.configs import check_group_config
from oncelog.coordinator.share.group import HeartbeatAnswer, Sessions, ShareGroups
from oncelog.coordinator.share.partition import AcquiredRange, SharePartition
from oncelog.coordinator.share.shard import PartKey, ShareSettings, ShareShard
from oncelog.protocol import records
from oncelog.storage.txn_index import AbortedTxn
from oncelog.protocol.errors import (
    CoordinatorNotAvailable,
    InvalidRequest,
    KafkaError,
    UnknownMemberId,
    UnknownTopicId,
)

__all__ = ["PartitionFetch", "ShareCoordinator"]

log = logging.getLogger(__name__)

TICK_SECONDS = 0.1


@dataclass
class PartitionFetch:
    """What a ShareFetch answers for one partition."""

    error: KafkaError | None = None
    ack_error: KafkaError | None = None
    data: list[bytes] = field(default_factory=list)
    acquired: list[AcquiredRange] = field(default_factory=list)


class _Signal:
    """Wakes every waiter at once: ``next()`` is a future the next ``fire()`` resolves (shared by
    its waiters, never cancelled by them)."""

    def __init__(self) -> None:
        self._fut: asyncio.Future[None] | None = None

    def next(self) -> asyncio.Future[None]:
        if self._fut is None or self._fut.done():
            self._fut = asyncio.get_running_loop().create_future()
        return self._fut

    def fire(self) -> None:
        if self._fut is not None and not self._fut.done():
            self._fut.set_result(None)


class _PartitionLog:
    """A partition this broker leads, as the core reads it (``shard.LogView``)."""

    __slots__ = ("_part",)

    def __init__(self, part: Partition) -> None:
        self._part = part

    @property
    def log_start_offset(self) -> int:
        return int(self._part.log_start_offset)

    @property
    def high_watermark(self) -> int:
        return int(self._part.high_watermark)

    @property
    def last_stable_offset(self) -> int:
        return int(self._part.last_stable_offset)

    def batches(self, start: int) -> Iterator[tuple[records.BatchHeader, bytes]]:
        return iter(self._part.log.iter_batches(start))

    def aborted(self, start: int, upper: int) -> Sequence[AbortedTxn]:
        return self._part.aborted.collect(start, upper)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, ...] | None:
        return self._part.log.offset_for_timestamp(timestamp_ms)


class ShareCoordinator:
    """See the module docstring. ``replicas`` is the broker's ReplicaManager; ``persister`` and
    ``members`` are the membership's (the mode's)."""

    def __init__(self, replicas: ReplicaManager, config: BrokerConfig, clock: Clock, *, persister: SharePersister,
                 members: ShareMembers) -> None:
        self.replicas = replicas
        self.clock = clock
        self.persister = persister
        self.members = members
        self.lock_ms = config.group_share_record_lock_duration_ms
        self.max_wait_ms = config.fetch_max_wait_ms
        self.shard = ShareShard(ShareSettings(
            lock_ms=config.group_share_record_lock_duration_ms, delivery_limit=config.group_share_delivery_count_limit,
            max_locks=config.group_share_partition_max_record_locks,
            session_timeout_ms=config.group_share_session_timeout_ms,
            heartbeat_interval_ms=config.group_share_heartbeat_interval_ms, max_size=config.group_share_max_size,
            max_groups=config.group_share_max_groups, max_sessions=config.group_share_max_share_sessions,
        ), on_available=self._fire_one)
        self.max_locks = self.shard.max_locks
        self.lock = asyncio.Lock()
        #: share partition -> the signal of its parked fetches (records there became available)
        self._signals: dict[PartKey, _Signal] = {}
        self._watched: set[asyncio.Future[Any]] = set()  # connections whose close ends their sessions
        self._background: set[asyncio.Task[None]] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._checking = False
        self._stopping = False

    # -- what the handlers and observability read -------------------------------------------------

    @property
    def groups(self) -> ShareGroups:
        return self.shard.groups

    @property
    def sessions(self) -> Sessions:
        return self.shard.sessions

    @property
    def partitions(self) -> dict[PartKey, SharePartition]:
        return self.shard.partitions

    @property
    def configs(self) -> dict[str, dict[str, str]]:
        return self.shard.configs

    def config(self, group_id: str, name: str) -> str:
        return self.shard.config(group_id, name)

    def known(self, group_id: str) -> bool:
        """A share group this broker has: members, configs or share-partition state."""
        return self.shard.known(group_id)

    def is_share_group(self, group_id: str) -> bool:
        """Whether this broker knows, without asking anyone, that ``group_id`` is a share group
        (embedded: it has it; cluster mode: never sure, the state may be anywhere)."""
        return self.persister.is_share_group(self.shard, group_id)

    def check_coordinator(self, group_id: str) -> None:
        """Raises NotCoordinator when the group's members are kept by another broker."""
        self.members.check_coordinator(group_id)

    def group_partitions(self, group_id: str) -> list[PartKey]:
        return self.shard.group_partitions(group_id)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Start loading the durable state (the persister's) and the timers."""
        self.persister.start(self.shard)
        self._tasks = [asyncio.get_running_loop().create_task(self._timer_loop())]

    async def ready(self) -> None:
        await self.persister.ready()

    async def stop(self) -> None:
        self._stopping = True
        for task in [*self._tasks, *self._background]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._background, return_exceptions=True)
        await self.persister.close()

    async def session_opened(self, group_id: str) -> None:
        """A share session of ``group_id`` opens (ShareFetch epoch 0): what an administrator
        changed in the durable state since this broker read it is read again at its next use
        (cluster mode). Raises the store's KafkaError."""
        async with self.lock:
            await self.persister.session_opened(self.shard, group_id)

    async def _persist(self, keys: Iterable[PartKey]) -> None:
        await self.persister.write(self.shard, self.shard.snapshots(keys))

    async def _write(self, recs: Records) -> None:
        await self.persister.write(self.shard, recs)

    # -- configs ----------------------------------------------------------------------------------

    async def refresh_configs(self, group_id: str) -> None:
        """The group's configs as they are durable now (cluster mode: another broker may have
        altered them). Raises the store's KafkaError."""
        await self.persister.refresh_configs(self.shard, group_id)

    async def groups_with_configs(self) -> list[str]:
        """The groups with configs of their own (ListConfigResources). Raises the store's KafkaError."""
        return await self.persister.groups_with_configs(self.shard)

    async def alter_configs(self, group_id: str, configs: dict[str, str], validate_only: bool) -> None:
        """The group's configs become ``configs`` (IncrementalAlterConfigs, the whole new set)."""
        for name, value in configs.items():
            check_group_config(name, value)
        if validate_only:
            return
        async with self.lock:
            await self.ready()
            await self._write([(srec.ConfigKey(group_id), tuple(sorted(configs.items())) if configs else None)])
            self.shard.set_configs(group_id, configs)

    # -- membership -------------------------------------------------------------------------------

    def _resolve(self, name: str) -> tuple[uuid.UUID, int] | None:
        meta = self.replicas.topics.get(name)
        return None if meta is None else (meta.topic_id, meta.num_partitions)

    async def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                        subscribed: tuple[str, ...] | None, client_id: str, client_host: str) -> HeartbeatAnswer:
        await self.ready()
        answer = self.shard.heartbeat(group_id, member_id, member_epoch, rack_id, subscribed, self._resolve,
                                      self.clock.now_ms(), client_id=client_id, client_host=client_host)
        if member_epoch == -1:
            await self._member_gone(group_id, member_id)
        return answer

    async def _member_gone(self, group_id: str, member_id: str, *, drop_session: bool = True) -> None:
        """The member left, timed out or lost its session: its session closes (unless
        ``drop_session`` is false: the caller closed it) and its acquired records go back."""
        self.shard.member_gone(group_id, member_id, drop_session=drop_session)
        async with self.lock:
            changed = self.shard.release_member(group_id, member_id, self.clock.now_ms())
            if changed:
                self._fire(changed)
                try:
                    await self._persist(changed)
                except KafkaError as exc:
                    self.persister.release_not_written(member_id, exc)

    # -- share fetch / acknowledge ----------------------------------------------------------------

    def is_member(self, group_id: str, member_id: str) -> bool:
        """Whether ``member_id`` is (as far as this broker knows now) a member of the group: one
        here, or one its coordinator elsewhere confirmed within a session timeout. Used to evict
        sessions at the limit; ``check_member`` is what a new session must pass."""
        return self.shard.is_member(group_id, member_id, self.clock.now_ms())

    async def check_member(self, group_id: str, member_id: str) -> None:
        """A share session may be opened only by a member of the group: one here, or one the
        group's coordinator has. Raises UnknownMemberId, or CoordinatorNotAvailable when the
        coordinator cannot be asked now."""
        if self.shard.groups.is_member(group_id, member_id):
            return
        found = await self.members.members(group_id, self.shard.members_of(group_id))
        if found is None:
            raise CoordinatorNotAvailable(f"the coordinator of share group {group_id} cannot confirm member "
                                          f"{member_id} now")
        if member_id in found:
            self.shard.confirm(group_id, member_id, self.clock.now_ms())
            return
        raise UnknownMemberId(f"member {member_id} is not in share group {group_id}: join it first "
                              f"(ShareGroupHeartbeat)")

    def session_connection(self, connection: "asyncio.Future[Any]") -> None:
        """A share session was opened on ``connection`` (its ``closed`` future): when it closes,
        its sessions end and their members' records go back (as Kafka does)."""
        if connection in self._watched or connection.done():
            return
        self._watched.add(connection)

        def closed(_: "asyncio.Future[Any]") -> None:
            self._watched.discard(connection)
            for group_id, member_id in self.shard.sessions.drop_connection(connection):
                self._spawn(self._member_gone(group_id, member_id, drop_session=False))

        connection.add_done_callback(closed)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        if self._stopping:
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _fire_one(self, pk: PartKey) -> None:
        signal = self._signals.pop(pk, None)
        if signal is not None:
            signal.fire()

    def _fire(self, pks: Iterable[PartKey]) -> None:
        """Records of ``pks`` may be available now: their parked fetches look again."""
        for pk in pks:
            self._fire_one(pk)

    def _signal(self, pk: PartKey) -> "asyncio.Future[None]":
        signal = self._signals.get(pk)
        if signal is None:
            signal = self._signals[pk] = _Signal()
        return signal.next()

    def _partition_of(self, topic_id: uuid.UUID, partition: int) -> Partition:
        """The topic partition this broker leads. Raises UnknownTopicId, NotLeaderOrFollower…"""
        meta = self.replicas.topic_by_id(topic_id)
        if meta is None:
            raise UnknownTopicId(f"topic id {topic_id} is unknown")
        return self.replicas.partition(meta.name, partition)

    async def acknowledge(self, group_id: str, member_id: str,
                          acks: dict[tuple[uuid.UUID, int], list[tuple[int, int, tuple[int, ...]]]]
                          ) -> dict[tuple[uuid.UUID, int], KafkaError | None]:
        """Apply acknowledgement batches per partition (all or nothing per partition), durable
        before returning. Returns each partition's error (None: applied)."""
        out: dict[tuple[uuid.UUID, int], KafkaError | None] = {}
        if not acks:
            return out
        async with self.lock:
            now = self.clock.now_ms()
            changed = []
            for (tid, p), batches in acks.items():
                pk = (group_id, tid, p)
                try:  # the persister reads it first if it is not current (cluster mode: the leader's, as of its epoch)
                    await self.persister.load(self.shard, pk, lambda: int(self._partition_of(tid, p).log.leader_epoch))
                    self.shard.acknowledge(pk, member_id, batches, now)
                    out[(tid, p)] = None
                    changed.append(pk)
                except ValueError as exc:
                    out[(tid, p)] = InvalidRequest(str(exc))
                except KafkaError as exc:
                    out[(tid, p)] = exc
            if changed:
                self._fire(changed)
                try:
                    await self._persist(changed)
                except KafkaError as exc:
                    log.warning("share coordinator: acknowledgements could not be written: %s", exc)
                    for (g, tid, p) in changed:
                        out[(tid, p)] = exc
        return out

    async def close_session(self, group_id: str, member_id: str) -> None:
        """A final request (epoch -1): the member's acquired records are released."""
        await self._member_gone(group_id, member_id)

    async def fetch(self, group_id: str, member_id: str, wanted: list[tuple[uuid.UUID, int]], max_records: int,
                    max_bytes: int, wait_ms: int, closed: asyncio.Future[Any], *,
                    record_limit: bool = False) -> dict[tuple[uuid.UUID, int], PartitionFetch]:
        """Acquire records for ``member_id`` from the ``wanted`` partitions; when none is acquired,
        wait up to ``wait_ms`` (at most fetch.max.wait.ms) for records to become available."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max(wait_ms, 0), self.max_wait_ms) / 1000
        while True:
            # taken before looking: a fire while we look is not missed
            avail = [self._signal((group_id, tid, p)) for tid, p in wanted]
            out, parts = await self._acquire(group_id, member_id, wanted, max_records, max_bytes, record_limit)
            remaining = deadline - loop.time()
            if any(r.acquired or r.error for r in out.values()) or remaining <= 0 or closed.done() or not parts:
                self.shard.fetch_ended(group_id, member_id, wanted, self.clock.now_ms())
                return out
            waiters = [p.waiter() for p in parts]
            try:
                await asyncio.wait([*waiters, *avail, closed], timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()

    async def _acquire(self, group_id: str, member_id: str, wanted: list[tuple[uuid.UUID, int]], max_records: int,
                       max_bytes: int, record_limit: bool = False
                       ) -> tuple[dict[tuple[uuid.UUID, int], PartitionFetch], list[Partition]]:
        out: dict[tuple[uuid.UUID, int], PartitionFetch] = {}
        parts = []
        budget = max(max_bytes, 1)
        # no fetch acquires more than a share partition may hold (group.share.partition.max.record.locks)
        records_left = min(max(max_records, 1), self.max_locks)
        async with self.lock:
            now = self.clock.now_ms()
            for tid, p in wanted:
                res = out[(tid, p)] = PartitionFetch()
                try:
                    part = self._partition_of(tid, p)
                except KafkaError as exc:
                    res.error = exc
                    continue
                parts.append(part)
                if records_left <= 0 or budget <= 0:
                    continue
                pk = (group_id, tid, p)
                log_view = _PartitionLog(part)
                try:
                    await self.persister.load(self.shard, pk, lambda: int(part.log.leader_epoch))
                except KafkaError as exc:
                    res.error = exc
                    continue
                if self.shard.open_partition(pk, log_view, now):
                    try:  # its start offset (share.auto.offset.reset) is durable before anything is acquired
                        await self._persist([pk])
                    except KafkaError as exc:
                        self.shard.drop(pk)
                        res.error = exc
                        continue
                ranges, data = self.shard.acquire(pk, member_id, log_view, records_left, budget, now,
                                                  record_limit=record_limit)
                if ranges:
                    records_left -= sum(r.last_offset - r.first_offset + 1 for r in ranges)
                    budget -= sum(len(d) for d in data)
                    res.data = data
                    res.acquired = ranges
        return out, parts

    # -- timers -----------------------------------------------------------------------------------

    async def _timer_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:  # the state could not be written: tried again next tick
                log.warning("share coordinator: lock timeouts or member expiry not written: %s", exc)
            except Exception:
                log.exception("bug: share coordinator timer failed")

    async def _tick(self) -> None:
        """Member expiry, lock timeouts (what came due in the heaps), and once a second the idle
        share sessions; every third of a session timeout, the sessions of members kept
        elsewhere checked against their coordinator (in the background)."""
        shard = self.shard
        now = self.clock.now_ms()
        for group_id, member_id in shard.groups.expire(now):
            log.info("share group %s: member %s left (session timeout)", group_id, member_id)
            await self._member_gone(group_id, member_id)
        if shard.sweep_due(now):
            for group_id, member_id in shard.expire_idle(now):
                log.info("share group %s: member %s's share session expired (unused for %d ms)", group_id, member_id,
                         shard.sessions.idle_ms)
                await self._member_gone(group_id, member_id, drop_session=False)
            if not self._checking and shard.check_due(now):
                self._checking = True
                self._spawn(self._check_sessions())
        if not shard.locks_due(now):
            return
        async with self.lock:
            changed = shard.expire_locks(self.clock.now_ms())
            if changed:
                self._fire(changed)
                await self._persist(changed)

    async def _check_sessions(self) -> None:
        """Each group with sessions here of members this broker does not have is asked of its
        coordinator (``members``: one request per group); the sessions of members it does not
        have are closed and their records released. A coordinator that cannot answer leaves its
        groups' sessions as they are (they still expire when unused)."""
        try:
            for group_id, member_ids in sorted(self.shard.sessions_to_check().items()):
                found = await self.members.members(group_id, self.shard.members_of(group_id))
                if found is None:
                    continue
                now = self.clock.now_ms()
                for member_id in member_ids:
                    if member_id in found:
                        self.shard.confirm(group_id, member_id, now)
                    elif (group_id, member_id) in self.shard.sessions.sessions:
                        log.info("share group %s: member %s is not a member at the coordinator: its share session "
                                 "closes", group_id, member_id)
                        await self._member_gone(group_id, member_id)
        finally:
            self._checking = False

    # -- administration (ListGroups, DescribeShareGroupOffsets, AlterShareGroupOffsets,
    #    DeleteShareGroupOffsets, DeleteGroups) ---------------------------------------------------

    def listed(self) -> list[tuple[str, str]]:
        """(group, state) of the share groups ListGroups shows: those with members here, and
        those without members whose durable state this broker holds (embedded): Empty."""
        out = [(gid, grp.state) for gid, grp in self.shard.groups.groups.items()]
        return out + [(gid, "Empty") for gid in self.persister.empty_groups(self.shard)]

    async def exists(self, group_id: str) -> bool:
        """A share group this broker coordinates (its members) or that has durable state (cluster
        mode: written by any broker). Raises the store's KafkaError."""
        async with self.lock:
            return await self.persister.exists(self.shard, group_id)

    async def offsets(self, group_id: str) -> dict[tuple[uuid.UUID, int], SharePartition]:
        """DescribeShareGroupOffsets: (topic id, partition) -> the group's share partition, for
        those initialized (cluster mode: as the store has them, every partition whichever broker
        leads it). Raises the store's KafkaError."""
        async with self.lock:
            return await self.persister.offsets(self.shard, group_id)

    async def alter_offsets(self, group_id: str, offsets: dict[tuple[uuid.UUID, int], int]) -> None:
        """AlterShareGroupOffsets: each partition's share-partition start offset becomes the one
        given, nothing in flight. Raises NonEmptyGroup while the group has members."""
        await self.ready()
        self.shard.check_empty(group_id)
        async with self.lock:
            await self.persister.alter_offsets(self.shard, group_id, offsets)

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups of a share group: its share-partition state and configs go (durable
        before returning). Raises NonEmptyGroup while it has members."""
        await self.ready()
        self.shard.check_empty(group_id)
        async with self.lock:
            await self.persister.delete_group(self.shard, group_id)

    async def delete_offsets(self, group_id: str, topic_ids: set[uuid.UUID]) -> None:
        """DeleteShareGroupOffsets: the group forgets its state on these topics (the next fetch
        starts per ``share.auto.offset.reset``). Raises NonEmptyGroup while it has members."""
        await self.ready()
        self.shard.check_empty(group_id)
        async with self.lock:
            await self.persister.delete_offsets(self.shard, group_id, topic_ids)
