"""Where share groups' state is durable (KIP-932, issue 30), as Kafka's share-state ``Persister``:
one interface, ``SharePersister``, and one implementation per mode, chosen once by the
membership when the broker starts and handed to the share coordinator:

* ``LogSharePersister`` (here; the embedded broker): the compacted internal topic
  ``__share_group_state``, one record per share partition (coordinator/share/records.py). This
  broker holds the whole state: it is replayed at start (in the background; the share APIs wait
  for it: ``ready``), and every change is appended and awaited before it is answered;
* ``share_store_persister.StoreSharePersister`` (cluster mode): rows of the store
  (cluster/share_state.py), each share partition read when the leader of its topic partition
  first serves it and written fenced by that leader epoch; this broker holds a cache of the
  share partitions it leads.

The share coordinator (share_coordinator.py) calls the persister under its one lock wherever
the state's durability is concerned, handing it the pure core (``ShareShard``) whose state it
reads or loads; it never asks which persister it has.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Callable, NamedTuple, Protocol

from oncelog.broker.coordinators.coordinator_runtime import CoordinatorRuntime
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.clock import Clock
from oncelog.coordinator.load_report import SkipReport, batch_records
from oncelog.coordinator.placement import partition_for
from oncelog.coordinator.share import records as srec
from oncelog.coordinator.share.partition import SharePartition
from oncelog.coordinator.share.shard import PartKey, ShareShard
from oncelog.internal_topics import SHARE_STATE_TOPIC as STATE_TOPIC
from oncelog.protocol import records
from oncelog.protocol.errors import KafkaError

__all__ = ["LogSharePersister", "Records", "SharePersister", "STATE_TOPIC"]

log = logging.getLogger(__name__)

#: the records of a change: snapshots (None: the share partition goes) and configs
Records = list[tuple[srec.Key, srec.Value | None]]
STATE_TOPIC_PARTITIONS = 1  # embedded mode: one partition holds every share group's state
#: Kafka's share.coordinator.state.topic.segment.bytes: segments roll (and the cleaner compacts
#: them to the latest snapshot per share partition) every 100 MiB, so a load replays little
STATE_TOPIC_SEGMENT_BYTES = 100 * 1024 * 1024


class SharePersister(Protocol):
    """See the module docstring. ``shard`` is the share coordinator's core; every method but
    ``start``, ``ready`` and ``close`` is called under the coordinator's lock. Methods raise
    the storage's KafkaError."""

    def start(self, shard: ShareShard) -> None:
        """Start loading what is durable into ``shard`` (in the background)."""
        ...

    async def ready(self) -> None:
        """Returns once the state loaded at start is in the shard."""
        ...

    async def close(self) -> None: ...

    async def load(self, shard: ShareShard, pk: PartKey, leader_epoch: Callable[[], int]) -> None:
        """Make share partition ``pk`` in ``shard`` the durable one before it is served
        (``leader_epoch()``: the epoch of the topic partition this broker leads)."""
        ...

    async def session_opened(self, shard: ShareShard, group_id: str) -> None:
        """A share session of the group opens: drop what an administrator changed since."""
        ...

    async def write(self, shard: ShareShard, recs: Records) -> None:
        """Make ``recs`` durable (all of them, before returning)."""
        ...

    def release_not_written(self, member_id: str, exc: KafkaError) -> None:
        """The records a member held were released but that could not be written: raise it, or
        say why it does not matter."""
        ...

    async def refresh_configs(self, shard: ShareShard, group_id: str) -> None:
        """The group's configs in ``shard`` as they are durable now."""
        ...

    async def groups_with_configs(self, shard: ShareShard) -> list[str]: ...

    def empty_groups(self, shard: ShareShard) -> list[str]:
        """The groups without members ListGroups shows (Empty): those with durable state, when
        this broker can name them without asking anyone."""
        ...

    def is_share_group(self, shard: ShareShard, group_id: str) -> bool:
        """Whether this broker can tell, without asking anyone, that ``group_id`` is a share
        group (a classic or consumer member may not take its id)."""
        ...

    async def exists(self, shard: ShareShard, group_id: str) -> bool:
        """Whether the share group exists (members here, or durable state)."""
        ...

    async def offsets(self, shard: ShareShard, group_id: str) -> dict[tuple[uuid.UUID, int], SharePartition]:
        """(topic id, partition) -> the group's initialized share partitions, as durable."""
        ...

    async def alter_offsets(self, shard: ShareShard, group_id: str, offsets: dict[tuple[uuid.UUID, int], int]) -> None:
        """AlterShareGroupOffsets (the group has no members)."""
        ...

    async def delete_group(self, shard: ShareShard, group_id: str) -> None:
        """DeleteGroups: the group's share-partition state and configs go (no members)."""
        ...

    async def delete_offsets(self, shard: ShareShard, group_id: str, topic_ids: set[uuid.UUID]) -> None:
        """DeleteShareGroupOffsets: the group's state on these topics goes (no members)."""
        ...


class _StatePartition(NamedTuple):
    """A partition of ``__share_group_state`` as the coordinator runtime loads it (the state of
    all of them goes into the one shard)."""

    partition: int


class LogSharePersister:
    """``SharePersister`` on ``__share_group_state`` (see the module docstring)."""

    def __init__(self, replicas: ReplicaManager, clock: Clock) -> None:
        self.replicas = replicas
        self.clock = clock
        self.runtime: CoordinatorRuntime[_StatePartition] = CoordinatorRuntime(
            "share coordinator", STATE_TOPIC, replicas, clock, logger=log)
        self._loaded = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self, shard: ShareShard) -> None:
        """Load ``__share_group_state`` when it exists (created at the first write otherwise)."""
        self._task = asyncio.get_running_loop().create_task(self._load(shard))

    async def _load(self, shard: ShareShard) -> None:
        try:
            meta = self.replicas.topics.get(STATE_TOPIC)
            if meta is not None and not meta.internal:
                # a client's topic of that name (created before the name was reserved): never
                # read as share state; writes fail (ensure_internal_topic) until it is deleted
                log.error("topic %s exists but the broker did not create it as internal: its records are not read "
                          "as share-group state, and share groups cannot write theirs until the topic is deleted",
                          STATE_TOPIC)
            elif meta is not None:

                def replay_batch(_: _StatePartition, header: records.BatchHeader, data: bytes, now: int,
                                 report: SkipReport) -> None:
                    _replay_batch(shard, header, data, report)

                await self.runtime.load(range(meta.num_partitions), _StatePartition, replay_batch)
                log.info("share coordinator loaded %d share partition(s)", len(shard.partitions))
        finally:
            self._loaded.set()

    async def ready(self) -> None:
        await self._loaded.wait()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    # -- the share partitions: all of them are here ---------------------------------------------

    async def load(self, shard: ShareShard, pk: PartKey, leader_epoch: Callable[[], int]) -> None:
        """Nothing to read: the whole state was loaded at start."""

    async def session_opened(self, shard: ShareShard, group_id: str) -> None:
        """Nothing changes the state but this broker."""

    async def write(self, shard: ShareShard, recs: Records) -> None:
        """Append ``recs`` to ``__share_group_state`` and wait until durable (one batch per state
        partition)."""
        if not recs:
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

    def release_not_written(self, member_id: str, exc: KafkaError) -> None:
        """The state here is ahead of its log: the caller is told."""
        raise exc

    # -- configs and administration: this broker's state is the whole state -------------------------

    async def refresh_configs(self, shard: ShareShard, group_id: str) -> None:
        """Nothing to read: only this broker changes them."""

    async def groups_with_configs(self, shard: ShareShard) -> list[str]:
        return sorted(g for g, c in shard.configs.items() if c)

    def empty_groups(self, shard: ShareShard) -> list[str]:
        return shard.empty_groups()

    def is_share_group(self, shard: ShareShard, group_id: str) -> bool:
        return shard.known(group_id)

    async def exists(self, shard: ShareShard, group_id: str) -> bool:
        return shard.known(group_id)

    async def offsets(self, shard: ShareShard, group_id: str) -> dict[tuple[uuid.UUID, int], SharePartition]:
        return shard.start_offsets(group_id)

    async def alter_offsets(self, shard: ShareShard, group_id: str, offsets: dict[tuple[uuid.UUID, int], int]) -> None:
        await self.write(shard, shard.snapshots(shard.reset(group_id, offsets)))

    async def delete_group(self, shard: ShareShard, group_id: str) -> None:
        gone = shard.group_partitions(group_id)
        recs: Records = [(srec.SnapshotKey(*pk), None) for pk in gone]
        if group_id in shard.configs:
            recs.append((srec.ConfigKey(group_id), None))
        await self.write(shard, recs)
        for pk in gone:
            shard.drop(pk)
        shard.forget_group(group_id)

    async def delete_offsets(self, shard: ShareShard, group_id: str, topic_ids: set[uuid.UUID]) -> None:
        gone = [pk for pk in shard.group_partitions(group_id) if pk[1] in topic_ids]
        await self.write(shard, [(srec.SnapshotKey(*pk), None) for pk in gone])
        for pk in gone:
            shard.drop(pk)


def _replay_batch(shard: ShareShard, header: records.BatchHeader, data: bytes, report: SkipReport) -> None:
    """One batch of ``__share_group_state`` into ``shard``; records that cannot be read are
    skipped (reported)."""
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
            shard.replay(key, value)
        except Exception as exc:  # the load boundary: one bad record never keeps the rest offline
            report.skip(r.offset, "record", f"bug: its replay raised {type(exc).__name__}: {exc}", exc_info=True)
