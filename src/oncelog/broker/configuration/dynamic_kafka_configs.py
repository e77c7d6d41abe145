"""Kafka's dynamic broker configs that are not topic-config synonyms: the names AlterConfigs /
IncrementalAlterConfigs on a BROKER resource accept as Kafka 4.x accepts them
(``DynamicBrokerConfig``; the broker config docs' "dynamic update mode"), with Kafka's types and
levels. Pure data and checks; ``dynamic_config.DynamicBrokerConfigs`` stores them.

Levels, as Kafka: the listener's security configs (SASL, SSL, ``principal.builder.class``) are
per-broker only: set at the cluster-default level ("" resource) they are INVALID_REQUEST
("broker id must be specified"); the keystore/truststore ones only with a listener prefix
(``listener.name.<listener>.<config>``), as Kafka refuses them bare. The thread-pool,
connection-limit, cleaner and metric-reporter configs are cluster-wide (either level).

What oncelog does with them: each is validated (type), stored durably with the other dynamic
broker configs (the data dir's file, or the cluster's store) and described back with its source
DYNAMIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG; none is applied to the running broker
(oncelog has no Kerberos, no thread pools to resize, and its listeners' security is fixed at
start), which docs/COMPATIBILITY-configs.md says for each. The listener addresses themselves
(``listeners``, ``advertised.listeners``, ``listener.security.protocol.map``) stay read-only:
storing an address the broker does not listen on would describe a lie.
"""

from __future__ import annotations

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


def normalize(name: str, raw: str) -> str:
    """The value as stored; raises ValueError for one that is not of the config's type."""
    typ = config_type(name)
    value = raw.strip()
    if typ in _RANGES:
        n = int(value)
        lo, hi = _RANGES[typ]  # type: ignore[index]
        if not lo <= n <= hi:
            raise ValueError(f"{n} is out of range for a {typ.name}")  # type: ignore[union-attr]
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
