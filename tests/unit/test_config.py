from pathlib import Path

import pytest

from oncelog.broker.configuration.config import BrokerConfig, parse_properties
from oncelog.protocol.errors import InvalidConfig


def test_kafka_property_names(tmp_path: Path) -> None:
    p = tmp_path / "server.properties"
    p.write_text("# comment\nlog.dirs=/x\nnum.partitions = 3\nlog.retention.hours=2\nauto.create.topics.enable=false\n")
    cfg = BrokerConfig.from_properties_file(p)
    assert cfg.data_dir == Path("/x")
    assert cfg.num_partitions == 3
    assert cfg.log_retention_ms == 2 * 3600 * 1000
    assert cfg.auto_create_topics_enable is False


def test_unknown_property_is_rejected() -> None:
    with pytest.raises(InvalidConfig, match="nmu.partitions"):
        BrokerConfig().with_overrides({"nmu.partitions": "3"})


def test_bad_value_is_rejected() -> None:
    with pytest.raises(InvalidConfig, match="num.partitions"):
        BrokerConfig().with_overrides({"num.partitions": "three"})


def test_properties_parser_rejects_garbage() -> None:
    with pytest.raises(InvalidConfig):
        parse_properties("just words")


def test_kip_937_timestamp_properties_are_broker_properties() -> None:
    """Issue 26 row 12: Kafka's log.message.timestamp.* broker properties are taken (the broker
    refused to start with them: "unknown broker property") and become the topics' defaults."""
    from oncelog.broker.configuration import topic_config

    b = BrokerConfig().with_overrides({"log.message.timestamp.after.max.ms": "1000",
                                       "log.message.timestamp.before.max.ms": "2000",
                                       "log.message.timestamp.type": "LogAppendTime"})
    lc = topic_config.log_config(b, {})
    assert (lc.timestamp_after_max_ms, lc.timestamp_before_max_ms, lc.log_append_time) == (1000, 2000, True)
    lc = topic_config.log_config(b, {"message.timestamp.after.max.ms": "5"})
    assert lc.timestamp_after_max_ms == 5
    assert topic_config.log_config(BrokerConfig(), {}).timestamp_after_max_ms == 3_600_000  # Kafka 4's default
    for bad in ({"log.message.timestamp.after.max.ms": "-1"}, {"log.message.timestamp.type": "Later"}):
        with pytest.raises(InvalidConfig):
            BrokerConfig().with_overrides(bad)
