"""Topic configs in cluster mode (issue 16): a config altered through one broker is stored in
oncelog_topic.configs, described by another broker and applied live by the broker that leads the
partition (its leader tracker applies config changes of a topic whose id and partition count are
unchanged)."""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Iterator

import pytest

from oncelog.client import ProtocolClient
from cluster_procs import brokers
from raw_connections import served_once
from oncelog.process import BrokerProcess
from oncelog.protocol import apis, records
from oncelog.protocol.errors import ErrorCode

SMALL = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
         "offsets.topic.num.partitions": "2", "transaction.state.log.num.partitions": "2"}


@pytest.fixture
def pair(pg_dsn: str, tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    with brokers(pg_dsn, tmp_path, SMALL, (1, 2)) as procs:
        yield procs


def _described(bootstrap: str, topic: str, key: str, resource_type: int = 2) -> tuple[str | None, int]:
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.DESCRIBE_CONFIGS, 4)
        req = m["DescribeConfigsRequest"](resources=(m["DescribeConfigsResource"](
            resource_type=resource_type, resource_name=topic, configuration_keys=(key,)),),
            include_synonyms=False, include_documentation=False)
        result = c.request(apis.DESCRIBE_CONFIGS, req, version=4).results[0]
    if result.error_code != 0 or len(result.configs) != 1:  # e.g. a broker not in this one's view yet
        return None, -result.error_code or -1
    (entry,) = result.configs
    return entry.value, entry.config_source


#: answers of a partition whose leader is still opening it or has just moved, or of a topic
#: another broker created that this one's view does not hold yet: asked again
_MOVING = {ErrorCode.not_leader_or_follower.value, ErrorCode.leader_not_available.value,
           ErrorCode.unknown_topic_or_partition.value}


def _produce(bootstrap: str, topic: str, partition: int, value: bytes) -> int:
    """The Produce answer once the partition's leader serves it (bounded: 15 s of retries while
    it answers NOT_LEADER_OR_FOLLOWER: the view names a leader a moment before it has opened the
    partition)."""
    code = _produce_once(bootstrap, topic, partition, value)
    for _ in range(75):
        if code not in _MOVING:
            break
        time.sleep(0.2)
        code = _produce_once(bootstrap, topic, partition, value)
    return code


def _produce_once(bootstrap: str, topic: str, partition: int, value: bytes) -> int:
    batch = records.build_batch([(b"k", value, ())], timestamp_ms=int(time.time() * 1000))
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.PRODUCE, 9)
        req = m["ProduceRequest"](transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
                                  topic_data=(m["TopicProduceData"](name=topic, partition_data=(
                                      m["PartitionProduceData"](index=partition, records=batch),)),))
        return c.request(apis.PRODUCE, req, version=9).responses[0].partition_responses[0].error_code


def test_alter_on_one_broker_applies_on_the_other(pair: list[BrokerProcess]) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

    b1, b2 = pair
    admin = AdminClient({"bootstrap.servers": b1.bootstrap})
    admin.create_topics([NewTopic("spread", 2, 1)], operation_timeout=10)["spread"].result(timeout=30)
    leaders: dict[int, int] = {}
    for _ in range(100):  # wait until each broker leads one partition
        md = admin.list_topics("spread", timeout=10)
        leaders = {p.id: p.leader for p in md.topics["spread"].partitions.values()}
        if sorted(leaders.values()) == [1, 2]:
            break
        time.sleep(0.2)
    assert sorted(leaders.values()) == [1, 2], leaders
    on_b2 = next(p for p, node in leaders.items() if node == 2)
    assert _produce(b2.bootstrap, "spread", on_b2, b"x" * 400) == 0

    res = ConfigResource(ResourceType.TOPIC, "spread", incremental_configs=[
        ConfigEntry("max.message.bytes", "200", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=30)

    deadline = time.time() + 15
    while _described(b2.bootstrap, "spread", "max.message.bytes") != ("200", 1) and time.time() < deadline:
        time.sleep(0.2)
    assert _described(b2.bootstrap, "spread", "max.message.bytes") == ("200", 1)  # DYNAMIC_TOPIC_CONFIG
    assert _produce(b2.bootstrap, "spread", on_b2, b"x" * 400) == ErrorCode.message_too_large.value
    on_b1 = next(p for p, node in leaders.items() if node == 1)
    assert _produce(b1.bootstrap, "spread", on_b1, b"x" * 400) == ErrorCode.message_too_large.value


def _alter_broker_default(bootstrap: str, key: str, value: str | None) -> int:
    """IncrementalAlterConfigs on the BROKER resource "" (the cluster-wide default); crafted,
    since librdkafka refuses an empty resource name."""
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.INCREMENTAL_ALTER_CONFIGS, 1)
        op = 0 if value is not None else 1  # SET / DELETE
        req = m["IncrementalAlterConfigsRequest"](resources=(m["AlterConfigsResource"](
            resource_type=4, resource_name="", configs=(m["AlterableConfig"](name=key, config_operation=op, value=value),)),),
            validate_only=False)
        return c.request(apis.INCREMENTAL_ALTER_CONFIGS, req, version=1).responses[0].error_code


def test_a_cluster_default_set_through_one_broker_applies_on_every_broker(pair: list[BrokerProcess]) -> None:
    """The dynamic broker default (resource "") lives in the store: set through broker 1, broker
    2 describes it as DYNAMIC_DEFAULT_BROKER_CONFIG and enforces it on the partitions it leads;
    deleting it through broker 2 lifts it on broker 1. A restarted broker still has it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    b1, b2 = pair
    admin = AdminClient({"bootstrap.servers": b1.bootstrap})
    admin.create_topics([NewTopic("dflt", 2, 1)], operation_timeout=10)["dflt"].result(timeout=30)
    leaders: dict[int, int] = {}
    for _ in range(100):
        md = admin.list_topics("dflt", timeout=10)
        leaders = {p.id: p.leader for p in md.topics["dflt"].partitions.values()}
        if sorted(leaders.values()) == [1, 2]:
            break
        time.sleep(0.2)
    assert sorted(leaders.values()) == [1, 2], leaders
    on = {node: p for p, node in leaders.items()}
    assert _produce(b2.bootstrap, "dflt", on[2], b"x" * 400) == 0

    assert _alter_broker_default(b1.bootstrap, "message.max.bytes", "200") == 0
    deadline = time.time() + 15
    while _described(b2.bootstrap, "dflt", "max.message.bytes") != ("200", 3) and time.time() < deadline:
        time.sleep(0.2)
    assert _described(b2.bootstrap, "dflt", "max.message.bytes") == ("200", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG
    assert _produce(b2.bootstrap, "dflt", on[2], b"x" * 400) == ErrorCode.message_too_large.value
    assert _produce(b1.bootstrap, "dflt", on[1], b"x" * 400) == ErrorCode.message_too_large.value

    b2.stop()
    b2.start()
    assert _described(b2.bootstrap, "dflt", "max.message.bytes") == ("200", 3)

    assert _alter_broker_default(b2.bootstrap, "message.max.bytes", None) == 0
    deadline = time.time() + 15
    while _described(b1.bootstrap, "dflt", "max.message.bytes")[1] != 5 and time.time() < deadline:
        time.sleep(0.2)
    assert _described(b1.bootstrap, "dflt", "max.message.bytes")[1] == 5  # DEFAULT_CONFIG again
    # b2's restart moves leaders (to b1 and back): produce through whichever broker leads now
    codes = []
    for _ in range(75):  # bounded: 15 s
        leader = {p.id: p.leader for p in admin.list_topics("dflt", timeout=10).topics["dflt"].partitions.values()}[on[1]]
        codes.append(_produce({1: b1, 2: b2}[leader].bootstrap, "dflt", on[1], b"x" * 400) if leader in (1, 2) else -1)
        if codes[-1] == 0:
            break
        time.sleep(0.2)
    assert codes[-1] == 0, codes


def _alter_group(bootstrap: str, group: str, key: str, value: str) -> int:
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.INCREMENTAL_ALTER_CONFIGS, 1)
        req = m["IncrementalAlterConfigsRequest"](resources=(m["AlterConfigsResource"](
            resource_type=32, resource_name=group, configs=(m["AlterableConfig"](name=key, config_operation=0,
                                                                                 value=value),)),),
            validate_only=False)
        return c.request(apis.INCREMENTAL_ALTER_CONFIGS, req, version=1).responses[0].error_code


def test_kafka_dynamic_configs_config_resources_and_log_dirs_in_cluster_mode(pair: list[BrokerProcess]) -> None:
    """Kafka's other dynamic broker configs live in the store like the log ones: a cluster
    default (num.io.threads) set through broker 1 is described by broker 2 (before: refused as
    read-only, and a broker adopting the store's view dropped names it did not know); a
    connection limit set through one broker is enforced by both at once (before: stored only).
    A consumer group config set through the broker that does not coordinate the group is applied
    by the one that does (before: INVALID_CONFIG). ListConfigResources on broker 2 lists the
    groups whose configs were set through broker 1 (the store's), both brokers, and the topics; AlterReplicaLogDirs on broker 2 for a partition
    broker 1 leads is REPLICA_NOT_AVAILABLE, for its own NONE."""
    from kafka.admin import KafkaAdminClient, NewTopic

    b1, b2 = pair
    assert _alter_broker_default(b1.bootstrap, "num.io.threads", "12") == 0
    deadline = time.time() + 15
    while _described(b2.bootstrap, "2", "num.io.threads", 4) != ("12", 3) and time.time() < deadline:
        time.sleep(0.2)
    assert _described(b2.bootstrap, "2", "num.io.threads", 4) == ("12", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG
    assert _alter_broker_default(b1.bootstrap, "sasl.kerberos.min.time.before.relogin", "1") == \
        ErrorCode.invalid_request.value  # per broker only, as Kafka

    # a connection limit set through broker 1 is enforced by broker 2 at once, and lifted through
    # broker 2 on broker 1 (connections from 127.0.0.2: the brokers' own, from 127.0.0.1, do not count)
    assert _alter_broker_default(b1.bootstrap, "max.connections.per.ip.overrides", "127.0.0.2:2") == 0
    assert served_once(b2.bootstrap, 3, [True, True, False], source="127.0.0.2") == [True, True, False]
    assert served_once(b1.bootstrap, 3, [True, True, False], source="127.0.0.2") == [True, True, False]
    assert _alter_broker_default(b2.bootstrap, "max.connections.per.ip.overrides", None) == 0
    assert served_once(b1.bootstrap, 3, [True] * 3, source="127.0.0.2") == [True] * 3

    # a consumer group config set through the broker that is not the group's coordinator is
    # applied by the coordinator: the heartbeat interval it hands out
    with ProtocolClient(b1.bootstrap) as c:
        m = c.classes(apis.FIND_COORDINATOR, 3)
        coordinator = c.request(apis.FIND_COORDINATOR, m["FindCoordinatorRequest"](key="cg-cfg", key_type=0),
                                version=3).node_id
    by_node = {1: b1, 2: b2}
    assert _alter_group(by_node[3 - coordinator].bootstrap, "cg-cfg", "consumer.heartbeat.interval.ms", "6000") == 0
    with ProtocolClient(by_node[coordinator].bootstrap) as c:
        m = c.classes(apis.CONSUMER_GROUP_HEARTBEAT, 1)
        for _ in range(50):  # bounded: 10 s (the coordinator has it at the notification or its next poll)
            hb = c.request(apis.CONSUMER_GROUP_HEARTBEAT, m["ConsumerGroupHeartbeatRequest"](
                group_id="cg-cfg", member_id="m-cfg", member_epoch=0, rebalance_timeout=datetime.timedelta(seconds=30),
                subscribed_topic_names=("lcr",), topic_partitions=()), version=1)
            if hb.error_code or hb.heartbeat_interval != datetime.timedelta(milliseconds=5000):
                break
            time.sleep(0.2)
    assert (hb.error_code, hb.heartbeat_interval) == (0, datetime.timedelta(milliseconds=6000))
    assert _described(b1.bootstrap, "cg-cfg", "consumer.heartbeat.interval.ms", 32) == ("6000", 8)  # GROUP_CONFIG

    assert _alter_group(b1.bootstrap, "sg-cfg", "share.auto.offset.reset", "earliest") == 0
    admin = KafkaAdminClient(bootstrap_servers=b2.bootstrap, request_timeout_ms=20_000)
    try:
        admin.create_topics([NewTopic("lcr", 2, 1)])
        listed = admin.list_config_resources()
        assert listed.get("group") == ["cg-cfg", "sg-cfg"], listed
        assert sorted(listed["broker"]) == ["1", "2"] and "lcr" in listed["topic"], listed
    finally:
        admin.close()
    leaders: dict[int, int] = {}
    for _ in range(100):  # bounded: 20 s
        with ProtocolClient(b2.bootstrap) as c:
            m = c.classes(apis.METADATA, 12)
            md = c.request(apis.METADATA, m["MetadataRequest"](topics=(m["MetadataRequestTopic"](name="lcr", topic_id=None),),
                                                               allow_auto_topic_creation=False,
                                                               include_topic_authorized_operations=False), version=12)
        leaders = {p.partition_index: p.leader_id for p in md.topics[0].partitions}
        if sorted(leaders.values()) == [1, 2]:
            break
        time.sleep(0.2)
    assert sorted(leaders.values()) == [1, 2], leaders
    with ProtocolClient(b2.bootstrap) as c:
        m = c.classes(apis.ALTER_REPLICA_LOG_DIRS, 2)
        r = c.request(apis.ALTER_REPLICA_LOG_DIRS, m["AlterReplicaLogDirsRequest"](dirs=(m["AlterReplicaLogDir"](
            path=str(b2.data_dir), topics=(m["AlterReplicaLogDirTopic"](name="lcr", partitions=(0, 1)),)),)), version=2)
    got = {p.partition_index: p.error_code for p in r.results[0].partitions}
    assert got == {p: (ErrorCode.none.value if leader == 2 else ErrorCode.replica_not_available.value)
                   for p, leader in leaders.items()}, (got, leaders)


def test_a_groups_consumer_configs_set_on_one_broker_are_described_by_the_other(pair: list[BrokerProcess]) -> None:
    """A GROUP resource's consumer group configs (KIP-848) are the store's in cluster mode: set
    through broker 1 (confluent-kafka's AdminClient), described by broker 2 once its next poll
    reloaded them, and still there after broker 2 restarts (read from the store at start)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    b1, b2 = pair
    admin = AdminClient({"bootstrap.servers": b1.bootstrap})
    res = ConfigResource(ResourceType.GROUP, "cfg-group", incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=30)
    seen: tuple[str | None, int] = (None, -1)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        seen = _described(b2.bootstrap, "cfg-group", "consumer.session.timeout.ms", resource_type=32)
        if seen[0] == "50000":
            break
        time.sleep(0.2)
    assert seen == ("50000", 8)  # GROUP_CONFIG, on the broker the change did not go through
    b2.restart(hard=False)
    assert _described(b2.bootstrap, "cfg-group", "consumer.session.timeout.ms", resource_type=32) == ("50000", 8)
