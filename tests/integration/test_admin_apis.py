"""The admin surface of issue 16 through the admin clients that call it (confluent-kafka's
AdminClient, kafka-python's KafkaAdminClient), or crafted requests where no client does:
CreatePartitions, DescribeLogDirs, DescribeTopicPartitions, ListGroups v5 filters, authorized
operations, ElectLeaders, partition reassignments, DescribeQuorum, Fetch by topic id and
ListOffsets -3/-4/-5.
"""

from __future__ import annotations

import time
import uuid

import pytest

from kafka_clients import create_topic
from oncelog.client import ProtocolClient
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration


def _confluent_admin(bootstrap: str):  # type: ignore[no-untyped-def]
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _partitions(admin, topic: str) -> int:  # type: ignore[no-untyped-def]
    return len(admin.list_topics(topic, timeout=10).topics[topic].partitions)


def test_create_partitions_confluent_producer_and_consumer_use_the_new_ones(broker) -> None:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import NewPartitions

    admin = _confluent_admin(broker.bootstrap)
    create_topic("confluent", broker.bootstrap, "grow", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "topic.metadata.refresh.interval.ms": 500})
    producer.produce("grow", b"before", partition=0)
    assert producer.flush(10) == 0

    # validate_only changes nothing
    admin.create_partitions([NewPartitions("grow", 3)], validate_only=True)["grow"].result(10)
    assert _partitions(admin, "grow") == 1
    admin.create_partitions([NewPartitions("grow", 3)])["grow"].result(10)
    assert _partitions(admin, "grow") == 3

    # not an increase, internal topics: refused
    for count, code in ((3, "INVALID_PARTITIONS"), (2, "INVALID_PARTITIONS")):
        with pytest.raises(KafkaException) as exc:
            admin.create_partitions([NewPartitions("grow", count)])["grow"].result(10)
        assert exc.value.args[0].name() == code
    with pytest.raises(KafkaException) as exc:
        admin.create_partitions([NewPartitions("nope-missing", 2)])["nope-missing"].result(10)
    assert exc.value.args[0].code() == ErrorCode.unknown_topic_or_partition

    # the producer created before the change sends to partition 2 once its metadata is refreshed
    delivered: list = []
    deadline = time.monotonic() + 20
    while not delivered and time.monotonic() < deadline:
        try:
            producer.produce("grow", b"after", partition=2, on_delivery=lambda err, msg: delivered.append((err, msg)))
        except (BufferError, KafkaException):  # "unknown partition" until its metadata is refreshed
            pass
        producer.flush(2)
        delivered = [d for d in delivered if d[0] is None]
        if not delivered:
            time.sleep(0.3)
    assert delivered and delivered[0][1].partition() == 2

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-grow", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("grow", 2, 0)])
        got = None
        deadline = time.monotonic() + 20
        while got is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got = msg
        assert got is not None and got.value() == b"after" and got.partition() == 2
    finally:
        consumer.close()


def test_create_partitions_kafka_python_refuses_internal_topics_and_persists(broker) -> None:
    from confluent_kafka import Consumer
    from kafka.admin import KafkaAdminClient, NewPartitions

    create_topic("confluent", broker.bootstrap, "grow2", 2)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-internal"})  # the group coordinator's topic
    c.subscribe(["grow2"])
    c.poll(2)
    c.close()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        res = admin.create_partitions({"grow2": NewPartitions(total_count=5)})
        assert [r.error_code for r in res.results] == [0]
        for internal in ("__consumer_offsets", "__transaction_state"):
            res = admin.create_partitions({internal: NewPartitions(total_count=100)}, raise_errors=False)
            assert [r.error_code for r in res.results] == [ErrorCode.invalid_request], res
    finally:
        admin.close()
    broker.restart()
    admin2 = _confluent_admin(broker.bootstrap)
    assert _partitions(admin2, "grow2") == 5
    assert _partitions(admin2, "__consumer_offsets") == 50


def _raw(bootstrap: str, api_key: int, version: int, cls: str, **fields):  # type: ignore[no-untyped-def]
    with ProtocolClient(bootstrap) as c:
        m = c.classes(api_key, version)
        return c.request(api_key, m[cls](**fields), version=version), m


def test_create_partitions_every_version_crafted(broker) -> None:
    import datetime

    create_topic("confluent", broker.bootstrap, "grow3", 1)
    for version, count in ((0, 2), (1, 3), (2, 4), (3, 5)):
        with ProtocolClient(broker.bootstrap) as c:
            m = c.classes(apis.CREATE_PARTITIONS, version)
            res = c.request(apis.CREATE_PARTITIONS, m["CreatePartitionsRequest"](
                topics=(m["CreatePartitionsTopic"](name="grow3", count=count, assignments=None),
                        m["CreatePartitionsTopic"](name="grow3", count=count + 1, assignments=None)),
                timeout=datetime.timedelta(seconds=5), validate_only=False), version=version)
        # a topic named twice: INVALID_REQUEST, nothing changed
        assert [(r.name, r.error_code) for r in res.results] == [("grow3", ErrorCode.invalid_request)]
        with ProtocolClient(broker.bootstrap) as c:
            m = c.classes(apis.CREATE_PARTITIONS, version)
            res = c.request(apis.CREATE_PARTITIONS, m["CreatePartitionsRequest"](
                topics=(m["CreatePartitionsTopic"](name="grow3", count=count, assignments=None),),
                timeout=datetime.timedelta(seconds=5), validate_only=False), version=version)
        assert [(r.name, r.error_code) for r in res.results] == [("grow3", ErrorCode.none)], res
    # manual assignments must name one list per new partition, of live brokers
    with ProtocolClient(broker.bootstrap) as c:
        m = c.classes(apis.CREATE_PARTITIONS, 3)
        res = c.request(apis.CREATE_PARTITIONS, m["CreatePartitionsRequest"](
            topics=(m["CreatePartitionsTopic"](name="grow3", count=7, assignments=(
                m["CreatePartitionsAssignment"](broker_ids=(1,)),)),),
            timeout=datetime.timedelta(seconds=5), validate_only=False), version=3)
    assert res.results[0].error_code == ErrorCode.invalid_replica_assignment


def test_kafka_python_infers_a_current_kafka_and_describes_log_dirs(broker) -> None:
    from kafka.admin import KafkaAdminClient

    from kafka_clients import produce

    create_topic("confluent", broker.bootstrap, "dirs", 2)
    produce("confluent", broker.bootstrap, "dirs", [(1, b"k", b"v" * 100)] * 10)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        # kafka-python infers the broker's version from ApiVersions (ListOffsets v11, DescribeLogDirs v5)
        assert admin._manager.broker_version_data.broker_version >= (4, 2)
        (answer,) = admin.describe_log_dirs({"dirs": [0, 1]})
        (log_dir,) = answer["log_dirs"]
        assert log_dir["error_code"] == 0 and log_dir["log_dir"].endswith(broker.data_dir.name)
        (topic,) = log_dir["topics"]
        sizes = {p["partition_index"]: (p["partition_size"], p["offset_lag"]) for p in topic["partitions"]}
        assert sizes[0] == (0, 0) and sizes[1][0] > 1000 and sizes[1][1] == 0
        assert log_dir["total_bytes"] > 0 and log_dir["usable_bytes"] > 0
    finally:
        admin.close()


def test_kafka_python_groups_topic_partitions_quorum_reassignments_elections(broker) -> None:
    from confluent_kafka import Consumer
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    create_topic("confluent", broker.bootstrap, "paged-a", 3)
    create_topic("confluent", broker.bootstrap, "paged-b", 2)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-listed"})
    c.subscribe(["paged-a"])
    deadline = time.monotonic() + 20
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(0.2)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        # ListGroups v5: state and type filters (every group here is a classic one)
        listed = repr(admin.list_groups(states_filter=["stable"], types_filter=["classic"]))
        assert "g-listed" in listed
        assert "g-listed" not in repr(admin.list_groups(types_filter=["consumer"]))
        assert "g-listed" not in repr(admin.list_groups(states_filter=["Empty"]))

        # DescribeTopicPartitions: pages of 2 partitions, following the cursor
        pages = []
        cursor = None
        while True:
            answer = admin.describe_topic_partitions(["paged-a", "paged-b"], response_partition_limit=2, cursor=cursor)
            pages.append([(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in answer["topics"]])
            cursor = answer["next_cursor"]
            if cursor is None:
                break
        assert pages == [[("paged-a", [0, 1])], [("paged-a", [2]), ("paged-b", [0])], [("paged-b", [1])]], pages

        quorum = admin.describe_metadata_quorum()
        (qt,) = quorum["topics"]
        (qp,) = qt["partitions"]
        assert qp["leader_id"] == 1 and [v["replica_id"] for v in qp["current_voters"]] == [1]

        assert admin.list_partition_reassignments() == {}
        moved = admin.alter_partition_reassignments({TopicPartition("paged-a", 0): [1]})
        assert moved == {TopicPartition("paged-a", 0): None}
        elected = admin.elect_leaders(0, {"paged-a": [0, 1]})  # ELECTION_NOT_NEEDED is not an error
        (result,) = elected.replica_election_results
        assert [p.error_code for p in result.partition_result] == [ErrorCode.election_not_needed] * 2
    finally:
        admin.close()
        c.close()


def test_confluent_describe_cluster_topics_groups_and_elections(broker) -> None:
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType, ElectionType, TopicCollection, TopicPartition
    from confluent_kafka.admin import AclOperation, NewPartitions

    admin = _confluent_admin(broker.bootstrap)
    create_topic("confluent", broker.bootstrap, "described", 2)
    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert set(cluster.authorized_operations) == {
        AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE}
    assert not admin.describe_cluster().result(10).authorized_operations

    described = admin.describe_topics(TopicCollection(["described"]), include_authorized_operations=True)
    topic = described["described"].result(10)
    assert len(topic.partitions) == 2 and topic.topic_id is not None
    assert AclOperation.READ in topic.authorized_operations and AclOperation.WRITE in topic.authorized_operations
    admin.create_partitions([NewPartitions("described", 4)])["described"].result(10)
    assert len(admin.describe_topics(TopicCollection(["described"]))["described"].result(10).partitions) == 4

    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-conf"})
    c.subscribe(["described"])
    deadline = time.monotonic() + 20
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(0.2)
    try:
        stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE},
                                            types={ConsumerGroupType.CLASSIC}).result(10)
        assert "g-conf" in [g.group_id for g in stable.valid]
        assert [g.type for g in stable.valid if g.group_id == "g-conf"] == [ConsumerGroupType.CLASSIC]
        empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(10)
        assert "g-conf" not in [g.group_id for g in empty.valid]
        consumer_type = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(10)
        assert "g-conf" not in [g.group_id for g in consumer_type.valid]
        (group,) = admin.describe_consumer_groups(["g-conf"], include_authorized_operations=True).values()
        assert AclOperation.READ in group.result(10).authorized_operations
    finally:
        c.close()

    elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("described", 0)]).result(10)
    (err,) = elected.values()
    assert err is not None and err.name() == "ELECTION_NOT_NEEDED"


def test_list_offsets_max_timestamp_is_the_record_not_its_batch(broker) -> None:
    """One batch holding timestamps 1000, 3000, 2000: MAX_TIMESTAMP is offset 1 (the record),
    not 0 (its batch's base offset, the old answer)."""
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    create_topic("confluent", broker.bootstrap, "maxts", 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000, "batch.num.messages": 3})
    for ts in (1000, 3000, 2000):
        p.produce("maxts", b"v", partition=0, timestamp=ts)
    assert p.flush(10) == 0
    # a second batch after it, with smaller timestamps
    p.produce("maxts", b"v", partition=0, timestamp=500)
    assert p.flush(10) == 0
    admin = _confluent_admin(broker.bootstrap)
    tp = TopicPartition("maxts", 0)
    got = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(10)
    assert (got.offset, got.timestamp) == (1, 3000)
    earliest = admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(10)
    assert earliest.offset == 0


def test_list_offsets_v8_to_v11_special_timestamps(broker) -> None:
    import datetime

    from kafka_clients import produce

    create_topic("confluent", broker.bootstrap, "special", 1)
    produce("confluent", broker.bootstrap, "special", [(0, None, b"x")] * 3)
    for version in (8, 9, 10, 11):
        with ProtocolClient(broker.bootstrap) as c:
            m = c.classes(apis.LIST_OFFSETS, version)
            parts = tuple(m["ListOffsetsPartition"](partition_index=0, current_leader_epoch=-1, timestamp=ts)
                          for ts in (-4, -5, -6, -1) if version >= 11 or ts != -6)
            res = c.request(apis.LIST_OFFSETS, m["ListOffsetsRequest"](
                replica_id=-1, isolation_level=0, topics=(m["ListOffsetsTopic"](name="special", partitions=parts),),
                **({"timeout": datetime.timedelta(seconds=1)} if version >= 10 else {})), version=version)
        got = [(p.error_code, p.offset, p.leader_epoch) for p in res.topics[0].partitions]
        expected = [(ErrorCode.none, 0, 0), (ErrorCode.none, -1, -1)]
        if version >= 11:
            expected.append((ErrorCode.none, -1, -1))
        expected.append((ErrorCode.none, 3, 0))
        assert got == expected, (version, got)


def test_fetch_by_topic_id_v13_to_v18(broker) -> None:
    import datetime

    from kafka_clients import produce

    create_topic("confluent", broker.bootstrap, "byid", 1)
    produce("confluent", broker.bootstrap, "byid", [(0, None, b"hello")] * 2)
    admin = _confluent_admin(broker.bootstrap)
    from confluent_kafka import TopicCollection

    tid = admin.describe_topics(TopicCollection(["byid"]))["byid"].result(10).topic_id
    topic_id = uuid.UUID(int=((tid.get_most_significant_bits() % (1 << 64)) << 64)
                         | (tid.get_least_significant_bits() % (1 << 64)))
    unknown = uuid.uuid4()
    for version in range(13, 19):
        with ProtocolClient(broker.bootstrap) as c:
            m = c.classes(apis.FETCH, version)
            topics = tuple(m["FetchTopic"](topic_id=tid, partitions=(m["FetchPartition"](
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 20),)) for tid in (topic_id, unknown))
            res = c.request(apis.FETCH, m["FetchRequest"](
                max_wait=datetime.timedelta(milliseconds=10), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                session_id=0, session_epoch=-1, topics=topics, forgotten_topics_data=(), rack_id="",
                **({"replica_id": -1} if version < 15 else {})), version=version)
        known, missing = res.responses
        assert known.topic_id == topic_id and missing.topic_id == unknown
        assert known.partitions[0].error_code == ErrorCode.none and known.partitions[0].high_watermark == 2
        assert len(bytes(known.partitions[0].records)) > 0
        assert missing.partitions[0].error_code == ErrorCode.unknown_topic_id


def test_describe_topic_partitions_crafted_edges(broker) -> None:
    create_topic("confluent", broker.bootstrap, "dtp-a", 2)

    def call(topics: tuple[str, ...], limit: int, cursor: tuple[str, int] | None = None):  # type: ignore[no-untyped-def]
        with ProtocolClient(broker.bootstrap) as c:
            m = c.classes(apis.DESCRIBE_TOPIC_PARTITIONS, 0)
            return c.request(apis.DESCRIBE_TOPIC_PARTITIONS, m["DescribeTopicPartitionsRequest"](
                topics=tuple(m["TopicRequest"](name=t) for t in topics), response_partition_limit=limit,
                cursor=None if cursor is None else m["Cursor"](topic_name=cursor[0], partition_index=cursor[1])),
                version=0)

    res = call(("dtp-a", "dtp-missing"), 10)
    assert [(t.name, t.error_code, len(t.partitions)) for t in res.topics] == [
        ("dtp-a", ErrorCode.none, 2), ("dtp-missing", ErrorCode.unknown_topic_or_partition, 0)]
    assert res.next_cursor is None
    res = call(("dtp-a",), 10, cursor=("elsewhere", 0))
    assert [(t.name, t.error_code) for t in res.topics] == [("dtp-a", ErrorCode.invalid_request)]
    # an empty list: every topic, internal ones flagged; a page of 50 ends inside __consumer_offsets
    res = call((), 50)
    assert [t.name for t in res.topics] == ["__consumer_offsets"] and res.topics[0].is_internal
    assert (res.next_cursor.topic_name, res.next_cursor.partition_index) == ("__transaction_state", 0)
    res = call((), 2000, cursor=("dtp-a", 1))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in res.topics] == [("dtp-a", [1])]


def test_metadata_v13_and_authorized_operations_when_asked(broker) -> None:
    from oncelog.broker.handlers import _acl

    create_topic("confluent", broker.bootstrap, "md13", 1)
    for version, asked in ((13, True), (13, False), (8, True)):
        with ProtocolClient(broker.bootstrap) as c:
            m = c.classes(apis.METADATA, version)
            fields = {"topics": (m["MetadataRequestTopic"](topic_id=uuid.UUID(int=0), name="md13"),)
                      if version >= 10 else (m["MetadataRequestTopic"](name="md13"),),
                      "allow_auto_topic_creation": False, "include_topic_authorized_operations": asked}
            if version <= 10:
                fields["include_cluster_authorized_operations"] = asked
            res = c.request(apis.METADATA, m["MetadataRequest"](**fields), version=version)
        (topic,) = res.topics
        assert topic.error_code == ErrorCode.none and topic.name == "md13"
        assert topic.topic_authorized_operations == (_acl.TOPIC if asked else _acl.NOT_REQUESTED)
        if version >= 13:
            assert res.error_code == ErrorCode.none
        if version <= 10:
            assert res.cluster_authorized_operations == (_acl.CLUSTER if asked else _acl.NOT_REQUESTED)


def test_every_version_of_the_new_admin_apis(broker) -> None:
    """Each advertised version of the APIs added in issue 16 answers (crafted requests; fields a
    version lacks are dropped by ``make``)."""
    import datetime

    from oncelog.protocol.messages import make

    create_topic("confluent", broker.bootstrap, "every", 1)
    second = datetime.timedelta(seconds=5)

    def build(m, key: int):  # type: ignore[no-untyped-def]
        if key == apis.DESCRIBE_QUORUM:
            return make(m["DescribeQuorumRequest"], topics=(m["TopicData"](
                topic_name="__cluster_metadata", partitions=(m["PartitionData"](partition_index=0),)),))
        if key == apis.ELECT_LEADERS:
            return make(m["ElectLeadersRequest"], election_type=0, timeout=second,
                        topic_partitions=(m["TopicPartitions"](topic="every", partitions=(0,)),))
        if key == apis.ALTER_PARTITION_REASSIGNMENTS:
            return make(m["AlterPartitionReassignmentsRequest"], timeout=second, allow_replication_factor_change=True,
                        topics=(m["ReassignableTopic"](name="every", partitions=(
                            m["ReassignablePartition"](partition_index=0, replicas=None),)),))
        if key == apis.LIST_PARTITION_REASSIGNMENTS:
            return make(m["ListPartitionReassignmentsRequest"], timeout=second, topics=None)
        if key == apis.DESCRIBE_LOG_DIRS:
            return make(m["DescribeLogDirsRequest"], topics=(m["DescribableLogDirTopic"](topic="every", partitions=(0,)),))
        if key == apis.LIST_GROUPS:
            return make(m["ListGroupsRequest"], states_filter=(), types_filter=())
        if key == apis.DESCRIBE_CLUSTER:
            return make(m["DescribeClusterRequest"], include_cluster_authorized_operations=True, endpoint_type=1,
                        include_fenced_brokers=False)
        raise AssertionError(key)

    keys = (apis.DESCRIBE_QUORUM, apis.ELECT_LEADERS, apis.ALTER_PARTITION_REASSIGNMENTS,
            apis.LIST_PARTITION_REASSIGNMENTS, apis.DESCRIBE_LOG_DIRS, apis.LIST_GROUPS, apis.DESCRIBE_CLUSTER)
    for key in keys:
        lo, hi = apis.SUPPORTED_VERSIONS[key]
        for version in range(lo, hi + 1):
            with ProtocolClient(broker.bootstrap) as c:
                res = c.request(key, build(c.classes(key, version), key), version=version)
            assert getattr(res, "error_code", ErrorCode.none) == ErrorCode.none, (apis.api_name(key), version, res)
