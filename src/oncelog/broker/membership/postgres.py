"""The membership of a cluster on PostgreSQL (issue 15, issue 27): the brokers sharing one store.

Its stores are the store's tables: topics and topic configs (cluster/topics.py), dynamic broker
configs (cluster/broker_configs.py), ACLs (cluster/acls.py), SCRAM credentials
(cluster_credentials.py over cluster/credentials.py) and producer-id blocks
(cluster/producer_ids.py). A metadata change is one transaction in the store, then this broker
loads and applies a new view at once (broker/cluster_member.py) and the others at the
notification or their next poll.

The parts it drives, opened by ``open`` and closed by ``close`` in reverse:
``ClusterParts`` (the store connections, the group committers and the leader tracker that opens
and closes partitions as leadership moves), ``ClusterMember`` (the session, heartbeat, poll and
rebalance), ``PeerClients`` (markers and transaction verification for partitions led
elsewhere), the ACL and credential stores, and the database bridge (issue 31,
broker/database/: the outbox's drain and the inbox, started once joined; the inbox stops before
the group coordinator: ``stop_coordinators``). The group and transaction coordinators load an
internal partition when this broker is given its leadership, with the leader epoch as the
coordinator epoch.

What the coordinators need of cluster mode is built by ``open`` and handed to them when the
broker builds them: the transaction coordinator's ``transaction_remote`` (``RemoteVerifier``),
the group coordinator's ``offset_inbox`` (the database inbox, when the store has it), the share
coordinator's ``share_persister`` (the store's rows) and ``share_members(groups)`` (the group's
coordinator, asked over the peers).

psycopg (the 'cluster' extra) is needed: ``membership_for`` imports this module only for a
broker started with a store.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Mapping, Sequence

from oncelog.broker import periodic
from oncelog.broker.auth.acls import AclService
from oncelog.broker.membership.cluster_credentials import StoreUserCredentials
from oncelog.broker.membership.cluster_member import ClusterMember, connector
from oncelog.broker.membership.cluster_parts import ClusterParts
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.coordinators.group_coordinator import OFFSETS_TOPIC, OFFSETS_TOPIC_SEGMENT_BYTES, GroupCoordinator
from oncelog.broker.coordinators.share_coordinator import ShareCoordinator
from oncelog.broker.configuration.group_config import GroupConfigs
from oncelog.broker.coordinators.offset_inbox import OffsetInbox
from oncelog.broker.coordinators.share_members import RemoteShareMembers
from oncelog.broker.coordinators.share_store_persister import StoreSharePersister
from oncelog.broker.database.bridge import DatabaseBridge
from oncelog.broker.partitions.markers import ClusterMarkerWriter, MarkerWriter
from oncelog.broker.membership.interface import Election, Node
from oncelog.broker.membership.peer_client import PeerClients, PeerSecurity
from oncelog.broker.partitions.replica_manager import NewTopic, ReplicaManager, TopicMeta
from oncelog.broker.coordinators.transaction_coordinator import TXN_TOPIC, TXN_TOPIC_SEGMENT_BYTES, TransactionCoordinator
from oncelog.broker.partitions.txn_verifier import RemoteVerifier
from oncelog.clock import Clock
from oncelog.coordinator.placement import partition_for
from oncelog.cluster import broker_configs as store_broker_configs
from oncelog.cluster import group_configs as store_group_configs
from oncelog.cluster import topics as store_topics
from oncelog.diskless import topic_rules
from oncelog.cluster.acls import StoreAcls
from oncelog.cluster.connection import StoreConnection
from oncelog.cluster.producer_ids import StoreProducerIds
from oncelog.cluster.share_state import StoreShareState
from oncelog.cluster.view import ClusterView
from oncelog.protocol.errors import KafkaError, UnknownTopicOrPartition
from oncelog.types import TopicPartition

__all__ = ["StoreConfigs", "StoreMembership", "StoreTopics"]

log = logging.getLogger(__name__)

#: how often the SCRAM credentials are reloaded from the store
CREDENTIALS_REFRESH_S = 1.0


class StoreTopics:
    """``TopicStore`` on the store (cluster/topics.py), each change one transaction on the
    member's control thread (``ClusterMember.call``); then this broker loads and applies a view
    at once (the others at their notification or next poll), after a rebalance where partitions
    need leaders."""

    def __init__(self, owner: "StoreMembership") -> None:
        self._owner = owner

    async def create(self, new: Sequence[NewTopic], *, validate_only: bool = False) -> list[TopicMeta | KafkaError]:
        """Each topic is validated as embedded, except that a replication factor up to the
        number of live brokers is accepted (the store keeps the data: there are no replicas to
        place); then created in the store (one transaction each), and a rebalance gives the new
        partitions leaders."""
        rm = self._owner.replicas
        member = self._owner.member
        max_rf = max(1, len(member.view.brokers))
        checked: list[TopicMeta | KafkaError] = []
        for t in new:
            try:
                meta = rm.validate_new_topic(t, max_rf)
                topic_rules.check_new_topic(t.name, meta.configs, cluster_mode=True,  # issue 29
                                            storage_url=self._owner.config.diskless_storage_url, internal=t.internal)
                checked.append(meta)
            except KafkaError as exc:
                checked.append(exc)
        wanted = [m for m in checked if isinstance(m, TopicMeta)]
        if validate_only or not wanted:
            return checked

        def create(conn: Any) -> dict[str, TopicMeta | KafkaError]:
            out: dict[str, TopicMeta | KafkaError] = {}
            for m in wanted:
                try:
                    info = store_topics.create(conn, m.name, m.num_partitions, m.configs, m.topic_id)
                    out[m.name] = TopicMeta(info.name, info.topic_id, info.partitions, dict(info.configs))
                except KafkaError as exc:
                    out[m.name] = exc
            return out

        created = await member.call(create)
        if any(isinstance(r, TopicMeta) for r in created.values()):
            await member.rebalance()
        return [created[m.name] if isinstance(m, TopicMeta) else m for m in checked]

    async def add_partitions(self, name: str, count: int, *, validate_only: bool = False) -> None:
        """Grow topic ``name`` to ``count`` partitions (``count`` was checked:
        ``ReplicaManager.check_partition_increase``), then rebalance so the new partitions get
        leaders. Raises UnknownTopicOrPartition, InvalidPartitions, StoreUnavailable."""
        if validate_only:
            return
        member = self._owner.member
        await member.call(lambda conn: store_topics.grow(conn, name, count))
        await member.rebalance()

    async def delete(self, name: str) -> None:
        """Delete topic ``name`` (cluster/topics.delete); its leaders close its partitions when
        they apply the next view. Raises UnknownTopicOrPartition, StoreUnavailable."""
        member = self._owner.member
        await member.call(lambda conn: store_topics.delete(conn, name))
        await member.refresh()


class StoreConfigs:
    """``ConfigStore`` on the store: every broker's leader tracker applies what the next view
    holds (this broker at once)."""

    def __init__(self, owner: "StoreMembership") -> None:
        self._owner = owner

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Raises UnknownTopicOrPartition, StoreUnavailable."""
        member = self._owner.member
        found = await member.call(lambda conn: store_topics.set_configs(conn, name, configs))
        if not found:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        await member.refresh()

    async def set_broker_configs(self, scope: str, configs: dict[str, str]) -> None:
        """``scope`` is stored as its resource: "" the cluster default, or a node id."""
        resource = self._owner.replicas.dynamic.resource_of(scope)
        member = self._owner.member
        await member.call(lambda conn: store_broker_configs.set_configs(conn, resource, configs))
        await member.refresh()


class StoreGroupConfigs:
    """``GroupConfigStore`` (broker/configuration/group_config.py) on the store
    (cluster/group_configs.py), through the member's control thread."""

    def __init__(self, member: ClusterMember) -> None:
        self._member = member

    async def set(self, group_id: str, configs: dict[str, str], every: dict[str, dict[str, str]]) -> None:
        await self._member.call(lambda conn: store_group_configs.set_configs(conn, group_id, configs))

    async def load_if_changed(self, version: int | None) -> tuple[int, dict[str, dict[str, str]] | None]:
        return await self._member.call(lambda conn: store_group_configs.load_if_changed(conn, version))


class StoreMembership:
    """``Membership`` of a broker of the cluster at ``dsn`` (see the module docstring).
    ``inter_broker()``: the inter-broker listener's name and how to log in there."""

    mode = "cluster"
    pipeline_produce = True  # appends complete at a COMMIT of the store
    producer_ids: StoreProducerIds  # set by open()
    member: ClusterMember  # set by open()
    transaction_remote: RemoteVerifier  # set by open()
    offset_inbox: OffsetInbox  # set by open()
    group_configs: GroupConfigs  # set by open()
    share_persister: StoreSharePersister  # set by open()

    def __init__(self, dsn: str, config: BrokerConfig, clock: Clock, replicas: ReplicaManager,
                 inter_broker: Callable[[], tuple[str, PeerSecurity]]) -> None:
        self.dsn = dsn
        self.config = config
        self.clock = clock
        self.replicas = replicas
        self.node_id = config.node_id
        self._inter_broker = inter_broker
        self.cluster_id = ""
        self.topics = StoreTopics(self)
        self.configs = StoreConfigs(self)
        self.users = StoreUserCredentials(connector(dsn), config.node_id)
        self.acls: AclService | None = None
        self.internal_partitions: Mapping[str, int] = {}
        self.coordinator_epoch = 0  # each internal partition's leader epoch is its coordinator epoch
        self._parts: ClusterParts | None = None
        self._peers: PeerClients | None = None
        self._store_acls: StoreAcls | None = None
        self._bridge: DatabaseBridge | None = None
        #: the coordinators the leader tracker tells of the internal partitions led here
        self._groups: GroupCoordinator | None = None
        self._transactions: TransactionCoordinator | None = None
        self._jobs: list[asyncio.Task[None]] = []
        self._joined = False

    @property
    def view(self) -> ClusterView:
        """The latest view of the store (brokers, topics, leaders and epochs)."""
        return self.member.view

    def diskless_counters(self) -> dict[str, int] | None:
        """The diskless parts' counters (``DisklessParts.counters``); None without
        ``diskless.storage.url`` or before ``open()``. On the event loop."""
        dl = self._parts.diskless if self._parts is not None else None
        return dl.counters() if dl is not None else None

    # -- Metadata ---------------------------------------------------------------------------

    def nodes(self, listener: str) -> list[Node]:
        return [Node(b.node_id, *b.endpoint(listener), b.rack) for b in self.member.view.brokers]

    def node(self, node_id: int, listener: str) -> Node | None:
        b = self.member.view.broker(node_id) if node_id >= 0 else None
        return None if b is None else Node(b.node_id, *b.endpoint(listener), b.rack)

    def leader(self, tp: TopicPartition) -> tuple[int, int]:
        return self.member.view.leader(tp)

    def leader_hint(self, tp: TopicPartition) -> tuple[int, int] | None:
        leader, epoch = self.member.view.leader(tp)
        return None if leader < 0 else (leader, epoch)

    def controller_id(self) -> int:
        """There is no controller (any broker rebalances, under a lock in the store), but clients
        expect one live broker there: the one with the lowest id."""
        live = self.member.view.live_ids
        return min(live) if live else -1

    async def elect_preferred(self) -> Election:
        """A rebalance (cluster/leadership.rebalance): leaders go where the placement policy
        (cluster/assignment.py) wants them. An unclean election never loses data here (there
        are no out-of-sync replicas), so it is the same."""
        view = self.member.view
        before = {tp: view.leader(tp)[0] for tp in view.partitions}
        await self.member.rebalance()
        view = self.member.view
        after = {tp: view.leader(tp)[0] for tp in view.partitions}
        return Election("the partition is led where the placement wants it",
                        moved=tuple(tp for tp, n in after.items() if n >= 0 and n != before.get(tp, -1)),
                        led=frozenset(tp for tp, n in after.items() if n >= 0))

    # -- lifecycle --------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the store parts, create the schema and the internal topics unless they exist
        (the first broker's partition counts are everyone's), load the ACLs and credentials."""
        cfg = self.config
        parts = self._parts = ClusterParts.open(self.dsn, cfg, self.replicas, self._lead, self._resign)
        self.producer_ids = StoreProducerIds(parts.reader)
        self.member = member = ClusterMember(self.dsn, cfg, self.clock, parts.tracker.apply)
        self.internal_partitions = await member.prepare([
            (OFFSETS_TOPIC, cfg.offsets_topic_num_partitions,
             {"cleanup.policy": "compact", "segment.bytes": str(OFFSETS_TOPIC_SEGMENT_BYTES)}),
            (TXN_TOPIC, cfg.transaction_state_log_num_partitions,
             {"cleanup.policy": "compact", "segment.bytes": str(TXN_TOPIC_SEGMENT_BYTES)}),
        ])
        self.cluster_id = member.cluster_id
        if cfg.authorizer_class_name:  # issue 18: the cluster's ACLs live in the store (cluster/acls.py)
            self._store_acls = StoreAcls(connector(self.dsn), f"node {self.node_id} acls")
            self.acls = acls = await asyncio.to_thread(AclService.for_config, cfg, self._store_acls)
            if acls is not None:
                member.after_poll.append(acls.refresh)
        inter, security = self._inter_broker()

        def address_of(node: int) -> tuple[str, int] | None:
            b = member.view.broker(node)
            return None if b is None else b.endpoint(inter)

        self._peers = PeerClients(self.node_id, address_of, security)
        txn_partitions = self.internal_partitions[TXN_TOPIC]
        self.transaction_remote = RemoteVerifier(lambda: member.view, self._peers,
                                                 lambda tid: partition_for(tid, txn_partitions))
        # issue 31: the outbox and the inbox, as the store has them (its role may lack the schema)
        self._bridge = DatabaseBridge(self.dsn, parts.reader, self.replicas, self.producer_ids.next_producer_id,
                                      self.clock, self.node_id)
        self.offset_inbox = self._bridge.inbox
        # the groups' consumer group configs (KIP-848): the store's oncelog_group_config
        self.group_configs = GroupConfigs(StoreGroupConfigs(member))
        # issue 30: share groups' state is the store's, written by each partition's leader
        self.share_persister = StoreSharePersister(
            StoreShareState(StoreConnection(connector(self.dsn), f"node {self.node_id} share state"), self.node_id),
            self.replicas)
        await self.users.refresh()  # the schema exists: member.prepare() made it
        self._jobs.append(periodic.every(CREDENTIALS_REFRESH_S, self.users.refresh_quietly,
                                         "housekeeping job refresh_quietly", log))

    def marker_writer(self, groups: GroupCoordinator) -> MarkerWriter:
        assert self._peers is not None, "open() first"
        member = self.member
        return ClusterMarkerWriter(self.node_id, self.replicas, groups, lambda: member.view, self._peers)

    def share_members(self, groups: GroupCoordinator) -> RemoteShareMembers:
        """A share group's members are kept by its group coordinator, the leader of its
        ``__consumer_offsets`` partition, asked over the peers unless it is this broker."""
        assert self._peers is not None, "open() first"
        member = self.member
        return RemoteShareMembers(self.node_id, lambda g: member.view.leader(
            TopicPartition(OFFSETS_TOPIC, groups.partition_for(g)))[0], self._peers, groups)

    async def start_coordinators(self, groups: GroupCoordinator, transactions: TransactionCoordinator,
                                 shares: ShareCoordinator) -> None:
        """Each internal partition is loaded when this broker is given its leadership (the
        leader tracker's ``on_lead``) and dropped when it loses it (``on_resign``). The share
        state (KIP-932, issue 30) is the store's, written by each partition's leader."""
        assert self._parts is not None and self._peers is not None, "open() first"
        self._groups, self._transactions = groups, transactions
        groups.start(load_all=False)
        # the groups' consumer group configs: the store's, reloaded after each poll when they changed
        configs = groups.configs
        await configs.refresh()

        async def refresh_group_configs() -> None:
            configs.refresh_soon()

        self.member.after_poll.append(refresh_group_configs)
        shares.start()

    def _lead(self, tp: TopicPartition, leader_epoch: int) -> None:
        """The leader tracker opened internal partition ``tp`` here (after ``start_coordinators``:
        views are applied once joined)."""
        assert self._groups is not None and self._transactions is not None, "start_coordinators() first"
        if tp.topic == TXN_TOPIC:
            self._transactions.lead(tp.partition, leader_epoch)
        elif tp.topic == OFFSETS_TOPIC:
            self._groups.lead(tp.partition)

    def _resign(self, tp: TopicPartition) -> None:
        if self._groups is None or self._transactions is None:
            return
        if tp.topic == TXN_TOPIC:
            self._transactions.resign(tp.partition)
        elif tp.topic == OFFSETS_TOPIC:
            self._groups.resign(tp.partition)

    async def join(self, listeners: Mapping[str, tuple[str, int]], host: str, port: int) -> None:
        """Register (``host:port`` the primary listener's advertised address), rebalance, load
        the first view, then start draining the database outbox (issue 31) into the
        partitions led here, and the database inbox (issue 31: ``oncelog.commit_offsets``'s
        commits) into the groups coordinated here, where the store has them."""
        assert self._bridge is not None and self._groups is not None, "open() and start_coordinators() first"
        await self.member.start(host, port, dict(listeners))
        self._joined = True
        self.cluster_id = self.member.cluster_id
        self._bridge.start(self._groups)

    async def stop_coordinators(self) -> None:
        """Stop the inbox before the group coordinator: its drains write through it."""
        if self._bridge is not None:
            await self._bridge.stop_inbox()

    def fence_if_lease_lapsed(self) -> None:
        self.member.fence_if_lease_lapsed()

    async def close(self) -> None:
        """Stop draining, leave (deregister and rebalance, so the partitions move at once),
        then close the peers, the store parts, the credential and ACL connections. Safe after
        a failed start and a second time."""
        for task in self._jobs:
            task.cancel()
        await asyncio.gather(*self._jobs, return_exceptions=True)
        self._jobs = []
        if self._bridge is not None:
            bridge, self._bridge = self._bridge, None
            await bridge.stop()
        if self._joined:
            self._joined = False
            await self.member.stop()
        if self._peers is not None:
            peers, self._peers = self._peers, None
            peers.close()
        if self._parts is not None:
            parts, self._parts = self._parts, None
            parts.close()
        self.users.close()
        if self._store_acls is not None:
            store_acls, self._store_acls = self._store_acls, None
            store_acls.close()
