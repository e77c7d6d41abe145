"""One Kafka release's table, and the two APIs Kafka 4.2 serves that oncelog did not
(AlterReplicaLogDirs 34, ListConfigResources 74), through kafka-python's own admin client.

Before: kafka-python inferred Kafka 4.3 (DescribeLogDirs v5) from a table otherwise 4.2's, and
both APIs closed the connection ("unsupported api key"), so kafka-python's admin calls failed
with a connection error.
"""

from __future__ import annotations

import os
import socket
import struct

import pytest

from oncelog.protocol import apis

pytestmark = pytest.mark.integration


def _admin(bs: str):  # type: ignore[no-untyped-def]
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=20_000)  # unpinned: infers


def test_kafka_python_infers_4_2_and_serves_both_apis(broker) -> None:  # type: ignore[no-untyped-def]
    from kafka import TopicPartitionReplica
    from kafka.admin import NewTopic
    import kafka.errors as Errors

    admin = _admin(broker.bootstrap)
    try:
        assert admin._client.check_version() == (4, 2)  # kafka-python's test_kafka_version_infer
        admin.create_topics([NewTopic("ard", 2, 1)])
        node = admin.describe_cluster()["brokers"][0]["broker_id"]
        dirs = admin.describe_log_dirs()
        log_dir = os.path.abspath(str(broker.data_dir))
        assert log_dir in repr(dirs), dirs

        got = admin.alter_replica_log_dirs({
            TopicPartitionReplica("ard", 0, node): log_dir,             # where it is: nothing moves
            TopicPartitionReplica("ard", 1, node): log_dir + "/",       # the same directory
            TopicPartitionReplica("nope", 0, node): log_dir,            # no replica here
        })
        assert got[TopicPartitionReplica("ard", 0, node)] is Errors.NoError, got
        assert got[TopicPartitionReplica("ard", 1, node)] is Errors.NoError, got
        assert got[TopicPartitionReplica("nope", 0, node)] is Errors.ReplicaNotAvailableError, got
        other = admin.alter_replica_log_dirs({TopicPartitionReplica("ard", 0, node): "/elsewhere"})
        assert other[TopicPartitionReplica("ard", 0, node)] is Errors.LogDirNotFoundError, other

        listed = admin.list_config_resources()
        assert "ard" in listed["topic"], listed
        assert listed["broker"] == listed["broker_logger"] == [str(node)], listed
        assert admin.list_config_resources(["TOPIC"]) == {"topic": listed["topic"]}
    finally:
        admin.close()


def test_every_api_key_oncelog_does_not_serve_closes_like_kafka(broker) -> None:  # type: ignore[no-untyped-def]
    """Kafka's network layer closes the connection, answering nothing, on a request for an API it
    does not serve or a version outside its range (Processor.parseRequestHeader; Produce v0-v2
    too, though Kafka 4 advertises them): so does oncelog, and goes on serving other
    connections."""
    host, port = broker.bootstrap.split(":")
    advertised = set(apis.advertised(apis.SUPPORTED_VERSIONS))

    def send(api_key: int, version: int) -> bytes:
        client = b"t"
        body = struct.pack(">hhih", api_key, version, 7, len(client)) + client + b"\0" * 16
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            s.settimeout(10)
            try:
                return s.recv(4)
            except ConnectionResetError:
                return b""

    for key in (4, 38, 48, 57, 93, 999):
        assert key not in advertised
        assert send(key, 0) == b"", key
    assert send(apis.PRODUCE, 1) == b""  # KIP-896: Produce v0-v2 removed
    with socket.create_connection((host, int(port)), timeout=10) as s:  # still serving
        s.sendall(struct.pack(">ihhih", 10, apis.API_VERSIONS, 0, 1, -1))
        assert len(s.recv(4)) == 4


def test_librdkafka_with_a_0_9_fallback_is_refused_as_kafka_4_refuses_it(broker) -> None:  # type: ignore[no-untyped-def]
    """librdkafka's own test 0052 with ``broker.version.fallback=0.9.0.0`` and
    ``api.version.request=false`` sends Produce v1 (its 0.9 message format). Kafka 4 removed
    Produce v0-v2 (KIP-896) and closes the connection on them without an answer (its network
    layer's UnsupportedVersionException); 0052 itself skips that case against Kafka 4. oncelog
    does the same: no record lands, the producer's delivery fails, the broker logs why."""
    from confluent_kafka import Producer
    from kafka_clients import create_topic

    create_topic("confluent", broker.bootstrap, "fallback09", 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "api.version.request": False,
                  "broker.version.fallback": "0.9.0.0", "message.timeout.ms": 4000, "retries": 0})
    errors: list = []
    p.produce("fallback09", b"v", on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert len(errors) == 1 and errors[0] is not None, errors
    log = broker.log_path.read_text(errors="replace")
    assert "produce v1 from" in log and "is an unsupported version (served: 3..13)" in log, log[-3000:]
