"""Cluster mode (issue 15): open the partitions this broker leads, close the ones it lost
(the engines of cluster mode are built here, by ``storage.engines.open_engine``; the local
files' in ``Partition.open``). Imported only by membership/cluster_parts.py, for a broker
started with a store.

Theory of operation. ``apply(view, may_lead)`` is called on the event loop with every view of
the store (broker/membership/cluster_member.py). The partitions this broker should lead are those whose row
names it as leader, and none when ``may_lead`` is False (its session surely ended, or it may
have). Then, in this order:

1. the topics the broker knows (``ReplicaManager.topics``) become the store's, so Produce and
   Fetch tell a partition led elsewhere (NOT_LEADER_OR_FOLLOWER) from an unknown one; a topic
   whose configs changed in the store (AlterConfigs through any broker) gets them, applied live
   to its open partitions;
2. every open partition that is not to be led any more, or whose leader epoch is not the
   store's, or whose engine stopped after a failed append (``failed`` of the PostgreSQL or diskless engine: the store
   may hold batches the leader never applied) is closed and removed: from then on requests for
   it get NOT_LEADER_OR_FOLLOWER, and parked fetches wake up;
3. every partition to lead that is neither open nor opening is opened on the opener thread
   (one worker with its own store connection, so a long recovery never blocks the event loop,
   its heartbeats or the other partitions' requests): its row is read again (the view may be
   older than this broker's own last commits), and if it still names this broker under the
   same epoch, ``Partition.recover`` rebuilds the producer state, LSO and aborted index from
   the store alone (the local directory is only a cache and is emptied first, so a snapshot of
   an earlier term can never be trusted by mistake). Back on the event loop, the partition is
   installed only if the latest view still wants it under that epoch (else it is dropped), and
   its reads then use the event loop's reader connection. A partition that fails to open is
   logged and tried again at the next view.

4. the coordinators hear of every internal partition opened (``on_lead(tp, leader_epoch)``: the
   group or transaction coordinator loads its shard) and closed (``on_resign(tp)``).

Invariant: a partition is open here only under the epoch the store had when it was opened;
appends under that epoch are refused by the store once it moves (fencing), so opening and
closing late is never unsafe, only slow. Reads run on the event loop with the broker's reader
connection (one query per read); see docs/CLUSTER.md.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NamedTuple

from oncelog.broker.configuration import topic_config
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.partitions.partition import Partition
from oncelog.broker.partitions.replica_manager import ReplicaManager, TopicMeta
from oncelog.internal_topics import INTERNAL_TOPICS
from oncelog.cluster import leadership
from oncelog.cluster.leadership import Leadership
from oncelog.cluster.connection import StoreConnection
from oncelog.storage.config import LogConfig
from oncelog.storage.engines import PostgresSpec, open_engine
from oncelog.storage.engines.postgres.group_commit import GroupCommitter
from oncelog.storage.store_log import StoreLeaderLog
from oncelog.cluster.view import ClusterView
if TYPE_CHECKING:
    from oncelog.diskless.parts import DisklessParts
from oncelog.diskless import topic_rules
from oncelog.protocol.errors import KafkaError, KafkaStorageError
from oncelog.types import TopicPartition

__all__ = ["LeaderTracker"]

log = logging.getLogger(__name__)


class _Opened(NamedTuple):
    """A partition recovered on the opener thread, and its engine (to be installed on the loop)."""

    part: Partition
    engine: StoreLeaderLog


class LeaderTracker:
    """See the module docstring. Single-threaded: the event loop only."""

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, reader: StoreConnection,
                 committer: GroupCommitter, opener: StoreConnection | None = None,
                 compactor: StoreConnection | None = None, *, diskless: "DisklessParts | None" = None,
                 on_lead: Callable[[TopicPartition, int], None] = lambda tp, epoch: None,
                 on_resign: Callable[[TopicPartition], None] = lambda tp: None) -> None:
        """``opener``: the store connection of the opener thread (recovery); None: reuse
        ``reader`` there too (tests that drive the tracker without an event loop).
        ``compactor``: the connection compaction passes run with (``plan_compaction`` of the
        engines built here); None: they do not compact. ``diskless``: the broker's diskless
        parts (diskless/parts.py); None: no object store. ``on_lead(tp, leader_epoch)`` /
        ``on_resign(tp)``: told of every internal partition this broker starts / stops leading
        (the coordinators)."""
        self.node_id = config.node_id
        self.config = config
        self.replicas = replicas
        self.reader = reader
        self.committer = committer
        self.compactor = compactor
        self.cache_dir = Path(config.data_dir) / "cluster-cache"
        self.on_lead = on_lead
        self.on_resign = on_resign
        self.opener = opener or reader
        self.diskless = diskless
        self._opener_thread = ThreadPoolExecutor(1, thread_name_prefix=f"oncelog-open-{self.node_id}")
        self._opening: dict[TopicPartition, asyncio.Future[_Opened | None]] = {}
        self._wanted: dict[TopicPartition, Leadership] = {}  # the latest view's, for installing opened ones
        #: the engine of every partition this tracker installed (in ``replicas.partitions``)
        self._engines: dict[TopicPartition, StoreLeaderLog] = {}

    def apply(self, view: ClusterView, may_lead: bool) -> None:
        self._set_topics(view)
        self.replicas.awaiting_metadata = False
        if self.replicas.adopt_broker_configs(view.broker_configs.get("", {}),
                                              view.broker_configs.get(str(self.node_id), {})):
            log.info("node %d: dynamic broker configs changed", self.node_id)
        wanted = view.led_by(self.node_id) if may_lead else {}
        self._wanted = wanted
        parts = self.replicas.partitions
        for tp, part in list(parts.items()):
            row = wanted.get(tp)
            plog = self._engines[tp]  # every partition here was installed by _install
            if row is None or row.leader_epoch != plog.leader_epoch or plog.failed is not None:
                why = ("not led here any more" if row is None else
                       f"epoch {plog.leader_epoch} -> {row.leader_epoch}" if row.leader_epoch != plog.leader_epoch else
                       f"append failed: {plog.failed}")
                self._close(tp, part, why)
        for tp, row in wanted.items():
            if tp not in parts and tp not in self._opening:
                self._start_open(tp, row.partition_id)

    def close_all(self) -> None:
        self._wanted = {}
        for tp, part in list(self.replicas.partitions.items()):
            self._close(tp, part, "broker stopping")
        self._opener_thread.shutdown(wait=True, cancel_futures=True)

    def _set_topics(self, view: ClusterView) -> None:
        old = self.replicas.topics
        metas = []
        reconfigured = []
        for name, info in view.topics.items():
            meta = old.get(name)
            if meta is None or meta.topic_id != info.topic_id or meta.num_partitions != info.partitions:
                configs = topic_config.usable_topic_configs(self.config, name, dict(info.configs))
                meta = TopicMeta(name, info.topic_id, info.partitions, configs, name in INTERNAL_TOPICS)
            elif dict(info.configs) != (meta.store_configs if meta.store_configs is not None else meta.configs):
                # AlterConfigs through any broker: the same topic with other configs, applied live
                meta.configs = topic_config.usable_topic_configs(self.config, name, dict(info.configs))
                reconfigured.append(meta)
            meta.store_configs = dict(info.configs)
            metas.append(meta)
        if len(metas) != len(old) or any(old.get(m.name) is not m for m in metas):
            self.replicas.set_topics(metas)
        if reconfigured:
            self.replicas.refresh_log_configs(reconfigured)
            log.info("node %d: configs of %s changed", self.node_id, ", ".join(m.name for m in reconfigured))

    def _close(self, tp: TopicPartition, part: Partition, why: str) -> None:
        self.replicas.partitions.pop(tp, None)
        self._engines.pop(tp, None)
        if tp.topic in INTERNAL_TOPICS:
            self.on_resign(tp)
        try:
            part.close()  # wakes parked fetches; the engine holds no resource of its own
        except (OSError, KafkaError) as exc:
            log.warning("closing %s: %s", tp, exc)
        log.info("node %d stopped leading %s (%s)", self.node_id, tp, why)

    def _start_open(self, tp: TopicPartition, partition_id: int) -> None:
        meta = self.replicas.topics.get(tp.topic)
        if meta is None:
            return
        cfg = self.replicas.log_config(meta)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (unit tests drive the tracker directly): open here
            self._install(tp, self._build(tp, partition_id, cfg))
            return
        fut = asyncio.wrap_future(self._opener_thread.submit(self._build, tp, partition_id, cfg), loop=loop)
        self._opening[tp] = fut

        def done(f: "asyncio.Future[_Opened | None]") -> None:
            if self._opening.get(tp) is f:
                del self._opening[tp]
            if not f.cancelled() and f.exception() is None:
                self._install(tp, f.result())

        fut.add_done_callback(done)

    def _build(self, tp: TopicPartition, partition_id: int, cfg: LogConfig) -> _Opened | None:
        """On the opener thread: read the row again and recover the partition from the store;
        None when it moved meanwhile or cannot be opened now (logged; retried at the next view)."""
        try:
            row = leadership.current(self.opener.raw(), partition_id)
            if row is None or row.leader_broker != self.node_id:
                return None  # moved since the view was read
            meta = self.replicas.topics.get(tp.topic)
            if meta is not None and topic_rules.is_diskless(meta.configs):  # issue 29: storage/engines/diskless/
                if self.diskless is None:
                    raise KafkaStorageError(f"{tp.topic} is diskless and this broker has no diskless.storage.url")
                plog: StoreLeaderLog = open_engine(self.diskless.engine_spec(self.opener, row, cfg))
            else:
                plog = open_engine(PostgresSpec(self.opener, self.committer, row, cfg, compactor=self.compactor))
            path = self.cache_dir / f"{tp.topic}-{tp.partition}"
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True, exist_ok=True)
            part = Partition.recover(tp, plog, path, cfg)
            plog.on_ready = part.wake_waiters  # diskless: a read's missed bytes have landed: wake its fetches
            return _Opened(part, plog)
        except Exception as exc:  # KafkaError, OSError, or a psycopg error of leadership.current
            self.opener.drop()  # a failed query may leave the connection unusable
            log.warning("node %d could not take the lead of %s (retried at the next view): %s", self.node_id, tp, exc)
            return None

    def _install(self, tp: TopicPartition, opened: _Opened | None) -> None:
        """On the event loop: serve the opened partition if the latest view still wants it under
        its epoch."""
        if opened is None:
            return
        part, plog = opened
        row = self._wanted.get(tp)
        if row is None or row.leader_epoch != plog.leader_epoch or tp in self.replicas.partitions:
            part.close()
            log.info("node %d opened %s under epoch %d but no longer leads it there; dropped", self.node_id, tp,
                     plog.leader_epoch)
            return
        plog.hand_over(self.reader)
        self.replicas.partitions[tp] = part
        self._engines[tp] = plog
        meta = self.replicas.topics.get(tp.topic)
        if meta is not None:
            self.replicas.refresh_log_configs([meta])  # configs altered while it was opening
        log.info("node %d leads %s, leader epoch %d, offsets [%d, %d)", self.node_id, tp, row.leader_epoch,
                 plog.log_start_offset, plog.log_end_offset)
        if tp.topic in INTERNAL_TOPICS:
            self.on_lead(tp, row.leader_epoch)
