"""Issue 26: requests that are well framed but ask for what the broker must refuse (R22) — a
Metadata v10/v11 topic without a name, a request with millions of entries, a record timestamp far
from now, a long group id — each gets Kafka's answer, and the broker's log stays short."""

from __future__ import annotations

import datetime
import socket
import struct
import time
import uuid

import crc32c

import pytest

from bystander import Bystander
from kafka_clients import consume, create_topic, produce
from oncelog.client import ProtocolClient
from oncelog.protocol import apis, messages
from oncelog.protocol import records as R
from oncelog.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration


def _metadata_v10_11(version: int, topics: list[tuple[str | None, uuid.UUID]]) -> object:
    m = messages.Builder(apis.METADATA, version, response=False)
    return m.MetadataRequest(
        topics=tuple(m.MetadataRequestTopic(name=n, topic_id=i) for n, i in topics),
        allow_auto_topic_creation=True, include_topic_authorized_operations=False,
        include_cluster_authorized_operations=False)


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_v11_null_topic_name_is_refused_as_kafka_does(broker, version: int) -> None:
    """Row 3. Before: the null name reached the response encoder outside the handler boundary
    (TypeError, no answer, ~1.5 KB of asyncio traceback per request past the log limiter). Now:
    Kafka's answer (KafkaApis: InvalidRequestException, MetadataRequest.getErrorResponse): every
    named topic INVALID_REQUEST, the null name as ""; a topic id (served from v12) likewise."""
    some_id = uuid.uuid4()
    log_before = len(broker.log_tail(10**9))
    with ProtocolClient(broker.bootstrap) as c:
        for _ in range(200):  # bounded: a client repeating it must not fill the log
            resp = c.request(apis.METADATA, _metadata_v10_11(version, [("a-topic", uuid.UUID(int=0)), (None, uuid.UUID(int=0))]),
                             version=version)
            assert [(t.name, t.error_code) for t in resp.topics] == [
                ("a-topic", ErrorCode.invalid_request), ("", ErrorCode.invalid_request)]
        resp = c.request(apis.METADATA, _metadata_v10_11(version, [("by-id", some_id)]), version=version)
        assert [(t.name, t.error_code) for t in resp.topics] == [("by-id", ErrorCode.invalid_request)]
        # a well-formed v10/v11 request is still served (the check does not refuse names with a zero id)
        resp = c.request(apis.METADATA, _metadata_v10_11(version, [("fine-topic", uuid.UUID(int=0))]), version=version)
        assert [(t.name, t.error_code) for t in resp.topics] == [("fine-topic", ErrorCode.none)]
    time.sleep(0.3)
    log = broker.log_tail(10**9)[log_before:]
    assert "Traceback" not in log
    assert log.count("refused Metadata") <= 12, log[-3000:]  # the log limiter: a burst of 10 per window
    assert len(log) < 8000, log[-3000:]


# -- row 13: long group ids -------------------------------------------------------------------


def test_a_group_id_of_a_thousand_characters_works_and_survives_a_restart(broker) -> None:
    """Row 13. Before: FindCoordinator answered INVALID_GROUP_ID to any group id over 255
    characters (and so did JoinGroup, OffsetCommit, TxnOffsetCommit, ...). Kafka accepts any
    non-empty id. Now: a confluent-kafka consumer joins, consumes and commits under a
    1,000-character id (multi-byte characters included), a transactional producer commits offsets
    for a second long id (AddOffsetsToTxn + TxnOffsetCommit), and both are read back after a hard
    restart (the ids are in ``__consumer_offsets`` keys)."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    topic = "long-groups"
    create_topic("confluent", broker.bootstrap, topic, 1)
    produce("confluent", broker.bootstrap, topic, [(0, None, b"v%d" % i) for i in range(5)])
    group = "g" * 900 + "ü€" * 50  # 1,000 characters, 1,150 UTF-8 bytes
    txn_group = "t" * 5000
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    try:
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())
        assert len(got) == 5
        c.commit(asynchronous=False)
    finally:
        c.close()
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "long-group-txn"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"in-txn", partition=0)
    meta = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": txn_group})
    try:
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 3)], meta.consumer_group_metadata(), 30)
    finally:
        meta.close()
    p.commit_transaction(30)
    broker.restart(hard=True)
    for g, expected in ((group, 5), (txn_group, 3)):
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": g})
        try:
            for _ in range(20):  # the coordinator may still be loading right after the restart
                try:
                    committed = c.committed([TopicPartition(topic, 0)], timeout=10)
                    break
                except KafkaException:
                    time.sleep(0.5)
            assert [tp.offset for tp in committed] == [expected], g[:20]
        finally:
            c.close()


# -- row 12: record timestamps (KIP-937) ------------------------------------------------------


def _raw_produce(c: ProtocolClient, topic: str, batch: bytes) -> object:
    m = c.classes(apis.PRODUCE)
    req = m["ProduceRequest"](transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
                              topic_data=(m["TopicProduceData"](name=topic, partition_data=(
                                  m["PartitionProduceData"](index=0, records=batch),)),))
    return c.request(apis.PRODUCE, req).responses[0].partition_responses[0]


def _with_attribute(batch: bytes, bit: int) -> bytes:
    b = bytearray(batch)
    struct.pack_into(">h", b, 21, struct.unpack_from(">h", b, 21)[0] | bit)
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[R.CRC_START:])))
    return bytes(b)


def test_record_timestamps_out_of_the_topics_bounds_are_refused_as_kafka_does(broker_factory) -> None:
    """Row 12. Before: a CreateTime of now + 2 h or 2^62 was accepted although the topic
    advertised message.timestamp.after.max.ms=3600000, and the broker refused to start with
    Kafka's broker property log.message.timestamp.after.max.ms ("unknown broker property").
    Now: the broker takes the KIP-937 properties, and every record's timestamp is checked as
    Kafka's LogValidator checks it: INVALID_TIMESTAMP for the whole batch, naming the records."""
    from confluent_kafka import KafkaError, Producer

    broker = broker_factory("ts", overrides={"log.message.timestamp.after.max.ms": "3600000",
                                             "log.message.timestamp.before.max.ms": "9223372036854775807"})
    create_topic("confluent", broker.bootstrap, "ts", 1)
    create_topic("confluent", broker.bootstrap, "ts-old", 1, {"message.timestamp.before.max.ms": "86400000"})
    create_topic("confluent", broker.bootstrap, "ts-lat", 1, {"message.timestamp.type": "LogAppendTime"})
    now = int(time.time() * 1000)

    # a real client: confluent-kafka sets each record's CreateTime
    outcomes: dict[int, object] = {}
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "retries": 0})
    for ts in (now, now + 2 * 3600_000, 2**62, now + 1000):
        p.produce("ts", b"v", partition=0, timestamp=ts,
                  on_delivery=lambda err, msg, ts=ts: outcomes.__setitem__(ts, err))
        p.flush(30)
    assert outcomes[now] is None and outcomes[now + 1000] is None
    for ts in (now + 2 * 3600_000, 2**62):
        assert outcomes[ts] is not None and outcomes[ts].code() == KafkaError.INVALID_TIMESTAMP, outcomes[ts]

    with ProtocolClient(broker.bootstrap) as c:
        # a crafted batch: one record of five is two hours ahead; the whole batch is refused
        recs = [(b"k", b"v", [], now + i) for i in range(5)]
        recs[3] = (b"k", b"v", [], now + 2 * 3600_000)
        res = _raw_produce(c, "ts", R.build_batch(recs, timestamp_ms=now))
        assert res.error_code == ErrorCode.invalid_timestamp
        assert [e.batch_index for e in res.record_errors] == [3]
        # a record far in the past: refused where before.max.ms says so (Kafka's default: never)
        old = R.build_batch([(b"k", b"v", [], now - 2 * 86_400_000)], timestamp_ms=now)
        assert _raw_produce(c, "ts-old", old).error_code == ErrorCode.invalid_timestamp
        assert _raw_produce(c, "ts", old).error_code == ErrorCode.none
        # a record without a timestamp (-1) is not checked, as in Kafka
        assert _raw_produce(c, "ts-old", R.build_batch([(b"k", b"v", [], -1)], timestamp_ms=-1)).error_code == 0
        # a LogAppendTime topic stamps the batch: its CreateTimes are not checked (Kafka's rule) ...
        far = R.build_batch([(b"k", b"v", [], 2**62)], timestamp_ms=2**62)
        assert _raw_produce(c, "ts-lat", far).error_code == ErrorCode.none
        # ... but no producer may claim LogAppendTime itself
        claimed = _with_attribute(R.build_batch([(b"k", b"v", [])], timestamp_ms=now), R.TIMESTAMP_TYPE_BIT)
        assert _raw_produce(c, "ts-lat", claimed).error_code == ErrorCode.invalid_timestamp
    got = consume("confluent", broker.bootstrap, "ts", [0], expected=3, timeout=30, settle=0.5)
    assert len(got) == 3  # now, now + 1 s, and the past record: nothing of a refused batch


# -- row 9: client-sized arrays ---------------------------------------------------------------


def _closed_within(s: socket.socket, seconds: float) -> bool:
    s.settimeout(seconds)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def test_a_request_with_ten_million_entries_is_refused_at_once(broker) -> None:
    """Row 9. Before: one 20 MB Metadata v1 request naming 10 million (empty) topics was answered
    after 87 s with 90 MB, the broker's RSS went 94 -> 1,577 MB and other clients waited up to
    3 s. Now: a request may announce at most schema_reader.MAX_REQUEST_ENTRIES (100,000) array
    entries; past it the connection is closed as soon as the array length is read (no error code
    fits: Metadata has no top-level one), with one rate-limited log line. Produce, read by its own
    reader, has the same bound."""
    import psutil

    proc = psutil.Process(broker.pid)
    rss_before = proc.memory_info().rss
    n = 10_000_000
    body = struct.pack(">hhih", apis.METADATA, 1, 1, -1) + struct.pack(">i", n) + b"\x00\x00" * n
    frame = struct.pack(">i", len(body)) + body
    parts = b"".join(struct.pack(">ii", i, -1) for i in range(100_001))  # index, null records
    produce = (struct.pack(">hhih", apis.PRODUCE, 3, 2, -1) + struct.pack(">hhi", -1, -1, 5000)
               + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 100_001) + parts)
    produce = struct.pack(">i", len(produce)) + produce
    log_before = len(broker.log_tail(10**9))
    with Bystander(broker.bootstrap) as bystander:
        time.sleep(0.2)
        for _ in range(3):  # a client that reconnects and tries again
            for data in (frame, produce):
                s = socket.create_connection((broker.host, broker.port))
                t0 = time.monotonic()
                try:
                    s.sendall(data)
                except (ConnectionResetError, BrokenPipeError):
                    pass  # closed while we were still sending: refused
                assert _closed_within(s, 30), "the broker kept the connection"
                assert time.monotonic() - t0 < 15
                s.close()
        time.sleep(0.3)
    assert bystander.latencies and bystander.worst < 1.0, f"bystander waited {bystander.worst:.2f} s"
    assert proc.memory_info().rss - rss_before < 200 * 1024 * 1024
    log = broker.log_tail(10**9)[log_before:]
    assert log.count("more than the 100,000 the broker serves in one request") == 6, log[-2000:]
    assert "Traceback" not in log
    with ProtocolClient(broker.bootstrap) as c:  # the broker serves on
        c.request(apis.API_VERSIONS, apis.message_class(apis.API_VERSIONS, 3, False)(
            client_software_name="x", client_software_version="1"), version=3)


def test_a_request_at_the_bound_is_answered_without_holding_up_others(broker) -> None:
    """Row 9: bounded work. A Metadata request naming 100,000 distinct missing topics (the bound)
    is answered (each UNKNOWN_TOPIC_OR_PARTITION) while a bystander's round trips stay under the
    1 s docs/RELIABILITY.md promises; naming one existing topic 100,000 times is answered once, as
    Kafka answers a set of names."""
    create_topic("confluent", broker.bootstrap, "wide", 50)
    m = messages.Builder(apis.METADATA, 9, response=False)

    def request(names: list[str]) -> object:
        return m.MetadataRequest(topics=tuple(m.MetadataRequestTopic(name=n) for n in names),
                                 allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                                 include_topic_authorized_operations=False)

    with Bystander(broker.bootstrap) as bystander, ProtocolClient(broker.bootstrap, timeout=120) as c:
        time.sleep(0.2)
        t0 = time.monotonic()
        resp = c.request(apis.METADATA, request([f"missing-{i}" for i in range(99_999)]), version=9)
        took = time.monotonic() - t0
        assert len(resp.topics) == 99_999
        assert {t.error_code for t in resp.topics} == {ErrorCode.unknown_topic_or_partition}
        resp = c.request(apis.METADATA, request(["wide"] * 99_999), version=9)
        assert [(t.name, len(t.partitions)) for t in resp.topics] == [("wide", 50)]
        time.sleep(0.3)
    assert took < 60
    assert bystander.worst < 1.0, f"bystander waited {bystander.worst:.2f} s"


def test_describe_configs_naming_one_topic_twenty_thousand_times_is_answered_once(broker) -> None:
    """Row 9, other requests with client-sized arrays. Before: DescribeConfigs naming one topic
    20,000 times described it 20,000 times on the event loop (75 s, an 83 MB answer, RSS
    38 -> 469 MB, a bystander waited 34 s); at the entry bound it would have been 5 times that.
    Now a resource named twice is answered once (clients match results by resource; Kafka's
    AdminClient never sends one twice) and the handler yields between resources."""
    create_topic("confluent", broker.bootstrap, "described", 1)
    m = messages.Builder(apis.DESCRIBE_CONFIGS, 4, response=False)
    req = m.DescribeConfigsRequest(include_synonyms=True, include_documentation=True, resources=tuple(
        m.DescribeConfigsResource(resource_type=2, resource_name="described", configuration_keys=None)
        for _ in range(20_000)) + (m.DescribeConfigsResource(resource_type=2, resource_name="described",
                                                              configuration_keys=("retention.ms",)),))
    with Bystander(broker.bootstrap) as bystander, ProtocolClient(broker.bootstrap, timeout=30) as c:
        time.sleep(0.2)
        t0 = time.monotonic()
        resp = c.request(apis.DESCRIBE_CONFIGS, req, version=4)
        took = time.monotonic() - t0
        time.sleep(0.3)
    assert [(r.resource_name, r.error_code) for r in resp.results] == [("described", 0), ("described", 0)]
    assert len(resp.results[0].configs) > 30 and [c.name for c in resp.results[1].configs] == ["retention.ms"]
    assert took < 10
    assert bystander.worst < 1.0, f"bystander waited {bystander.worst:.2f} s"


def test_offset_fetch_and_describe_groups_answer_a_group_named_many_times_once(broker) -> None:
    """Row 9, other requests with client-sized arrays. Before: OffsetFetch v8+ naming one group
    20,000 times (topics null: every offset of the group) answered every copy, and so did
    DescribeGroups (members' metadata and assignments each time): up to the entry bound, an
    answer of gigabytes from a request of a few hundred KB. Now each group is answered once;
    Kafka's clients never send a group twice and match answers by group id."""
    from confluent_kafka import Consumer, TopicPartition

    create_topic("confluent", broker.bootstrap, "fanout", 50)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "fan", "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition("fanout", p, 7) for p in range(50)], asynchronous=False)
    finally:
        c.close()
    of = messages.Builder(apis.OFFSET_FETCH, 8, response=False)
    dg = messages.Builder(apis.DESCRIBE_GROUPS, 5, response=False)
    with ProtocolClient(broker.bootstrap, timeout=60) as client:
        resp = client.request(apis.OFFSET_FETCH, of.OffsetFetchRequest(require_stable=False, groups=tuple(
            of.OffsetFetchRequestGroup(group_id="fan", topics=None) for _ in range(20_000))), version=8)
        assert [(g.group_id, sum(len(t.partitions) for t in g.topics)) for g in resp.groups] == [("fan", 50)]
        resp = client.request(apis.DESCRIBE_GROUPS, dg.DescribeGroupsRequest(
            groups=("fan",) * 20_000 + ("other",), include_authorized_operations=False), version=5)
        assert [g.group_id for g in resp.groups] == ["fan", "other"]


# -- a client's string echoed into an error message ---------------------------------------------


def test_an_invalid_config_value_near_32_kb_gets_its_error_code_not_an_unencodable_answer(broker) -> None:
    """A refused value is echoed into the answer's error message ("invalid value '…' for
    configuration …"); a value near a Kafka string's 32,767 bytes made that message longer than
    the non-flexible versions can carry (IncrementalAlterConfigs v0, CreateTopics v0-4). Before:
    the answer could not be encoded, a ``bug:`` line with a traceback was logged and the whole
    request was answered UNKNOWN_SERVER_ERROR with no per-resource result. Now every answer's
    error message is bounded where answers are built (``messages.make``), and the client gets
    INVALID_CONFIG for the resource, as Kafka answers it."""
    big = "x" * 32_700
    log_before = len(broker.log_tail(10**9))
    with ProtocolClient(broker.bootstrap, timeout=30) as c:
        create_topic("confluent", broker.bootstrap, "echo", 1)
        m = c.classes(apis.INCREMENTAL_ALTER_CONFIGS, 0)
        r = c.request(apis.INCREMENTAL_ALTER_CONFIGS, m["IncrementalAlterConfigsRequest"](resources=(
            m["AlterConfigsResource"](resource_type=2, resource_name="echo", configs=(
                m["AlterableConfig"](name="retention.ms", config_operation=0, value=big),)),), validate_only=False),
            version=0)
        assert [x.error_code for x in r.responses] == [ErrorCode.invalid_config], r
        assert "retention.ms" in r.responses[0].error_message and len(r.responses[0].error_message) <= 1024
        m = c.classes(apis.CREATE_TOPICS, 4)
        r = c.request(apis.CREATE_TOPICS, m["CreateTopicsRequest"](topics=(m["CreatableTopic"](
            name="echo-2", num_partitions=1, replication_factor=1, assignments=(),
            configs=(m["CreatableTopicConfig"](name="retention.ms", value=big),)),),
            timeout=datetime.timedelta(seconds=30), validate_only=False), version=4)
        assert [x.error_code for x in r.topics] == [ErrorCode.invalid_config], r
    log = broker.log_tail(10**9)[log_before:]
    assert "bug:" not in log and "Traceback" not in log, log[-3000:]
