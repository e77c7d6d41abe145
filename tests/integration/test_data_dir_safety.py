"""R22, issue 12: the data directory is never emptied on a guess, and one request creating
thousands of topics does not freeze the broker."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import pytest

from bystander import Bystander
from kafka_clients import consume, create_topic, produce
from oncelog.protocol.messages import make
from oncelog.client import ProtocolClient
from oncelog.protocol import apis

pytestmark = pytest.mark.integration
#: These tests measure how fast the broker answers: no spare broker starts next to them (conftest.py).
START_SPARE_BROKER_DURING_TESTS = False


def test_missing_topics_json_rebuilds_the_topics_and_keeps_every_record(broker) -> None:
    """Before: a missing topics.json made the broker delete every partition directory it found
    ("of no known topic"): all data, offsets and transaction state gone."""
    create_topic("confluent", broker.bootstrap, "precious", 3, {"retention.ms": "3600000"})
    produce("confluent", broker.bootstrap, "precious", [(i % 3, b"k", b"v%d" % i) for i in range(30)])
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("precious", 1, 4)], asynchronous=False)
    c.close()
    with ProtocolClient(broker.bootstrap) as pc:
        m = pc.classes(apis.METADATA)
        md = pc.request(apis.METADATA, make(m["MetadataRequest"], topics=None, allow_auto_topic_creation=False,
                                            include_topic_authorized_operations=False))
        topic_id = next(t.topic_id for t in md.topics if t.name == "precious")
    broker.stop()
    (broker.data_dir / "topics.json").unlink()
    broker.start()
    assert "topics.json is missing" in broker.log_tail(20_000)
    got = consume("kafka-python", broker.bootstrap, "precious", [0, 1, 2], expected=30, timeout=60)
    assert sorted(r[3] for r in got) == sorted(b"v%d" % i for i in range(30))
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    assert c.committed([TopicPartition("precious", 1)], timeout=30)[0].offset == 4
    c.close()
    with ProtocolClient(broker.bootstrap) as pc:
        m = pc.classes(apis.METADATA)
        md = pc.request(apis.METADATA, make(m["MetadataRequest"], topics=None, allow_auto_topic_creation=False,
                                            include_topic_authorized_operations=False))
        assert next(t.topic_id for t in md.topics if t.name == "precious") == topic_id  # from partition.metadata
    assert (broker.data_dir / "topics.json").exists()


def test_a_directory_of_no_known_topic_is_set_aside_not_deleted(broker) -> None:
    create_topic("confluent", broker.bootstrap, "kept", 1)
    produce("confluent", broker.bootstrap, "kept", [(0, None, b"x")])
    broker.stop()
    stray = broker.data_dir / "ghost-0"
    stray.mkdir()
    (stray / "00000000000000000000.log").write_bytes(b"some bytes")
    broker.start()
    aside = [p for p in broker.data_dir.iterdir() if p.name.startswith("ghost-0.") and p.name.endswith("-stray")]
    assert len(aside) == 1 and (aside[0] / "00000000000000000000.log").read_bytes() == b"some bytes"
    # a new topic of that name starts empty, not with the stray's files
    create_topic("confluent", broker.bootstrap, "ghost", 1)
    assert consume("confluent", broker.bootstrap, "kept", [0], expected=1, timeout=30)[-1][3] == b"x"


def test_an_unreadable_topics_json_stops_the_start_with_a_clear_message(tmp_path: Path) -> None:
    from oncelog.process import BrokerProcess

    b = BrokerProcess(tmp_path / "b")
    b.start()
    assert b.stop() == 0
    (b.data_dir / "topics.json").write_text("{ not json")
    with pytest.raises(RuntimeError, match="exited with 1"):
        b.start()
    log = b.log_tail(20_000)
    assert "topics.json is unreadable" in log and "Traceback" not in log and "╭" not in log
    assert any(p.name.startswith("__consumer_offsets-") for p in b.data_dir.iterdir())  # nothing deleted


def test_metadata_auto_creating_3000_topics_keeps_the_broker_responsive(broker) -> None:
    """Before: topics.json was rewritten and fsynced per topic (quadratic): 72 s frozen."""
    names = [f"auto-{i}" for i in range(3000)]
    with Bystander(broker.bootstrap) as bystander:
        t0 = time.monotonic()
        with ProtocolClient(broker.bootstrap, timeout=300) as pc:
            m = pc.classes(apis.METADATA)
            md = pc.request(apis.METADATA, make(m["MetadataRequest"], topics=tuple(
                make(m["MetadataRequestTopic"], name=n, topic_id=None) for n in names),
                allow_auto_topic_creation=True, include_topic_authorized_operations=False))
        elapsed = time.monotonic() - t0
    assert {t.name for t in md.topics if t.error_code == 0} == set(names)
    assert elapsed < 60, elapsed
    assert bystander.worst < 2.0, f"bystander waited {bystander.worst:.2f} s"


def test_metadata_for_100k_unknown_topics_keeps_the_broker_responsive(broker_factory) -> None:
    b = broker_factory(overrides={"auto.create.topics.enable": "false"})
    with Bystander(b.bootstrap) as bystander:
        with ProtocolClient(b.bootstrap, timeout=300) as pc:
            m = pc.classes(apis.METADATA)
            md = pc.request(apis.METADATA, make(m["MetadataRequest"], topics=tuple(
                make(m["MetadataRequestTopic"], name=f"nope-{i}", topic_id=None) for i in range(100_000)),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    assert len(md.topics) == 100_000 and {t.error_code for t in md.topics} == {3}
    assert bystander.worst < 2.0, f"bystander waited {bystander.worst:.2f} s"
