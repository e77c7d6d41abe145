"""R22: bad input never crashes the broker; it answers with an error code or closes that one
connection, and goes on serving every other client."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from kafka_clients import consume, create_topic, produce
from oncelog.client import ProtocolClient
from oncelog.protocol import apis, framing

pytestmark = pytest.mark.integration


def _connect(broker) -> socket.socket:
    s = socket.create_connection((broker.host, broker.port), timeout=5)
    return s


def _closed_by_peer(s: socket.socket, timeout: float = 5.0) -> bool:
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def _still_serving(broker, topic: str) -> None:
    produce("confluent", broker.bootstrap, topic, [(0, b"k", b"still alive")])
    got = consume("confluent", broker.bootstrap, topic, [0], expected=1, timeout=30)
    assert got[-1][3] == b"still alive"


def test_garbage_bytes_close_only_that_connection(broker) -> None:
    create_topic("confluent", broker.bootstrap, "alive", 1)
    bystander = ProtocolClient(broker.bootstrap)
    for garbage in (b"\xff" * 64, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", struct.pack(">i", 12) + b"\x00" * 12):
        s = _connect(broker)
        s.sendall(garbage)
        assert _closed_by_peer(s)
        s.close()
    # an unrelated, already-open connection is unaffected
    assert bystander.request(apis.API_VERSIONS, apis.message_class(18, 3, False)(
        client_software_name="x", client_software_version="1"), version=3).error_code == 0
    bystander.close()
    _still_serving(broker, "alive")
    assert "closing connection" in broker.log_tail()


def test_oversize_frame_is_refused_without_reading_it(broker) -> None:
    s = _connect(broker)
    s.sendall(struct.pack(">i", 2_000_000_000))
    assert _closed_by_peer(s)
    assert "socket.request.max.bytes" in broker.log_tail()


def test_negative_frame_size(broker) -> None:
    s = _connect(broker)
    s.sendall(struct.pack(">i", -5))
    assert _closed_by_peer(s)


def test_unknown_api_key_and_version(broker) -> None:
    s = _connect(broker)
    body = struct.pack(">hhi", 999, 0, 1) + struct.pack(">h", -1)  # api key 999
    s.sendall(struct.pack(">i", len(body)) + body)
    assert _closed_by_peer(s)
    s = _connect(broker)
    body = struct.pack(">hhi", apis.PRODUCE, 42, 9) + b"\x00\x00"
    s.sendall(struct.pack(">i", len(body)) + body)
    assert _closed_by_peer(s)


def test_api_versions_newer_than_ours_gets_v0_answer_with_our_list(broker) -> None:
    """KIP-511: a client asking ApiVersions v99 gets UNSUPPORTED_VERSION and our ranges in v0."""
    s = _connect(broker)
    body = struct.pack(">hhi", apis.API_VERSIONS, 99, 77) + struct.pack(">h", -1) + b"\x00\x00\x00"
    s.sendall(struct.pack(">i", len(body)) + body)
    s.settimeout(5)
    size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
    corr, resp = framing.decode_response(apis.API_VERSIONS, 0, s.recv(size, socket.MSG_WAITALL))
    assert corr == 77 and resp.error_code == 35
    assert any(k.api_key == apis.PRODUCE for k in resp.api_keys)


def test_disconnect_mid_request(broker) -> None:
    create_topic("confluent", broker.bootstrap, "alive2", 1)
    for _ in range(20):
        s = _connect(broker)
        raw = framing.encode_request(apis.API_VERSIONS, 3, 1, "x", apis.message_class(18, 3, False)(
            client_software_name="x", client_software_version="1"))
        s.sendall(raw[: len(raw) // 2])
        s.close()
    time.sleep(0.2)
    _still_serving(broker, "alive2")


def test_corrupt_record_batch_gets_corrupt_message_and_log_is_untouched(broker) -> None:
    from oncelog.protocol import records

    create_topic("confluent", broker.bootstrap, "crc", 1)
    good = records.build_batch([(b"k", b"v", [])], timestamp_ms=1)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    with ProtocolClient(broker.bootstrap) as c:
        m = c.classes(apis.PRODUCE)

        def send(batch: bytes) -> int:
            req = m["ProduceRequest"](transactional_id=None, acks=-1, timeout=__import__("datetime").timedelta(seconds=5),
                                      topic_data=(m["TopicProduceData"](name="crc", partition_data=(
                                          m["PartitionProduceData"](index=0, records=batch),)),))
            return c.request(apis.PRODUCE, req).responses[0].partition_responses[0].error_code

        assert send(bytes(bad)) == 2  # CORRUPT_MESSAGE
        assert send(good[:30]) in (2, 87)  # torn header: CORRUPT_MESSAGE / INVALID_RECORD
        assert send(good) == 0
    got = consume("confluent", broker.bootstrap, "crc", [0], expected=1, timeout=30, settle=0.5)
    assert [(o, v) for _, o, _, v in got] == [(0, b"v")]


# --- issue 12: requests that used to crash, brick or freeze the broker ------------------------

def _raw_produce(bootstrap: str, topic: str, partition: int, batch: bytes) -> tuple[int, str | None]:
    import datetime

    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.PRODUCE)
        req = m["ProduceRequest"](transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
                                  topic_data=(m["TopicProduceData"](name=topic, partition_data=(
                                      m["PartitionProduceData"](index=partition, records=batch),)),))
        p = c.request(apis.PRODUCE, req).responses[0].partition_responses[0]
        return p.error_code, p.error_message


def test_26_byte_request_with_a_huge_array_length_closes_that_connection_only(broker) -> None:
    frame = struct.pack(">hhih", 3, 12, 1, 1) + b"x" + b"\0" + b"\xff\xff\xff\xff\x32" + b"\0" * 5
    s = _connect(broker)
    s.sendall(struct.pack(">i", len(frame)) + frame)
    assert _closed_by_peer(s)
    _still_serving(broker, "after-bomb")
    assert "cannot fit" in broker.log_tail()


def test_null_array_is_refused_at_decoding_not_a_bug_in_a_handler(broker) -> None:
    # CreateTopics v7 with a null topics array: before, the handler got None and logged "bug:".
    frame = struct.pack(">hhih", 19, 7, 1, 1) + b"x" + b"\0" + b"\x00" + b"\x00\x00\x75\x30" + b"\x00" + b"\x00"
    s = _connect(broker)
    s.sendall(struct.pack(">i", len(frame)) + frame)
    assert _closed_by_peer(s)
    tail = broker.log_tail()
    assert "null array" in tail and "bug:" not in tail


@pytest.mark.parametrize("topic", ["__transaction_state", "__consumer_offsets"])
def test_client_writes_to_internal_topics_are_refused_and_the_next_start_works(broker, topic: str) -> None:
    from oncelog.protocol import records

    create_topic("confluent", broker.bootstrap, "user", 1)
    # a consumer group commits an offset and a transaction completes before the attempt
    from confluent_kafka import Consumer, TopicPartition

    produce("confluent", broker.bootstrap, "user", [(0, b"k", b"v%d" % i) for i in range(10)])
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("user", 0, 7)], asynchronous=False)
    c.close()
    batch = records.build_batch([(b"k", b"v", ())], timestamp_ms=1)
    code, message = _raw_produce(broker.bootstrap, topic, 0, batch)
    assert code == 17 and "internal topic" in (message or "")  # INVALID_TOPIC_EXCEPTION
    # a real client's plain produce is refused too
    from confluent_kafka import KafkaException, Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "message.send.max.retries": 0})
    errors: list = []
    p.produce(topic, key=b"k", value=b"v", partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(30)
    assert errors and errors[0] is not None and errors[0].code() == 17, errors
    broker.restart()  # hard kill + start: before, __transaction_state garbage stopped every start
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    assert c.committed([TopicPartition("user", 0)], timeout=30)[0].offset == 7
    c.close()
    del KafkaException


@pytest.mark.parametrize("topic", ["__transaction_state", "__consumer_offsets"])
def test_delete_records_on_internal_topics_is_refused(broker, topic: str) -> None:
    from confluent_kafka import Consumer, TopicPartition

    create_topic("confluent", broker.bootstrap, "dr", 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "dr-g", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("dr", 0, 7)], asynchronous=False)
    c.close()
    with ProtocolClient(broker.bootstrap) as pc:
        m = pc.classes(apis.DELETE_RECORDS)
        import datetime

        parts = tuple(m["DeleteRecordsPartition"](partition_index=i, offset=-1) for i in range(50))
        req = m["DeleteRecordsRequest"](topics=(m["DeleteRecordsTopic"](name=topic, partitions=parts),),
                                        timeout=datetime.timedelta(seconds=5))
        resp = pc.request(apis.DELETE_RECORDS, req)
        assert {p.error_code for p in resp.topics[0].partitions} == {17}
    broker.restart()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "dr-g"})
    assert c.committed([TopicPartition("dr", 0)], timeout=30)[0].offset == 7  # before: -1001
    c.close()


@pytest.mark.parametrize("config", [
    {"segment.bytes": "1"}, {"segment.bytes": "-1"}, {"segment.ms": "0"}, {"max.message.bytes": "-1"},
    {"flush.messages": "0"}, {"retention.ms": "-2"}, {"cleanup.policy": "sometimes"},
])
def test_refused_create_topics_leaves_nothing_and_the_next_start_works(broker, config: dict) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fut = admin.create_topics([NewTopic("badcfg", 1, 1, config=config)])["badcfg"]
    with pytest.raises(Exception, match="INVALID_CONFIG|nvalid"):
        fut.result(timeout=30)
    md = admin.list_topics(timeout=10)
    assert "badcfg" not in md.topics
    broker.restart()
    assert "badcfg" not in AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).topics
    _still_serving(broker, "after-badcfg")


def test_index_interval_zero_is_accepted_as_kafka_does(broker) -> None:
    create_topic("kafka-python", broker.bootstrap, "every-batch-indexed", 1, {"index.interval.bytes": "0"})
    _still_serving(broker, "every-batch-indexed")
    broker.restart()
    got = consume("confluent", broker.bootstrap, "every-batch-indexed", [0], expected=1, timeout=30)
    assert got[-1][3] == b"still alive"


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_batches_that_lie_are_refused_so_every_client_can_read_the_partition(broker, client: str) -> None:
    """Before: acknowledged with error 0, then kafka-python and aiokafka raised on the partition
    forever and confluent-kafka reported _BAD_COMPRESSION and never got past it."""
    import crc32c
    from oncelog.protocol import records as R

    def recrc(b: bytearray) -> bytes:
        struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[R.CRC_START:])))
        return bytes(b)

    topic = f"lies-{client}"
    create_topic("confluent", broker.bootstrap, topic, 1)
    produce("confluent", broker.bootstrap, topic, [(0, b"k", b"before")])
    one = R.build_batch([(b"k", b"v", ())], timestamp_ms=int(time.time() * 1000))
    two_claimed = bytearray(one)
    struct.pack_into(">i", two_claimed, 23, 1)  # lastOffsetDelta
    struct.pack_into(">i", two_claimed, 57, 2)  # recordsCount
    garbage_body = bytearray(one[:R.BATCH_HEADER_SIZE] + b"\xfe" * (len(one) - R.BATCH_HEADER_SIZE))
    gz = bytearray(R._assemble(b"\x1f\x8bnot gzip at all", base_offset=0, attributes=R.COMPRESSION_GZIP,
                               last_offset_delta=0, base_timestamp=1, max_timestamp=1, producer_id=-1,
                               producer_epoch=-1, base_sequence=-1, records_count=1))
    zs = bytearray(R._assemble(b"\x28\xb5\x2f\xfdgarbage", base_offset=0, attributes=R.COMPRESSION_ZSTD,
                               last_offset_delta=0, base_timestamp=1, max_timestamp=1, producer_id=-1,
                               producer_epoch=-1, base_sequence=-1, records_count=1))
    bomb = R._assemble(R._compress(R.COMPRESSION_ZSTD, b"\0" * (200 * 1024 * 1024)), base_offset=0,
                       attributes=R.COMPRESSION_ZSTD, last_offset_delta=0, base_timestamp=1, max_timestamp=1,
                       producer_id=-1, producer_epoch=-1, base_sequence=-1, records_count=1)
    for bad in (recrc(two_claimed), recrc(garbage_body), recrc(gz), recrc(zs), bomb):
        code, _ = _raw_produce(broker.bootstrap, topic, 0, bad)
        assert code in (2, 10, 87), code  # CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_RECORD
    produce("confluent", broker.bootstrap, topic, [(0, b"k", b"after")])
    got = consume(client, broker.bootstrap, topic, [0], expected=2, timeout=60)
    assert [r[3] for r in got] == [b"before", b"after"]
