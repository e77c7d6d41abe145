"""The broker: configuration, storage, coordinators and the server, started and stopped as one.

``Broker.start()`` opens the data directory (recovering every log), starts the housekeeping
tasks (retention) and listens. ``Broker.stop()`` stops listening, closes connections, and closes
every log cleanly (flushing it), so a SIGTERM never loses acknowledged data — and a SIGKILL does
not either, because every acknowledged batch is already in the log file (see config.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Awaitable, Callable

from oncelog.broker.network import listeners as listeners_mod
from oncelog.broker.observability import metrics as metrics_mod
from oncelog.broker import periodic
from oncelog.broker.auth import tls
from oncelog.broker.auth.sasl import SUPPORTED_MECHANISMS, SaslSession
from oncelog.broker.auth.acls import AclService
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.configuration.dynamic_config import DynamicBrokerConfigs
from oncelog.broker.coordinators.group_coordinator import OFFSETS_TOPIC, GroupCoordinator
from oncelog.broker.coordinators.transaction_coordinator import TXN_TOPIC, TransactionCoordinator
from oncelog.broker.membership import (
    ConfigStore,
    CredentialService,
    Membership,
    Metadata,
    ProducerIdSource,
    TopicStore,
    membership_for,
)
from oncelog.broker.membership.peer_client import PeerSecurity
from oncelog.broker.network.dispatch import Dispatcher
from oncelog.broker.network.request_memory import RequestMemory
from oncelog.broker.network.server import Server
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.broker.coordinators.share_coordinator import ShareCoordinator
from oncelog.broker.routes import ROUTES
from oncelog.broker.routes import load as load_handlers
from oncelog.clock import Clock, SystemClock
from oncelog.coordinator.transaction.shard import TxnSettings
from oncelog.faults import CrashPoints
from oncelog.protocol import apis
from oncelog.protocol.errors import InvalidConfig, KafkaError
from oncelog.types import TopicPartition

if TYPE_CHECKING:
    from oncelog.broker.observability.metrics import BrokerMetrics, RequestStats
    from oncelog.broker.partitions.partition import Partition
    from oncelog.console import Console
    from oncelog.schema_registry import SchemaRegistry
    from oncelog.schema_registry.validation import SchemaIds

log = logging.getLogger(__name__)


class Broker:
    """Implements ``context.BrokerContext``: what the handlers may use."""

    def __init__(self, config: BrokerConfig, clock: Clock | None = None, *, store: str | None = None) -> None:
        """``store``: a PostgreSQL URL (``postgresql://USER@HOST:PORT/DB``) for cluster mode
        (issue 15, docs/CLUSTER.md); None: the embedded single node on local files."""
        self.config = config
        self.clock = clock or SystemClock()
        self.node_id = config.node_id
        self.replicas = ReplicaManager(config, self.clock)
        #: issue 27: who the brokers are and where the metadata is kept: this node alone (the data
        #: dir's files) or the cluster on PostgreSQL (broker/membership/); the one choice between
        #: them, which also gives the coordinators what differs between the modes
        self.membership: Membership = membership_for(config, self.clock, self.replicas, store,
                                                     address_of=self._advertised_address,
                                                     inter_broker=self._inter_broker)
        #: the coordinators, built by start() with what the opened membership hands them (the
        #: data directory's or the store's parts): groups, transactions, share groups (KIP-932)
        self.groups: GroupCoordinator
        self.transactions: TransactionCoordinator
        self.shares: ShareCoordinator
        #: issue 19: Prometheus metrics (broker/observability/metrics.py); None unless metrics.listen is set
        self.metrics_endpoint: BrokerMetrics | None = metrics_mod.metrics_for(self)
        #: the request-path counters the handlers update (context.BrokerContext.metrics): the
        #: metrics' own, or the console's alone (its charts); None when neither is on
        self.metrics: RequestStats | None = self.metrics_endpoint
        #: issue 19: the web console (oncelog/console/); None unless console.listen is set
        self.console: Console | None = None
        if config.console_listen is not None:
            from oncelog.console import console_for

            self.console = console_for(self)
            if self.metrics is None:
                self.metrics = metrics_mod.RequestStats()
        #: the schema registry (oncelog/schema_registry/, docs/SCHEMA-REGISTRY.md); None unless
        #: schema.registry.listen is set
        self.schema_registry: SchemaRegistry | None = None
        if config.schema_registry_listen is not None:
            from oncelog.schema_registry import registry_for

            self.schema_registry = registry_for(self)
        self._schema_ids: SchemaIds | None = None
        self.dispatcher = self._dispatcher(self)
        self.listeners = listeners_mod.resolve(config)  # raises InvalidConfig before anything listens
        #: queued.max.request.bytes: one bound on the request bytes of every listener's connections
        self.request_memory = RequestMemory(config.queued_max_request_bytes)
        self.servers = [self._server_for(lst) for lst in self.listeners]
        #: the dynamic connection limits (AlterConfigs on the BROKER resource) reach every listener at once
        self.replicas.on_broker_configs.append(self._adopt_connection_limits)
        primary = self._primary_index()
        self.listener = self.listeners[primary]
        self.server = self.servers[primary]  # the ready line's, the one the cluster store registers
        self._housekeeping: list[asyncio.Task[None]] = []
        #: set when the broker stops: a compaction pass in progress gives up (InterruptedError)
        self._compaction_stop = threading.Event()

    def _adopt_connection_limits(self, dynamic: DynamicBrokerConfigs) -> None:
        for server in self.servers:
            server.quotas.adopt(dynamic.value)

    def _primary_index(self) -> int:
        """The first PLAINTEXT listener, else the first listener."""
        for i, lst in enumerate(self.listeners):
            if lst.protocol == "PLAINTEXT":
                return i
        return 0

    def _dispatcher(self, context: "Broker | ListenerContext") -> Dispatcher:
        return Dispatcher(context, ROUTES, fence=self.membership.fence_if_lease_lapsed, metrics=self.metrics)

    # -- what the handlers use (context.BrokerContext): the membership's services -------------

    @property
    def cluster_id(self) -> str:
        return self.membership.cluster_id

    @property
    def metadata(self) -> Metadata:
        return self.membership

    @property
    def topics(self) -> TopicStore:
        return self.membership.topics

    @property
    def configs(self) -> ConfigStore:
        return self.membership.configs

    @property
    def users(self) -> CredentialService:
        return self.membership.users

    @property
    def acls(self) -> AclService | None:
        return self.membership.acls

    @property
    def producer_ids(self) -> ProducerIdSource:
        return self.membership.producer_ids

    @property
    def schema_ids(self) -> "SchemaIds":
        """The produce path's schema-id check (topics with confluent.*.schema.validation), made
        at first use."""
        if self._schema_ids is None:
            from oncelog.schema_registry import schema_ids_for

            self._schema_ids = schema_ids_for(self)
        return self._schema_ids

    def _advertised_address(self, listener: str) -> tuple[str, int]:
        """This broker's advertised (host, port) on listener ``listener`` (the primary's when
        there is no such listener)."""
        for lst, srv in zip(self.listeners, self.servers):
            if lst.name == listener:
                return lst.advertised_host, lst.advertised_port or srv.port
        return self.advertised_host, self.advertised_port

    def _server_for(self, lst: listeners_mod.Listener) -> Server:
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
        server = Server(self.dispatcher.handle, lst.host, lst.port, cfg, name=lst.name, ssl_context=ctx, sasl=sasl,
                        memory=self.request_memory,
                        pipeline_produce=self.membership.pipeline_produce)  # issue 28: Produce waits for a COMMIT
        if not (lst.name == "PLAINTEXT" and self.config.listeners is None):
            server.handle = self._dispatcher(ListenerContext(self, lst, server)).handle
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

    def _inter_broker(self) -> tuple[str, PeerSecurity]:
        """Cluster mode: the inter-broker listener's name, and how this broker logs in there."""
        inter = self._inter_broker_listener()
        return inter.name, self._peer_security(inter)

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
        return self.dispatcher.advertised

    @property
    def advertised_host(self) -> str:
        return self.listener.advertised_host

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def listener_name(self) -> str:
        """The name of the listener requests come on, as the handlers see it (the primary's here;
        a ``ListenerContext`` says its own)."""
        return self.listener.name

    @property
    def advertised_port(self) -> int:
        """The port advertised to clients: ``advertised.port`` if set, else the listening port."""
        return self.listener.advertised_port or self.server.port

    def bound_listeners(self) -> list[tuple[listeners_mod.Listener, str, int]]:
        """(listener, bound host, bound port) of every listener, once started."""
        return [(lst, srv.host, srv.port) for lst, srv in zip(self.listeners, self.servers)]

    async def _start_servers(self) -> tuple[str, int]:
        """Listen on every listener, accepting nothing yet (``_accept``); the primary's bound
        address is returned. If one listener cannot bind, the others are closed again."""
        started: list[Server] = []
        try:
            for srv in self.servers:
                await srv.start(accept=False)
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
        """One start sequence (issue 27); what differs between the embedded node and a member of
        a cluster lives in the two ``Membership`` implementations (broker/membership/)."""
        data_dir = Path(self.config.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        apis.preload()  # the first requests' message classes, before we say we are ready
        load_handlers()  # and their handlers; the other handlers are imported at first use
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.serve()  # first: an address that refuses stops the start before anything opens
        if self.console is not None:
            self.console.serve()  # also before anything opens; it reaches the listener only when asked
        if self.schema_registry is not None:
            self.schema_registry.serve()  # also before anything opens; its store reads once the broker listens
        m = self.membership
        listening = False
        try:
            await m.open()  # ACLs before listening: no request is ever unchecked
            cfg = self.config
            counts = m.internal_partitions
            self.groups = GroupCoordinator(self.replicas, cfg, self.clock, inbox=m.offset_inbox,
                                           configs=m.group_configs,
                                           num_partitions=counts[OFFSETS_TOPIC])
            self.transactions = TransactionCoordinator(
                self.replicas, self.clock, self._txn_settings(counts[TXN_TOPIC], counts[OFFSETS_TOPIC]),
                producer_ids=m.producer_ids, markers=m.marker_writer(self.groups), remote=m.transaction_remote,
                coordinator_epoch=m.coordinator_epoch, crash=CrashPoints(),
            )
            self.shares = ShareCoordinator(self.replicas, cfg, self.clock, persister=m.share_persister,
                                           members=m.share_members(self.groups))
            await m.start_coordinators(self.groups, self.transactions, self.shares)
            bound = await self._start_servers()
            listening = True
            await m.join({lst.name: (lst.advertised_host, lst.advertised_port or port)
                          for lst, _, port in self.bound_listeners()}, self.advertised_host, self.advertised_port)
            # Only now, as a KRaft broker serves clients only once it has caught up with the
            # metadata log: in cluster mode the listeners are bound before the join (the store
            # registers their ports), but until the first view is applied this broker knows no
            # topic, and a Metadata answer of UNKNOWN_TOPIC_OR_PARTITION with no brokers then
            # reads as a deleted topic to librdkafka (its consumer drops the assigned partitions
            # and never fetches them again). Connections made meanwhile wait in the backlog.
            for srv in self.servers:
                srv.start_accepting()
        except BaseException:
            if listening:
                await self._close_servers()
            await m.close()
            raise
        if self.schema_registry is not None:
            self.schema_registry.open()
        self._every(cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms, self._transaction_timeouts)
        self._every(cfg.transaction_remove_expired_transaction_cleanup_interval_ms, self._transactional_id_expiry)
        self._every(cfg.log_retention_check_interval_ms, self._enforce_retention)
        # Kafka checks every producer.id.expiration.check.interval.ms (10 minutes).
        self._every(int(min(600_000, max(cfg.producer_id_expiration_ms / 10, 1000))), self._expire_producers)
        if cfg.log_cleaner_enable:
            self._every(cfg.log_cleaner_backoff_ms, self._compact)
        if self.console is not None:  # the charts' history (broker/observability/history.py)
            self._every(cfg.console_history_interval_ms, self.console.sample)
        return bound

    def _txn_settings(self, num_partitions: int, offsets_partitions: int) -> TxnSettings:
        cfg = self.config
        return TxnSettings(num_partitions=num_partitions, max_timeout_ms=cfg.transaction_max_timeout_ms,
                           id_expiration_ms=cfg.transactional_id_expiration_ms, offsets_partitions=offsets_partitions)

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

    async def stop(self) -> None:
        self._compaction_stop.set()
        if self.schema_registry is not None or self._schema_ids is not None:  # its clients use the listener
            await asyncio.to_thread(self._close_schema_registry)
        for task in self._housekeeping:
            task.cancel()
        await asyncio.gather(*self._housekeeping, return_exceptions=True)
        await self.membership.stop_coordinators()  # before the group coordinator (cluster: the inbox)
        await self.transactions.flush()  # the Complete* records not yet in __transaction_state
        await self.groups.stop()
        await self.shares.stop()
        await self._close_servers()
        await self.membership.close()
        if self.metrics_endpoint is not None:
            await asyncio.to_thread(self.metrics_endpoint.close)  # waits for a scrape in progress, which needs the loop
        if self.console is not None:
            await asyncio.to_thread(self.console.close)
        self.replicas.close()

    def _close_schema_registry(self) -> None:
        if self.schema_registry is not None:
            self.schema_registry.close()
        if self._schema_ids is not None:
            self._schema_ids.close()

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


class ListenerContext:
    """The broker as the handlers of one listener see it (``context.BrokerContext``, every
    member declared): everything is the broker's, except the advertised address, which is the
    listener's (``advertised.listeners``)."""

    def __init__(self, broker: Broker, listener: listeners_mod.Listener, server: Server) -> None:
        self._broker = broker
        self._listener = listener
        self._server = server

    @property
    def config(self) -> BrokerConfig:
        return self._broker.config

    @property
    def clock(self) -> Clock:
        return self._broker.clock

    @property
    def node_id(self) -> int:
        return self._broker.node_id

    @property
    def cluster_id(self) -> str:
        return self._broker.cluster_id

    @property
    def replicas(self) -> ReplicaManager:
        return self._broker.replicas

    @property
    def groups(self) -> GroupCoordinator:
        return self._broker.groups

    @property
    def transactions(self) -> TransactionCoordinator:
        return self._broker.transactions

    @property
    def producer_ids(self) -> ProducerIdSource:
        return self._broker.producer_ids

    @property
    def metadata(self) -> Metadata:
        return self._broker.metadata

    @property
    def topics(self) -> TopicStore:
        return self._broker.topics

    @property
    def configs(self) -> ConfigStore:
        return self._broker.configs

    @property
    def users(self) -> CredentialService:
        return self._broker.users

    @property
    def acls(self) -> AclService | None:
        return self._broker.acls

    @property
    def shares(self) -> ShareCoordinator:
        return self._broker.shares

    @property
    def metrics(self) -> "RequestStats | None":
        return self._broker.metrics

    @property
    def schema_ids(self) -> "SchemaIds":
        return self._broker.schema_ids

    def advertised_versions(self) -> dict[int, tuple[int, int]]:
        return self._broker.advertised_versions()

    @property
    def advertised_host(self) -> str:
        return self._listener.advertised_host

    @property
    def listener_name(self) -> str:
        return self._listener.name

    @property
    def advertised_port(self) -> int:
        return self._listener.advertised_port or self._server.port
