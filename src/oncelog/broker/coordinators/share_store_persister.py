"""Share groups' state in the cluster's store (KIP-932 in cluster mode, issue 30): the
``SharePersister`` (share_persister.py) of a broker started with a store, built by its
membership.

A share partition is served by the leader of its topic partition, and its state is a row of the
store (cluster/share_state.py) instead of a ``__share_group_state`` record: read at the first use
under the current leader epoch (``load``), written fenced by that epoch; a write refused or
failed drops the state here (``_forget``), to be read again. So this broker holds a cache of the
share partitions it leads, and asks the store about the rest (``exists``, ``offsets``, the groups
with configs).

Administration (AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups) is done by the
group's coordinator, which knows whether the group has members, directly on the store's rows
(``StoreShareState.admin_write``), each written at a new row version: a leader that cached the
state before checks the versions when a share session of the group opens (``session_opened``:
the group was empty, so its consumers open new sessions) and reads again what changed, and a
leader's write of a row at another version than it loaded is refused (StaleShareState) and the
state read again, so no leader serves or writes back what an administrator replaced.

Store calls run on a worker thread (``asyncio.to_thread``), one at a time: the share
coordinator calls the persister under its lock.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Callable, Iterable

from oncelog.broker.coordinators.share_persister import Records
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.cluster.share_state import ConfigRow, SnapshotRow, StoreShareState
from oncelog.coordinator.share import records as srec
from oncelog.coordinator.share.partition import SharePartition
from oncelog.coordinator.share.shard import PartKey, ShareShard, reset_state, restored
from oncelog.protocol.errors import KafkaError

__all__ = ["StoreSharePersister"]

log = logging.getLogger(__name__)


class StoreSharePersister:
    """``SharePersister`` on the store's rows (see the module docstring)."""

    def __init__(self, store: StoreShareState, replicas: ReplicaManager) -> None:
        self.store = store
        self.replicas = replicas
        #: the leader epoch of the topic partition at which each share partition here was loaded
        self._epochs: dict[PartKey, int] = {}
        #: the store row's version each share partition here was loaded or last written at
        self._versions: dict[PartKey, int] = {}

    def start(self, shard: ShareShard) -> None:
        """Nothing to load: share partitions are read as they are served."""

    async def ready(self) -> None:
        pass

    async def close(self) -> None:
        self.store.conn.drop()

    # -- the share partitions this broker leads --------------------------------------------------

    async def load(self, shard: ShareShard, pk: PartKey, leader_epoch: Callable[[], int]) -> None:
        """Make share partition ``pk`` the store's, unless it was loaded at the topic partition's
        current leader epoch. A state kept from an earlier leadership is stale (another leader
        may have moved it since): it is read again."""
        epoch = leader_epoch()
        if self._epochs.get(pk) == epoch:
            return
        raw, version = await asyncio.to_thread(self.store.load_versioned, *pk)
        configs = await asyncio.to_thread(self.store.load_configs, pk[0])
        if configs:
            shard.configs[pk[0]] = configs
        else:
            shard.configs.pop(pk[0], None)
        shard.drop(pk)
        if raw is not None:
            key = srec.SnapshotKey(*pk)
            shard.replay(key, srec.decode_value(key, raw))
        self._epochs[pk] = epoch
        self._versions[pk] = version

    async def session_opened(self, shard: ShareShard, group_id: str) -> None:
        """The share partitions of the group cached here whose store row an administrator
        changed since they were read (another version, or gone) are dropped, to be read again
        at their next use."""
        cached = [pk for pk in self._epochs if pk[0] == group_id]
        if not cached:
            return
        versions = await asyncio.to_thread(self.store.versions, group_id)
        self._forget(shard, [pk for pk in cached if versions.get((pk[1], pk[2]), 0) != self._versions.get(pk)])

    def _forget(self, shard: ShareShard, pks: Iterable[PartKey]) -> None:
        """Drop what may be ahead of the store (a write that failed, a leadership lost): the next
        use reads the store again."""
        for pk in pks:
            shard.drop(pk)
            self._epochs.pop(pk, None)
            self._versions.pop(pk, None)

    async def write(self, shard: ShareShard, recs: Records) -> None:
        """``recs`` as rows of the store, in one transaction fenced by the leader epochs the
        share partitions were loaded at. On failure the share partitions written are forgotten
        (their state here may be ahead of the store's) and the error raised."""
        if not recs:
            return
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
            self._forget(shard, pks)
            raise
        for pk, version in written.items():
            if pk in self._epochs:
                self._versions[pk] = version

    def release_not_written(self, member_id: str, exc: KafkaError) -> None:
        """Forgotten (``write``), read again from the store, where a record acquired is
        AVAILABLE already (acquisitions are never written)."""
        log.info("share coordinator: releasing member %s's records not written: %s", member_id, exc)

    # -- configs and administration: the store's ---------------------------------------------------

    async def refresh_configs(self, shard: ShareShard, group_id: str) -> None:
        """The group's configs as the store has them now (another broker may have altered them)."""
        shard.set_configs(group_id, await asyncio.to_thread(self.store.load_configs, group_id))

    async def groups_with_configs(self, shard: ShareShard) -> list[str]:
        return await asyncio.to_thread(self.store.config_group_ids)

    def empty_groups(self, shard: ShareShard) -> list[str]:
        """None: the store holds the groups without members (any broker may have written them)."""
        return []

    def is_share_group(self, shard: ShareShard, group_id: str) -> bool:
        """Never known here for sure: the group's state may be anywhere in the store."""
        return False

    async def exists(self, shard: ShareShard, group_id: str) -> bool:
        """One this broker coordinates (its members) or the store has (state or configs written
        by any broker; what a leader cached may be gone from the store)."""
        if group_id in shard.groups.groups:
            return True
        return await asyncio.to_thread(self.store.has_group, group_id)

    async def offsets(self, shard: ShareShard, group_id: str) -> dict[tuple[uuid.UUID, int], SharePartition]:
        """As the store has them, every partition whichever broker leads it (its durable part:
        nothing acquired)."""
        rows = await asyncio.to_thread(self.store.load_group, group_id)
        out = {}
        for (tid, p), raw in rows.items():
            sp = restored(raw, srec.SnapshotKey(group_id, tid, p), shard.max_locks)
            if sp.initialized:
                out[(tid, p)] = sp
        return out

    async def alter_offsets(self, shard: ShareShard, group_id: str, offsets: dict[tuple[uuid.UUID, int], int]) -> None:
        await self._admin_write(shard, group_id, offsets, set())

    async def delete_group(self, shard: ShareShard, group_id: str) -> None:
        await self._admin_write(shard, group_id, {}, set(), whole_group=True)
        shard.forget_group(group_id)

    async def delete_offsets(self, shard: ShareShard, group_id: str, topic_ids: set[uuid.UUID]) -> None:
        await self._admin_write(shard, group_id, {}, topic_ids)

    async def _admin_write(self, shard: ShareShard, group_id: str, offsets: dict[tuple[uuid.UUID, int], int],
                           deleted_topics: set[uuid.UUID], *, whole_group: bool = False) -> None:
        """An administrator's change written on the store's rows by this broker, whichever
        leads the partitions (module docstring): ``offsets`` start over there (the state epoch
        of a row there goes on), the rows of ``deleted_topics`` go, ``whole_group``: every row
        and the configs go. What this broker cached of the group is dropped."""
        store = self.store
        current = await asyncio.to_thread(store.load_group, group_id)
        states: dict[tuple[uuid.UUID, int], bytes | None] = {k: None for k in current if k[0] in deleted_topics}
        for (tid, p), offset in offsets.items():
            states[(tid, p)] = reset_state(current.get((tid, p)), srec.SnapshotKey(group_id, tid, p), offset,
                                           shard.max_locks)
        await asyncio.to_thread(store.admin_write, group_id, states, whole_group=whole_group)
        self._forget(shard, [pk for pk in self._epochs if pk[0] == group_id])
