"""Topic-level configuration: Kafka's topic property names, their broker-wide defaults, and the
``LogConfig`` a partition's log is opened with.

A topic stores only the properties set on it (CreateTopics configs); every other value comes from
the broker's config at the time of use, exactly as in Kafka, so DescribeConfigs can tell a
topic's own setting (source TOPIC_CONFIG) from an inherited default (DEFAULT_CONFIG).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

from oncelog.broker.config import BrokerConfig
from oncelog.protocol.errors import InvalidConfig
from oncelog.storage.log import LogConfig

log = logging.getLogger(__name__)


def _opt(v: str) -> int | None:
    return None if v in ("", "9223372036854775807") else int(v)


@dataclass(frozen=True, slots=True)
class TopicProperty:
    name: str
    parse: Callable[[str], Any]
    default: Callable[[BrokerConfig], Any]
    log_field: str | None  # the LogConfig field it sets, if any


def _policy(v: str) -> str:
    parts = sorted(p.strip() for p in v.split(",") if p.strip())
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError("cleanup.policy is delete, compact or compact,delete")
    return ",".join(parts)


TOPIC_PROPERTIES: dict[str, TopicProperty] = {
    p.name: p
    for p in (
        TopicProperty("cleanup.policy", _policy, lambda b: b.log_cleanup_policy, "cleanup_policy"),
        TopicProperty("retention.ms", int, lambda b: b.log_retention_ms, "retention_ms"),
        TopicProperty("retention.bytes", int, lambda b: b.log_retention_bytes, "retention_bytes"),
        TopicProperty("segment.bytes", int, lambda b: b.log_segment_bytes, "segment_bytes"),
        TopicProperty("segment.ms", int, lambda b: b.log_roll_ms, "segment_ms"),
        TopicProperty("max.message.bytes", int, lambda b: b.message_max_bytes, "max_message_bytes"),
        TopicProperty("flush.messages", _opt, lambda b: b.log_flush_interval_messages, "flush_messages"),
        TopicProperty("flush.ms", _opt, lambda b: b.log_flush_interval_ms, "flush_ms"),
        TopicProperty("index.interval.bytes", int, lambda b: b.log_index_interval_bytes, "index_interval_bytes"),
        TopicProperty("file.delete.delay.ms", int, lambda b: b.file_delete_delay_ms, "file_delete_delay_ms"),
        TopicProperty("delete.retention.ms", int, lambda b: 86_400_000, "delete_retention_ms"),
        TopicProperty("min.compaction.lag.ms", int, lambda b: 0, "min_compaction_lag_ms"),
        TopicProperty("min.insync.replicas", int, lambda b: 1, None),
        TopicProperty("message.timestamp.type", str, lambda b: "CreateTime", None),
        TopicProperty("compression.type", str, lambda b: "producer", None),
        TopicProperty("unclean.leader.election.enable", str, lambda b: "false", None),
    )
}


#: Lower bounds of the numeric properties (Kafka's ConfigDef validators; segment.bytes: one batch
#: header, below Kafka 4's 1 MiB so that tests can roll segments quickly).
_AT_LEAST: dict[str, int] = {
    "segment.bytes": 61,
    "segment.ms": 1,
    "retention.ms": -1,
    "retention.bytes": -1,
    "max.message.bytes": 0,
    "flush.messages": 1,
    "flush.ms": 0,
    "index.interval.bytes": 0,
    "file.delete.delay.ms": 0,
    "delete.retention.ms": 0,
    "min.compaction.lag.ms": 0,
    "min.insync.replicas": 1,
}
_INT32_MAX = {"segment.bytes", "max.message.bytes", "index.interval.bytes", "min.insync.replicas"}


def validate_topic_configs(broker: BrokerConfig, configs: dict[str, str]) -> dict[str, str]:
    """Check names, values and ranges, and that the log settings they make are usable; returns
    the configs normalised. Raises InvalidConfig — before anything is written, so a refused
    CreateTopics leaves nothing behind."""
    out: dict[str, str] = {}
    for name, raw in configs.items():
        prop = TOPIC_PROPERTIES.get(name)
        if prop is None:
            raise InvalidConfig(f"unknown topic config {name!r}")
        if raw is None:
            continue
        try:
            value = prop.parse(raw)
        except ValueError as exc:
            raise InvalidConfig(f"invalid value {raw!r} for topic config {name}: {exc}") from None
        if isinstance(value, int):
            low = _AT_LEAST.get(name)
            if low is not None and value < low:
                raise InvalidConfig(f"invalid value {raw} for topic config {name}: must be at least {low}")
            if name in _INT32_MAX and value > 0x7FFFFFFF:
                raise InvalidConfig(f"invalid value {raw} for topic config {name}: must be at most 2147483647")
        if name == "message.timestamp.type" and value not in ("CreateTime",):
            raise InvalidConfig("only message.timestamp.type=CreateTime is supported")
        out[name] = str(raw) if not isinstance(value, str) else value
    log_config(broker, out)  # raises InvalidConfig if the combination is unusable
    return out


def usable_topic_configs(broker: BrokerConfig, topic: str, configs: dict[str, str]) -> dict[str, str]:
    """The stored configs of ``topic`` without those that are no longer valid (a topic created
    by an older version, or a hand-edited topics.json): each dropped one is logged and its
    broker default applies. A broker never refuses to start over a topic config."""
    kept: dict[str, str] = {}
    for name, value in configs.items():
        try:
            validate_topic_configs(broker, {**kept, name: value})
        except InvalidConfig as exc:
            log.error("topic %s: ignoring stored config %s=%r (%s); the broker default applies", topic, name, value, exc)
            continue
        kept[name] = value
    return kept


def effective(broker: BrokerConfig, topic_configs: dict[str, str], name: str) -> Any:
    prop = TOPIC_PROPERTIES[name]
    if name in topic_configs:
        return prop.parse(topic_configs[name])
    return prop.default(broker)


def log_config(broker: BrokerConfig, topic_configs: dict[str, str]) -> LogConfig:
    """The LogConfig of a topic's partitions: topic settings over broker defaults."""
    kwargs = {
        prop.log_field: effective(broker, topic_configs, prop.name)
        for prop in TOPIC_PROPERTIES.values()
        if prop.log_field is not None
    }
    return LogConfig(**kwargs, max_uncompressed_bytes=broker.message_max_uncompressed_bytes)


def describe(broker: BrokerConfig, topic_configs: dict[str, str]) -> list[tuple[str, str | None, bool]]:
    """(name, value, is_default) for every topic property, for DescribeConfigs."""
    rows = []
    for name in sorted(TOPIC_PROPERTIES):
        value = effective(broker, topic_configs, name)
        text = None if value is None else str(value)
        rows.append((name, text, name not in topic_configs))
    return rows
