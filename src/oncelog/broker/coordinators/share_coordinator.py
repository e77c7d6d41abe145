"""The share-group service (KIP-932, issue 30): the asyncio shell around the pure share groups
(coordinator/share/group.py) and share partitions (coordinator/share/partition.py).

Theory of operation. One service per broker (embedded mode) serves the share groups' membership
(ShareGroupHeartbeat), their share sessions and the records they have in flight (ShareFetch,
ShareAcknowledge). Every operation that changes a share partition runs under one lock: decide
on the pure state, append the changed partitions' snapshots to ``__share_group_state`` and wait
until the append is durable, then answer. So an acknowledgement is durable before its answer
leaves: after a crash the state replayed from ``__share_group_state`` holds it, and no record
acknowledged is delivered again. Acquisitions are not written (as in Kafka, a lock does not
survive the broker): after a crash the records acquired and not acknowledged are AVAILABLE again
(at-least-once), with the delivery count last written. A share partition's start offset, chosen
at the group's first fetch of it (``share.auto.offset.reset``), is written before anything is
acquired, so ``latest`` does not move past records produced before a crash.

Cluster mode (``start_cluster``; docs/ARCHITECTURE.md "share groups"): the same service on every
broker; a share partition is served by the leader of its topic partition, and its state is a row
of the store (cluster/share_state.py) instead of a ``__share_group_state`` record: read at the
first use under the current leader epoch (``_ensure_loaded``), written fenced by that epoch; a
write refused or failed drops the state here (``_forget``), to be read again. The group's members
are kept by whichever broker receives its heartbeats: its group coordinator. Administration
(AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups) is done by the group's
coordinator, which knows whether the group has members, directly on the store's rows
(``StoreShareState.admin_write``), each written at a new row version: a leader that cached the
state before checks the versions when a share session of the group opens (``session_opened``:
the group was empty, so its consumers open new sessions) and reads again what changed, and a
leader's write of a row at another version than it loaded is refused (StaleShareState) and the
state read again, so no leader serves or writes back what an administrator replaced.

``__share_group_state`` is a compacted internal topic keyed per share partition
(coordinator/share/records.py), read through the coordinator runtime: it is loaded at start
when it exists (created at the first write otherwise); until it is loaded, the share APIs wait
for it.

A timer expires acquisition locks (``group.share.record.lock.duration.ms``) and members whose
session timed out (their acquired records are released, their share sessions closed), from
deadline heaps (the share partitions' and the groups'): a tick costs what came due, never a walk
of every record or member. A parked ShareFetch waits on the signals of its own share
partitions (records there became available again) and on its log partitions (new records), so
an acknowledgement wakes only the fetches of its partition.

Share sessions are the members' only: embedded, the member must be in the group here; in
cluster mode the group's coordinator is asked (``members``: coordinators/share_members.py, a
ShareGroupDescribe to it) when a session opens, and the sessions of groups coordinated
elsewhere are checked against it every third of a session timeout (those of members gone are
closed, their records released). A session also ends with its connection (as Kafka ties it to
the connection) and after a session timeout unused.

Bounds: ``group.share.max.groups`` groups with members, ``group.share.max.size`` members each,
``group.share.partition.max.record.locks`` records acquired per share partition (and read per
ShareFetch: ``max_records`` is capped to it, and the log is read only as far as the records
to acquire need). A group whose last member leaves is dropped from memory; its share-partition
state and configs (durable) stay.

Single-threaded: everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol

from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.coordinators.coordinator_runtime import CoordinatorRuntime
from oncelog.broker.partitions.partition import Partition
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.clock import Clock
from oncelog.cluster.share_state import ConfigRow, SnapshotRow, StoreShareState
from oncelog.coordinator.load_report import SkipReport, batch_records
from oncelog.coordinator.placement import partition_for
from oncelog.coordinator.share import records as srec
from oncelog.coordinator.share.group import HeartbeatAnswer, Sessions, ShareGroups
from oncelog.coordinator.share.partition import AcquiredRange, LogBatch, SharePartition, Snapshot
from oncelog.protocol import records
from oncelog.protocol.errors import (
    CoordinatorNotAvailable,
    InvalidConfig,
    InvalidRecordState,
    InvalidRequest,
    KafkaError,
    UnknownMemberId,
    UnknownTopicId,
)
from oncelog.internal_topics import SHARE_STATE_TOPIC as STATE_TOPIC

log = logging.getLogger(__name__)

STATE_TOPIC_PARTITIONS = 1  # embedded mode: one partition holds every share group's state
#: Kafka's share.coordinator.state.topic.segment.bytes: segments roll (and the cleaner compacts
#: them to the latest snapshot per share partition) every 100 MiB, so a load replays little
STATE_TOPIC_SEGMENT_BYTES = 100 * 1024 * 1024
TICK_SECONDS = 0.1
#: group configs a share group accepts (IncrementalAlterConfigs on a GROUP resource), with their
#: defaults and how a value is checked
GROUP_CONFIGS: dict[str, str] = {
    "share.auto.offset.reset": "latest",
    "share.isolation.level": "read_uncommitted",
    "share.record.lock.duration.ms": "",  # "": the broker's group.share.record.lock.duration.ms
    "share.delivery.count.limit": "",  # "": the broker's group.share.delivery.count.limit
    "share.renew.acknowledge.enable": "true",  # RENEW (KIP-1222) accepted
}
_CHOICES = {"share.auto.offset.reset": ("latest", "earliest"),
            "share.isolation.level": ("read_uncommitted", "read_committed"),
            "share.renew.acknowledge.enable": ("true", "false")}
#: how often idle share sessions are expired (s)
SESSION_SWEEP_S = 1.0
#: how long a member whose ShareFetch ended keeps its place in a turn queue (ms; clients send
#: the next one at once)
TURN_GRACE_MS = 1000

PartKey = tuple[str, uuid.UUID, int]  # (group, topic id, partition)


def check_group_config(name: str, value: str | None) -> None:
    """Raises InvalidConfig for a config a share group does not have or a value it refuses."""
    if name not in GROUP_CONFIGS:
        raise InvalidConfig(f"unknown group config {name!r} (share groups accept {', '.join(sorted(GROUP_CONFIGS))})")
    if value is None:
        return
    if name == "share.auto.offset.reset" and value.startswith(BY_DURATION):
        by_duration_ms(value)  # raises InvalidConfig
        return
    if name in _CHOICES and value.lower() not in _CHOICES[name]:
        raise InvalidConfig(f"{name}={value!r}: one of {', '.join(_CHOICES[name])}"
                            f"{' or by_duration:<ISO-8601 duration>' if name == 'share.auto.offset.reset' else ''}")
    if name not in _CHOICES:
        try:
            n = int(value)
        except ValueError:
            raise InvalidConfig(f"{name}={value!r} is not an integer") from None
        if n < (2 if name == "share.delivery.count.limit" else 1000):
            raise InvalidConfig(f"{name}={value!r} is too small")


BY_DURATION = "by_duration:"
_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?=\d)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d{1,9})?)S)?)?", re.IGNORECASE)


def by_duration_ms(value: str) -> int:
    """``by_duration:PnDTnHnMn.nS`` (Java's ``Duration.parse`` form, days at most, as Kafka's
    ``share.auto.offset.reset``) in milliseconds. Raises InvalidConfig."""
    text = value[len(BY_DURATION):]
    m = _DURATION.fullmatch(text)
    if m is None or text.upper() in ("P", "PT"):
        raise InvalidConfig(f"share.auto.offset.reset={value!r}: by_duration: takes an ISO-8601 duration "
                            f"such as PT1H or P1DT30M")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


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


class ShareMembers(Protocol):
    """Cluster mode: who the members of a share group are, at its coordinator
    (coordinators/share_members.py)."""

    async def members(self, group_id: str) -> set[str] | None: ...


class _Shard:
    def __init__(self, partition: int) -> None:
        self.partition = partition


class ShareCoordinator:
    """See the module docstring. ``replicas`` is the broker's ReplicaManager."""

    def __init__(self, replicas: ReplicaManager, config: BrokerConfig, clock: Clock) -> None:
        self.replicas = replicas
        self.clock = clock
        self.lock_ms = config.group_share_record_lock_duration_ms
        self.delivery_limit = config.group_share_delivery_count_limit
        self.max_locks = config.group_share_partition_max_record_locks
        self.max_wait_ms = config.fetch_max_wait_ms
        self.groups = ShareGroups(session_timeout_ms=config.group_share_session_timeout_ms,
                                  heartbeat_interval_ms=config.group_share_heartbeat_interval_ms,
                                  max_size=config.group_share_max_size, max_groups=config.group_share_max_groups)
        self.sessions = Sessions(max_sessions=config.group_share_max_share_sessions,
                                 idle_ms=config.group_share_session_timeout_ms)
        self.partitions: dict[PartKey, SharePartition] = {}
        #: group -> the keys of its share partitions in ``partitions`` (kept by ``_put``/``_drop``)
        self._by_group: dict[str, set[PartKey]] = {}
        #: (lock deadline, share partition) per change that may have moved a partition's earliest
        #: lock; stale entries are skipped when they come due
        self._lock_heap: list[tuple[int, PartKey]] = []
        #: share partition -> the signal of its parked fetches (records there became available)
        self._signals: dict[PartKey, _Signal] = {}
        #: cluster mode: asks a group's coordinator for its members (``start_cluster``)
        self.members: ShareMembers | None = None
        #: cluster mode: (group, member) -> when its coordinator last confirmed it (ms)
        self._confirmed: dict[tuple[str, str], int] = {}
        self._watched: set[asyncio.Future[Any]] = set()  # connections whose close ends their sessions
        self._background: set[asyncio.Task[None]] = set()
        self._next_sweep = 0
        self._next_check = 0
        self._checking = False
        self._stopping = False
        self.configs: dict[str, dict[str, str]] = {}
        self.runtime: CoordinatorRuntime[_Shard] = CoordinatorRuntime("share coordinator", STATE_TOPIC, replicas,
                                                                      clock, logger=log)
        self.lock = asyncio.Lock()
        self._loaded: asyncio.Event | None = None
        #: share partition -> members whose fetch waits for room under the lock limit, first come
        #: first served: a member that frees room by acknowledging does not take it back at once
        #: while others wait (else the first members to fill the limit would starve the rest).
        #: Each member maps to 0 while its fetch is parked, else to when it loses its place: a
        #: fetch that ends keeps its member's place for TURN_GRACE_MS, until the next one comes
        #: (a member between two fetches when room appears is not passed over, every time)
        self._turns: dict[PartKey, dict[str, int]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        #: cluster mode (``start_cluster``): the share state in the store, and the leader epoch of
        #: the topic partition at which each share partition here was loaded from it
        self.store: StoreShareState | None = None
        self._epochs: dict[PartKey, int] = {}
        #: cluster mode: the store row's version each share partition here was loaded or last written at
        self._versions: dict[PartKey, int] = {}

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loaded = asyncio.Event()
        self._tasks = [loop.create_task(self._timer_loop()), loop.create_task(self._load())]

    def start_cluster(self, store: "StoreShareState", members: ShareMembers | None = None) -> None:
        """Cluster mode: the share state lives in the store (cluster/share_state.py), read per
        share partition when this broker, leading its topic partition, first serves it;
        ``members`` asks a group's coordinator who its members are."""
        self.store = store
        self.members = members
        self._loaded = asyncio.Event()
        self._loaded.set()
        self._tasks = [asyncio.get_running_loop().create_task(self._timer_loop())]

    async def _ensure_loaded(self, pk: PartKey, part: Partition) -> None:
        """Cluster mode: make the share partition ``pk`` the store's, unless it was loaded at the
        topic partition's current leader epoch (``part``: the partition this broker leads). A
        state kept from an earlier leadership is stale (another leader may have moved it since):
        it is read again. Raises the store's KafkaError. Called under ``lock``."""
        if self.store is None:
            return
        epoch = int(part.log.leader_epoch)
        if self._epochs.get(pk) == epoch:
            return
        store = self.store
        raw, version = await asyncio.to_thread(store.load_versioned, *pk)
        configs = await asyncio.to_thread(store.load_configs, pk[0])
        if configs:
            self.configs[pk[0]] = configs
        else:
            self.configs.pop(pk[0], None)
        self._drop(pk)
        if raw is not None:
            self.replay(srec.SnapshotKey(*pk), srec.decode_value(srec.SnapshotKey(*pk), raw))
        self._epochs[pk] = epoch
        self._versions[pk] = version

    async def session_opened(self, group_id: str) -> None:
        """A share session of ``group_id`` opens (ShareFetch epoch 0). Cluster mode: the share
        partitions of the group cached here whose store row an administrator changed since they
        were read (another version, or gone) are dropped, to be read again at their next use.
        Embedded: nothing to do. Raises the store's KafkaError."""
        if self.store is None:
            return
        async with self.lock:
            cached = [pk for pk in self._epochs if pk[0] == group_id]
            if not cached:
                return
            versions = await asyncio.to_thread(self.store.versions, group_id)
            self._forget([pk for pk in cached if versions.get((pk[1], pk[2]), 0) != self._versions.get(pk)])

    def _forget(self, pks: Iterable[PartKey]) -> None:
        """Cluster mode: drop what may be ahead of the store (a write that failed, a leadership
        lost): the next use reads the store again."""
        for pk in pks:
            self._drop(pk)
            self._epochs.pop(pk, None)
            self._versions.pop(pk, None)

    async def _load(self) -> None:
        assert self._loaded is not None
        try:
            meta = self.replicas.topics.get(STATE_TOPIC)
            if meta is not None and not meta.internal:
                # a client's topic of that name (created before the name was reserved): never
                # read as share state; writes fail (ensure_internal_topic) until it is deleted
                log.error("topic %s exists but the broker did not create it as internal: its records are not read "
                          "as share-group state, and share groups cannot write theirs until the topic is deleted",
                          STATE_TOPIC)
            elif meta is not None:
                await self.runtime.load(range(meta.num_partitions), _Shard, self._replay_batch)
                log.info("share coordinator loaded %d share partition(s)", len(self.partitions))
        finally:
            self._loaded.set()

    async def ready(self) -> None:
        if self._loaded is not None:
            await self._loaded.wait()

    async def stop(self) -> None:
        self._stopping = True
        for task in [*self._tasks, *self._background]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._background, return_exceptions=True)
        if self.store is not None:
            self.store.conn.drop()

    def _replay_batch(self, shard: _Shard, header: records.BatchHeader, data: bytes, now: int,
                      report: SkipReport) -> None:
        if header.is_control:
            return
        for r in batch_records(header, data, report):
            try:
                if r.key is None:
                    raise srec.RecordFormatError("it has no key")
                key = srec.decode_key(r.key)
                value = srec.decode_value(key, r.value)
            except srec.RecordFormatError as exc:
                report.skip(r.offset, "record", exc)
                continue
            try:
                self.replay(key, value)
            except Exception as exc:  # the load boundary: one bad record never keeps the rest offline
                report.skip(r.offset, "record", f"bug: its replay raised {type(exc).__name__}: {exc}", exc_info=True)

    def replay(self, key: srec.Key, value: srec.Value | None) -> None:
        """Apply one ``__share_group_state`` record (load)."""
        if isinstance(key, srec.ConfigKey):
            if value is None:
                self.configs.pop(key.group, None)
            else:
                self.configs[key.group] = dict(value)  # type: ignore[arg-type]
            return
        pk = (key.group, key.topic_id, key.partition)
        if value is None:
            self._drop(pk)
        else:
            assert isinstance(value, Snapshot)
            self._put(pk, SharePartition.restore(value, max_in_flight=self.max_locks))

    def _put(self, pk: PartKey, sp: SharePartition) -> SharePartition:
        self.partitions[pk] = sp
        self._by_group.setdefault(pk[0], set()).add(pk)
        self._configure(pk)
        return sp

    def _drop(self, pk: PartKey) -> None:
        if self.partitions.pop(pk, None) is None:
            return
        keys = self._by_group.get(pk[0])
        if keys is not None:
            keys.discard(pk)
            if not keys:
                del self._by_group[pk[0]]
        signal = self._signals.pop(pk, None)
        if signal is not None:
            signal.fire()  # its parked fetches look again (and find it gone or new)

    def group_partitions(self, group_id: str) -> list[PartKey]:
        """The keys of the group's share partitions held here."""
        return sorted(self._by_group.get(group_id, ()), key=str)

    # -- durability -------------------------------------------------------------------------------

    async def _write(self, recs: list[tuple[srec.Key, srec.Value | None]]) -> None:
        """Append ``recs`` to ``__share_group_state`` and wait until durable (one batch per state
        partition). Raises the storage's KafkaError."""
        if not recs:
            return
        if self.store is not None:
            await self._write_store(recs)
            return
        meta = self.replicas.ensure_internal_topic(
            STATE_TOPIC, STATE_TOPIC_PARTITIONS,
            {"cleanup.policy": "compact", "segment.bytes": str(STATE_TOPIC_SEGMENT_BYTES)})
        by_part: dict[int, list[tuple[bytes, bytes | None, tuple[()]]]] = {}
        for k, v in recs:
            by_part.setdefault(partition_for(k.group, meta.num_partitions), []).append(
                (srec.encode_key(k), None if v is None else srec.encode_value(v), ()))
        now = self.clock.now_ms()
        for p, items in sorted(by_part.items()):
            batch = records.build_batch(items, timestamp_ms=now, producer_id=-1, producer_epoch=-1, transactional=False)
            await self.runtime.append(p, batch, now)

    async def _write_store(self, recs: list[tuple[srec.Key, srec.Value | None]]) -> None:
        """Cluster mode: ``recs`` as rows of the store, in one transaction fenced by the leader
        epochs the share partitions were loaded at. On failure the share partitions written are
        forgotten (their state here may be ahead of the store's) and the error raised."""
        assert self.store is not None
        rows: list[SnapshotRow | ConfigRow] = []
        pks: list[PartKey] = []
        for k, v in recs:
            if isinstance(k, srec.ConfigKey):
                rows.append(ConfigRow(k.group, None if v is None else dict(v)))  # type: ignore[arg-type]
                continue
            pk = (k.group, k.topic_id, k.partition)
            pks.append(pk)
            meta = self.replicas.topic_by_id(k.topic_id)
            rows.append(SnapshotRow(k.group, k.topic_id, meta.name if meta is not None else "", k.partition,
                                    self._epochs.get(pk, -1), None if v is None else srec.encode_value(v),
                                    self._versions.get(pk, 0)))
        try:
            written = await asyncio.to_thread(self.store.write, rows)
        except BaseException:
            self._forget(pks)
            raise
        for pk, version in written.items():
            if pk in self._epochs:
                self._versions[pk] = version

    async def _persist(self, keys: Iterable[PartKey]) -> None:
        await self._write([(srec.SnapshotKey(*k), self.partitions[k].snapshot()) for k in sorted(set(keys), key=str)
                           if k in self.partitions])

    # -- configs ----------------------------------------------------------------------------------

    async def refresh_configs(self, group_id: str) -> None:
        """Cluster mode: the group's configs as the store has them now (another broker may have
        altered them); embedded: nothing to do. Raises the store's KafkaError."""
        if self.store is None:
            return
        configs = await asyncio.to_thread(self.store.load_configs, group_id)
        if configs:
            self.configs[group_id] = configs
        else:
            self.configs.pop(group_id, None)
        for pk in self.group_partitions(group_id):
            self._configure(pk)

    async def groups_with_configs(self) -> list[str]:
        """The groups with configs of their own (ListConfigResources): this node's, or in
        cluster mode the store's. Raises the store's KafkaError."""
        if self.store is None:
            return sorted(g for g, c in self.configs.items() if c)
        return await asyncio.to_thread(self.store.config_group_ids)

    def config(self, group_id: str, name: str) -> str:
        return self.configs.get(group_id, {}).get(name) or GROUP_CONFIGS[name]

    def _configure(self, pk: PartKey) -> None:
        sp = self.partitions[pk]
        lock = self.config(pk[0], "share.record.lock.duration.ms")
        limit = self.config(pk[0], "share.delivery.count.limit")
        sp.lock_ms = int(lock) if lock else self.lock_ms
        sp.delivery_limit = int(limit) if limit else self.delivery_limit
        sp.renew_enabled = self.config(pk[0], "share.renew.acknowledge.enable").lower() == "true"

    async def alter_configs(self, group_id: str, configs: dict[str, str], validate_only: bool) -> None:
        """The group's configs become ``configs`` (IncrementalAlterConfigs, the whole new set)."""
        for name, value in configs.items():
            check_group_config(name, value)
        if validate_only:
            return
        async with self.lock:
            await self.ready()
            await self._write([(srec.ConfigKey(group_id), tuple(sorted(configs.items())) if configs else None)])
            if configs:
                self.configs[group_id] = dict(configs)
            else:
                self.configs.pop(group_id, None)
            for pk in self.group_partitions(group_id):
                self._configure(pk)

    # -- membership -------------------------------------------------------------------------------

    def _resolve(self, name: str) -> tuple[uuid.UUID, int] | None:
        meta = self.replicas.topics.get(name)
        return None if meta is None else (meta.topic_id, meta.num_partitions)

    async def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                        subscribed: tuple[str, ...] | None, client_id: str, client_host: str) -> HeartbeatAnswer:
        await self.ready()
        answer = self.groups.heartbeat(group_id, member_id, member_epoch, rack_id, subscribed, self._resolve,
                                       self.clock.now_ms(), client_id=client_id, client_host=client_host,
                                       initialized=self._initialized)
        # Kafka's coordinator initializes the share state of newly subscribed partitions between
        # two heartbeats and assigns them only then; here a share partition's state is
        # initialized at its first fetch, and the partitions become assignable after the
        # heartbeat that first subscribed them: members of a new group get their first
        # partitions at their second heartbeat, balanced among all who joined meanwhile
        for topic_id, partitions in answer.uninitialized.items():
            self.groups.mark_initialized(group_id, topic_id, partitions)
        if member_epoch == -1:
            await self._member_gone(group_id, member_id)
        return answer

    def _initialized(self, group_id: str) -> dict[uuid.UUID, frozenset[int]]:
        """The group's share partitions whose state is initialized here (embedded: durable;
        cluster mode: those this broker leads and has read)."""
        out: dict[uuid.UUID, set[int]] = {}
        for pk in self._by_group.get(group_id, ()):
            if self.partitions[pk].initialized:
                out.setdefault(pk[1], set()).add(pk[2])
        return {tid: frozenset(ps) for tid, ps in out.items()}

    async def _member_gone(self, group_id: str, member_id: str, *, drop_session: bool = True) -> None:
        """The member left, timed out or lost its session: its session closes (unless
        ``drop_session`` is false: the caller closed it) and its acquired records go back."""
        if drop_session:
            self.sessions.drop_member(group_id, member_id)
        self._confirmed.pop((group_id, member_id), None)
        for pk in self.group_partitions(group_id):
            self._drop_turn(pk, member_id)
        async with self.lock:
            now = self.clock.now_ms()
            changed = [pk for pk in self.group_partitions(group_id)
                       if (sp := self.partitions[pk]).holds(member_id) and sp.release_member(member_id, now)]
            if changed:
                self._fire(changed)
                try:
                    await self._persist(changed)
                except KafkaError as exc:
                    if self.store is None:
                        raise
                    # cluster mode: forgotten, read again from the store, where a record acquired
                    # is AVAILABLE already (acquisitions are never written)
                    log.info("share coordinator: releasing member %s's records not written: %s", member_id, exc)

    # -- share fetch / acknowledge ----------------------------------------------------------------

    def is_member(self, group_id: str, member_id: str) -> bool:
        """Whether ``member_id`` is (as far as this broker knows now) a member of the group: one
        here, or in cluster mode one its coordinator confirmed within a session timeout. Used to
        evict sessions at the limit; ``check_member`` is what a new session must pass."""
        if self.groups.is_member(group_id, member_id):
            return True
        seen = self._confirmed.get((group_id, member_id))
        return seen is not None and seen + self.groups.session_timeout_ms > self.clock.now_ms()

    async def check_member(self, group_id: str, member_id: str) -> None:
        """A share session may be opened only by a member of the group: embedded, one here; in
        cluster mode, one here or one the group's coordinator has. Raises UnknownMemberId, or
        CoordinatorNotAvailable when the coordinator cannot be asked now."""
        if self.groups.is_member(group_id, member_id):
            return
        if self.store is not None and self.members is not None:
            found = await self.members.members(group_id)
            if found is None:
                raise CoordinatorNotAvailable(f"the coordinator of share group {group_id} cannot confirm member "
                                              f"{member_id} now")
            if member_id in found:
                self._confirmed[(group_id, member_id)] = self.clock.now_ms()
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
            for group_id, member_id in self.sessions.drop_connection(connection):
                self._spawn(self._member_gone(group_id, member_id, drop_session=False))

        connection.add_done_callback(closed)

    def _spawn(self, coro: Any) -> None:
        if self._stopping:
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _fire(self, pks: Iterable[PartKey]) -> None:
        """Records of ``pks`` may be available now: their parked fetches look again."""
        for pk in pks:
            signal = self._signals.pop(pk, None)
            if signal is not None:
                signal.fire()

    def _signal(self, pk: PartKey) -> "asyncio.Future[None]":
        signal = self._signals.get(pk)
        if signal is None:
            signal = self._signals[pk] = _Signal()
        return signal.next()

    def _watch_locks(self, pk: PartKey, sp: SharePartition) -> None:
        deadline = sp.next_deadline()
        if deadline is None:
            return
        heapq.heappush(self._lock_heap, (deadline, pk))
        if len(self._lock_heap) > 4 * len(self.partitions) + 1024:  # mostly stale: one entry per partition
            self._lock_heap = [(d, k) for k, p in self.partitions.items() if (d := p.next_deadline()) is not None]
            heapq.heapify(self._lock_heap)

    def _partition(self, pk: PartKey, part: Partition) -> SharePartition:
        sp = self.partitions.get(pk)
        if sp is None:
            sp = self._put(pk, SharePartition(max_in_flight=self.max_locks))
        if not sp.initialized:
            sp.initialize(self._reset_offset(pk[0], part))
        sp.trim_to(part.log_start_offset)
        return sp

    def _reset_offset(self, group_id: str, part: Partition) -> int:
        """Where a share partition starts (``share.auto.offset.reset``): the log start, the high
        watermark, or (by_duration) the first record at or after now minus the duration."""
        reset = self.config(group_id, "share.auto.offset.reset")
        if reset == "earliest":
            return int(part.log_start_offset)
        if reset.startswith(BY_DURATION):
            found = part.log.offset_for_timestamp(self.clock.now_ms() - by_duration_ms(reset))
            return int(part.high_watermark) if found is None else min(int(found[0]), int(part.high_watermark))
        return int(part.high_watermark)

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
                try:
                    if self.store is not None:  # cluster mode: only the leader's, as of its epoch
                        meta = self.replicas.topic_by_id(tid)
                        if meta is None:
                            raise UnknownTopicId(f"topic id {tid} is unknown")
                        await self._ensure_loaded((group_id, tid, p), self.replicas.partition(meta.name, p))
                    sp = self.partitions.get((group_id, tid, p))
                    if sp is None:
                        raise InvalidRecordState(f"no records of {tid}-{p} are in flight for group {group_id}")
                    sp.acknowledge(member_id, batches, now)
                    out[(tid, p)] = None
                    changed.append((group_id, tid, p))
                    self._watch_locks((group_id, tid, p), sp)  # a renewal moved a deadline
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
                self._leave_turns(group_id, member_id, wanted)
                return out
            waiters = [p.waiter() for p in parts]
            try:
                await asyncio.wait([*waiters, *avail, closed], timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()

    async def _acquire(self, group_id: str, member_id: str, wanted: list[tuple[uuid.UUID, int]], max_records: int,
                       max_bytes: int, record_limit: bool = False) -> tuple[dict[tuple[uuid.UUID, int], PartitionFetch], list[Any]]:
        out: dict[tuple[uuid.UUID, int], PartitionFetch] = {}
        parts = []
        budget = max(max_bytes, 1)
        # no fetch acquires more than a share partition may hold (group.share.partition.max.record.locks)
        records_left = min(max(max_records, 1), self.max_locks)
        read_committed = self.config(group_id, "share.isolation.level") == "read_committed"
        async with self.lock:
            now = self.clock.now_ms()
            for tid, p in wanted:
                res = out[(tid, p)] = PartitionFetch()
                try:
                    meta = self.replicas.topic_by_id(tid)
                    if meta is None:
                        raise UnknownTopicId(f"topic id {tid} is unknown")
                    part = self.replicas.partition(meta.name, p)
                except KafkaError as exc:
                    res.error = exc
                    continue
                parts.append(part)
                if records_left <= 0 or budget <= 0:
                    continue
                pk = (group_id, tid, p)
                try:
                    await self._ensure_loaded(pk, part)
                except KafkaError as exc:
                    res.error = exc
                    continue
                fresh = pk not in self.partitions or not self.partitions[pk].initialized
                sp = self._partition(pk, part)
                if fresh:  # its start offset (share.auto.offset.reset) is durable before anything is acquired
                    try:
                        await self._persist([pk])
                    except KafkaError as exc:
                        self._drop(pk)
                        res.error = exc
                        continue
                first = self._first_turn(pk, now)
                if sp.acquired_count() >= self.max_locks or (first is not None and first != member_id):
                    self._wait_turn(pk, member_id)
                    continue
                start = sp.next_fetch_offset()
                upper = part.last_stable_offset if read_committed else part.high_watermark
                if start >= upper:
                    continue
                batches: list[tuple[records.BatchHeader, bytes]] = []
                size = 0
                new = 0  # offsets from the SPEO on read so far: what ``acquire`` takes as new records
                limit = sp.spso + sp.max_in_flight
                for h, data in part.log.iter_batches(start):
                    if h.base_offset >= upper or h.base_offset >= limit or (batches and size + len(data) > budget):
                        break
                    if new >= records_left and h.last_offset >= sp.speo:
                        break  # ``acquire`` stops before this batch: the read is bounded by max_records
                    batches.append((h, bytes(data)))
                    size += len(data)
                    if not h.is_control and h.last_offset >= sp.speo:
                        new += h.last_offset + 1 - max(h.base_offset, sp.speo)
                aborted = part.aborted.collect(start, upper) if read_committed else []
                view = [LogBatch(h.base_offset, h.last_offset, h.is_control or _is_aborted(h, aborted))
                        for h, _ in batches]
                ranges = sp.acquire(member_id, view, records_left, now, record_limit=record_limit)
                if not ranges:
                    if sp.acquired_count():  # records there, but held up to the lock limit: wait for room
                        self._wait_turn(pk, member_id)
                    continue
                if first == member_id:
                    self._drop_turn(pk, member_id)
                self._watch_locks(pk, sp)
                records_left -= sum(r.last_offset - r.first_offset + 1 for r in ranges)
                for h, data in batches:
                    if any(r.first_offset <= h.last_offset and h.base_offset <= r.last_offset for r in ranges):
                        res.data.append(data)
                        budget -= len(data)
                res.acquired = ranges
        return out, parts

    def _wait_turn(self, pk: PartKey, member_id: str) -> None:
        """The member's fetch waits for its turn: queued last, or back at the place it kept."""
        self._turns.setdefault(pk, {})[member_id] = 0

    def _first_turn(self, pk: PartKey, now: int) -> str | None:
        """The member whose turn it is (None: nobody waits); those whose place ran out go."""
        turns = self._turns.get(pk)
        while turns:
            member_id, until = next(iter(turns.items()))
            if until == 0 or until > now:
                return member_id
            del turns[member_id]
        self._turns.pop(pk, None)
        return None

    def _drop_turn(self, pk: PartKey, member_id: str) -> None:
        turns = self._turns.get(pk)
        if turns is not None:
            turns.pop(member_id, None)
            if not turns:
                del self._turns[pk]

    def _leave_turns(self, group_id: str, member_id: str, wanted: list[tuple[uuid.UUID, int]]) -> None:
        """A fetch that ends keeps its member's place for TURN_GRACE_MS: its next fetch takes it
        back; once the place runs out the next in line goes (at its next look)."""
        until = self.clock.now_ms() + TURN_GRACE_MS
        for tid, p in wanted:
            turns = self._turns.get((group_id, tid, p))
            if turns and member_id in turns:
                turns[member_id] = until

    # -- timers -----------------------------------------------------------------------------------

    async def _timer_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:  # the state topic could not be written: tried again next tick
                log.warning("share coordinator: lock timeouts or member expiry not written: %s", exc)
            except Exception:
                log.exception("bug: share coordinator timer failed")

    async def _tick(self) -> None:
        """Member expiry, lock timeouts (what came due in the heaps), and once a second the idle
        share sessions; in cluster mode, every third of a session timeout, the sessions of
        groups coordinated elsewhere checked against their coordinator (in the background)."""
        now = self.clock.now_ms()
        for group_id, member_id in self.groups.expire(now):
            log.info("share group %s: member %s left (session timeout)", group_id, member_id)
            await self._member_gone(group_id, member_id)
        if now >= self._next_sweep:
            self._next_sweep = now + int(SESSION_SWEEP_S * 1000)
            for group_id, member_id in self.sessions.expire_idle(now):
                log.info("share group %s: member %s's share session expired (unused for %d ms)", group_id, member_id,
                         self.sessions.idle_ms)
                await self._member_gone(group_id, member_id, drop_session=False)
            for key in [k for k, seen in self._confirmed.items() if seen + self.groups.session_timeout_ms <= now]:
                del self._confirmed[key]
            if self.members is not None and now >= self._next_check and not self._checking:
                self._next_check = now + max(self.groups.session_timeout_ms // 3, 1000)
                self._checking = True
                self._spawn(self._check_sessions())
        due: set[PartKey] = set()
        while self._lock_heap and self._lock_heap[0][0] <= now:
            due.add(heapq.heappop(self._lock_heap)[1])
        if not due:
            return
        async with self.lock:
            now = self.clock.now_ms()
            changed = []
            for pk in sorted(due, key=str):
                sp = self.partitions.get(pk)
                if sp is None:
                    continue
                if sp.expire_locks(now):
                    changed.append(pk)
                self._watch_locks(pk, sp)
            if changed:
                self._fire(changed)
                await self._persist(changed)

    async def _check_sessions(self) -> None:
        """Cluster mode: each group with sessions here of members this broker does not have is
        described by its coordinator (one request per group); the sessions of members it does
        not have are closed and their records released. A coordinator that cannot answer leaves
        its groups' sessions as they are (they still expire when unused)."""
        assert self.members is not None
        try:
            await self._check_sessions_once(self.members)
        finally:
            self._checking = False

    async def _check_sessions_once(self, members: ShareMembers) -> None:
        by_group: dict[str, list[str]] = {}
        for group_id, member_id in list(self.sessions.sessions):
            if not self.groups.is_member(group_id, member_id):
                by_group.setdefault(group_id, []).append(member_id)
        for group_id, member_ids in sorted(by_group.items()):
            found = await members.members(group_id)
            if found is None:
                continue
            now = self.clock.now_ms()
            for member_id in member_ids:
                if member_id in found:
                    self._confirmed[(group_id, member_id)] = now
                elif (group_id, member_id) in self.sessions.sessions:
                    log.info("share group %s: member %s is not a member at the coordinator: its share session "
                             "closes", group_id, member_id)
                    await self._member_gone(group_id, member_id)

    # -- administration (DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets) --

    def known(self, group_id: str) -> bool:
        """A share group this broker has: members, configs or share-partition state."""
        return group_id in self.groups.groups or group_id in self.configs or group_id in self._by_group

    def listed(self) -> list[tuple[str, str]]:
        """(group, state) of the share groups ListGroups shows: those with members here, and
        (embedded: the state is this broker's) those without members that have durable state
        (share-partition state or configs): Empty."""
        out = [(gid, grp.state) for gid, grp in self.groups.groups.items()]
        if self.store is None:
            out += [(gid, "Empty") for gid in sorted({*self._by_group, *self.configs}) if gid not in self.groups.groups]
        return out

    async def exists(self, group_id: str) -> bool:
        """Embedded: a share group this broker has (``known``). Cluster mode: one this broker
        coordinates (its members) or the store has (state or configs written by any broker; what
        a leader cached may be gone from the store). Raises the store's KafkaError."""
        if self.store is None:
            return self.known(group_id)
        if group_id in self.groups.groups:
            return True
        async with self.lock:
            return await asyncio.to_thread(self.store.has_group, group_id)

    async def offsets(self, group_id: str) -> dict[tuple[uuid.UUID, int], SharePartition]:
        """DescribeShareGroupOffsets: (topic id, partition) -> the group's share partition, for
        those initialized; cluster mode: as the store has them, every partition whichever broker
        leads it (its durable part: nothing acquired). Raises the store's KafkaError."""
        if self.store is None:
            return self.start_offsets(group_id)
        async with self.lock:
            rows = await asyncio.to_thread(self.store.load_group, group_id)
        out = {}
        for (tid, p), raw in rows.items():
            snap = srec.decode_value(srec.SnapshotKey(group_id, tid, p), raw)
            assert isinstance(snap, Snapshot)
            sp = SharePartition.restore(snap, max_in_flight=self.max_locks)
            if sp.initialized:
                out[(tid, p)] = sp
        return out

    def start_offsets(self, group_id: str) -> dict[tuple[uuid.UUID, int], SharePartition]:
        """(topic id, partition) -> the group's share partition, for those initialized."""
        return {(pk[1], pk[2]): sp for pk in self.group_partitions(group_id) if (sp := self.partitions[pk]).initialized}

    def _check_empty(self, group_id: str) -> None:
        """Raises NonEmptyGroup while the group has members (this broker must coordinate the
        group: it is where its members heartbeat, in cluster mode too; the caller checked)."""
        group = self.groups.groups.get(group_id)
        if group is not None and group.members:
            from oncelog.protocol.errors import NonEmptyGroup
            raise NonEmptyGroup(f"share group {group_id} has {len(group.members)} member(s): stop them first")

    async def alter_offsets(self, group_id: str, offsets: dict[tuple[uuid.UUID, int], int]) -> None:
        """AlterShareGroupOffsets: each partition's share-partition start offset becomes the one
        given, nothing in flight. Raises NonEmptyGroup while the group has members."""
        await self.ready()
        self._check_empty(group_id)
        if self.store is not None:
            await self._admin_write(group_id, offsets, set())
            return
        async with self.lock:
            for (tid, p), offset in offsets.items():
                pk = (group_id, tid, p)
                sp = self.partitions.get(pk)
                if sp is None:
                    sp = self._put(pk, SharePartition(max_in_flight=self.max_locks))
                sp.reset_to(offset)
            await self._persist([(group_id, tid, p) for tid, p in offsets])

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups of a share group: its share-partition state and configs go (tombstones,
        durable before returning). Raises NonEmptyGroup while it has members."""
        await self.ready()
        self._check_empty(group_id)
        if self.store is not None:
            await self._admin_write(group_id, {}, set(), whole_group=True)
            self.configs.pop(group_id, None)
            self.groups.groups.pop(group_id, None)
            return
        async with self.lock:
            gone = self.group_partitions(group_id)
            recs: list[tuple[srec.Key, srec.Value | None]] = [(srec.SnapshotKey(*pk), None) for pk in gone]
            if group_id in self.configs:
                recs.append((srec.ConfigKey(group_id), None))
            await self._write(recs)
            for pk in gone:
                self._drop(pk)
            self.configs.pop(group_id, None)
            self.groups.groups.pop(group_id, None)

    async def delete_offsets(self, group_id: str, topic_ids: set[uuid.UUID]) -> None:
        """DeleteShareGroupOffsets: the group forgets its state on these topics (the next fetch
        starts per ``share.auto.offset.reset``). Raises NonEmptyGroup while it has members."""
        await self.ready()
        self._check_empty(group_id)
        if self.store is not None:
            await self._admin_write(group_id, {}, topic_ids)
            return
        async with self.lock:
            gone = [pk for pk in self.group_partitions(group_id) if pk[1] in topic_ids]
            await self._write([(srec.SnapshotKey(*pk), None) for pk in gone])
            for pk in gone:
                self._drop(pk)


    async def _admin_write(self, group_id: str, offsets: dict[tuple[uuid.UUID, int], int],
                           deleted_topics: set[uuid.UUID], *, whole_group: bool = False) -> None:
        """Cluster mode: an administrator's change written on the store's rows by this broker,
        whichever leads the partitions (module docstring): ``offsets`` start over there (the
        state epoch of a row there goes on), the rows of ``deleted_topics`` go, ``whole_group``:
        every row and the configs go. What this broker cached of the group is dropped."""
        assert self.store is not None
        store = self.store
        async with self.lock:
            current = await asyncio.to_thread(store.load_group, group_id)
            states: dict[tuple[uuid.UUID, int], bytes | None] = {k: None for k in current if k[0] in deleted_topics}
            for (tid, p), offset in offsets.items():
                raw = current.get((tid, p))
                snap = None if raw is None else srec.decode_value(srec.SnapshotKey(group_id, tid, p), raw)
                sp = (SharePartition.restore(snap, max_in_flight=self.max_locks) if isinstance(snap, Snapshot)
                      else SharePartition(max_in_flight=self.max_locks))
                sp.reset_to(offset)
                states[(tid, p)] = srec.encode_value(sp.snapshot())
            await asyncio.to_thread(store.admin_write, group_id, states, whole_group=whole_group)
            self._forget([pk for pk in self._epochs if pk[0] == group_id])


def _is_aborted(h: records.BatchHeader, aborted: list[Any]) -> bool:
    if not h.is_transactional:
        return False
    return any(a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset for a in aborted)
