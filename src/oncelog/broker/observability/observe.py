"""The one observer (issue 27): broker state at one instant, copied into plain values on the
event loop, for everything that shows it. The metrics (broker/observability/metrics.py: ``/metrics``) and the
web console (console/: ``/api/state``) both render from ``take(broker)``'s ``BrokerState``; this
is the only code outside the request path that reaches into partitions, group shards, the
transaction coordinator and the listeners to read them.

Theory of operation. The event loop owns every piece of broker state, so ``take`` runs on it
(an HTTP thread schedules it with ``run_coroutine_threadsafe``). It copies ``chunk`` rows
(partitions, groups, committed offsets, transactional ids: ``SNAPSHOT_CHUNK``) per turn of the
loop, which serves requests between chunks (issue 26 row 14: a broker of thousands of
partitions is not held for the whole copy). Each row is consistent; the whole is as of the
moment its chunk was read: a partition deleted meanwhile is left out, a group or a
transactional id is as its chunk found it. A part not started yet (the coordinators during
start-up) is left out. Nothing here does I/O or waits on anything but the loop.

The rows are named tuples (cheap to build: a snapshot makes one per partition) of immutable
values (a transaction's partitions are the coordinator's own ``frozenset``, shared, not
copied); consumers derive what they show (lag, ages, totals) without touching the broker. ``loop_s`` is how long taking it held the loop, all chunks together: both
consumers reuse a snapshot for a multiple of it, so that being observed costs the broker a
bounded share of its time.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from oncelog.types import TopicPartition

if TYPE_CHECKING:
    from oncelog.broker.observability.observed import ObservedBroker
    from oncelog.broker.request_stats import RequestStats

__all__ = ["OPEN_TXN_STATES", "SNAPSHOT_CHUNK", "BrokerState", "GroupRow", "PartitionRow", "SharePartitionRow",
           "TxnRow", "lag", "take"]

#: rows (partitions, groups, committed offsets, transactional ids) copied per turn of the loop
SNAPSHOT_CHUNK = 256
#: the transaction states (Kafka's names) in which a transactional id has an open transaction
OPEN_TXN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


def lag(end: int, position: int) -> int:
    """How far ``position`` (an LSO, a committed offset) is behind ``end``; never negative
    (a committed offset past the log end after a truncation counts as caught up)."""
    return max(end - position, 0)


class PartitionRow(NamedTuple):
    topic: str
    partition: int
    log_start: int
    log_end: int  # the high watermark
    lso: int
    size_bytes: int  # -1: not on local files
    segments: int  # -1: not on local files
    producers: int  # producer ids the partition keeps state for
    open_txns: int = 0  # producers with a transaction open on it


class GroupRow(NamedTuple):
    """A group (a classic one not Dead, a consumer group (KIP-848), a share group (KIP-932)): its
    members as (member id, instance id, client id, client host, assignment bytes). A classic
    group's ``generation`` is its generation id, a consumer or share group's its group epoch;
    their members' assignment bytes are empty and ``assigned`` holds, per member in the same
    order, the partitions the coordinator assigned it (its target, for a share group)."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation: int
    members: tuple[tuple[str, str | None, str, str, bytes], ...]
    group_type: str = "classic"  # classic, consumer, share (ListGroups' group type)
    assigned: tuple[tuple[TopicPartition, ...], ...] | None = None


class SharePartitionRow(NamedTuple):
    """One share partition (KIP-932) of a share group, from its counters (no per-record walk):
    the share-partition start and end offsets (-1: not initialized yet), the records in flight
    between them, those acquired now, and those acknowledged or archived since it was loaded."""

    group_id: str
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    in_flight: int
    acquired: int
    acknowledged_total: int
    archived_total: int


class TxnRow(NamedTuple):
    transactional_id: str
    state: str  # Kafka's name: Ongoing, CompleteCommit, ...
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int  # -1: no transaction started
    partitions: frozenset[TopicPartition]

    @property
    def open(self) -> bool:
        return self.state in OPEN_TXN_STATES


@dataclass(slots=True)
class BrokerState:
    """Broker state at one instant, as plain values (taken on the event loop by ``take``)."""

    now_ms: int = 0
    node_id: int = 0
    cluster_id: str = ""
    mode: str = "embedded"
    #: (node id, host, port, rack or None): the live brokers this one knows (itself, embedded)
    brokers: list[tuple[int, str, int, str | None]] = field(default_factory=list)
    #: (listener name, security protocol, bound host, bound port)
    listeners: list[tuple[str, str, str, int]] = field(default_factory=list)
    #: open client connections by listener name
    connections: dict[str, int] = field(default_factory=dict)
    partitions: list[PartitionRow] = field(default_factory=list)
    groups: list[GroupRow] = field(default_factory=list)
    #: share partitions of the share groups this broker serves (KIP-932)
    share_partitions: list[SharePartitionRow] = field(default_factory=list)
    #: (group, topic, partition, committed offset)
    committed: list[tuple[str, str, int, int]] = field(default_factory=list)
    #: whether group coordinator partitions are still loading
    groups_loading: bool = False
    txns: list[TxnRow] = field(default_factory=list)
    #: transactions ended since start (the coordinator's own counters)
    txn_committed: int = 0
    txn_aborted: int = 0
    txn_timed_out: int = 0
    #: the diskless parts' counters (``DisklessParts.counters``); None: no diskless storage
    diskless: dict[str, float] | None = None
    #: cluster mode: every partition of every topic as (topic, partition, leader node id (-1:
    #: none live), leader epoch, diskless topic?) from this broker's latest view; embedded: empty
    leaders: list[tuple[str, int, int, int, bool]] = field(default_factory=list)
    #: the metrics' request-path counters at that instant (set by metrics; None: not collected)
    requests: "RequestStats | None" = None
    #: how long taking it held the event loop, all chunks together (seconds)
    loop_s: float = 0.0

    def open_txn_starts(self) -> list[int]:
        """The start time (ms) of each open transaction."""
        return [t.start_ms for t in self.txns if t.open and t.start_ms >= 0]


def _named(broker: "ObservedBroker", assignment: "dict[uuid.UUID, frozenset[int]]") -> tuple[TopicPartition, ...]:
    """A KIP-848/KIP-932 assignment (topic id -> partitions) by topic name, sorted; a topic
    deleted meanwhile is left out."""
    out = []
    for topic_id, parts in assignment.items():
        meta = broker.replicas.topic_by_id(topic_id)
        if meta is not None:
            out.extend(TopicPartition(meta.name, p) for p in parts)
    return tuple(sorted(out))


async def take(broker: "ObservedBroker", *, chunk: int = SNAPSHOT_CHUNK) -> BrokerState:
    """Copy ``broker``'s state; runs on its event loop, about ``chunk`` rows per turn of it."""
    held = 0.0
    started = time.perf_counter()
    rows = 0  # copied since the last turn

    async def turn() -> None:
        nonlocal held, started, rows
        held += time.perf_counter() - started
        await asyncio.sleep(0)
        started = time.perf_counter()
        rows = 0

    snap = BrokerState(now_ms=broker.clock.now_ms(), node_id=broker.node_id, cluster_id=broker.cluster_id)
    for lst, host, port in broker.bound_listeners():
        snap.listeners.append((lst.name, lst.protocol, host, port))
    for srv in broker.servers:
        snap.connections[srv.name] = snap.connections.get(srv.name, 0) + srv.connection_count
    snap.mode = broker.membership.mode
    snap.brokers.extend((n.node_id, n.host, n.port, n.rack) for n in broker.membership.nodes(broker.listener_name))
    dl_counters = getattr(broker.membership, "diskless_counters", None)  # cluster mode only
    snap.diskless = dl_counters() if dl_counters is not None else None

    partitions = broker.replicas.partitions
    for i, (tp, part) in enumerate(list(partitions.items())):
        if i and i % chunk == 0:
            await turn()
        if partitions.get(tp) is not part:
            continue  # deleted (or closed) during a turn: any item of a later chunk may be
        size, segments = part.disk_usage()
        snap.partitions.append(PartitionRow(tp.topic, tp.partition, part.log_start_offset, part.high_watermark,
                                            part.last_stable_offset, size, segments, len(part.producers.entries),
                                            len(part.producers.ongoing)))

    coordinator = getattr(broker, "groups", None)  # declared by Broker, set once its start() makes it
    for shard in list(coordinator.shards.values()) if coordinator is not None else []:
        for gid, g in list(shard.groups.items()):
            if g.state.value == "Dead":
                continue
            members = tuple((m.member_id, m.group_instance_id, m.client_id, m.client_host, m.assignment)
                            for m in g.members.values())
            snap.groups.append(GroupRow(gid, g.state.value, g.protocol_type or "", g.protocol_name or "",
                                        g.generation, members))
            rows += 1 + len(members)
            if rows >= chunk:
                await turn()
        for gid, cg in list(shard.consumers.groups.items()):  # consumer groups (KIP-848)
            if gid in shard.groups:
                continue  # a classic group of that id is what the group is (ListGroups says so too)
            cmembers = list(cg.members.values())
            members = tuple((m.member_id, m.instance_id, m.client_id, m.client_host, b"") for m in cmembers)
            snap.groups.append(GroupRow(gid, cg.state, "consumer", "", cg.group_epoch, members, "consumer",
                                        tuple(_named(broker, m.assigned) for m in cmembers)))
            rows += 1 + len(members)
            if rows >= chunk:
                await turn()
        for gid, offsets in list(shard.offsets.committed.items()):
            snap.committed.extend((gid, tp.topic, tp.partition, off.offset) for tp, off in list(offsets.items()))
            rows += len(offsets)
            if rows >= chunk:
                await turn()
    snap.groups_loading = coordinator is None or bool(coordinator.loading)

    shares = getattr(broker, "shares", None)  # the share-group service (KIP-932), once started
    if shares is not None:
        for gid, sg in list(shares.groups.groups.items()):
            smembers = list(sg.members.values())
            members = tuple((m.member_id, None, m.client_id, m.client_host, b"") for m in smembers)
            snap.groups.append(GroupRow(gid, sg.state, "share", "", sg.group_epoch, members, "share",
                                        tuple(_named(broker, m.assigned) for m in smembers)))
            rows += 1 + len(members)
            if rows >= chunk:
                await turn()
        for (gid, topic_id, p), sp in list(shares.partitions.items()):
            meta = broker.replicas.topic_by_id(topic_id)
            if meta is None:
                continue  # its topic was deleted
            snap.share_partitions.append(SharePartitionRow(gid, meta.name, p, sp.spso, sp.speo, sp.in_flight,
                                                           sp.acquired, sp.acknowledged_total, sp.archived_total))
            rows += 1
            if rows >= chunk:
                await turn()

    if snap.mode == "cluster":  # who leads what (embedded: this broker leads everything)
        for meta in list(broker.replicas.topics.values()):
            diskless = meta.configs.get("diskless.enable") == "true"
            for p in range(meta.num_partitions):
                leader, epoch = broker.membership.leader(TopicPartition(meta.name, p))
                snap.leaders.append((meta.name, p, leader, epoch, diskless))
                rows += 1
                if rows >= chunk:
                    await turn()

    txns = getattr(broker, "transactions", None)  # declared by Broker, set once its start() makes it
    if txns is not None:
        snap.txn_committed, snap.txn_aborted, snap.txn_timed_out = txns.committed, txns.aborted, txns.timed_out
        for tid, meta in list(txns.txns.items()):
            snap.txns.append(TxnRow(tid, meta.state.kafka_name, meta.producer_id, meta.producer_epoch,
                                    meta.timeout_ms, meta.start_ms, meta.partitions))
            rows += 1
            if rows >= chunk:
                await turn()
    snap.loop_s = held + time.perf_counter() - started
    return snap
