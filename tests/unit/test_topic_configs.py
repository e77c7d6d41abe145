"""The table of Kafka topic configs (broker/configuration/topic_config.py) and what is built on it: validation,
precedence and synonyms, LogConfig, IncrementalAlterConfigs operations, LogAppendTime stamping,
the compacted-topic key check, and docs/COMPATIBILITY-configs.md kept in sync (issue 16)."""

from __future__ import annotations

from pathlib import Path

import crc32c
import pytest

from oncelog.broker.configuration import dynamic_config
from oncelog.broker.configuration import topic_config
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.handlers.incremental_alter_configs import APPEND, DELETE, SET, SUBTRACT, apply_ops
from oncelog.broker.configuration.topic_config import ConfigSource, ConfigType
from oncelog.protocol import records
from oncelog.protocol.errors import InvalidConfig, InvalidRecord, InvalidRequest

DOC = Path(__file__).resolve().parents[2] / "docs" / "COMPATIBILITY-configs.md"


def test_every_kafka_topic_config_is_accepted_with_its_default() -> None:
    b = BrokerConfig()
    defaults = {n: d.default for n, d in topic_config.TOPIC_CONFIGS.items()}
    assert topic_config.validate_topic_configs(b, defaults) == defaults
    for name in ("min.cleanable.dirty.ratio", "max.compaction.lag.ms", "segment.index.bytes", "preallocate",
                 "message.format.version", "message.downconversion.enable"):
        assert name in topic_config.TOPIC_CONFIGS


@pytest.mark.parametrize("configs", [
    {"no.such": "1"}, {"retention.ms": "1.5"}, {"segment.bytes": "3000000000"}, {"preallocate": "maybe"},
    {"min.cleanable.dirty.ratio": "1.5"}, {"cleanup.policy": ""}, {"compression.type": "brotli"},
    {"message.timestamp.type": "Now"}, {"flush.messages": "0"},
])
def test_invalid_configs_are_refused(configs: dict) -> None:
    with pytest.raises(InvalidConfig):
        topic_config.validate_topic_configs(BrokerConfig(), configs)


def test_values_are_normalised() -> None:
    out = topic_config.validate_topic_configs(BrokerConfig(), {
        "cleanup.policy": "delete, compact", "preallocate": "TRUE", "retention.ms": " 5 ", "retention.bytes": None})
    assert out == {"cleanup.policy": "compact,delete", "preallocate": "true", "retention.ms": "5"}


def test_precedence_topic_dynamic_node_default_static_default() -> None:
    static = BrokerConfig(log_retention_ms=1000)
    layers = {"log.retention.ms": [("3", ConfigSource.DYNAMIC_BROKER_CONFIG),
                                   ("4", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]}
    syn = topic_config.resolve(static, {"retention.ms": "2"}, "retention.ms", layers)
    assert syn == [("retention.ms", "2", ConfigSource.DYNAMIC_TOPIC_CONFIG),
                   ("log.retention.ms", "3", ConfigSource.DYNAMIC_BROKER_CONFIG),
                   ("log.retention.ms", "4", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                   ("log.retention.ms", "1000", ConfigSource.STATIC_BROKER_CONFIG),
                   ("log.retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG)]
    assert topic_config.resolve(BrokerConfig(), {}, "flush.ms")[0] == (
        "log.flush.interval.ms", "9223372036854775807", ConfigSource.DEFAULT_CONFIG)
    assert topic_config.log_config(static, {}, layers).retention_ms == 3


def test_log_config_from_table() -> None:
    cfg = topic_config.log_config(BrokerConfig(), {"message.timestamp.type": "LogAppendTime", "flush.ms": "100",
                                                   "cleanup.policy": "compact"})
    assert cfg.log_append_time and cfg.flush_ms == 100 and cfg.flush_messages is None and cfg.cleanup_policy == "compact"


def test_broker_rows_use_kafka_names_and_types() -> None:
    rows = {r.name: r for r in dynamic_config.broker_config_rows(
        BrokerConfig(port=9999), dynamic_config.DynamicBrokerConfigs(Path("/nonexistent"), 1))}
    assert rows["listeners"].value == "PLAINTEXT://127.0.0.1:9999"
    assert rows["listeners"].source == ConfigSource.STATIC_BROKER_CONFIG
    assert rows["log.flush.interval.messages"].value == "9223372036854775807"
    assert rows["log.retention.ms"].type is ConfigType.LONG and not rows["log.retention.ms"].read_only
    assert rows["node.id"].read_only and rows["node.id"].type is ConfigType.INT
    assert rows["auto.create.topics.enable"].type is ConfigType.BOOLEAN
    assert not {"listener.port", "listener.host", "advertised.host", "advertised.port"} & set(rows)


def test_dynamic_broker_configs_persist(tmp_path: Path) -> None:
    dyn = dynamic_config.DynamicBrokerConfigs.load(tmp_path, 3)
    dyn.replace("default", dyn.validate({"log.retention.ms": "10"}))
    dyn.replace("node", dyn.validate({"log.retention.ms": "20"}))
    again = dynamic_config.DynamicBrokerConfigs.load(tmp_path, 3)
    assert again.layered()["log.retention.ms"] == [("20", ConfigSource.DYNAMIC_BROKER_CONFIG),
                                                   ("10", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
    with pytest.raises(InvalidRequest):
        again.validate({"node.id": "5"})
    with pytest.raises(InvalidConfig):
        again.validate({"log.retention.ms": "soon"})
    with pytest.raises(InvalidRequest):
        again.scope_of("4")


def test_incremental_operations() -> None:
    eff = {"cleanup.policy": "delete"}.get
    assert apply_ops(2, [("cleanup.policy", APPEND, "compact")], {}, lambda n: eff(n, "")) == {"cleanup.policy": "delete,compact"}
    assert apply_ops(2, [("cleanup.policy", SUBTRACT, "delete")], {"cleanup.policy": "compact,delete"},
                     lambda n: "") == {"cleanup.policy": "compact"}
    assert apply_ops(2, [("retention.ms", SET, "5"), ("segment.ms", DELETE, None)], {"segment.ms": "9"},
                     lambda n: "") == {"retention.ms": "5"}
    with pytest.raises(InvalidConfig):
        apply_ops(2, [("retention.ms", APPEND, "5")], {}, lambda n: "")
    with pytest.raises(InvalidRequest):
        apply_ops(2, [("retention.ms", 9, "5")], {}, lambda n: "")


def test_stamp_log_append_time_rewrites_header_and_crc_only() -> None:
    batch = records.build_batch([(b"a", b"1", ()), (None, b"2", ())], timestamp_ms=1000)
    h = records.validate_produce_batch(batch, 1 << 20)
    stamped, h2 = records.stamp_log_append_time(batch, h, 5555)
    assert records.parse_header(stamped) == h2
    assert h2.max_timestamp == 5555 and h2.timestamp_type == records.TIMESTAMP_LOG_APPEND_TIME
    assert h2.base_timestamp == h.base_timestamp and stamped[61:] == batch[61:]
    assert h2.crc == crc32c.crc32c(bytes(stamped[21:]))
    assert records.validate_produce_batch(stamped, 1 << 20) == h2
    assert [r.timestamp for r in records.iter_records(stamped)] == [5555, 5555]


@pytest.mark.parametrize("compression", [records.COMPRESSION_NONE, records.COMPRESSION_ZSTD])
def test_compacted_topic_batch_without_key_lists_each_record(compression: int) -> None:
    batch = records.build_batch([(b"a", b"1", ()), (None, b"2", ()), (b"c", None, ()), (None, None, ())],
                                timestamp_ms=1, compression=compression)
    records.validate_produce_batch(batch, 1 << 20)  # a plain topic takes it
    with pytest.raises(InvalidRecord) as exc:
        records.validate_produce_batch(batch, 1 << 20, compacted=True)
    assert [i for i, _ in exc.value.record_errors] == [1, 3]
    keyed = records.build_batch([(b"a", b"1", ())], timestamp_ms=1, compression=compression)
    records.validate_produce_batch(keyed, 1 << 20, compacted=True)


def test_compatibility_doc_is_in_sync() -> None:
    """docs/COMPATIBILITY-configs.md holds the tables generated from the config tables; after a
    change run ``python -m oncelog.broker.configuration.config_docs > docs/COMPATIBILITY-configs.md``."""
    from oncelog.broker.configuration import config_docs

    assert DOC.read_text() == config_docs.render()
