"""The broker's configs as Kafka describes them, and its dynamic configs (AlterConfigs on a
BROKER resource).

Theory of operation. ``broker_config_rows`` lists the broker's configs under Kafka's names
(``listeners``, ``advertised.listeners``, ``node.id``, ``log.dirs``, …) with Kafka's types; the
broker-side synonyms of every topic config (``log.retention.ms``, ``log.cleaner.min.cleanable.ratio``,
…) are among them. Those synonyms are the dynamic broker configs here (Kafka's cluster-wide
dynamic log configs): set for this node (resource name = the node id) or as the cluster default
(resource name ""), kept in ``<data-dir>/dynamic-broker-configs.json`` (replaced atomically),
and applied live to every partition whose topic does not set the config itself. Kafka's other
dynamic broker configs (SASL, SSL, connection limits, thread pools: ``dynamic_kafka_configs``)
are accepted at the levels Kafka accepts them, validated, stored in the same layers and
described; those that apply here (the connection limits, ``producer.id.expiration.ms``) are
applied live: ``value`` gives a config's dynamic value, and the ReplicaManager tells the
broker's listeners after every change (``ReplicaManager.on_broker_configs``); the others are
stored only. Every other broker config is read-only here (INVALID_REQUEST when altered, as
Kafka). In cluster mode both layers live
in the store instead (cluster/broker_configs.py), the cluster default applies to every broker,
and each broker ``adopt``s what its latest view holds; the file is not used.

Single-threaded: the broker's event loop.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from oncelog.broker.configuration import dynamic_kafka_configs as kafka_dynamic
from oncelog.broker.configuration import topic_config
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.configuration.topic_config import TOPIC_CONFIGS, ConfigSource, ConfigType
from oncelog.protocol.errors import InvalidConfig, InvalidRequest
from oncelog.atomic import write_atomically

log = logging.getLogger(__name__)

FILE_NAME = "dynamic-broker-configs.json"

#: broker config name -> the topic config it is the default of (the dynamic ones here)
BROKER_SYNONYMS: dict[str, topic_config.TopicConfigDef] = {
    d.broker_name: d for d in TOPIC_CONFIGS.values() if d.broker_name is not None
}

_OWN = {  # oncelog's own broker configs (no Kafka counterpart)
    "message.max.uncompressed.bytes", "socket.request.receive.timeout.ms", "fetch.max.wait.ms", "metrics.listen",
    "console.listen", "console.client.config", "console.history.interval.ms",
    # issue 29 (docs/DISKLESS.md)
    "diskless.storage.url", "diskless.storage.endpoint", "diskless.storage.region",
    "diskless.storage.request.timeout.ms", "diskless.storage.call.deadline.ms", "diskless.storage.retry.backoff.ms",
    "diskless.storage.retry.backoff.max.ms", "diskless.commit.interval.ms", "diskless.object.max.bytes",
    "diskless.read.cache.bytes", "diskless.gc.interval.ms", "diskless.gc.grace.ms",
}
#: string configs whose default is None (unset), which the type rules below would call INT
_STRING = {"metrics.listen", "console.listen", "console.client.config", "diskless.storage.url",
           "diskless.storage.endpoint", "diskless.storage.region"}
_LONG = {"log.retention.bytes", "log.flush.interval.messages", "offsets.retention.minutes", "queued.max.request.bytes"}
_NOT_KAFKA = {"listener.host", "listener.port", "advertised.host", "advertised.port", "listener.name.*",
              "listeners", "advertised.listeners"}
#: secrets (issue 18): described with no value, as Kafka describes sensitive configs
SENSITIVE = {"ssl.key.password", "ssl.keystore.key", "sasl.jaas.config"}


@dataclass(frozen=True, slots=True)
class BrokerRow:
    name: str
    value: str | None
    type: ConfigType
    read_only: bool
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...]  # effective first
    doc: str

    @property
    def source(self) -> ConfigSource:
        return self.synonyms[0][2] if self.synonyms else ConfigSource.DEFAULT_CONFIG


class DynamicBrokerConfigs:
    """The dynamic broker configs: cluster default and this node's, durable in the data dir."""

    def __init__(self, path: Path, node_id: int, default: dict[str, str] | None = None,
                 node: dict[str, str] | None = None) -> None:
        self.path = path
        self.node_id = node_id
        self.default: dict[str, str] = dict(default or {})
        self.node: dict[str, str] = dict(node or {})

    @classmethod
    def load(cls, data_dir: Path, node_id: int) -> "DynamicBrokerConfigs":
        path = Path(data_dir) / FILE_NAME
        try:
            doc = json.loads(path.read_text())
            return cls(path, node_id, doc.get("default", {}), doc.get("nodes", {}).get(str(node_id), {}))
        except FileNotFoundError:
            return cls(path, node_id)
        except (OSError, ValueError, AttributeError) as exc:
            log.error("%s is unreadable (%s); dynamic broker configs ignored until set again", path, exc)
            return cls(path, node_id)

    def layered(self) -> dict[str, list[tuple[str, ConfigSource]]]:
        """broker config name -> [(value, source)], per-node before cluster default."""
        out: dict[str, list[tuple[str, ConfigSource]]] = {}
        for name, value in self.node.items():
            out.setdefault(name, []).append((value, ConfigSource.DYNAMIC_BROKER_CONFIG))
        for name, value in self.default.items():
            out.setdefault(name, []).append((value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        return out

    def value(self, name: str) -> str | None:
        """The dynamic value of ``name`` in force: this node's, else the cluster default's (None:
        not set dynamically)."""
        return self.node.get(name, self.default.get(name))

    def scope_of(self, resource_name: str) -> str:
        """"default" for "", "node" for this broker's id; raises InvalidRequest otherwise."""
        if resource_name == "":
            return "default"
        if resource_name == str(self.node_id):
            return "node"
        raise InvalidRequest(f"broker {resource_name} is not this broker ({self.node_id})")

    def current(self, scope: str) -> dict[str, str]:
        return dict(self.default if scope == "default" else self.node)

    def validate(self, configs: Mapping[str, str | None], scope: str = "node") -> dict[str, str]:
        """Normalised dynamic configs of ``scope``; raises InvalidRequest for a read-only or
        unknown broker config or one Kafka refuses at that level, InvalidConfig for a bad value."""
        out: dict[str, str] = {}
        for name, raw in configs.items():
            d = BROKER_SYNONYMS.get(name)
            if d is None:
                why = kafka_dynamic.refusal(name, scope == "node")
                if why is None and kafka_dynamic.config_type(name) is None:
                    why = f"cannot update these configs dynamically: {name} (read-only or unknown)"
                if why is not None:
                    raise InvalidRequest(why)
            if raw is None:
                continue
            try:
                out[name] = topic_config.normalize(d, raw) if d is not None else kafka_dynamic.normalize(name, raw)
            except ValueError as exc:
                raise InvalidConfig(f"invalid value {raw!r} for configuration {name}: {exc}") from None
        layers = self.with_scope(scope, out)
        per_ip = layers.get("max.connections.per.ip", [("", ConfigSource.UNKNOWN)])[0][0]
        if per_ip == "0" and not layers.get(kafka_dynamic.OVERRIDES, [("", ConfigSource.UNKNOWN)])[0][0]:
            raise InvalidConfig("max.connections.per.ip can be set to zero only if "
                                "max.connections.per.ip.overrides property is set.")
        return out

    def resource_of(self, scope: str) -> str:
        """The resource name of ``scope`` ("" or this node's id), as the store keys it."""
        return "" if scope == "default" else str(self.node_id)

    def with_scope(self, scope: str, configs: dict[str, str]) -> dict[str, list[tuple[str, ConfigSource]]]:
        """``layered()`` as it would be with ``configs`` as the whole set of ``scope``."""
        other = DynamicBrokerConfigs(self.path, self.node_id, self.default, self.node)
        if scope == "default":
            other.default = dict(configs)
        else:
            other.node = dict(configs)
        return other.layered()

    def adopt(self, default: Mapping[str, str], node: Mapping[str, str]) -> bool:
        """Cluster mode: take both layers as the store holds them (nothing written here).
        Returns whether anything changed. Names this broker does not know as dynamic are
        dropped with a log line (a newer broker may have stored them)."""
        def known(configs: Mapping[str, str]) -> dict[str, str]:
            unknown = sorted(k for k in configs if not is_dynamic(k))
            if unknown:
                log.warning("dynamic broker configs in the store not known here, ignored: %s", ", ".join(unknown))
            return {k: v for k, v in configs.items() if is_dynamic(k)}

        new_default, new_node = known(default), known(node)
        if new_default == self.default and new_node == self.node:
            return False
        self.default, self.node = new_default, new_node
        return True

    def replace(self, scope: str, configs: dict[str, str]) -> None:
        """Make ``configs`` the whole set of ``scope`` and persist (atomically). Raises OSError."""
        if scope == "default":
            self.default = dict(configs)
        else:
            self.node = dict(configs)
        doc: dict = {"version": 1, "default": self.default, "nodes": {}}
        try:
            doc["nodes"] = json.loads(self.path.read_text()).get("nodes", {})
        except (OSError, ValueError, AttributeError):
            pass
        doc["nodes"][str(self.node_id)] = self.node
        write_atomically(self.path, json.dumps(doc, indent=1, sort_keys=True).encode())


def is_dynamic(name: str) -> bool:
    """Whether ``name`` is a dynamic broker config here (a topic synonym or Kafka's others)."""
    return name in BROKER_SYNONYMS or kafka_dynamic.config_type(name) is not None


def dynamic_type(name: str) -> ConfigType:
    d = BROKER_SYNONYMS.get(name)
    return d.type if d is not None else (kafka_dynamic.config_type(name) or ConfigType.STRING)


def _kafka_type(name: str, value: object) -> ConfigType:
    if name in SENSITIVE:
        return ConfigType.PASSWORD
    if name == "sasl.enabled.mechanisms":
        return ConfigType.LIST
    if (name.startswith("ssl.") and not name.endswith(".ms")) or name in _STRING:
        return ConfigType.STRING
    if isinstance(value, bool):
        return ConfigType.BOOLEAN
    if name.endswith(".ms") or name in _LONG:
        return ConfigType.LONG
    if isinstance(value, int) or value is None:
        return ConfigType.INT
    return ConfigType.STRING


def broker_config_rows(broker: BrokerConfig, dynamic: DynamicBrokerConfigs, *, default_only: bool = False) -> list[BrokerRow]:
    """The configs of this broker (or, ``default_only``, the dynamic cluster defaults alone:
    resource name ""), by name, under Kafka's names."""
    layers = dynamic.layered()
    if default_only:
        return [BrokerRow(n, _shown(n, v), dynamic_type(n), False,
                          ((n, _shown(n, v), ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),), _doc(n))
                for n, v in sorted(dynamic.default.items()) if is_dynamic(n)]
    defaults = BrokerConfig()
    rows: dict[str, BrokerRow] = {}

    def static_row(name: str, value: str | None, default: str | None, typ: ConfigType, doc: str) -> None:
        syn = []
        if value != default:
            syn.append((name, value, ConfigSource.STATIC_BROKER_CONFIG))
        syn.append((name, default, ConfigSource.DEFAULT_CONFIG))
        rows[name] = BrokerRow(name, value, typ, True, tuple(syn), doc)

    for f in dataclasses.fields(BrokerConfig):
        name = f.metadata["kafka"]
        if name in _NOT_KAFKA or name in BROKER_SYNONYMS:
            continue
        static_row(name, None if name in SENSITIVE else broker.kafka_value(name), defaults.kafka_value(name),
                   ConfigType.LIST if name == "log.dirs" else _kafka_type(name, getattr(defaults, f.name)),
                   "oncelog's own (no Kafka counterpart)." if name in _OWN else "")
    port = broker.advertised_port or broker.port
    static_row("listeners", broker.listeners or f"PLAINTEXT://{broker.host}:{broker.port}", "PLAINTEXT://:9092",
               ConfigType.LIST, "The listeners (or one PLAINTEXT listener on listener.host / listener.port).")
    static_row("advertised.listeners", broker.advertised_listeners or f"PLAINTEXT://{broker.advertised}:{port}", None,
               ConfigType.LIST, "The addresses clients are told (advertised.host / advertised.port without listeners).")
    static_row("broker.id", str(broker.node_id), "-1", ConfigType.INT, "Equal to node.id.")
    static_row("process.roles", "broker,controller", "", ConfigType.LIST, "One process plays both roles.")
    for name, d in BROKER_SYNONYMS.items():
        syn: list[tuple[str, str | None, ConfigSource]] = [(name, v, s) for v, s in layers.get(name, ())]
        static = topic_config.static_broker_value(broker, name)
        if static is not None:
            syn.append((name, static, ConfigSource.STATIC_BROKER_CONFIG))
        default = broker.kafka_default(name) or d.default
        syn.append((name, default, ConfigSource.DEFAULT_CONFIG))
        rows[name] = BrokerRow(name, syn[0][1], d.type, False, tuple(syn), d.doc)
    # Kafka's other dynamic configs: writable; a value set dynamically comes first
    for name in {n for n in layers if n not in BROKER_SYNONYMS} | {n for n in rows if kafka_dynamic.config_type(n)}:
        if kafka_dynamic.config_type(name) is None:
            continue
        static = rows.get(name)
        syn = [(name, _shown(name, v), src) for v, src in layers.get(name, ())] + list(static.synonyms if static else ())
        rows[name] = BrokerRow(name, syn[0][1] if syn else None, dynamic_type(name), False, tuple(syn), _doc(name))
    return [rows[n] for n in sorted(rows)]


def _shown(name: str, value: str | None) -> str | None:
    """A secret is described without its value, as Kafka describes sensitive configs."""
    return None if name in SENSITIVE or kafka_dynamic.is_secret(name) else value


def _doc(name: str) -> str:
    d = BROKER_SYNONYMS.get(name)
    if d is not None:
        return d.doc
    if kafka_dynamic.base_name(name) in kafka_dynamic.APPLIED:
        return "Kafka's dynamic broker config: applied to the running broker when set."
    return "Kafka's dynamic broker config: stored and described here, not applied to the running broker."


def _applied(name: str) -> str:
    """The 'applied' column of one of Kafka's other dynamic configs."""
    return kafka_dynamic.APPLIED.get(name) or kafka_dynamic.not_applied(name)



def compatibility_table(broker: BrokerConfig | None = None) -> str:
    """The Markdown table of docs/COMPATIBILITY-configs.md's broker section (generated)."""
    rows = ["| config | type | default | dynamic here | applied |", "|---|---|---|---|---|"]
    for r in broker_config_rows(broker or BrokerConfig(), DynamicBrokerConfigs(Path("/nonexistent"), 1)):
        default = r.synonyms[-1][1]
        d = BROKER_SYNONYMS.get(r.name)
        applied = ("yes" if d.applied else "no: " + d.note) if d is not None else (
            "oncelog's own" if r.name in _OWN else
            _applied(r.name) if kafka_dynamic.config_type(r.name) else "yes")
        rows.append(f"| `{r.name}` | {r.type.name} | `{default}` | {'no' if r.read_only else 'yes'} | {applied} |")
    listed = {r.name for r in broker_config_rows(broker or BrokerConfig(), DynamicBrokerConfigs(Path("/nonexistent"), 1))}
    for name in sorted({**kafka_dynamic.PER_BROKER, **kafka_dynamic.CLUSTER_WIDE}.keys() - listed):
        level = "yes, per broker" if name in kafka_dynamic.PER_BROKER else "yes"
        rows.append(f"| `{name}` | {dynamic_type(name).name} | (Kafka's) | {level} | {_applied(name)} |")
    return "\n".join(rows) + "\n"
