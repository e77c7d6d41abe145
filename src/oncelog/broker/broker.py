"""The broker: configuration, storage, coordinators and the server, started and stopped as one.

``Broker.start()`` opens the data directory (recovering every log), starts the housekeeping
tasks (retention) and listens. ``Broker.stop()`` stops listening, closes connections, and closes
every log cleanly (flushing it), so a SIGTERM never loses acknowledged data — and a SIGKILL does
not either, because every acknowledged batch is already in the log file (see config.py).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Awaitable, Callable

from oncelog.broker.network import listeners as listeners_mod
from oncelog.broker.observability import metrics as metrics_mod
from oncelog.broker import periodic
from oncelog.broker.auth import tls
from oncelog.broker.auth.credentials import CredentialFile, UserCredentials
from oncelog.broker.auth.sasl import SUPPORTED_MECHANISMS, SaslSession
from oncelog.broker.auth.acls import AclService
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.network.dispatch import Dispatcher
from oncelog.broker.coordinators.group_coordinator import OFFSETS_TOPIC, OFFSETS_TOPIC_SEGMENT_BYTES, GroupCoordinator
from oncelog.broker.partitions.markers import LocalMarkerWriter
from oncelog.broker.membership.peer_client import PeerClients, PeerSecurity
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.broker.coordinators.share_coordinator import ShareCoordinator
from oncelog.broker.routes import ROUTES
from oncelog.broker.routes import load as load_handlers
from oncelog.broker.network.server import Server
from oncelog.broker.coordinators.transaction_coordinator import TXN_TOPIC, TXN_TOPIC_SEGMENT_BYTES, TransactionCoordinator
from oncelog.clock import Clock, SystemClock
from oncelog.coordinator.producer_ids import ProducerIdManager
from oncelog.coordinator.transaction.shard import TxnSettings
from oncelog.faults import CrashPoints
from oncelog.protocol import apis
from oncelog.protocol.errors import InvalidConfig, KafkaError
from oncelog.storage.engines.local import cleaner
from oncelog.storage.atomic import write_atomically
from oncelog.types import TopicPartition

if TYPE_CHECKING:  # cluster mode's modules need psycopg (the 'cluster' extra): imported when used
    from oncelog.broker.membership.cluster_credentials import StoreUserCredentials
    from oncelog.broker.membership.cluster_member import ClusterMember
    from oncelog.broker.membership.cluster_parts import ClusterParts
    from oncelog.broker.membership.outbox_drainer import OutboxDrainer
    from oncelog.cluster.acls import StoreAcls
    from oncelog.broker.membership.inbox import Inbox
    from oncelog.console import Console

log = logging.getLogger(__name__)


def _load_or_create_cluster_id(data_dir: Path) -> str:
    path = data_dir / "meta.properties"
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1].strip()
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    write_atomically(path, f"version=1\ncluster.id={cluster_id}\n".encode())
    return cluster_id


class Broker:
    """Implements ``context.BrokerContext``: what the handlers may use."""

    def __init__(self, config: BrokerConfig, clock: Clock | None = None, *, store: str | None = None) -> None:
        """``store``: a PostgreSQL URL (``postgresql://USER@HOST:PORT/DB``) for cluster mode
        (issue 15, docs/CLUSTER.md); None: the embedded single node on local files."""
        self.config = config
        self.clock = clock or SystemClock()
        self.node_id = config.node_id
        self.replicas = ReplicaManager(config, self.clock)
        self.cluster_id = ""
        self.groups = GroupCoordinator(self.replicas, config, self.clock)
        #: share groups (KIP-932, issue 30): state in __share_group_state (embedded) or the store
        self.shares = ShareCoordinator(self.replicas, config, self.clock)
        self.transactions: TransactionCoordinator  # set by start(): it needs the data directory
        self.producer_ids: ProducerIdManager  # set by start()
        self.store = store
        self.cluster: ClusterMember | None = None  # set by start() in cluster mode
        self._cluster_parts: ClusterParts | None = None
        self._outbox: "OutboxDrainer | None" = None  # cluster mode: the database outbox's drain
        self._inbox: "Inbox | None" = None  # cluster mode: the database inbox (broker/membership/inbox.py)
        self._peers: PeerClients | None = None  # cluster mode: connections to the other brokers
        self.acls: AclService | None = None  # issue 18: set by start() when an authorizer is configured
        self._store_acls: "StoreAcls | None" = None  # cluster mode with ACLs on
        #: SCRAM credentials: the data dir's file; in cluster mode the store's (set by start())
        self.users: UserCredentials | StoreUserCredentials = UserCredentials(CredentialFile(config.data_dir))
        #: issue 19: Prometheus metrics (broker/observability/metrics.py); None unless metrics.listen is set
        self.metrics = metrics_mod.metrics_for(self)
        #: issue 19: the read-only web console (oncelog/console/); None unless console.listen is set
        self.console: Console | None = None
        if config.console_listen is not None:
            from oncelog.console import console_for

            self.console = console_for(self)
        # one table (issue 27): the handlers ask the membership where the modes differ
        routes = ROUTES
        self.dispatcher = Dispatcher(self, routes)
        self.listeners = listeners_mod.resolve(config)  # raises InvalidConfig before anything listens
        self.servers = [self._server_for(lst, routes) for lst in self.listeners]
        primary = self._primary_index()
        self.listener = self.listeners[primary]
        self.server = self.servers[primary]  # the ready line's, the one the cluster store registers
        self._housekeeping: list[asyncio.Task[None]] = []
        #: set when the broker stops: a compaction pass in progress gives up (InterruptedError)
        self._compaction_stop = threading.Event()

    def _primary_index(self) -> int:
        """The first PLAINTEXT listener, else the first listener."""
        for i, lst in enumerate(self.listeners):
            if lst.protocol == "PLAINTEXT":
                return i
        return 0

    def _server_for(self, lst: listeners_mod.Listener, routes: dict) -> Server:  # type: ignore[type-arg]
        """The listener's server: its TLS context, its SASL sessions, and a dispatcher whose
        handlers see the listener's advertised address (Metadata, FindCoordinator and
        DescribeCluster answer with the endpoint of the listener the client came on)."""
        cfg = self.config.for_listener(lst.name)
        ctx = tls.server_context(cfg, lst.name) if lst.tls else None
        sasl = None
        if lst.sasl:
            enabled = tuple(m.strip().upper() for m in cfg.sasl_enabled_mechanisms.split(",") if m.strip())
            unknown = [m for m in enabled if m not in SUPPORTED_MECHANISMS]
            if unknown or not enabled:
                raise InvalidConfig(f"sasl.enabled.mechanisms: {', '.join(unknown) or 'empty'}: supported are "
                                    f"{', '.join(SUPPORTED_MECHANISMS)}")
            lifetime = cfg.connections_max_reauth_ms
            sasl = lambda: SaslSession(enabled, lambda: self.users.store, lifetime_ms=lifetime)  # noqa: E731
        server = Server(self.dispatcher.handle, lst.host, lst.port, cfg, name=lst.name, ssl_context=ctx, sasl=sasl)
        server.pipeline_produce = bool(self.store)  # issue 28: Produce waits for a COMMIT only in cluster mode
        if not (lst.name == "PLAINTEXT" and self.config.listeners is None):
            server.handle = Dispatcher(_ListenerView(self, lst, server), routes).handle
        return server

    def _inter_broker_listener(self) -> listeners_mod.Listener:
        """``inter.broker.listener.name``'s listener, else the primary. Raises InvalidConfig."""
        name = self.config.inter_broker_listener_name
        if name is None:
            return self.listener
        for lst in self.listeners:
            if lst.name == name.upper():
                return lst
        raise InvalidConfig(f"inter.broker.listener.name={name}: no such listener")

    def _peer_security(self, lst: listeners_mod.Listener) -> PeerSecurity:
        """How this broker logs in to its peers' inter-broker listener: TLS with its own
        certificate (and the listener's truststore), SASL with ``sasl.jaas.config``'s user."""
        import re
        import ssl

        cfg = self.config.for_listener(lst.name)
        ctx = None
        if lst.tls:
            ctx = ssl.create_default_context(cafile=cfg.ssl_truststore_location,
                                             cadata=cfg.ssl_truststore_certificates)
            if cfg.ssl_keystore_location:
                ctx.load_cert_chain(cfg.ssl_keystore_location, password=cfg.ssl_key_password)
        if not lst.sasl:
            return PeerSecurity(ctx)
        mech = cfg.sasl_mechanism_inter_broker_protocol.upper()
        jaas = cfg.sasl_jaas_config or ""
        user = re.search(r'username\s*=\s*"([^"]*)"', jaas)
        password = re.search(r'password\s*=\s*"([^"]*)"', jaas)
        if mech not in SUPPORTED_MECHANISMS or user is None or password is None:
            raise InvalidConfig(f"inter-broker listener {lst.name} uses SASL: set sasl.mechanism.inter.broker.protocol "
                                f"(one of {', '.join(SUPPORTED_MECHANISMS)}) and listener.name.{lst.name.lower()}."
                                f"{mech.lower()}.sasl.jaas.config with username=\"…\" password=\"…\"")
        return PeerSecurity(ctx, mech, user.group(1), password.group(1))

    def advertised_versions(self) -> dict[int, tuple[int, int]]:
        return self.dispatcher.versions

    @property
    def advertised_host(self) -> str:
        return self.listener.advertised_host

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def listener_name(self) -> str:
        """The name of the listener requests come on, as the handlers see it (the primary's here;
        a ``_ListenerView`` says its own)."""
        return self.listener.name

    @property
    def advertised_port(self) -> int:
        """The port advertised to clients: ``advertised.port`` if set, else the listening port."""
        return self.listener.advertised_port or self.server.port

    def bound_listeners(self) -> list[tuple[listeners_mod.Listener, str, int]]:
        """(listener, bound host, bound port) of every listener, once started."""
        return [(lst, srv.host, srv.port) for lst, srv in zip(self.listeners, self.servers)]

    async def _start_servers(self) -> tuple[str, int]:
        """Listen on every listener; the primary's bound address is returned. If one listener
        cannot bind, the others are closed again."""
        started: list[Server] = []
        try:
            for srv in self.servers:
                await srv.start()
                started.append(srv)
        except BaseException:
            for srv in started:
                await srv.close()
            raise
        for lst, host, port in self.bound_listeners():
            log.info("listener %s (%s) on %s:%d, advertised as %s:%d", lst.name, lst.protocol, host, port,
                     lst.advertised_host, lst.advertised_port or port)
        return self.server.host, self.server.port

    async def _close_servers(self) -> None:
        for srv in self.servers:
            await srv.close()

    async def start(self) -> tuple[str, int]:
        data_dir = Path(self.config.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        apis.preload()  # the first requests' message classes, before we say we are ready
        load_handlers()  # and their handlers; the other handlers are imported at first use
        if self.metrics is not None:
            self.metrics.serve()  # first: an address that refuses stops the start before anything opens
        if self.console is not None:
            self.console.serve()  # also before anything opens; it reaches the listener only when asked
        if self.store:
            return await self._start_cluster_member()
        self.cluster_id = _load_or_create_cluster_id(data_dir)
        self.acls = AclService.for_config(self.config)  # before listening: no request is ever unchecked
        self.producer_ids = ProducerIdManager(data_dir / "producer_id_block.json")
        cleaner.recover(data_dir)  # finish or undo a compaction interrupted by a crash
        self.replicas.open()
        self.groups.start()  # creates __consumer_offsets, loads it in the background
        self.shares.start()  # loads __share_group_state (when it exists) in the background
        await self._start_transaction_coordinator(data_dir)
        bound = await self._start_servers()
        cfg = self.config
        self._every(cfg.log_retention_check_interval_ms, self._enforce_retention)
        # Kafka checks every producer.id.expiration.check.interval.ms (10 minutes).
        self._every(int(min(600_000, max(cfg.producer_id_expiration_ms / 10, 1000))), self._expire_producers)
        if cfg.log_cleaner_enable:
            self._every(cfg.log_cleaner_backoff_ms, self._compact)
        return bound

    async def _start_transaction_coordinator(self, data_dir: Path) -> None:
        """Load ``__transaction_state`` before listening (every transaction left between states
        is finished first, R19) and start its timers."""
        cfg = self.config
        epoch_file = data_dir / "transaction_coordinator_epoch"
        epoch = int(epoch_file.read_text()) + 1 if epoch_file.exists() else 0
        write_atomically(epoch_file, str(epoch).encode())
        self.transactions = TransactionCoordinator(
            self.replicas, self.clock,
            self._txn_settings(cfg.transaction_state_log_num_partitions, cfg.offsets_topic_num_partitions),
            producer_ids=self.producer_ids, markers=LocalMarkerWriter(self.replicas, self.groups),
            coordinator_epoch=epoch, crash=CrashPoints(),
        )
        loaded = await self.transactions.load()
        log.info("transaction coordinator loaded %d transactional id(s), coordinator epoch %d", loaded, epoch)
        self._start_transaction_timers()

    def _txn_settings(self, num_partitions: int, offsets_partitions: int) -> TxnSettings:
        cfg = self.config
        return TxnSettings(num_partitions=num_partitions, max_timeout_ms=cfg.transaction_max_timeout_ms,
                           id_expiration_ms=cfg.transactional_id_expiration_ms, offsets_partitions=offsets_partitions)

    def _start_transaction_timers(self) -> None:
        cfg = self.config
        self._every(cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms, self._transaction_timeouts)
        self._every(cfg.transaction_remove_expired_transaction_cleanup_interval_ms, self._transactional_id_expiry)

    async def _transaction_timeouts(self) -> None:
        aborted = await self.transactions.abort_timed_out()
        if aborted:
            log.info("aborted %d timed-out transaction(s): %s", len(aborted), ", ".join(aborted))
        await self.transactions.retry_unfinished()

    async def _transactional_id_expiry(self) -> None:
        expired = await self.transactions.expire_transactional_ids()
        if expired:
            log.info("expired %d transactional id(s)", len(expired))

    def _every(self, interval_ms: int, job: Callable[[], Awaitable[None] | None]) -> None:
        """Run ``job`` every ``interval_ms`` on the event loop until stop() (broker/periodic.py)."""
        what = f"housekeeping job {getattr(job, '__name__', job)}"
        self._housekeeping.append(periodic.every(interval_ms / 1000, job, what, log))

    async def _start_cluster_member(self) -> tuple[str, int]:
        """Cluster mode: create the internal topics in the store unless they exist, listen,
        then join the cluster (broker/membership/cluster_member.py); partitions are opened as this broker
        is given their leadership (leader_tracker.py), and the group and transaction
        coordinators load the internal partitions among them (``_on_lead``), with the leader
        epoch as the coordinator epoch. Markers for partitions led elsewhere go to their leader
        as WriteTxnMarkers (markers.ClusterMarkerWriter)."""
        from oncelog.broker.membership.cluster_member import ClusterMember
        from oncelog.broker.membership.cluster_parts import ClusterParts
        from oncelog.broker.partitions.markers import ClusterMarkerWriter
        from oncelog.broker.partitions.txn_verifier import RemoteVerifier
        from oncelog.cluster.producer_ids import StoreProducerIds

        assert self.store
        cfg = self.config
        parts = ClusterParts.open(self.store, cfg, self.replicas)
        self._cluster_parts = parts
        self.producer_ids = StoreProducerIds(parts.reader)  # type: ignore[assignment]
        self.cluster = member = ClusterMember(self.store, cfg, self.clock, parts.tracker.apply)
        try:
            counts = await member.prepare([
                (OFFSETS_TOPIC, cfg.offsets_topic_num_partitions,
                 {"cleanup.policy": "compact", "segment.bytes": str(OFFSETS_TOPIC_SEGMENT_BYTES)}),
                (TXN_TOPIC, cfg.transaction_state_log_num_partitions,
                 {"cleanup.policy": "compact", "segment.bytes": str(TXN_TOPIC_SEGMENT_BYTES)}),
            ])
        except BaseException:
            parts.close()
            raise
        self.groups.num_partitions = counts[OFFSETS_TOPIC]
        self.groups.start(load_all=False)
        from oncelog.broker.membership.cluster_member import connector as share_connector
        from oncelog.cluster.connection import StoreConnection
        from oncelog.cluster.share_state import StoreShareState

        # share groups (KIP-932, issue 30): their state in the store, written by each partition's leader
        self.shares.start_cluster(StoreShareState(StoreConnection(share_connector(self.store), f"node {self.node_id} share state"),
                                                  self.node_id))
        if cfg.authorizer_class_name:  # issue 18: the cluster's ACLs live in the store (cluster/acls.py)
            from oncelog.broker.membership.cluster_member import connector
            from oncelog.cluster.acls import StoreAcls

            self._store_acls = StoreAcls(connector(self.store), f"node {self.node_id} acls")
            self.acls = await asyncio.to_thread(AclService.for_config, cfg, self._store_acls)
            member.after_poll.append(self.acls.refresh)  # type: ignore[union-attr]

        inter = self._inter_broker_listener()

        def address_of(node: int) -> tuple[str, int] | None:
            b = member.view.broker(node)
            return None if b is None else b.endpoint(inter.name)

        self._peers = PeerClients(self.node_id, address_of, self._peer_security(inter))
        self.transactions = TransactionCoordinator(
            self.replicas, self.clock, self._txn_settings(counts[TXN_TOPIC], counts[OFFSETS_TOPIC]),
            producer_ids=self.producer_ids,
            markers=ClusterMarkerWriter(self.node_id, self.replicas, self.groups, lambda: member.view, self._peers),
            crash=CrashPoints(),
        )
        self.transactions.remote = RemoteVerifier(lambda: member.view, self._peers, self.transactions.partition_of)
        parts.tracker.on_lead = self._on_lead
        parts.tracker.on_resign = self._on_resign
        from oncelog.broker.membership.cluster_credentials import StoreUserCredentials
        from oncelog.broker.membership.cluster_member import connector

        self.users = users = StoreUserCredentials(connector(self.store), self.node_id)
        try:
            await users.refresh()  # the schema exists: member.prepare() made it
        except BaseException:
            users.close()
            parts.close()
            raise
        self._every(1000, users.refresh_quietly)
        bound = await self._start_servers()
        try:
            await member.start(self.advertised_host, self.advertised_port,
                               {lst.name: (lst.advertised_host, lst.advertised_port or port)
                                for lst, _, port in self.bound_listeners()})
        except BaseException:
            await self._close_servers()
            parts.close()
            raise
        self.cluster_id = member.cluster_id
        from oncelog.broker.membership.outbox_drainer import OutboxDrainer

        self._outbox = OutboxDrainer(self.replicas, parts.reader, connector(self.store),
                                     self.producer_ids.next_producer_id, self.clock, self.node_id)
        self._outbox.start()  # issue 31: oncelog.send's pending rows into the partitions led here
        from oncelog.broker.membership.inbox import Inbox

        import psycopg

        store = self.store
        inbox = Inbox(connector(store), lambda: psycopg.AsyncConnection.connect(store, autocommit=True, connect_timeout=10),
                      self.node_id)
        if inbox.available():  # issue 31: oncelog.commit_offsets's commits, for the groups coordinated here
            inbox.start(self.groups)
            self.groups.inbox = self._inbox = inbox
        self._start_transaction_timers()
        self._every(cfg.log_retention_check_interval_ms, self._enforce_retention)
        self._every(int(min(600_000, max(cfg.producer_id_expiration_ms / 10, 1000))), self._expire_producers)
        if cfg.log_cleaner_enable:
            self._every(cfg.log_cleaner_backoff_ms, self._compact)
        return bound

    def _on_lead(self, tp: TopicPartition, leader_epoch: int) -> None:
        if tp.topic == TXN_TOPIC:
            self.transactions.lead(tp.partition, leader_epoch)
        elif tp.topic == OFFSETS_TOPIC:
            self.groups.lead(tp.partition)

    def _on_resign(self, tp: TopicPartition) -> None:
        if tp.topic == TXN_TOPIC:
            self.transactions.resign(tp.partition)
        elif tp.topic == OFFSETS_TOPIC:
            self.groups.resign(tp.partition)

    async def stop(self) -> None:
        self._compaction_stop.set()
        for task in self._housekeeping:
            task.cancel()
        await asyncio.gather(*self._housekeeping, return_exceptions=True)
        if self._inbox is not None:  # before the group coordinator: its drains write through it
            await self._inbox.stop()
        await self.groups.stop()
        await self.shares.stop()
        await self._close_servers()
        if self._outbox is not None:
            await self._outbox.stop()
        if self.cluster is not None:
            await self.cluster.stop()
        if self._peers is not None:
            self._peers.close()
        if self._cluster_parts is not None:
            self._cluster_parts.close()
        close_users = getattr(self.users, "close", None)
        if close_users is not None:
            close_users()
        if self._store_acls is not None:
            self._store_acls.close()
        if self.metrics is not None:
            await asyncio.to_thread(self.metrics.close)  # waits for a scrape in progress, which needs the loop
        if self.console is not None:
            await asyncio.to_thread(self.console.close)
        self.replicas.close()

    def _expire_producers(self) -> None:
        gone = self.replicas.expire_producers()
        if gone:
            log.info("expired %d idle producer id(s)", gone)

    def _enforce_retention(self) -> None:
        deleted = self.replicas.enforce_retention()
        if deleted:
            log.info("retention deleted %d segment(s)", deleted)

    async def _compact(self) -> None:
        """One compaction pass over the partitions of compacted topics (R4), one after the
        other, each the way its engine compacts (``PartitionEngine.plan_compaction``, storage/
        engine.py): the plan on the event loop, the heavy part (``build``) in a thread, the
        result made the log that is read (``commit``) on the event loop again. Local files:
        new segments are built, then swapped in (storage/engines/local/cleaner.py); PostgreSQL:
        rows are rewritten in the thread with the compactor's own store connection, each page
        conditional on the leader epoch. A partition that fails is retried in the next pass."""
        for tp, part in list(self.replicas.partitions.items()):
            try:
                job = part.log.plan_compaction(part.last_stable_offset, self.clock.now_ms(), self._compaction_stop)
                if job is None:
                    continue
                await asyncio.to_thread(job.build)
                if self.replicas.partitions.get(tp) is not part:
                    job.abort()  # the topic was deleted meanwhile
                    continue
                done = job.commit()
                if done is not None:
                    log.info("compaction of %s: %s", tp, done)
            except asyncio.CancelledError:
                raise
            except InterruptedError:
                return  # the cleaner is stopping
            except KafkaError as exc:  # the store refused or is unreachable
                log.warning("compaction of %s: %s; retried in the next pass", tp, exc)
            except Exception:
                log.exception("compaction of %s failed; it is retried in the next pass", tp)


class _ListenerView:
    """The broker as the handlers of one listener see it: everything is the broker's, except
    the advertised address, which is the listener's (``advertised.listeners``)."""

    def __init__(self, broker: Broker, listener: listeners_mod.Listener, server: Server) -> None:
        self._broker = broker
        self._listener = listener
        self._server = server

    def __getattr__(self, name: str) -> object:
        return getattr(self._broker, name)

    @property
    def advertised_host(self) -> str:
        return self._listener.advertised_host

    @property
    def listener_name(self) -> str:
        return self._listener.name

    @property
    def advertised_port(self) -> int:
        return self._listener.advertised_port or self._server.port
