"""Kafka's dynamic broker configs that are not topic-config synonyms: the names AlterConfigs /
IncrementalAlterConfigs on a BROKER resource accept as Kafka 4.x accepts them
(``DynamicBrokerConfig``; the broker config docs' "dynamic update mode"), with Kafka's types and
levels. Pure data and checks; ``dynamic_config.DynamicBrokerConfigs`` stores them.

Levels, as Kafka: the listener's security configs (SASL, SSL, ``principal.builder.class``) are
per-broker only: set at the cluster-default level ("" resource) they are INVALID_REQUEST
("broker id must be specified"); the keystore/truststore ones only with a listener prefix
(``listener.name.<listener>.<config>``), as Kafka refuses them bare. The thread-pool,
connection-limit, cleaner and metric-reporter configs are cluster-wide (either level).

What oncelog does with them: each is validated (type, Kafka's lower bounds), stored durably with
the other dynamic broker configs (the data dir's file, or the cluster's store) and described back
with its source DYNAMIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG. Those of ``APPLIED`` take
effect on the running broker at once (the connection limits: ``connection_limits``, which every
listener's server adopts; ``producer.id.expiration.ms``) and after a restart; the others are
stored only, for the reason ``NOT_APPLIED`` gives (no Kerberos, no thread pools to resize, the
listeners' security read at start), which docs/COMPATIBILITY-configs.md says for each. The
listener addresses themselves (``listeners``, ``advertised.listeners``,
``listener.security.protocol.map``) stay read-only: storing an address the broker does not
listen on would describe a lie.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Callable

from oncelog.broker.configuration.topic_config import ConfigType

T = ConfigType
#: per-broker-only security configs -> type (Kafka's DynamicListenerConfig.ReconfigurableConfigs)
PER_BROKER: dict[str, ConfigType] = {
    "principal.builder.class": T.CLASS,
    "ssl.protocol": T.STRING, "ssl.provider": T.STRING, "ssl.cipher.suites": T.LIST,
    "ssl.enabled.protocols": T.LIST, "ssl.keymanager.algorithm": T.STRING, "ssl.trustmanager.algorithm": T.STRING,
    "ssl.endpoint.identification.algorithm": T.STRING, "ssl.secure.random.implementation": T.STRING,
    "ssl.client.auth": T.STRING, "ssl.engine.factory.class": T.CLASS,
    "sasl.mechanism.inter.broker.protocol": T.STRING, "sasl.jaas.config": T.PASSWORD,
    "sasl.enabled.mechanisms": T.LIST, "sasl.kerberos.service.name": T.STRING, "sasl.kerberos.kinit.cmd": T.STRING,
    "sasl.kerberos.ticket.renew.window.factor": T.DOUBLE, "sasl.kerberos.ticket.renew.jitter": T.DOUBLE,
    "sasl.kerberos.min.time.before.relogin": T.LONG, "sasl.kerberos.principal.to.local.rules": T.LIST,
    "sasl.login.refresh.window.factor": T.DOUBLE, "sasl.login.refresh.window.jitter": T.DOUBLE,
    "sasl.login.refresh.min.period.seconds": T.SHORT, "sasl.login.refresh.buffer.seconds": T.SHORT,
}
#: the keystore/truststore configs (Kafka's SslConfigs.RECONFIGURABLE_CONFIGS): per listener only
LISTENER_ONLY: dict[str, ConfigType] = {
    "ssl.keystore.type": T.STRING, "ssl.keystore.location": T.STRING, "ssl.keystore.password": T.PASSWORD,
    "ssl.key.password": T.PASSWORD, "ssl.keystore.key": T.PASSWORD, "ssl.keystore.certificate.chain": T.PASSWORD,
    "ssl.truststore.type": T.STRING, "ssl.truststore.location": T.STRING, "ssl.truststore.password": T.PASSWORD,
    "ssl.truststore.certificates": T.PASSWORD,
}
#: cluster-wide dynamic configs (either level) -> type
CLUSTER_WIDE: dict[str, ConfigType] = {
    "max.connections": T.INT, "max.connection.creation.rate": T.INT, "max.connections.per.ip": T.INT,
    "max.connections.per.ip.overrides": T.STRING, "num.network.threads": T.INT, "num.io.threads": T.INT,
    "num.replica.fetchers": T.INT, "num.recovery.threads.per.data.dir": T.INT, "background.threads": T.INT,
    "log.cleaner.threads": T.INT, "log.cleaner.io.max.bytes.per.second": T.DOUBLE,
    "log.cleaner.dedupe.buffer.size": T.LONG, "log.cleaner.io.buffer.size": T.INT,
    "log.cleaner.io.buffer.load.factor": T.DOUBLE, "log.cleaner.backoff.ms": T.LONG, "metric.reporters": T.LIST,
    "producer.id.expiration.ms": T.INT, "transaction.partition.verification.enable": T.BOOLEAN,
}
#: applied to the running broker -> how
APPLIED: dict[str, str] = {
    "max.connections": "yes: every listener refuses new connections past it (open ones stay)",
    "max.connections.per.ip": "yes: every listener refuses a new connection from an address past it",
    "max.connections.per.ip.overrides": "yes: per address or host name (resolved when set), over max.connections.per.ip",
    "max.connection.creation.rate": "yes: every listener takes at most this many new connections a second "
                                    "(the next ones wait, as Kafka throttles them)",
    "producer.id.expiration.ms": "yes: at the next expiry pass",
}
_THREADS = "no: oncelog has no such thread pool (one event loop)"
#: stored and described only -> why (the others of PER_BROKER / LISTENER_ONLY: ``not_applied``)
NOT_APPLIED: dict[str, str] = {
    "num.network.threads": _THREADS, "num.io.threads": _THREADS, "background.threads": _THREADS,
    "num.recovery.threads.per.data.dir": _THREADS, "log.cleaner.threads": _THREADS,
    "num.replica.fetchers": "no: no replica fetchers (cluster mode keeps the log in the store)",
    "log.cleaner.io.max.bytes.per.second": "no: the cleaner is not throttled",
    "log.cleaner.dedupe.buffer.size": "no: the cleaner sizes its key map itself",
    "log.cleaner.io.buffer.size": "no: the cleaner sizes its buffers itself",
    "log.cleaner.io.buffer.load.factor": "no: the cleaner sizes its key map itself",
    "log.cleaner.backoff.ms": "no: read at start (the static value applies)",
    "metric.reporters": "no: no Java metric reporters (metrics.listen serves Prometheus)",
    "transaction.partition.verification.enable": "no: transactional appends are always verified (KIP-890)",
}


def not_applied(name: str) -> str:
    """Why a dynamic config that ``APPLIED`` lacks is stored only."""
    base = base_name(name)
    if base in NOT_APPLIED:
        return NOT_APPLIED[base]
    if "kerberos" in base:
        return "no: oncelog has no Kerberos (GSSAPI)"
    return "no: the listeners' security is read at start (a restart applies it)"


LISTENER_PREFIX = "listener.name."
_SECRET = {n for n, t in {**PER_BROKER, **LISTENER_ONLY}.items() if t is T.PASSWORD}
_RANGES = {T.SHORT: (-2**15, 2**15 - 1), T.INT: (-2**31, 2**31 - 1), T.LONG: (-2**63, 2**63 - 1)}


def base_name(name: str) -> str:
    """``listener.name.<l>.<config>`` -> ``<config>``; any other name as it is."""
    if name.startswith(LISTENER_PREFIX):
        rest = name[len(LISTENER_PREFIX):]
        if "." in rest:
            return rest.split(".", 1)[1]
    return name


def config_type(name: str) -> ConfigType | None:
    """The Kafka type of a dynamic config accepted here, or None when it is not one."""
    base = base_name(name)
    if base != name:  # listener-prefixed: the listener's security configs
        return PER_BROKER.get(base) or LISTENER_ONLY.get(base)
    return PER_BROKER.get(name) or CLUSTER_WIDE.get(name)


def is_secret(name: str) -> bool:
    return base_name(name) in _SECRET


def refusal(name: str, per_broker: bool) -> str | None:
    """Why ``name`` cannot be set at this level (Kafka's message), or None. Only for names
    ``config_type`` knows, or the bare keystore/truststore ones."""
    base = base_name(name)
    if base == name and name in LISTENER_ONLY:
        return f"These security configs can be dynamically updated only per-listener using the listener prefix: {name}"
    if not per_broker and (base != name or name in PER_BROKER):
        return f"Cannot update these configs at default cluster level, broker id must be specified: {name}"
    return None


#: Kafka's lower bounds (``atLeast``) of the applied ones
_AT_LEAST = {"max.connections": 0, "max.connections.per.ip": 0, "max.connection.creation.rate": 0,
             "producer.id.expiration.ms": 1}
OVERRIDES = "max.connections.per.ip.overrides"


def parse_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count,host:count`` (an IPv6 address before
    its last colon) -> {host: count}. Raises ValueError for a malformed entry, a negative count
    or an address that is not a valid host name or IP address (Kafka's ``validHostPattern``)."""
    out: dict[str, int] = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip()
        if not sep or not host or int(count) < 0:
            raise ValueError(f"{item!r} is not host:count")
        if not _valid_host(host):
            raise ValueError(f"{OVERRIDES} contains invalid addresses : {host}")
        out[host] = int(count)
    return out


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        labels = host.rstrip(".").split(".")
        return all(0 < len(label) <= 63 and label.replace("-", "").isalnum() and not label.startswith("-")
                   for label in labels) and len(host) <= 253


def normalize(name: str, raw: str) -> str:
    """The value as stored; raises ValueError for one that is not of the config's type or is
    below Kafka's lower bound."""
    typ = config_type(name)
    value = raw.strip()
    if name == OVERRIDES:
        return ",".join(f"{h}:{n}" for h, n in parse_overrides(value).items())
    if typ in _RANGES:
        n = int(value)
        lo, hi = _RANGES[typ]  # type: ignore[index]
        if not lo <= n <= hi:
            raise ValueError(f"{n} is out of range for a {typ.name}")  # type: ignore[union-attr]
        if n < _AT_LEAST.get(name, lo):
            raise ValueError(f"Value must be at least {_AT_LEAST[name]}")
        return str(n)
    if typ is T.DOUBLE:
        return repr(float(value))
    if typ is T.BOOLEAN:
        if value.lower() not in ("true", "false"):
            raise ValueError("expected true or false")
        return value.lower()
    if typ is T.LIST:
        return ",".join(i.strip() for i in value.split(",") if i.strip())
    return raw


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The connection limits a listener's server applies (static values, or dynamic ones over them)."""

    max_connections: int
    max_per_ip: int
    #: address or host name -> its own limit (host names are resolved by the server)
    per_ip_overrides: dict[str, int] = field(default_factory=dict)
    creation_rate: int = 2**31 - 1


def connection_limits(static: ConnectionLimits, value: Callable[[str], str | None]) -> ConnectionLimits:
    """``static`` with the dynamic values ``value(name)`` gives (None: not set dynamically)."""
    def num(name: str, fallback: int) -> int:
        v = value(name)
        return fallback if v is None else int(v)

    overrides = value(OVERRIDES)
    return ConnectionLimits(num("max.connections", static.max_connections),
                            num("max.connections.per.ip", static.max_per_ip),
                            static.per_ip_overrides if overrides is None else parse_overrides(overrides),
                            num("max.connection.creation.rate", static.creation_rate))
