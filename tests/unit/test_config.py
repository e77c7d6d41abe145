from pathlib import Path

import pytest

from oncelog.broker.config import BrokerConfig, parse_properties
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
