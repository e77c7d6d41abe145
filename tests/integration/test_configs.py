"""Topic and broker configs through real admin clients (issue 16): DescribeConfigs as Kafka 4.x
answers it, CreateTopics with every Kafka topic config, AlterConfigs / IncrementalAlterConfigs
(durable, live, validate_only, per-resource errors), message.timestamp.type=LogAppendTime, and a
compacted topic refusing records without a key (Produce v8+ record_errors)."""

from __future__ import annotations

import datetime
import time

import pytest

from oncelog.broker.configuration.topic_config import TOPIC_CONFIGS
from oncelog.client import ProtocolClient
from oncelog.protocol import apis, records
from oncelog.protocol.errors import ErrorCode

LONG_MAX = "9223372036854775807"


def _admin(broker):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create(broker, name: str, configs: dict[str, str] | None = None, partitions: int = 1) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(broker)  # held: a collected AdminClient fails its futures
    fut = admin.create_topics([NewTopic(name, partitions, 1, config=configs or {})], operation_timeout=10)
    fut[name].result(timeout=30)


def _describe(broker, restype, name: str) -> dict:
    from confluent_kafka.admin import ConfigResource

    res = ConfigResource(restype, name)
    admin = _admin(broker)
    return admin.describe_configs([res])[res].result(timeout=30)


def _raw_produce(bootstrap: str, topic: str, batch: bytes, version: int = 9):
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.PRODUCE, version)
        req = m["ProduceRequest"](
            transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
            topic_data=(m["TopicProduceData"](name=topic, partition_data=(
                m["PartitionProduceData"](index=0, records=batch),)),),
        )
        return c.request(apis.PRODUCE, req, version=version).responses[0].partition_responses[0]


def _batch(recs, ts: int | None = None) -> bytes:
    return records.build_batch(recs, timestamp_ms=int(time.time() * 1000) if ts is None else ts)


# -- CreateTopics + DescribeConfigs -----------------------------------------------------------------


def test_create_topic_accepts_every_kafka_topic_config_and_describes_all(broker) -> None:
    from confluent_kafka.admin import ConfigSource, ResourceType

    accepted = {
        "min.cleanable.dirty.ratio": "0.3", "max.compaction.lag.ms": "1000000", "segment.index.bytes": "1048576",
        "preallocate": "true", "message.format.version": "3.0-IV1", "message.downconversion.enable": "false",
        "retention.ms": "3600000", "compression.type": "zstd", "message.timestamp.type": "LogAppendTime",
    }
    _create(broker, "cfg-all", accepted)
    described = _describe(broker, ResourceType.TOPIC, "cfg-all")
    assert set(described) == set(TOPIC_CONFIGS)
    for name, value in accepted.items():
        assert described[name].value == value, name
        assert described[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, name
    assert described["flush.ms"].value == LONG_MAX and described["flush.messages"].value == LONG_MAX
    assert described["flush.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert described["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not any(e.is_read_only or e.is_sensitive for e in described.values())


def test_create_topic_refuses_unknown_and_invalid_configs(broker) -> None:
    from confluent_kafka import KafkaException

    for configs in ({"no.such.config": "1"}, {"retention.ms": "soon"}, {"min.cleanable.dirty.ratio": "2"},
                    {"cleanup.policy": "shred"}, {"message.timestamp.type": "WallClock"}):
        with pytest.raises(KafkaException) as exc:
            _create(broker, "cfg-bad", configs)
        assert exc.value.args[0].code() == ErrorCode.invalid_config.value, configs


def test_describe_types_synonyms_documentation_kafka_python(broker) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    _create(broker, "cfg-types", {"retention.ms": "1000", "cleanup.policy": "compact"})
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        out = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "cfg-types")], include_synonyms=True,
                                     config_filter="all")
        topic = out["topic"]["cfg-types"]
        assert topic["retention.ms"]["config_type"] == "LONG"
        assert topic["cleanup.policy"]["config_type"] == "LIST"
        assert topic["preallocate"]["config_type"] == "BOOLEAN"
        assert topic["min.cleanable.dirty.ratio"]["config_type"] == "DOUBLE"
        assert topic["max.message.bytes"]["config_type"] == "INT"
        assert topic["message.timestamp.type"]["config_type"] == "STRING"
        syn = [(s["name"], s["source"]) for s in topic["retention.ms"]["synonyms"]]
        assert syn[0] == ("retention.ms", "DYNAMIC_TOPIC_CONFIG")
        assert syn[-1] == ("log.retention.ms", "DEFAULT_CONFIG")
        brokers = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(broker.node_id or 1))],
                                         config_filter="all")["broker"][str(broker.node_id or 1)]
        for name in ("listeners", "advertised.listeners", "node.id", "log.dirs", "num.partitions", "log.retention.ms",
                     "log.flush.interval.ms", "log.cleaner.min.cleanable.ratio"):
            assert name in brokers, name
        assert not {"listener.port", "advertised.host", "listener.host", "advertised.port"} & set(brokers)
        assert brokers["listeners"]["value"] == f"PLAINTEXT://{broker.host}:{broker.port}"
        assert brokers["log.flush.interval.ms"]["value"] == LONG_MAX
        assert brokers["node.id"]["read_only"] and not brokers["log.retention.ms"]["read_only"]
        assert brokers["node.id"]["config_type"] == "INT"
    finally:
        admin.close()
    with ProtocolClient(broker.bootstrap) as c:  # documentation (v3+) only when asked
        m = c.classes(apis.DESCRIBE_CONFIGS, 4)
        for wanted in (True, False):
            req = m["DescribeConfigsRequest"](resources=(m["DescribeConfigsResource"](
                resource_type=2, resource_name="cfg-types", configuration_keys=("segment.ms",)),),
                include_synonyms=False, include_documentation=wanted)
            (entry,) = c.request(apis.DESCRIBE_CONFIGS, req, version=4).results[0].configs
            assert (entry.documentation is not None) is wanted
            assert entry.config_type == 5  # LONG


# -- AlterConfigs / IncrementalAlterConfigs -----------------------------------------------------------


def test_incremental_alter_topic_live_durable_and_validate_only(broker) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                       ResourceType)

    _create(broker, "cfg-alter")
    admin = _admin(broker)

    def alter(entries, validate_only=False):
        res = ConfigResource(ResourceType.TOPIC, "cfg-alter", incremental_configs=entries)
        return admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(timeout=30)

    E = ConfigEntry
    alter([E("max.message.bytes", "200", incremental_operation=AlterConfigOpType.SET)], validate_only=True)
    assert _describe(broker, ResourceType.TOPIC, "cfg-alter")["max.message.bytes"].value == "1048588"
    assert _raw_produce(broker.bootstrap, "cfg-alter", _batch([(b"k", b"x" * 400, ())])).error_code == 0
    alter([E("max.message.bytes", "200", incremental_operation=AlterConfigOpType.SET),
           E("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    d = _describe(broker, ResourceType.TOPIC, "cfg-alter")
    assert d["max.message.bytes"].value == "200" and d["max.message.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert d["cleanup.policy"].value == "compact,delete"
    # live: the partition's LogConfig changed
    assert _raw_produce(broker.bootstrap, "cfg-alter", _batch([(b"k", b"x" * 400, ())])).error_code == \
        ErrorCode.message_too_large.value
    alter([E("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT),
           E("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    d = _describe(broker, ResourceType.TOPIC, "cfg-alter")
    assert d["cleanup.policy"].value == "compact"
    assert d["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    for bad, code in (([E("retention.ms", "x", incremental_operation=AlterConfigOpType.SET)], ErrorCode.invalid_config),
                      ([E("nope", "1", incremental_operation=AlterConfigOpType.SET)], ErrorCode.invalid_config),
                      ([E("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)], ErrorCode.invalid_config)):
        with pytest.raises(KafkaException) as exc:
            alter(bad)
        assert exc.value.args[0].code() == code.value, bad
    res = ConfigResource(ResourceType.TOPIC, "missing", incremental_configs=[E("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as exc:
        admin.incremental_alter_configs([res])[res].result(timeout=30)
    assert exc.value.args[0].code() == ErrorCode.unknown_topic_or_partition.value
    # durable: survives a restart
    alter([E("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)])
    broker.stop()
    broker.start()
    assert _describe(broker, ResourceType.TOPIC, "cfg-alter")["retention.ms"].value == "123456"
    assert _describe(broker, ResourceType.TOPIC, "cfg-alter")["cleanup.policy"].value == "compact"


def test_alter_configs_kafka_python_and_broker_dynamic(broker) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    _create(broker, "cfg-kp")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        for incremental in (False, True):
            out = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "cfg-kp",
                                                      configs={"retention.ms": str(1000 + incremental)})],
                                      incremental=incremental)
            assert out["topic"]["cfg-kp"] == "OK", out
            got = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "cfg-kp")])["topic"]["cfg-kp"]
            assert got["retention.ms"]["value"] == str(1000 + incremental)
        # the broker's dynamic configs: per node, inherited by topics that do not set them
        node = str(broker.node_id or 1)
        out = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, node,
                                                  configs={"log.cleaner.min.cleanable.ratio": "0.25",
                                                           "message.max.bytes": "300"})], incremental=True)
        assert out["broker"][node] == "OK", out
        got = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "cfg-kp")], include_synonyms=True,
                                     config_filter="all")["topic"]["cfg-kp"]
        assert got["min.cleanable.dirty.ratio"]["value"] == "0.25"
        assert got["min.cleanable.dirty.ratio"]["config_source"] == "DYNAMIC_BROKER_CONFIG"
        assert got["max.message.bytes"]["value"] == "300"
        out = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, node, configs={"node.id": "7"})],
                                  incremental=True, raise_on_unknown=False)
        assert "InvalidRequest" in out["broker"][node]
    finally:
        admin.close()
    # live and durable: a 400-byte batch is now too large for every topic without its own setting
    assert _raw_produce(broker.bootstrap, "cfg-kp", _batch([(b"k", b"x" * 400, ())])).error_code == \
        ErrorCode.message_too_large.value
    broker.stop()
    broker.start()
    assert _raw_produce(broker.bootstrap, "cfg-kp", _batch([(b"k", b"x" * 400, ())])).error_code == \
        ErrorCode.message_too_large.value


def test_confluent_alter_configs_replaces_whole_set(broker) -> None:
    from confluent_kafka.admin import ConfigResource, ResourceType

    _create(broker, "cfg-replace", {"retention.ms": "5000", "segment.ms": "60000"})
    res = ConfigResource(ResourceType.TOPIC, "cfg-replace", set_config={"retention.bytes": "1000000"})
    admin = _admin(broker)
    admin.alter_configs([res])[res].result(timeout=30)
    d = _describe(broker, ResourceType.TOPIC, "cfg-replace")
    assert d["retention.bytes"].value == "1000000"
    assert d["retention.ms"].value == "604800000" and d["segment.ms"].value == "604800000"


# -- LogAppendTime ------------------------------------------------------------------------------


def test_log_append_time_stamps_batches(broker) -> None:
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer

    _create(broker, "cfg-lat", {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    r = _raw_produce(broker.bootstrap, "cfg-lat", _batch([(b"a", b"1", ()), (b"b", b"2", ())], ts=1000))
    after = int(time.time() * 1000)
    assert r.error_code == 0
    assert r.log_append_time is not None
    stamped = int(r.log_append_time.timestamp() * 1000)
    assert before - 5 <= stamped <= after + 5
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lat", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["cfg-lat"])
        got = []
        deadline = time.time() + 30
        while len(got) < 2 and time.time() < deadline:
            msg = c.poll(1.0)
            if msg is not None and not msg.error():
                got.append(msg.timestamp())
    finally:
        c.close()
    assert got == [(TIMESTAMP_LOG_APPEND_TIME, stamped)] * 2


def test_create_time_topic_keeps_producer_timestamps(broker) -> None:
    _create(broker, "cfg-ct")
    r = _raw_produce(broker.bootstrap, "cfg-ct", _batch([(b"a", b"1", ())], ts=1000))
    assert r.error_code == 0 and r.log_append_time is None


# -- compacted topics refuse records without a key ----------------------------------------------------


def test_compacted_topic_refuses_records_without_key(broker) -> None:
    _create(broker, "cfg-compact", {"cleanup.policy": "compact"})
    r = _raw_produce(broker.bootstrap, "cfg-compact", _batch([(b"k", b"1", ()), (None, b"2", ()), (None, b"3", ())]))
    assert r.error_code == ErrorCode.invalid_record.value
    assert [(e.batch_index, e.batch_index_error_message) for e in r.record_errors] == [
        (i, "Compacted topic cannot accept message without key in topic partition cfg-compact-0.") for i in (1, 2)]
    assert "2 record errors" in r.error_message
    assert _raw_produce(broker.bootstrap, "cfg-compact", _batch([(b"k", b"1", ())])).error_code == 0
    # through a real producer: the keyless record fails, the keyed one is delivered
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap})
    errors: list = []
    p.produce("cfg-compact", value=b"nokey", on_delivery=lambda err, msg: errors.append(err))
    p.flush(30)  # one batch each: Kafka refuses a whole batch holding a keyless record
    p.produce("cfg-compact", key=b"k", value=b"keyed", on_delivery=lambda err, msg: errors.append(err))
    p.flush(30)
    assert errors[0] is not None and errors[0].code() == ErrorCode.invalid_record.value
    assert errors[1] is None
