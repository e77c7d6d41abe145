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
(at-least-once), with the delivery count last written.

``__share_group_state`` is a compacted internal topic keyed per share partition
(coordinator/share/records.py), read through the coordinator runtime: it is loaded at start
when it exists (created at the first write otherwise); until it is loaded, the share APIs wait
for it.

A timer expires acquisition locks (``group.share.record.lock.duration.ms``) and members whose
session timed out (their acquired records are released, their share sessions closed).

Single-threaded: everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable

from oncelog.broker.coordinator_runtime import CoordinatorRuntime
from oncelog.clock import Clock
from oncelog.coordinator.load_report import SkipReport, batch_records
from oncelog.coordinator.placement import partition_for
from oncelog.coordinator.share import records as srec
from oncelog.coordinator.share.group import HeartbeatAnswer, Sessions, ShareGroups
from oncelog.coordinator.share.partition import AcquiredRange, LogBatch, SharePartition, Snapshot
from oncelog.protocol import records
from oncelog.protocol.errors import InvalidConfig, InvalidRecordState, InvalidRequest, KafkaError

log = logging.getLogger(__name__)

STATE_TOPIC = "__share_group_state"
STATE_TOPIC_PARTITIONS = 1  # embedded mode: one partition holds every share group's state
TICK_SECONDS = 0.1
#: group configs a share group accepts (IncrementalAlterConfigs on a GROUP resource), with their
#: defaults and how a value is checked
GROUP_CONFIGS: dict[str, str] = {
    "share.auto.offset.reset": "latest",
    "share.isolation.level": "read_uncommitted",
    "share.record.lock.duration.ms": "",  # "": the broker's group.share.record.lock.duration.ms
    "share.delivery.count.limit": "",  # "": the broker's group.share.delivery.count.limit
}
_CHOICES = {"share.auto.offset.reset": ("latest", "earliest"),
            "share.isolation.level": ("read_uncommitted", "read_committed")}

PartKey = tuple[str, uuid.UUID, int]  # (group, topic id, partition)


def check_group_config(name: str, value: str | None) -> None:
    """Raises InvalidConfig for a config a share group does not have or a value it refuses."""
    if name not in GROUP_CONFIGS:
        raise InvalidConfig(f"unknown group config {name!r} (share groups accept {', '.join(sorted(GROUP_CONFIGS))})")
    if value is None:
        return
    if name in _CHOICES and value not in _CHOICES[name]:
        raise InvalidConfig(f"{name}={value!r}: one of {', '.join(_CHOICES[name])} (by_duration: not supported)")
    if name not in _CHOICES:
        try:
            n = int(value)
        except ValueError:
            raise InvalidConfig(f"{name}={value!r} is not an integer") from None
        if n < (2 if name == "share.delivery.count.limit" else 1000):
            raise InvalidConfig(f"{name}={value!r} is too small")


@dataclass
class PartitionFetch:
    """What a ShareFetch answers for one partition."""

    error: KafkaError | None = None
    ack_error: KafkaError | None = None
    data: list[bytes] = field(default_factory=list)
    acquired: list[AcquiredRange] = field(default_factory=list)


class _Shard:
    def __init__(self, partition: int) -> None:
        self.partition = partition


class ShareCoordinator:
    """See the module docstring. ``replicas`` is the broker's ReplicaManager."""

    def __init__(self, replicas: Any, config: Any, clock: Clock) -> None:
        self.replicas = replicas
        self.clock = clock
        self.lock_ms = config.group_share_record_lock_duration_ms
        self.delivery_limit = config.group_share_delivery_count_limit
        self.max_locks = config.group_share_partition_max_record_locks
        self.max_wait_ms = config.fetch_max_wait_ms
        self.groups = ShareGroups(session_timeout_ms=config.group_share_session_timeout_ms,
                                  heartbeat_interval_ms=config.group_share_heartbeat_interval_ms,
                                  max_size=config.group_share_max_size)
        self.sessions = Sessions(max_sessions=config.group_share_max_share_sessions)
        self.partitions: dict[PartKey, SharePartition] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.runtime: CoordinatorRuntime[_Shard] = CoordinatorRuntime("share coordinator", STATE_TOPIC, replicas,
                                                                      clock, logger=log)
        self.lock = asyncio.Lock()
        self.available = asyncio.Event()  # set when records become AVAILABLE again (wakes parked fetches)
        self._loaded: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loaded = asyncio.Event()
        self._tasks = [loop.create_task(self._timer_loop()), loop.create_task(self._load())]

    async def _load(self) -> None:
        assert self._loaded is not None
        try:
            if STATE_TOPIC in self.replicas.topics:
                n = self.replicas.topics[STATE_TOPIC].num_partitions
                await self.runtime.load(range(n), _Shard, self._replay_batch)
                log.info("share coordinator loaded %d share partition(s)", len(self.partitions))
        finally:
            self._loaded.set()

    async def ready(self) -> None:
        if self._loaded is not None:
            await self._loaded.wait()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

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
            self.replay(key, value)

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
            self.partitions.pop(pk, None)
        else:
            assert isinstance(value, Snapshot)
            self.partitions[pk] = SharePartition.restore(value, max_in_flight=self.max_locks)
            self._configure(pk)

    # -- durability -------------------------------------------------------------------------------

    async def _write(self, recs: list[tuple[srec.Key, srec.Value | None]]) -> None:
        """Append ``recs`` to ``__share_group_state`` and wait until durable (one batch per state
        partition). Raises the storage's KafkaError."""
        if not recs:
            return
        meta = self.replicas.ensure_internal_topic(STATE_TOPIC, STATE_TOPIC_PARTITIONS, {"cleanup.policy": "compact"})
        by_part: dict[int, list[tuple[bytes, bytes | None, tuple[()]]]] = {}
        for k, v in recs:
            by_part.setdefault(partition_for(k.group, meta.num_partitions), []).append(
                (srec.encode_key(k), None if v is None else srec.encode_value(v), ()))
        now = self.clock.now_ms()
        for p, items in sorted(by_part.items()):
            batch = records.build_batch(items, timestamp_ms=now, producer_id=-1, producer_epoch=-1, transactional=False)
            await self.runtime.append(p, batch, now)

    async def _persist(self, keys: Iterable[PartKey]) -> None:
        await self._write([(srec.SnapshotKey(*k), self.partitions[k].snapshot()) for k in sorted(set(keys), key=str)
                           if k in self.partitions])

    # -- configs ----------------------------------------------------------------------------------

    def config(self, group_id: str, name: str) -> str:
        return self.configs.get(group_id, {}).get(name) or GROUP_CONFIGS[name]

    def _configure(self, pk: PartKey) -> None:
        sp = self.partitions[pk]
        lock = self.config(pk[0], "share.record.lock.duration.ms")
        limit = self.config(pk[0], "share.delivery.count.limit")
        sp.lock_ms = int(lock) if lock else self.lock_ms
        sp.delivery_limit = int(limit) if limit else self.delivery_limit

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
            for pk in self.partitions:
                if pk[0] == group_id:
                    self._configure(pk)

    # -- membership -------------------------------------------------------------------------------

    def _resolve(self, name: str) -> tuple[uuid.UUID, int] | None:
        meta = self.replicas.topics.get(name)
        return None if meta is None else (meta.topic_id, meta.num_partitions)

    async def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                        subscribed: tuple[str, ...] | None, client_id: str, client_host: str) -> HeartbeatAnswer:
        await self.ready()
        answer = self.groups.heartbeat(group_id, member_id, member_epoch, rack_id, subscribed, self._resolve,
                                       self.clock.now_ms(), client_id=client_id, client_host=client_host)
        if member_epoch == -1:
            await self._member_gone(group_id, member_id)
        return answer

    async def _member_gone(self, group_id: str, member_id: str) -> None:
        self.sessions.drop_member(group_id, member_id)
        async with self.lock:
            now = self.clock.now_ms()
            changed = [pk for pk, sp in self.partitions.items() if pk[0] == group_id and sp.release_member(member_id, now)]
            if changed:
                self.available.set()
                await self._persist(changed)

    # -- share fetch / acknowledge ----------------------------------------------------------------

    def _partition(self, pk: PartKey, part: Any) -> SharePartition:
        sp = self.partitions.get(pk)
        if sp is None:
            sp = self.partitions[pk] = SharePartition(max_in_flight=self.max_locks)
            self._configure(pk)
        if not sp.initialized:
            earliest = self.config(pk[0], "share.auto.offset.reset") == "earliest"
            sp.initialize(part.log_start_offset if earliest else part.high_watermark)
        sp.trim_to(part.log_start_offset)
        return sp

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
                sp = self.partitions.get((group_id, tid, p))
                try:
                    if sp is None:
                        raise InvalidRecordState(f"no records of {tid}-{p} are in flight for group {group_id}")
                    sp.acknowledge(member_id, batches, now)
                    out[(tid, p)] = None
                    changed.append((group_id, tid, p))
                except ValueError as exc:
                    out[(tid, p)] = InvalidRequest(str(exc))
                except KafkaError as exc:
                    out[(tid, p)] = exc
            if changed:
                self.available.set()
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
                    max_bytes: int, wait_ms: int, closed: asyncio.Future[Any]) -> dict[tuple[uuid.UUID, int], PartitionFetch]:
        """Acquire records for ``member_id`` from the ``wanted`` partitions; when none is acquired,
        wait up to ``wait_ms`` (at most fetch.max.wait.ms) for records to become available."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max(wait_ms, 0), self.max_wait_ms) / 1000
        while True:
            self.available.clear()
            out, parts = await self._acquire(group_id, member_id, wanted, max_records, max_bytes)
            remaining = deadline - loop.time()
            if any(r.acquired or r.error for r in out.values()) or remaining <= 0 or closed.done() or not parts:
                return out
            waiters = [p.waiter() for p in parts]
            avail = loop.create_task(self.available.wait())
            try:
                await asyncio.wait([*waiters, avail, closed], timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                avail.cancel()
                for w in waiters:
                    w.cancel()

    async def _acquire(self, group_id: str, member_id: str, wanted: list[tuple[uuid.UUID, int]], max_records: int,
                       max_bytes: int) -> tuple[dict[tuple[uuid.UUID, int], PartitionFetch], list[Any]]:
        out: dict[tuple[uuid.UUID, int], PartitionFetch] = {}
        parts = []
        budget = max(max_bytes, 1)
        records_left = max(max_records, 1)
        read_committed = self.config(group_id, "share.isolation.level") == "read_committed"
        async with self.lock:
            now = self.clock.now_ms()
            for tid, p in wanted:
                res = out[(tid, p)] = PartitionFetch()
                try:
                    meta = self.replicas.topic_by_id(tid)
                    if meta is None:
                        from oncelog.protocol.errors import UnknownTopicId
                        raise UnknownTopicId(f"topic id {tid} is unknown")
                    part = self.replicas.partition(meta.name, p)
                except KafkaError as exc:
                    res.error = exc
                    continue
                parts.append(part)
                if records_left <= 0 or budget <= 0:
                    continue
                sp = self._partition((group_id, tid, p), part)
                if sp.acquired_count() >= self.max_locks:
                    continue
                start = sp.next_fetch_offset()
                upper = part.last_stable_offset if read_committed else part.high_watermark
                if start >= upper:
                    continue
                batches: list[tuple[records.BatchHeader, bytes]] = []
                size = 0
                for h, data in part.log.iter_batches(start):
                    if h.base_offset >= upper or (batches and size + len(data) > budget):
                        break
                    batches.append((h, bytes(data)))
                    size += len(data)
                aborted = part.aborted.collect(start, upper) if read_committed else []
                view = [LogBatch(h.base_offset, h.last_offset, h.is_control or _is_aborted(h, aborted))
                        for h, _ in batches]
                ranges = sp.acquire(member_id, view, records_left, now)
                if not ranges:
                    continue
                records_left -= sum(r.last_offset - r.first_offset + 1 for r in ranges)
                for h, data in batches:
                    if any(r.first_offset <= h.last_offset and h.base_offset <= r.last_offset for r in ranges):
                        res.data.append(data)
                        budget -= len(data)
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
            except Exception:
                log.exception("bug: share coordinator timer failed")

    async def _tick(self) -> None:
        now = self.clock.now_ms()
        for group_id, member_id in self.groups.expire(now):
            log.info("share group %s: member %s left (session timeout)", group_id, member_id)
            await self._member_gone(group_id, member_id)
        due = [pk for pk, sp in self.partitions.items()
               if (d := sp.next_deadline()) is not None and d <= now]
        if not due:
            return
        async with self.lock:
            now = self.clock.now_ms()
            changed = [pk for pk in due if pk in self.partitions and self.partitions[pk].expire_locks(now)]
            if changed:
                self.available.set()
                await self._persist(changed)

    # -- views ------------------------------------------------------------------------------------

    def start_offsets(self, group_id: str) -> dict[tuple[uuid.UUID, int], int]:
        return {(tid, p): sp.spso for (g, tid, p), sp in self.partitions.items() if g == group_id and sp.initialized}


def _is_aborted(h: records.BatchHeader, aborted: list[Any]) -> bool:
    if not h.is_transactional:
        return False
    return any(a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset for a in aborted)
