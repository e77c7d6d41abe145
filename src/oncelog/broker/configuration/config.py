"""Broker configuration, under Kafka's property names.

``BrokerConfig`` is read from a ``server.properties``-style file and/or ``key=value`` overrides
given on the command line; every key is one Kafka has (the table below says which), so an
operator's existing knowledge applies. Unknown keys are rejected, so a typo never silently does
nothing.

Durability default (``log.flush.interval.messages`` unset, as in Kafka): a produce request is
acknowledged once its batch is written to the log file, that is, in the operating system's page
cache. That survives a crash (kill -9) of the broker process; it does not survive a power loss or
kernel crash of the machine, for which set ``log.flush.interval.messages=1`` (fsync before every
acknowledgement) or a ``log.flush.interval.ms``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from oncelog.hostport import parse_listen
from oncelog.properties import parse_properties  # noqa: F401  (re-exported: tests, tools)
from oncelog.protocol.errors import InvalidConfig

DAY_MS = 24 * 3600 * 1000


def _bool(v: str) -> bool:
    if v.lower() in ("true", "1", "yes"):
        return True
    if v.lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {v!r}")


def _commit_connections(v: str) -> int:
    n = int(v)
    if not 1 <= n <= 32:
        raise ValueError("must be 1 to 32")
    return n


#: ``authorizer.class.name`` values that turn ACLs on (issue 18): Kafka's two and oncelog's short name
AUTHORIZER_NAMES = frozenset({
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "kafka.security.authorizer.AclAuthorizer", "oncelog",
})


def _authorizer(v: str) -> str:
    v = v.strip()
    if v and v not in AUTHORIZER_NAMES:
        raise ValueError(f"unknown authorizer (one of: {', '.join(sorted(AUTHORIZER_NAMES))}, or empty for none)")
    return v


def _listen(v: str) -> str | None:
    """``HOST:PORT`` (checked here, so a bad address is a config error at start), or empty for none."""
    if v.strip() in ("", "none", "null"):
        return None
    parse_listen(v)
    return v.strip()


def _positive(v: str) -> int:
    n = int(v)
    if n <= 0:
        raise ValueError("must be > 0")
    return n


def _console_interval(v: str) -> int:
    n = int(v)
    if not 1000 <= n <= 600_000:
        raise ValueError("must be from 1000 to 600000 (ms)")
    return n


def _opt_str(v: str) -> str | None:
    return None if v.strip() in ("", "none", "null") else v.strip()


def _timestamp_type(v: str) -> str:
    if v.strip() not in ("CreateTime", "LogAppendTime"):
        raise ValueError("CreateTime or LogAppendTime")
    return v.strip()


def _non_negative(v: str) -> int:
    n = int(v)
    if not 0 <= n <= 9223372036854775807:
        raise ValueError("must be between 0 and 9223372036854775807")
    return n


def _compatibility_level(v: str) -> str:
    levels = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
    if v.strip().upper() not in levels:
        raise ValueError(f"one of {', '.join(x.lower() for x in levels)}")
    return v.strip().upper()


def _fetch_max_bytes(v: str) -> int:
    n = int(v)
    if not 1024 <= n <= 2_147_483_647:
        raise ValueError("must be between 1024 and 2147483647")
    return n


def _bound_or_unbounded(v: str) -> int:
    n = int(v)
    if n != -1 and not 1 <= n <= 9223372036854775807:
        raise ValueError("must be -1 (no bound) or a positive number of bytes")
    return n


def _opt_int(v: str) -> int | None:
    return None if v.strip() in ("", "none", "null") else int(v)


@dataclass(frozen=True)
class BrokerConfig:
    """Broker settings. Field metadata ``kafka`` names the Kafka property."""

    data_dir: Path = field(default=Path("data"), metadata={"kafka": "log.dirs", "parse": Path})
    host: str = field(default="127.0.0.1", metadata={"kafka": "listener.host", "parse": str})
    port: int = field(default=9092, metadata={"kafka": "listener.port", "parse": int})
    advertised_host: str | None = field(default=None, metadata={"kafka": "advertised.host", "parse": str})
    #: the port clients are told to connect to (Metadata, FindCoordinator, DescribeCluster); None: the
    #: listening port. Differs when clients reach the broker through a proxy (oncelog verify queue).
    advertised_port: int | None = field(default=None, metadata={"kafka": "advertised.port", "parse": _opt_int})
    node_id: int = field(default=1, metadata={"kafka": "node.id", "parse": int})
    # issue 18: listeners, TLS and SASL (broker/network/listeners.py, broker/auth/, docs/SECURITY.md).
    #: ``NAME://HOST:PORT,...``; None: one PLAINTEXT listener on listener.host/listener.port
    listeners: str | None = field(default=None, metadata={"kafka": "listeners", "parse": str})
    advertised_listeners: str | None = field(default=None, metadata={"kafka": "advertised.listeners", "parse": str})
    listener_security_protocol_map: str = field(
        default="PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        metadata={"kafka": "listener.security.protocol.map", "parse": str})
    #: Kafka's default is GSSAPI, which oncelog does not have: every mechanism it has is on
    sasl_enabled_mechanisms: str = field(default="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                                         metadata={"kafka": "sasl.enabled.mechanisms", "parse": str})
    #: KIP-368: an authenticated SASL session lasts this long; the client must re-authenticate
    #: before it ends or the connection is closed at its next request. 0: forever (Kafka's default)
    connections_max_reauth_ms: int = field(default=0, metadata={"kafka": "connections.max.reauth.ms", "parse": int})
    #: cluster mode: the listener brokers use to reach each other (markers, verification); None:
    #: the primary listener (the first PLAINTEXT one, else the first)
    inter_broker_listener_name: str | None = field(default=None, metadata={"kafka": "inter.broker.listener.name", "parse": str})
    #: Kafka's default is GSSAPI, which oncelog does not have
    sasl_mechanism_inter_broker_protocol: str = field(
        default="SCRAM-SHA-512", metadata={"kafka": "sasl.mechanism.inter.broker.protocol", "parse": str})
    #: the broker's own login on a SASL inter-broker listener: ``… username="u" password="p";``
    #: (Kafka's JAAS line; usually per listener: ``listener.name.<l>.<mechanism>.sasl.jaas.config``)
    sasl_jaas_config: str | None = field(default=None, metadata={"kafka": "sasl.jaas.config", "parse": str})
    connection_failed_authentication_delay_ms: int = field(
        default=100, metadata={"kafka": "connection.failed.authentication.delay.ms", "parse": int})
    #: the largest request a connection on a SASL listener may send before it is authenticated
    #: (Kafka's name and default): a longer size prefix closes the connection before anything is read
    sasl_server_max_receive_size: int = field(
        default=524_288, metadata={"kafka": "sasl.server.max.receive.size", "parse": int})
    ssl_keystore_type: str = field(default="PEM", metadata={"kafka": "ssl.keystore.type", "parse": str})
    ssl_keystore_location: str | None = field(default=None, metadata={"kafka": "ssl.keystore.location", "parse": str})
    ssl_keystore_certificate_chain: str | None = field(
        default=None, metadata={"kafka": "ssl.keystore.certificate.chain", "parse": str})
    ssl_keystore_key: str | None = field(default=None, metadata={"kafka": "ssl.keystore.key", "parse": str})
    ssl_key_password: str | None = field(default=None, metadata={"kafka": "ssl.key.password", "parse": str})
    ssl_truststore_type: str = field(default="PEM", metadata={"kafka": "ssl.truststore.type", "parse": str})
    ssl_truststore_location: str | None = field(default=None, metadata={"kafka": "ssl.truststore.location", "parse": str})
    ssl_truststore_certificates: str | None = field(
        default=None, metadata={"kafka": "ssl.truststore.certificates", "parse": str})
    ssl_client_auth: str = field(default="none", metadata={"kafka": "ssl.client.auth", "parse": str})
    #: a TLS handshake (and, on SASL listeners, the authentication) must finish within this
    ssl_handshake_timeout_ms: int = field(default=10_000, metadata={"kafka": "ssl.handshake.timeout.ms", "parse": int})
    #: ``listener.name.<name>.<key>=value`` settings, for the ssl.* keys (Kafka's per-listener form)
    listener_overrides: tuple[tuple[str, str], ...] = field(
        default=(), metadata={"kafka": "listener.name.*", "parse": str})
    num_partitions: int = field(default=1, metadata={"kafka": "num.partitions", "parse": int})
    default_replication_factor: int = field(default=1, metadata={"kafka": "default.replication.factor", "parse": int})
    auto_create_topics_enable: bool = field(default=True, metadata={"kafka": "auto.create.topics.enable", "parse": _bool})
    delete_topic_enable: bool = field(default=True, metadata={"kafka": "delete.topic.enable", "parse": _bool})
    socket_request_max_bytes: int = field(default=104_857_600, metadata={"kafka": "socket.request.max.bytes", "parse": int})
    #: oncelog's own: a connection that takes longer than this to send one whole request is closed (slowloris)
    socket_request_receive_timeout_ms: int = field(
        default=60_000, metadata={"kafka": "socket.request.receive.timeout.ms", "parse": int}
    )
    connections_max_idle_ms: int = field(default=600_000, metadata={"kafka": "connections.max.idle.ms", "parse": int})
    max_connections: int = field(default=2_147_483_647, metadata={"kafka": "max.connections", "parse": int})
    max_connections_per_ip: int = field(default=2_147_483_647, metadata={"kafka": "max.connections.per.ip", "parse": int})
    #: oncelog's own: a Fetch waits for data at most this long, whatever max_wait it asks for
    fetch_max_wait_ms: int = field(default=500, metadata={"kafka": "fetch.max.wait.ms", "parse": int})
    #: Kafka's (KIP-541): the most a Fetch (or ShareFetch) answer holds, whatever max_bytes it asks
    #: for (the first batch is always whole, KIP-74)
    fetch_max_bytes: int = field(default=57_671_680, metadata={"kafka": "fetch.max.bytes", "parse": _fetch_max_bytes})
    #: Kafka's: the request bytes all connections together may hold (read, queued or being
    #: handled); the broker stops reading requests while they are used up (a request that starts
    #: while any are left is read whole). Kafka's default is -1 (no bound); oncelog's is 100 MiB,
    #: socket.request.max.bytes' default (-1: no bound)
    queued_max_request_bytes: int = field(
        default=104_857_600, metadata={"kafka": "queued.max.request.bytes", "parse": _bound_or_unbounded})
    message_max_bytes: int = field(default=1_048_588, metadata={"kafka": "message.max.bytes", "parse": int})
    #: oncelog's own: the most a produced batch may expand to when decompressed (a batch that
    #: expands further is refused with MESSAGE_TOO_LARGE); bounds the memory a decompression bomb costs.
    message_max_uncompressed_bytes: int = field(
        default=64 * 1024 * 1024, metadata={"kafka": "message.max.uncompressed.bytes", "parse": int}
    )
    #: KIP-937 (issue 26 row 12): the broker defaults of the topics' message.timestamp.* configs
    log_message_timestamp_type: str = field(
        default="CreateTime", metadata={"kafka": "log.message.timestamp.type", "parse": _timestamp_type})
    log_message_timestamp_before_max_ms: int = field(
        default=9223372036854775807, metadata={"kafka": "log.message.timestamp.before.max.ms", "parse": _non_negative})
    log_message_timestamp_after_max_ms: int = field(
        default=3_600_000, metadata={"kafka": "log.message.timestamp.after.max.ms", "parse": _non_negative})
    log_segment_bytes: int = field(default=1 << 30, metadata={"kafka": "log.segment.bytes", "parse": int})
    log_roll_ms: int = field(default=7 * DAY_MS, metadata={"kafka": "log.roll.ms", "parse": int})
    log_retention_ms: int = field(default=7 * DAY_MS, metadata={"kafka": "log.retention.ms", "parse": int})
    log_retention_bytes: int = field(default=-1, metadata={"kafka": "log.retention.bytes", "parse": int})
    log_retention_check_interval_ms: int = field(
        default=300_000, metadata={"kafka": "log.retention.check.interval.ms", "parse": int}
    )
    log_flush_interval_messages: int | None = field(
        default=None, metadata={"kafka": "log.flush.interval.messages", "parse": _opt_int}
    )
    log_flush_interval_ms: int | None = field(default=None, metadata={"kafka": "log.flush.interval.ms", "parse": _opt_int})
    log_index_interval_bytes: int = field(default=4096, metadata={"kafka": "log.index.interval.bytes", "parse": int})
    log_cleanup_policy: str = field(default="delete", metadata={"kafka": "log.cleanup.policy", "parse": str})
    file_delete_delay_ms: int = field(default=60_000, metadata={"kafka": "log.segment.delete.delay.ms", "parse": int})
    offsets_topic_num_partitions: int = field(default=50, metadata={"kafka": "offsets.topic.num.partitions", "parse": int})
    offsets_retention_minutes: int = field(default=7 * 24 * 60, metadata={"kafka": "offsets.retention.minutes", "parse": int})
    group_initial_rebalance_delay_ms: int = field(
        default=3000, metadata={"kafka": "group.initial.rebalance.delay.ms", "parse": int}
    )
    group_min_session_timeout_ms: int = field(default=6000, metadata={"kafka": "group.min.session.timeout.ms", "parse": int})
    group_max_session_timeout_ms: int = field(
        default=1_800_000, metadata={"kafka": "group.max.session.timeout.ms", "parse": int}
    )
    group_max_size: int = field(default=2_147_483_647, metadata={"kafka": "group.max.size", "parse": int})
    # the consumer rebalance protocol (KIP-848, issue 30): Kafka's names and defaults
    group_consumer_session_timeout_ms: int = field(
        default=45_000, metadata={"kafka": "group.consumer.session.timeout.ms", "parse": int})
    group_consumer_min_session_timeout_ms: int = field(
        default=45_000, metadata={"kafka": "group.consumer.min.session.timeout.ms", "parse": int})
    group_consumer_max_session_timeout_ms: int = field(
        default=60_000, metadata={"kafka": "group.consumer.max.session.timeout.ms", "parse": int})
    group_consumer_heartbeat_interval_ms: int = field(
        default=5_000, metadata={"kafka": "group.consumer.heartbeat.interval.ms", "parse": int})
    group_consumer_min_heartbeat_interval_ms: int = field(
        default=5_000, metadata={"kafka": "group.consumer.min.heartbeat.interval.ms", "parse": int})
    group_consumer_max_heartbeat_interval_ms: int = field(
        default=15_000, metadata={"kafka": "group.consumer.max.heartbeat.interval.ms", "parse": int})
    group_consumer_assignors: str = field(
        default="uniform,range", metadata={"kafka": "group.consumer.assignors", "parse": str})
    group_consumer_max_size: int = field(
        default=2_147_483_647, metadata={"kafka": "group.consumer.max.size", "parse": int})
    # share groups (KIP-932, issue 30): Kafka 4.2's names and defaults
    group_share_record_lock_duration_ms: int = field(
        default=30_000, metadata={"kafka": "group.share.record.lock.duration.ms", "parse": int})
    group_share_delivery_count_limit: int = field(
        default=5, metadata={"kafka": "group.share.delivery.count.limit", "parse": int})
    group_share_partition_max_record_locks: int = field(
        default=2000, metadata={"kafka": "group.share.partition.max.record.locks", "parse": int})
    group_share_session_timeout_ms: int = field(
        default=45_000, metadata={"kafka": "group.share.session.timeout.ms", "parse": int})
    group_share_heartbeat_interval_ms: int = field(
        default=5_000, metadata={"kafka": "group.share.heartbeat.interval.ms", "parse": int})
    group_share_max_size: int = field(default=200, metadata={"kafka": "group.share.max.size", "parse": int})
    #: share groups with members a broker coordinates at once (Kafka 4.0's name and default)
    group_share_max_groups: int = field(default=10, metadata={"kafka": "group.share.max.groups", "parse": int})
    group_share_max_share_sessions: int = field(
        default=2000, metadata={"kafka": "group.share.max.share.sessions", "parse": int})
    offset_metadata_max_bytes: int = field(default=4096, metadata={"kafka": "offset.metadata.max.bytes", "parse": int})
    offsets_retention_check_interval_ms: int = field(
        default=600_000, metadata={"kafka": "offsets.retention.check.interval.ms", "parse": int}
    )
    log_cleaner_enable: bool = field(default=True, metadata={"kafka": "log.cleaner.enable", "parse": _bool})
    log_cleaner_backoff_ms: int = field(default=15_000, metadata={"kafka": "log.cleaner.backoff.ms", "parse": int})
    transaction_state_log_num_partitions: int = field(
        default=50, metadata={"kafka": "transaction.state.log.num.partitions", "parse": int}
    )
    transaction_max_timeout_ms: int = field(default=900_000, metadata={"kafka": "transaction.max.timeout.ms", "parse": int})
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = field(
        default=10_000, metadata={"kafka": "transaction.abort.timed.out.transaction.cleanup.interval.ms", "parse": int}
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = field(
        default=3_600_000, metadata={"kafka": "transaction.remove.expired.transaction.cleanup.interval.ms", "parse": int}
    )
    transactional_id_expiration_ms: int = field(
        default=7 * DAY_MS, metadata={"kafka": "transactional.id.expiration.ms", "parse": int}
    )
    producer_id_expiration_ms: int = field(default=DAY_MS, metadata={"kafka": "producer.id.expiration.ms", "parse": int})
    #: KIP-939: may producers enable two-phase commit (InitProducerId enable_2pc)? Off, as in Kafka;
    #: when off they are told TRANSACTIONAL_ID_AUTHORIZATION_FAILED (broker/coordinators/two_phase_commit.py)
    transaction_two_phase_commit_enable: bool = field(
        default=False, metadata={"kafka": "transaction.two.phase.commit.enable", "parse": _bool}
    )
    # cluster mode (issue 15; cluster/membership.py SessionConfig): a broker's session in the store
    broker_session_timeout_ms: int = field(default=9_000, metadata={"kafka": "broker.session.timeout.ms", "parse": int})
    broker_heartbeat_interval_ms: int = field(
        default=2_000, metadata={"kafka": "broker.heartbeat.interval.ms", "parse": int}
    )
    #: oncelog's own (issue 28, storage/engines/postgres/commit_pool.py): group-commit connections per broker, i.e.
    #: rounds in flight at once (a partition always on the same one, so its order is kept); 1:
    #: on 2 cores more measured slower (smaller rounds), meant for many-core machines
    store_commit_connections: int = field(default=1, metadata={"kafka": "store.commit.connections", "parse": _commit_connections})
    # issue 29, docs/DISKLESS.md: diskless topics (``diskless.enable=true``) keep their batches in
    # an S3-compatible object store; cluster mode only. Credentials: AWS_ACCESS_KEY_ID /
    # AWS_SECRET_ACCESS_KEY in the environment (diskless/object_store.py ObjectStoreConfig).
    #: ``s3://BUCKET/PREFIX``; None: diskless topics are refused (INVALID_CONFIG)
    diskless_storage_url: str | None = field(default=None, metadata={"kafka": "diskless.storage.url", "parse": _opt_str})
    #: ``http(s)://HOST:PORT`` of an S3-compatible server; None: the provider's (AWS) default
    diskless_storage_endpoint: str | None = field(
        default=None, metadata={"kafka": "diskless.storage.endpoint", "parse": _opt_str})
    #: the signing region; None: AWS_REGION, else us-east-1
    diskless_storage_region: str | None = field(
        default=None, metadata={"kafka": "diskless.storage.region", "parse": _opt_str})
    diskless_storage_request_timeout_ms: int = field(
        default=10_000, metadata={"kafka": "diskless.storage.request.timeout.ms", "parse": _positive})
    diskless_storage_call_deadline_ms: int = field(
        default=30_000, metadata={"kafka": "diskless.storage.call.deadline.ms", "parse": _positive})
    diskless_storage_retry_backoff_ms: int = field(
        default=50, metadata={"kafka": "diskless.storage.retry.backoff.ms", "parse": _positive})
    diskless_storage_retry_backoff_max_ms: int = field(
        default=2_000, metadata={"kafka": "diskless.storage.retry.backoff.max.ms", "parse": _positive})
    #: objects close on this cadence (every interval, when they hold a batch; or at the size
    #: bound, or at a transaction marker) and are uploaded: at most one per interval, the PUT bound
    diskless_commit_interval_ms: int = field(
        default=250, metadata={"kafka": "diskless.commit.interval.ms", "parse": _positive})
    diskless_object_max_bytes: int = field(
        default=8 << 20, metadata={"kafka": "diskless.object.max.bytes", "parse": _positive})
    #: bytes the object writer holds (open object, objects not committed yet); past it new
    #: diskless appends wait for room (their answers come later: the writer's backpressure)
    diskless_buffer_max_bytes: int = field(
        default=64 << 20, metadata={"kafka": "diskless.buffer.max.bytes", "parse": _positive})
    #: the broker's byte cache shared by the fetches of diskless partitions
    diskless_read_cache_bytes: int = field(
        default=256 << 20, metadata={"kafka": "diskless.read.cache.bytes", "parse": _positive})
    #: how often the collector deletes unreferenced objects and orphans, and how old they must be
    diskless_gc_interval_ms: int = field(
        default=60_000, metadata={"kafka": "diskless.gc.interval.ms", "parse": _positive})
    diskless_gc_grace_ms: int = field(
        default=300_000, metadata={"kafka": "diskless.gc.grace.ms", "parse": _positive})
    # ACLs (issue 18, docs/ACLS.md): Kafka's switch and settings; empty authorizer = ACLs off
    authorizer_class_name: str = field(default="", metadata={"kafka": "authorizer.class.name", "parse": _authorizer})
    super_users: str = field(default="", metadata={"kafka": "super.users", "parse": str})
    allow_everyone_if_no_acl_found: bool = field(
        default=False, metadata={"kafka": "allow.everyone.if.no.acl.found", "parse": _bool}
    )
    #: oncelog's own (issue 19, docs/METRICS.md): serve Prometheus metrics on ``HOST:PORT``; None: off
    metrics_listen: str | None = field(default=None, metadata={"kafka": "metrics.listen", "parse": _listen})
    #: oncelog's own (issue 19, docs/CONSOLE.md): serve the read-only web console on ``HOST:PORT``; None: off
    console_listen: str | None = field(default=None, metadata={"kafka": "console.listen", "parse": _listen})
    #: the client properties file (as ``--command-config``) the console logs in to this broker's
    #: listener with, for find-hanging and abort; None: PLAINTEXT, no login (abort is then disabled
    #: when an authorizer is configured)
    console_client_config: str | None = field(default=None, metadata={"kafka": "console.client.config",
                                                                      "parse": _opt_str})
    # the schema registry (docs/SCHEMA-REGISTRY.md, oncelog/schema_registry/); Confluent's names but the first
    #: oncelog's own: serve the Confluent-compatible Schema Registry REST API on ``HOST:PORT``; None: off
    schema_registry_listen: str | None = field(default=None, metadata={"kafka": "schema.registry.listen",
                                                                       "parse": _listen})
    #: the compatibility level of subjects with none of their own, until PUT /config sets one
    schema_compatibility_level: str = field(default="BACKWARD", metadata={"kafka": "schema.compatibility.level",
                                                                         "parse": _compatibility_level})
    #: oncelog's own: the registry's HTTP requests each get this long in all (a slow client is dropped)
    schema_registry_request_timeout_ms: int = field(
        default=30_000, metadata={"kafka": "schema.registry.request.timeout.ms", "parse": _positive})
    #: the compacted topic the registry keeps its schemas in
    kafkastore_topic: str = field(default="_schemas", metadata={"kafka": "kafkastore.topic", "parse": str})
    #: oncelog's own: a client properties file (librdkafka's names: security.protocol, sasl.*, ssl.*)
    #: the registry's Kafka clients log in to this broker's listener with; None: PLAINTEXT, no login
    schema_registry_client_config: str | None = field(
        default=None, metadata={"kafka": "schema.registry.client.config", "parse": _opt_str})
    #: how often the console samples the traffic and lag its charts show (the last hour is kept)
    console_history_interval_ms: int = field(
        default=10_000, metadata={"kafka": "console.history.interval.ms", "parse": _console_interval})

    @property
    def advertised(self) -> str:
        return self.advertised_host or self.host

    def for_listener(self, name: str) -> "BrokerConfig":
        """This configuration as listener ``name`` sees it: each ``listener.name.<name>.<key>``
        (lower-case name, as Kafka writes it) replaces ``<key>``. Raises InvalidConfig."""
        prefix = f"listener.name.{name.lower()}."
        own = {k[len(prefix):]: v for k, v in self.listener_overrides if k.lower().startswith(prefix)}
        # Kafka's per-mechanism form, listener.name.<l>.<mechanism>.sasl.jaas.config
        own = {("sasl.jaas.config" if k.endswith(".sasl.jaas.config") else k): v for k, v in own.items()}
        return dataclasses.replace(self.with_overrides(own), listener_overrides=()) if own else self

    def kafka_value(self, kafka_name: str) -> str | None:
        """The value of a Kafka-named property as Kafka describes it (unset flush intervals are
        Long.MAX_VALUE, booleans lower case); None for a name this class does not hold."""
        spec = _BY_KAFKA_NAME.get(kafka_name)
        if spec is None or _CANONICAL.get(spec[0]) != kafka_name:
            return None
        value = getattr(self, spec[0])
        if value is None and spec[0] in ("log_flush_interval_messages", "log_flush_interval_ms"):
            return "9223372036854775807"
        if isinstance(value, bool):
            return "true" if value else "false"
        return None if value is None else str(value)

    def kafka_default(self, kafka_name: str) -> str | None:
        """``kafka_value`` of the built-in default."""
        return _DEFAULT.kafka_value(kafka_name)

    def with_overrides(self, props: dict[str, str]) -> "BrokerConfig":
        """A copy with Kafka-named properties applied. Raises InvalidConfig on unknown keys."""
        changes: dict[str, Any] = {}
        per_listener = dict(self.listener_overrides)
        for key, raw in props.items():
            if key.startswith("listener.name."):
                per_listener[key] = raw
                changes["listener_overrides"] = tuple(sorted(per_listener.items()))
                continue
            spec = _BY_KAFKA_NAME.get(key)
            if spec is None:
                raise InvalidConfig(f"unknown broker property {key!r}")
            name, parse = spec
            try:
                changes[name] = parse(raw)
            except ValueError as exc:
                raise InvalidConfig(f"bad value for {key}: {raw!r} ({exc})") from None
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_properties_file(cls, path: Path) -> "BrokerConfig":
        return cls().with_overrides(parse_properties(path.read_text()))


_BY_KAFKA_NAME: dict[str, tuple[str, Callable[[str], Any]]] = {
    f.metadata["kafka"]: (f.name, f.metadata["parse"]) for f in dataclasses.fields(BrokerConfig)
}
_CANONICAL: dict[str, str] = {f.name: f.metadata["kafka"] for f in dataclasses.fields(BrokerConfig)}
_DEFAULT = BrokerConfig()
# Kafka spells some of these several ways; accept the common aliases.
_BY_KAFKA_NAME["file.delete.delay.ms"] = _BY_KAFKA_NAME["log.segment.delete.delay.ms"]  # oncelog's older name
_BY_KAFKA_NAME["log.dir"] = _BY_KAFKA_NAME["log.dirs"]
_BY_KAFKA_NAME["broker.id"] = _BY_KAFKA_NAME["node.id"]
_BY_KAFKA_NAME["log.retention.hours"] = ("log_retention_ms", lambda v: int(v) * 3600 * 1000)
_BY_KAFKA_NAME["log.retention.minutes"] = ("log_retention_ms", lambda v: int(v) * 60 * 1000)
_BY_KAFKA_NAME["log.roll.hours"] = ("log_roll_ms", lambda v: int(v) * 3600 * 1000)
# Confluent's older name of schema.compatibility.level
_BY_KAFKA_NAME["avro.compatibility.level"] = _BY_KAFKA_NAME["schema.compatibility.level"]
