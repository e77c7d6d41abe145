"""Topic-level configuration: the one table of Apache Kafka 4.x's topic configs (name, type,
default, broker synonym, whether oncelog applies it), and the ``LogConfig`` a partition's log is
opened with.

Theory of operation. ``TOPIC_CONFIGS`` is the single source used by CreateTopics (validation),
DescribeConfigs (type, value, source, synonyms, documentation), AlterConfigs and
IncrementalAlterConfigs, and docs/COMPATIBILITY-configs.md (generated from it; a unit test holds
the two in sync). A topic stores only the configs set on it; every other value comes from the
broker, in Kafka's order of precedence (``resolve``): the topic's own value (DYNAMIC_TOPIC_CONFIG),
the broker's dynamic per-node value, the broker's dynamic cluster default, the static broker value
(server.properties / command line), Kafka's default. Configs marked ``applied=False`` are accepted,
stored and described, and change nothing here (the note says why).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Mapping, Sequence

from oncelog.broker.configuration.config import BrokerConfig
from oncelog.protocol.errors import InvalidConfig
from oncelog.storable import unstorable
from oncelog.storage.config import LogConfig

log = logging.getLogger(__name__)

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647


class ConfigType(enum.IntEnum):
    """DescribeConfigs ``config_type`` (Kafka's ConfigDef types)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """DescribeConfigs ``config_source``."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8  # a group's own value (a GROUP resource)


#: the broker's dynamic values: broker config name -> [(value, source)], per-node first
#: (``dynamic_config.DynamicBrokerConfigs.layered``)
Layers = Mapping[str, Sequence[tuple[str, "ConfigSource"]]]


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    """One Kafka topic config. ``default`` is Kafka's default as Kafka describes it;
    ``broker_name`` the broker config it inherits from (None: none); ``low``/``high`` bounds of
    numbers; ``choices`` the allowed values of a STRING or each item of a LIST; ``log_field`` the
    LogConfig field it sets; ``applied`` whether it changes anything here, ``note`` how."""

    name: str
    type: ConfigType
    default: str
    broker_name: str | None
    applied: bool
    doc: str
    note: str = ""
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None
    log_field: str | None = None


_T = ConfigType
_ACCEPTED = "accepted and described, no effect here"
_D = TopicConfigDef
TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in (
        _D("cleanup.policy", _T.LIST, "delete", "log.cleanup.policy", True,
           "The retention policy of log segments: delete, compact, or both.", "retention and compaction",
           choices=("delete", "compact"), log_field="cleanup_policy"),
        _D("diskless.enable", _T.BOOLEAN, "false", None, True,
           "Keep the topic's record batches in the brokers' object store (KIP-1150); set at creation only.",
           "oncelog's own (issue 29, docs/DISKLESS.md): cluster mode with diskless.storage.url only; refused "
           "with cleanup.policy=compact, on internal topics and as a change after creation"),
        # the schema registry (docs/SCHEMA-REGISTRY.md): Confluent Server's names
        _D("confluent.key.schema.validation", _T.BOOLEAN, "false", None, True,
           "Refuse records whose key does not carry a schema id registered under <topic>-key.",
           "oncelog/schema_registry/validation.py: INVALID_RECORD naming the record", log_field="key_schema_validation"),
        _D("confluent.value.schema.validation", _T.BOOLEAN, "false", None, True,
           "Refuse records whose value does not carry a schema id registered under <topic>-value.",
           "oncelog/schema_registry/validation.py: INVALID_RECORD naming the record",
           log_field="value_schema_validation"),
        _D("compression.gzip.level", _T.INT, "-1", "compression.gzip.level", False,
           "The compression level used with gzip.", _ACCEPTED + " (batches are stored as produced)", low=-1, high=9),
        _D("compression.lz4.level", _T.INT, "9", "compression.lz4.level", False,
           "The compression level used with lz4.", _ACCEPTED + " (batches are stored as produced)", low=1, high=17),
        _D("compression.type", _T.STRING, "producer", "compression.type", False,
           "The final compression type of the topic; 'producer' keeps the producer's codec.",
           "accepted and described; batches are always stored as produced (as 'producer')",
           choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
        _D("compression.zstd.level", _T.INT, "3", "compression.zstd.level", False,
           "The compression level used with zstd.", _ACCEPTED + " (batches are stored as produced)", low=-131072, high=22),
        _D("delete.retention.ms", _T.LONG, "86400000", "log.cleaner.delete.retention.ms", True,
           "How long tombstones are kept in a compacted topic.", "compaction", low=0, log_field="delete_retention_ms"),
        _D("file.delete.delay.ms", _T.LONG, "60000", "log.segment.delete.delay.ms", True,
           "How long a deleted segment's file is kept before it is removed.", "retention", low=0,
           log_field="file_delete_delay_ms"),
        _D("flush.messages", _T.LONG, str(LONG_MAX), "log.flush.interval.messages", True,
           "Fsync the log after this many messages.", "fsync policy", low=1, log_field="flush_messages"),
        _D("flush.ms", _T.LONG, str(LONG_MAX), "log.flush.interval.ms", True,
           "Fsync the log after this many milliseconds.", "fsync policy", low=0, log_field="flush_ms"),
        _D("follower.replication.throttled.replicas", _T.LIST, "", "follower.replication.throttled.replicas", False,
           "Replicas whose log replication is throttled on the follower side.", _ACCEPTED + " (no replication)"),
        _D("index.interval.bytes", _T.INT, "4096", "log.index.interval.bytes", True,
           "How often an offset index entry is added.", "offset index", low=0, log_field="index_interval_bytes"),
        _D("leader.replication.throttled.replicas", _T.LIST, "", "leader.replication.throttled.replicas", False,
           "Replicas whose log replication is throttled on the leader side.", _ACCEPTED + " (no replication)"),
        _D("local.retention.bytes", _T.LONG, "-2", "log.local.retention.bytes", False,
           "Bytes kept locally before tiered storage deletes them.", _ACCEPTED + " (no tiered storage)", low=-2),
        _D("local.retention.ms", _T.LONG, "-2", "log.local.retention.ms", False,
           "Time a segment is kept locally before tiered storage deletes it.", _ACCEPTED + " (no tiered storage)",
           low=-2),
        _D("max.compaction.lag.ms", _T.LONG, str(LONG_MAX), "log.cleaner.max.compaction.lag.ms", False,
           "The longest a message stays ineligible for compaction.", _ACCEPTED + " (the cleaner runs on its own schedule)",
           low=1),
        _D("max.message.bytes", _T.INT, "1048588", "message.max.bytes", True,
           "The largest record batch size allowed.", "produce", low=0, log_field="max_message_bytes"),
        _D("message.downconversion.enable", _T.BOOLEAN, "true", "log.message.downconversion.enable", False,
           "Removed in Kafka 4.0 (no down-conversion).", "accepted for older tools, no effect (removed in Kafka 4.0)"),
        _D("message.format.version", _T.STRING, "3.0-IV1", "log.message.format.version", False,
           "Removed in Kafka 4.0 (always record batch v2).", "accepted for older tools, no effect (removed in Kafka 4.0)"),
        _D("message.timestamp.after.max.ms", _T.LONG, "3600000", "log.message.timestamp.after.max.ms", True,
           "How far a CreateTime timestamp may be ahead of the broker's clock.",
           "produce: INVALID_TIMESTAMP past it (every record checked)", low=0, log_field="timestamp_after_max_ms"),
        _D("message.timestamp.before.max.ms", _T.LONG, str(LONG_MAX), "log.message.timestamp.before.max.ms", True,
           "How far a CreateTime timestamp may be behind the broker's clock.",
           "produce: INVALID_TIMESTAMP past it (every record checked)", low=0, log_field="timestamp_before_max_ms"),
        _D("message.timestamp.type", _T.STRING, "CreateTime", "log.message.timestamp.type", True,
           "CreateTime or LogAppendTime.", "LogAppendTime: the broker stamps each batch at append",
           choices=("CreateTime", "LogAppendTime"), log_field="log_append_time"),
        _D("min.cleanable.dirty.ratio", _T.DOUBLE, "0.5", "log.cleaner.min.cleanable.ratio", False,
           "The dirty ratio above which the cleaner compacts.", _ACCEPTED + " (the cleaner runs on its own schedule)",
           low=0, high=1),
        _D("min.compaction.lag.ms", _T.LONG, "0", "log.cleaner.min.compaction.lag.ms", True,
           "The shortest time a message stays uncompacted.", "compaction", low=0, log_field="min_compaction_lag_ms"),
        _D("min.insync.replicas", _T.INT, "1", "min.insync.replicas", False,
           "Replicas that must acknowledge a write with acks=all.", _ACCEPTED + " (one copy, or the store)", low=1),
        _D("preallocate", _T.BOOLEAN, "false", "log.preallocate", False,
           "Preallocate the file of a new segment.", _ACCEPTED),
        _D("remote.log.copy.disable", _T.BOOLEAN, "false", None, False,
           "Stop copying segments to tiered storage.", _ACCEPTED + " (no tiered storage)"),
        _D("remote.log.delete.on.disable", _T.BOOLEAN, "false", None, False,
           "Delete tiered data when tiered storage is disabled.", _ACCEPTED + " (no tiered storage)"),
        _D("remote.storage.enable", _T.BOOLEAN, "false", None, False,
           "Tiered storage for the topic.", _ACCEPTED + " (no tiered storage)"),
        _D("retention.bytes", _T.LONG, "-1", "log.retention.bytes", True,
           "The most bytes a partition keeps (-1: no limit).", "retention", low=-1, log_field="retention_bytes"),
        _D("retention.ms", _T.LONG, "604800000", "log.retention.ms", True,
           "How long a segment is kept (-1: forever).", "retention", low=-1, log_field="retention_ms"),
        _D("segment.bytes", _T.INT, "1073741824", "log.segment.bytes", True,
           "The size of a segment file.", "segment roll (at least 61 here, 1048576 in Kafka 4)", low=61,
           log_field="segment_bytes"),
        _D("segment.index.bytes", _T.INT, "10485760", "log.index.size.max.bytes", False,
           "The size of the offset index of a segment.", _ACCEPTED + " (indexes grow as needed)", low=4),
        _D("segment.jitter.ms", _T.LONG, "0", "log.roll.jitter.ms", False,
           "Random jitter subtracted from segment.ms.", _ACCEPTED, low=0),
        _D("segment.ms", _T.LONG, "604800000", "log.roll.ms", True,
           "How long before a segment is rolled.", "segment roll", low=1, log_field="segment_ms"),
        _D("unclean.leader.election.enable", _T.BOOLEAN, "false", "unclean.leader.election.enable", False,
           "Whether an out-of-sync replica may become leader.", _ACCEPTED + " (no replicas)"),
    )
}

def _parse_bool(raw: str) -> str:
    v = raw.strip().lower()
    if v not in ("true", "false"):
        raise ValueError("expected true or false")
    return v


def normalize(d: TopicConfigDef, raw: str) -> str:
    """The value of ``d`` as stored and described; raises ValueError when ``raw`` is invalid
    (a NUL character or a lone surrogate included: no store can keep it, storable.py)."""
    why = unstorable(raw)
    if why is not None:
        raise ValueError(f"the value {why}")
    t = d.type
    if t is ConfigType.BOOLEAN:
        return _parse_bool(raw)
    if t in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
        n = int(raw.strip())
        hi = INT_MAX if t is ConfigType.INT else LONG_MAX
        lo = -INT_MAX - 1 if t is ConfigType.INT else -LONG_MAX - 1
        if not lo <= n <= hi:
            raise ValueError(f"outside the range of {t.name}")
        if d.low is not None and n < d.low:
            raise ValueError(f"must be at least {int(d.low)}")
        if d.high is not None and n > d.high:
            raise ValueError(f"must be at most {int(d.high)}")
        return str(n)
    if t is ConfigType.DOUBLE:
        x = float(raw.strip())
        if (d.low is not None and x < d.low) or (d.high is not None and x > d.high):
            raise ValueError(f"must be between {d.low} and {d.high}")
        return raw.strip()
    if t is ConfigType.LIST:
        items = [p.strip() for p in raw.split(",") if p.strip()]
        if d.choices is not None:
            if not items:
                raise ValueError(f"must be one or more of {', '.join(d.choices)}")
            bad = [i for i in items if i not in d.choices]
            if bad:
                raise ValueError(f"{bad[0]!r} is not one of {', '.join(d.choices)}")
            items = sorted(set(items))
        return ",".join(items)
    value = raw.strip()
    if d.choices is not None and value not in d.choices:
        raise ValueError(f"must be one of {', '.join(d.choices)}")
    return value


def validate_topic_configs(broker: BrokerConfig, configs: Mapping[str, str | None],
                           dynamic: Layers | None = None) -> dict[str, str]:
    """Check names and values against ``TOPIC_CONFIGS`` and that the log settings they make are
    usable; returns the configs normalised (a None value is dropped: the default applies).
    Raises InvalidConfig — before anything is written, so a refused request changes nothing."""
    out: dict[str, str] = {}
    for name, raw in configs.items():
        d = TOPIC_CONFIGS.get(name)
        if d is None:
            raise InvalidConfig(f"unknown topic config name: {name}")
        if raw is None:
            continue
        try:
            out[name] = normalize(d, raw)
        except ValueError as exc:
            raise InvalidConfig(f"invalid value {raw!r} for configuration {name}: {exc}") from None
    log_config(broker, out, dynamic)  # raises InvalidConfig if the combination is unusable
    return out


def usable_topic_configs(broker: BrokerConfig, topic: str, configs: dict[str, str]) -> dict[str, str]:
    """The stored configs of ``topic`` without those that are no longer valid (a topic created
    by an older version, or a hand-edited topics.json): each dropped one is logged and its
    broker default applies. A broker never refuses to start over a topic config."""
    kept: dict[str, str] = {}
    for name, value in configs.items():
        try:
            kept = {**kept, **validate_topic_configs(broker, {**kept, name: value})}
        except InvalidConfig as exc:
            log.error("topic %s: ignoring stored config %s=%r (%s); the broker default applies", topic, name, value, exc)
    return kept


# -- values of the broker's side -------------------------------------------------------------


def static_broker_value(broker: BrokerConfig, broker_name: str) -> str | None:
    """The broker's static value of a Kafka broker config when set differently from the default
    (server.properties / command line), else None."""
    value = broker.kafka_value(broker_name)
    if value is None or value == BrokerConfig().kafka_value(broker_name):
        return None
    return value


def resolve(broker: BrokerConfig, topic_configs: Mapping[str, str], name: str,
            dynamic: Layers | None = None) -> list[tuple[str, str, ConfigSource]]:
    """Every value that applies to topic config ``name``, highest precedence first, as
    (config name, value, source): Kafka's synonyms list. The first is the effective value.
    ``dynamic`` is the broker's dynamic values (``Layers``)."""
    d = TOPIC_CONFIGS[name]
    out: list[tuple[str, str, ConfigSource]] = []
    if name in topic_configs:
        out.append((name, topic_configs[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
    if d.broker_name is not None:
        for value, source in (dynamic or {}).get(d.broker_name, ()):
            out.append((d.broker_name, value, source))
        static = static_broker_value(broker, d.broker_name)
        if static is not None:
            out.append((d.broker_name, _as_topic_value(d, static), ConfigSource.STATIC_BROKER_CONFIG))
        out.append((d.broker_name, _as_topic_value(d, broker.kafka_default(d.broker_name) or d.default),
                    ConfigSource.DEFAULT_CONFIG))
    else:
        out.append((name, d.default, ConfigSource.DEFAULT_CONFIG))
    return out


def _as_topic_value(d: TopicConfigDef, value: str) -> str:
    try:
        return normalize(d, value)
    except ValueError:
        return value


def effective(broker: BrokerConfig, topic_configs: Mapping[str, str], name: str,
              dynamic: Layers | None = None) -> str:
    return resolve(broker, topic_configs, name, dynamic)[0][1]


def log_config(broker: BrokerConfig, topic_configs: Mapping[str, str],
               dynamic: Layers | None = None) -> LogConfig:
    """The LogConfig of a topic's partitions: topic settings over broker values. Raises
    InvalidConfig when the combination is unusable."""
    kwargs: dict[str, object] = {}
    for d in TOPIC_CONFIGS.values():
        if d.log_field is None:
            continue
        value = effective(broker, topic_configs, d.name, dynamic)
        if d.log_field == "log_append_time":
            kwargs[d.log_field] = value == "LogAppendTime"
        elif d.type is ConfigType.BOOLEAN:
            kwargs[d.log_field] = value == "true"
        elif d.log_field == "cleanup_policy":
            kwargs[d.log_field] = value
        else:
            n = int(value)
            kwargs[d.log_field] = None if d.log_field in ("flush_messages", "flush_ms") and n >= LONG_MAX else n
    return LogConfig(**kwargs, max_uncompressed_bytes=broker.message_max_uncompressed_bytes)  # type: ignore[arg-type]


def describe(broker: BrokerConfig, topic_configs: Mapping[str, str],
             dynamic: Layers | None = None) -> list[tuple[TopicConfigDef, list[tuple[str, str, ConfigSource]]]]:
    """(definition, synonyms) for every topic config, by name: DescribeConfigs and CreateTopics
    v5+. The first synonym is the effective value and its source."""
    return [(TOPIC_CONFIGS[n], resolve(broker, topic_configs, n, dynamic)) for n in sorted(TOPIC_CONFIGS)]


def compatibility_table() -> str:
    """The Markdown table of docs/COMPATIBILITY-configs.md's topic section (generated)."""
    rows = ["| config | type | Kafka default | broker synonym | applied | notes |", "|---|---|---|---|---|---|"]
    for n in sorted(TOPIC_CONFIGS):
        d = TOPIC_CONFIGS[n]
        rows.append(f"| `{n}` | {d.type.name} | `{d.default}` | {('`' + d.broker_name + '`') if d.broker_name else ''} "
                    f"| {'yes' if d.applied else 'no'} | {d.note} |")
    return "\n".join(rows) + "\n"

