"""Topic administration: the ``oncelog topics`` command line, DescribeConfigs through real admin
clients, auto-creation on Metadata, topic ids, and DeleteTopics (R1).

The CLI runs as a subprocess (``python -m oncelog topics ...``) against a broker process, the way
an operator uses it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from kafka_clients import create_topic, produce
from oncelog.protocol.messages import make
from oncelog.client import ProtocolClient
from oncelog.process import BrokerProcess
from oncelog.protocol import apis, records
from oncelog.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration


def oncelog(*args: str, bootstrap: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``python -m oncelog topics <args> -b <bootstrap>``; wide output so tables don't wrap."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    res = subprocess.run([sys.executable, "-m", "oncelog", "topics", *args, "--bootstrap-server", bootstrap],
                         capture_output=True, text=True, timeout=60, env=env)
    if check:
        assert res.returncode == 0, f"oncelog topics {' '.join(args)} exited {res.returncode}:\n{res.stdout}{res.stderr}"
    return res


def _topic_names(bootstrap: str) -> set[str]:
    """Every topic, by a Metadata request for all topics that never auto-creates."""
    md = _metadata(bootstrap, None, allow_auto_create=False)
    return {t.name for t in md.topics}  # type: ignore[attr-defined]


# -- the CLI -----------------------------------------------------------------------------------


def test_cli_create_list_describe_delete(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    out = oncelog("create", "orders", "--partitions", "3", "--config", "retention.ms=3600000", bootstrap=bs).stdout
    assert "created topic orders with 3 partition(s)" in out
    oncelog("create", "audit", bootstrap=bs)
    assert oncelog("list", bootstrap=bs).stdout.split() == ["audit", "orders"]
    assert {"audit", "orders"} <= _topic_names(bs)

    produce("confluent", bs, "orders", [(p, None, b"x") for p in (0, 1, 1, 2, 2, 2)])
    out = oncelog("describe", "orders", bootstrap=bs).stdout
    # Rows: partition, leader, replicas, isr, start offset, end offset, records (borders removed).
    rows = [line.translate({ord(ch): " " for ch in "│┃|"}).split() for line in out.splitlines()]
    cells = [r for r in rows if len(r) == 7 and all(c.replace(",", "").isdigit() for c in r)]
    assert [(r[0], r[4], r[5], r[6]) for r in cells] == [("0", "0", "1", "1"), ("1", "0", "2", "2"), ("2", "0", "3", "3")]
    assert all(r[1] == "1" and r[2] == "1" and r[3] == "1" for r in cells), cells

    out = oncelog("delete", "orders", bootstrap=bs).stdout
    assert "deleted topic orders" in out
    assert oncelog("list", bootstrap=bs).stdout.split() == ["audit"]
    assert "orders" not in _topic_names(bs)
    assert not (broker.data_dir / "orders-0").exists()


def test_cli_errors_exit_non_zero(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    oncelog("create", "once", bootstrap=bs)
    res = oncelog("create", "once", bootstrap=bs, check=False)
    assert res.returncode == 1 and "TOPIC_ALREADY_EXISTS" in res.stdout.upper()
    res = oncelog("create", "bad/name", bootstrap=bs, check=False)
    assert res.returncode == 1 and "INVALID_TOPIC" in res.stdout.upper()
    res = oncelog("create", "cfg", "--config", "no.such.config=1", bootstrap=bs, check=False)
    assert res.returncode == 1 and "INVALID_CONFIG" in res.stdout.upper()
    res = oncelog("describe", "missing", bootstrap=bs, check=False)
    assert res.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in res.stdout.upper()
    res = oncelog("delete", "missing", bootstrap=bs, check=False)
    assert res.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in res.stdout.upper()
    assert oncelog("list", bootstrap=bs).stdout.split() == ["once"]


@pytest.mark.parametrize("verb", [("topics", "list"), ("groups", "list"), ("transactions", "list"),
                                  ("transactions", "find-hanging"), ("acls", "list"), ("users", "list")])
def test_cli_unreachable_broker_is_one_line_and_exit_1(verb: tuple[str, str]) -> None:
    """No broker at the address (a bound socket that does not listen refuses): every admin verb
    says so in one line and exits 1, without a traceback."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = "127.0.0.1:%d" % s.getsockname()[1]
        env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
        res = subprocess.run([sys.executable, "-m", "oncelog", *verb, "--bootstrap-server", address],
                             capture_output=True, text=True, timeout=60, env=env)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "Traceback" not in out and "─" not in out, out
    assert "refused" in out.lower(), out


# -- DescribeConfigs ---------------------------------------------------------------------------


def test_describe_configs_confluent(broker: BrokerProcess) -> None:
    """A config set at creation is the topic's own (DYNAMIC_TOPIC_CONFIG, not default); every
    other topic config is reported as a default."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

    create_topic("confluent", broker.bootstrap, "configured", 2, {"retention.ms": "3600000", "cleanup.policy": "delete"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource("topic", "configured")
    entries = admin.describe_configs([res])[res].result(timeout=30)
    own = {n for n, e in entries.items() if not e.is_default}
    assert own == {"retention.ms", "cleanup.policy"}
    assert entries["retention.ms"].value == "3600000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    for name in ("segment.bytes", "retention.bytes", "max.message.bytes", "min.insync.replicas"):
        assert entries[name].is_default and entries[name].source == ConfigSource.DEFAULT_CONFIG.value, name
    assert entries["segment.bytes"].value == str(1 << 30)
    assert entries["retention.bytes"].value == "-1"

    missing = ConfigResource("topic", "no-such-topic")
    with pytest.raises(Exception, match="UNKNOWN_TOPIC_OR_PART|nknown topic"):
        admin.describe_configs([missing])[missing].result(timeout=30)


def test_describe_configs_kafka_python(broker: BrokerProcess) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    create_topic("kafka-python", broker.bootstrap, "configured-kp", 1, {"retention.ms": "7200000"})
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        res = ConfigResource(ConfigResourceType.TOPIC, "configured-kp")
        modified = _kp_configs(admin.describe_configs([res]), "configured-kp")
        assert set(modified) == {"retention.ms"}, modified
        assert _kp_value(modified["retention.ms"]) == "7200000"
        everything = _kp_configs(admin.describe_configs([res], config_filter="all"), "configured-kp")
        assert {"retention.ms", "segment.bytes", "cleanup.policy", "retention.bytes"} <= set(everything)
        assert _kp_value(everything["segment.bytes"]) == str(1 << 30)
    finally:
        admin.close()


def _kp_configs(result: object, name: str) -> dict:
    """kafka-python 3 answers {resource type: {resource name: {key: entry}}} (older versions a
    list of responses; accept that shape too)."""
    if isinstance(result, dict):
        by_name = next(iter(result.values()))
        return by_name[name]
    out = {}
    for resp in result:  # type: ignore[attr-defined]
        for r in resp.resources:
            for entry in r[4]:
                out[entry[0]] = entry
    return out


def _kp_value(entry: object) -> str:
    if isinstance(entry, dict):
        return entry["value"] if "value" in entry else entry["config_value"]
    if isinstance(entry, (tuple, list)):
        return entry[1]
    return getattr(entry, "value")


# -- Metadata: auto-creation and topic ids -----------------------------------------------------


def _metadata(bootstrap: str, names: list[str] | None, *, allow_auto_create: bool, version: int = 12,
              ids: list[uuid.UUID] | None = None) -> object:
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.METADATA, version)
        topics = None
        if names is not None:
            topics = tuple(m["MetadataRequestTopic"](topic_id=uuid.UUID(int=0), name=n) for n in names)
        if ids is not None:
            topics = tuple(m["MetadataRequestTopic"](topic_id=i, name=None) for i in ids)
        return c.request(apis.METADATA, make(
            m["MetadataRequest"], topics=topics, allow_auto_topic_creation=allow_auto_create,
            include_topic_authorized_operations=False, include_cluster_authorized_operations=False), version=version)


def test_metadata_auto_creates_topics_when_enabled(broker_factory) -> None:
    b: BrokerProcess = broker_factory(overrides={"num.partitions": "3"})
    md = _metadata(b.bootstrap, ["auto-raw"], allow_auto_create=True)
    t = md.topics[0]  # type: ignore[attr-defined]
    assert t.error_code == ErrorCode.none and t.name == "auto-raw" and len(t.partitions) == 3
    # A request that does not allow creation leaves unknown topics alone.
    md = _metadata(b.bootstrap, ["not-auto"], allow_auto_create=False)
    assert md.topics[0].error_code == ErrorCode.unknown_topic_or_partition  # type: ignore[attr-defined]
    # Real clients: producing to an unknown topic creates it (broker-side auto-creation).
    produce("kafka-python", b.bootstrap, "auto-kp", [(None, None, b"hello")])  # type: ignore[list-item]
    produce("confluent", b.bootstrap, "auto-ck", [(0, None, b"hello")])
    assert {"auto-raw", "auto-kp", "auto-ck"} <= _topic_names(b.bootstrap)
    assert "not-auto" not in _topic_names(b.bootstrap)


def test_metadata_does_not_auto_create_when_disabled(broker_factory) -> None:
    from confluent_kafka import KafkaException, Producer

    b: BrokerProcess = broker_factory(overrides={"auto.create.topics.enable": "false"})
    md = _metadata(b.bootstrap, ["nope"], allow_auto_create=True)
    t = md.topics[0]  # type: ignore[attr-defined]
    assert t.error_code == ErrorCode.unknown_topic_or_partition and t.partitions == ()
    errors: list[str] = []
    p = Producer({"bootstrap.servers": b.bootstrap, "message.timeout.ms": 3000})
    try:
        p.produce("nope", b"x", on_delivery=lambda err, _m: errors.append(str(err)))
    except KafkaException as exc:  # librdkafka may refuse locally once it knows the topic is unknown
        errors.append(str(exc))
    p.flush(10)
    assert errors and errors[0] != "None", errors
    assert any("nknown topic" in e or "UNKNOWN_TOPIC" in e or "timed out" in e for e in errors), errors
    assert "nope" not in _topic_names(b.bootstrap)
    assert not (b.data_dir / "nope-0").exists()


def test_metadata_v10_plus_returns_topic_ids(broker: BrokerProcess) -> None:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    with ProtocolClient(broker.bootstrap) as c:
        m = c.classes(apis.CREATE_TOPICS, 7)
        import datetime

        res = c.request(apis.CREATE_TOPICS, m["CreateTopicsRequest"](
            topics=(m["CreatableTopic"](name="with-id", num_partitions=2, replication_factor=1, assignments=(),
                                        configs=()),),
            timeout=datetime.timedelta(seconds=10), validate_only=False), version=7)
    created_id = res.topics[0].topic_id
    assert res.topics[0].error_code == ErrorCode.none and created_id != uuid.UUID(int=0)
    for version in (10, 11, 12):
        t = _metadata(broker.bootstrap, ["with-id"], allow_auto_create=False, version=version).topics[0]  # type: ignore[attr-defined]
        assert t.topic_id == created_id, f"Metadata v{version}"
    everything = _metadata(broker.bootstrap, None, allow_auto_create=False).topics  # type: ignore[attr-defined]
    assert {t.name: t.topic_id for t in everything}["with-id"] == created_id
    by_id = _metadata(broker.bootstrap, None, allow_auto_create=False, ids=[created_id]).topics  # type: ignore[attr-defined]
    assert [(t.name, t.error_code) for t in by_id] == [("with-id", ErrorCode.none)]
    unknown = _metadata(broker.bootstrap, None, allow_auto_create=False, ids=[uuid.uuid4()]).topics  # type: ignore[attr-defined]
    assert unknown[0].error_code == ErrorCode.unknown_topic_id
    # The id survives a restart, and confluent-kafka sees the same one.
    broker.kill()
    broker.start()
    t = _metadata(broker.bootstrap, ["with-id"], allow_auto_create=False).topics[0]  # type: ignore[attr-defined]
    assert t.topic_id == created_id
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    desc = admin.describe_topics(TopicCollection(["with-id"]))["with-id"].result(timeout=30)
    assert str(desc.topic_id) and uuid.UUID(bytes=_uuid_bytes(desc.topic_id)) == created_id


def _uuid_bytes(u: object) -> bytes:
    """confluent-kafka's Uuid -> 16 bytes (most significant half first)."""
    msb = u.get_most_significant_bits() & (2**64 - 1)  # type: ignore[attr-defined]
    lsb = u.get_least_significant_bits() & (2**64 - 1)  # type: ignore[attr-defined]
    return msb.to_bytes(8, "big") + lsb.to_bytes(8, "big")


# -- DeleteTopics --------------------------------------------------------------------------------


def _raw_produce(bootstrap: str, topic: str) -> int:
    """Error code of a Produce (acks=-1) of one record to partition 0."""
    batch = records.build_batch([(None, b"after delete", ())], timestamp_ms=int(time.time() * 1000))
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.PRODUCE, 9)
        import datetime

        req = m["ProduceRequest"](
            transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
            topic_data=(m["TopicProduceData"](name=topic, partition_data=(
                m["PartitionProduceData"](index=0, records=batch),)),),
        )
        res = c.request(apis.PRODUCE, req, version=9)
    return res.responses[0].partition_responses[0].error_code


def test_delete_topics_then_produce_fails(broker_factory) -> None:
    from confluent_kafka.admin import AdminClient

    b: BrokerProcess = broker_factory(overrides={"auto.create.topics.enable": "false"})
    create_topic("confluent", b.bootstrap, "doomed", 2)
    produce("confluent", b.bootstrap, "doomed", [(0, None, b"before")])
    assert _raw_produce(b.bootstrap, "doomed") == ErrorCode.none
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.delete_topics(["doomed"], operation_timeout=10)["doomed"].result(timeout=30)
    assert "doomed" not in _topic_names(b.bootstrap)
    assert _raw_produce(b.bootstrap, "doomed") == ErrorCode.unknown_topic_or_partition
    with pytest.raises(Exception, match="UNKNOWN_TOPIC_OR_PART|nknown topic"):
        admin.delete_topics(["doomed"], operation_timeout=10)["doomed"].result(timeout=30)
    # Gone for good: not back after a restart, and the name can be reused for a new topic.
    b.kill()
    b.start()
    assert "doomed" not in _topic_names(b.bootstrap)
    assert not list(b.data_dir.glob("doomed-*"))
    create_topic("kafka-python", b.bootstrap, "doomed", 1)
    assert _raw_produce(b.bootstrap, "doomed") == ErrorCode.none


def test_confluent_list_all_topics(broker: BrokerProcess) -> None:
    """librdkafka 2.16 sends its all-topics Metadata v12 request with 3 stray bytes after the
    body (librdkafka #5049); Kafka ignores them, and so must we."""
    from confluent_kafka.admin import AdminClient

    create_topic("confluent", broker.bootstrap, "listed", 1)
    topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=5).topics
    assert "listed" in topics
