"""A partition's log configuration (Kafka's topic-level configs), shared by every storage engine:
each engine reads the fields that apply to it (segment and index settings only the local engine)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from oncelog.protocol.errors import InvalidConfig

__all__ = ["LogConfig"]

_DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Per-topic log settings (Kafka topic config names in the comments)."""

    segment_bytes: int = 1 << 30  # segment.bytes
    segment_ms: int = 7 * _DAY_MS  # segment.ms
    retention_ms: int = 7 * _DAY_MS  # retention.ms (-1: forever)
    retention_bytes: int = -1  # retention.bytes (-1: unlimited)
    index_interval_bytes: int = 4096  # index.interval.bytes
    flush_messages: int | None = None  # flush.messages (None: never fsync per message)
    flush_ms: int | None = None  # flush.ms (None: never fsync by time)
    max_message_bytes: int = 1048588  # max.message.bytes
    file_delete_delay_ms: int = 60_000  # file.delete.delay.ms
    cleanup_policy: str = "delete"  # cleanup.policy ("delete", "compact", "compact,delete")
    delete_retention_ms: int = _DAY_MS  # delete.retention.ms (compaction: how long tombstones stay)
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    #: message.timestamp.type=LogAppendTime: producer batches are stamped at append (Partition)
    log_append_time: bool = False
    #: KIP-937: how far behind / ahead of the broker's clock a CreateTime record timestamp may be
    #: (message.timestamp.before.max.ms / message.timestamp.after.max.ms; Kafka 4's defaults)
    timestamp_before_max_ms: int = 2**63 - 1
    timestamp_after_max_ms: int = 3_600_000
    #: a produced batch may expand to at most this many bytes (broker: message.max.uncompressed.bytes)
    max_uncompressed_bytes: int = 64 * 1024 * 1024
    #: confluent.key.schema.validation / confluent.value.schema.validation: produced keys / values
    #: must carry a schema id registered under <topic>-key / <topic>-value (oncelog/schema_registry)
    key_schema_validation: bool = False
    value_schema_validation: bool = False

    #: Kafka property name -> field name.
    KAFKA_NAMES = {
        "segment.bytes": "segment_bytes",
        "segment.ms": "segment_ms",
        "retention.ms": "retention_ms",
        "retention.bytes": "retention_bytes",
        "index.interval.bytes": "index_interval_bytes",
        "flush.messages": "flush_messages",
        "flush.ms": "flush_ms",
        "max.message.bytes": "max_message_bytes",
        "file.delete.delay.ms": "file_delete_delay_ms",
        "cleanup.policy": "cleanup_policy",
        "delete.retention.ms": "delete_retention_ms",
        "min.compaction.lag.ms": "min_compaction_lag_ms",
        "message.timestamp.before.max.ms": "timestamp_before_max_ms",
        "message.timestamp.after.max.ms": "timestamp_after_max_ms",
    }

    def __post_init__(self) -> None:
        if not 61 <= self.segment_bytes <= 0x7FFFFFFF:
            raise InvalidConfig(f"segment.bytes {self.segment_bytes} outside [61, 2147483647]")
        if self.segment_ms < 1 or self.index_interval_bytes < 0 or self.max_message_bytes < 0:
            raise InvalidConfig("segment.ms must be >= 1, index.interval.bytes and max.message.bytes >= 0")
        if (self.flush_messages is not None and self.flush_messages < 1) or (
            self.flush_ms is not None and self.flush_ms < 0
        ):
            raise InvalidConfig("flush.messages must be >= 1 and flush.ms >= 0 when set")
        if not set(self.cleanup_policy.split(",")) <= {"delete", "compact"}:
            raise InvalidConfig(f"cleanup.policy {self.cleanup_policy!r} unknown")

    @classmethod
    def from_properties(cls, props: dict[str, str], base: LogConfig | None = None) -> LogConfig:
        """``base`` (default: defaults) overridden by Kafka-named properties; unknown names are
        ignored (they belong to other layers). Raises InvalidConfig on unparsable values."""
        changes: dict[str, object] = {}
        for name, value in props.items():
            field = cls.KAFKA_NAMES.get(name)
            if field is None:
                continue
            if field == "cleanup_policy":
                changes[field] = value.replace(" ", "")
                continue
            try:
                number = int(value)
            except ValueError:
                raise InvalidConfig(f"{name}={value!r} is not an integer") from None
            if field in ("flush_messages", "flush_ms") and number >= 2**63 - 1:
                changes[field] = None  # Kafka's "never"
            else:
                changes[field] = number
        return dataclasses.replace(base or cls(), **changes)
