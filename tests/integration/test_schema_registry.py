"""The schema registry served by the broker, driven by confluent-kafka's own serializers and
SchemaRegistryClient (docs/SCHEMA-REGISTRY.md).

* Avro, JSON Schema and Protobuf records round-trip: registered by the serializers, produced to
  a topic whose values must carry a registered id (confluent.value.schema.validation=true),
  consumed and decoded by the deserializers;
* an incompatible change is refused with 409 under BACKWARD, accepted under NONE;
* the validating topic refuses an unregistered id and raw bytes with INVALID_RECORD naming the
  record, accepts registered ids and tombstones;
* the REST API's errors are Confluent's (40401, 40402, 40403, 40406/40407, 42201, 42202 …),
  soft and hard deletes, modes;
* ids survive a broker restart and are never given again after a permanent delete.
"""

from __future__ import annotations

import datetime
import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_clients import create_topic
from oncelog.client import ProtocolClient
from oncelog.process import BrokerProcess, free_port
from oncelog.protocol import apis, records
from oncelog.protocol.errors import ErrorCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TEST_OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}


def _stop_cleanly(b: BrokerProcess) -> None:
    """SIGTERM, and the broker must exit 0 (killed when it does not stop)."""
    try:
        code = b.stop()
    except Exception:
        b.kill()
        raise
    assert code == 0, f"broker exited with {code}; log:\n{b.log_tail()}"

USER_V1 = json.dumps({"type": "record", "name": "User", "namespace": "t",
                      "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]})
#: adds a field without a default: the new schema cannot read old records (BACKWARD refuses)
USER_V2_BAD = json.dumps({"type": "record", "name": "User", "namespace": "t",
                          "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"},
                                     {"name": "email", "type": "string"}]})
#: adds a field with a default: BACKWARD accepts
USER_V2_OK = json.dumps({"type": "record", "name": "User", "namespace": "t",
                         "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"},
                                    {"name": "email", "type": "string", "default": ""}]})


class Registry:
    """Plain HTTP to the registry, for what the client library does not expose."""

    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")


@pytest.fixture(scope="module")
def registry_broker(tmp_path_factory: pytest.TempPathFactory):
    address = f"127.0.0.1:{free_port()}"
    b = BrokerProcess(tmp_path_factory.mktemp("sr") / "broker",
                      overrides={**TEST_OVERRIDES, "schema.registry.listen": address})
    b.start()
    b.registry_url = f"http://{address}"  # type: ignore[attr-defined]
    yield b
    _stop_cleanly(b)


def _roundtrip(bootstrap: str, topic: str, serialize: Any, deserialize: Any, objects: list[Any]) -> list[Any]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    errors: list[Any] = []
    for obj in objects:
        value = serialize(obj, SerializationContext(topic, MessageField.VALUE))
        p.produce(topic, value, on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(30) == 0 and errors == []
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[Any] = []
    try:
        for _ in range(60):
            m = c.poll(1.0)
            if m is not None and not m.error():
                out.append(deserialize(m.value(), SerializationContext(topic, MessageField.VALUE)))
            if len(out) == len(objects):
                break
    finally:
        c.close()
    return out


def test_avro_json_and_protobuf_serializers_round_trip_through_a_validating_topic(registry_broker) -> None:
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    sr = SchemaRegistryClient({"url": registry_broker.registry_url})
    bootstrap = registry_broker.bootstrap
    for topic in ("avro-users", "json-users", "proto-users"):
        create_topic("confluent", bootstrap, topic, 1, {"confluent.value.schema.validation": "true"})

    users = [{"name": f"u{i}", "age": 20 + i} for i in range(5)]
    got = _roundtrip(bootstrap, "avro-users", AvroSerializer(sr, USER_V1), AvroDeserializer(sr), users)
    assert got == users

    json_schema = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "User",
                              "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                              "required": ["name", "age"]})
    got = _roundtrip(bootstrap, "json-users", JSONSerializer(json_schema, sr), JSONDeserializer(json_schema), users)
    assert got == users

    user_class = _protobuf_user_class()
    msgs = [user_class(name=u["name"], age=u["age"]) for u in users]
    got = _roundtrip(bootstrap, "proto-users", ProtobufSerializer(user_class, sr, {"use.deprecated.format": False}),
                     ProtobufDeserializer(user_class, {"use.deprecated.format": False}), msgs)
    assert [(m.name, m.age) for m in got] == [(u["name"], u["age"]) for u in users]

    # the three schemas have three ids, each under its topic's value subject, with its type
    r = Registry(registry_broker.registry_url)
    kinds = {}
    for subject in ("avro-users-value", "json-users-value", "proto-users-value"):
        latest = sr.get_latest_version(subject)
        kinds[subject] = latest.schema.schema_type
        status, doc = r.call("GET", f"/schemas/ids/{latest.schema_id}/subjects")
        assert (status, doc) == (200, [subject])
    assert kinds == {"avro-users-value": "AVRO", "json-users-value": "JSON", "proto-users-value": "PROTOBUF"}
    # Protobuf is stored as .proto text and served as a descriptor when asked (format=serialized)
    proto = sr.get_latest_version("proto-users-value")
    assert "message User" in proto.schema.schema_str and "int64 age = 2;" in proto.schema.schema_str


def _protobuf_user_class() -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message_factory import GetMessageClass

    fdp = descriptor_pb2.FileDescriptorProto(name="oncelog_test_user.proto", package="oncelogtest", syntax="proto3")
    msg = fdp.message_type.add(name="User")
    msg.field.add(name="name", number=1, type=9, label=1)
    msg.field.add(name="age", number=2, type=3, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return GetMessageClass(pool.FindMessageTypeByName("oncelogtest.User"))


def test_incompatible_change_is_409_under_backward_and_accepted_under_none(registry_broker) -> None:
    sr = SchemaRegistryClient({"url": registry_broker.registry_url})
    first = sr.register_schema("compat-value", Schema(USER_V1, "AVRO"))
    assert sr.register_schema("compat-value", Schema(USER_V1, "AVRO")) == first  # same schema, same id
    with pytest.raises(SchemaRegistryError) as refused:
        sr.register_schema("compat-value", Schema(USER_V2_BAD, "AVRO"))
    assert refused.value.http_status_code == 409 and refused.value.error_code == 409
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in refused.value.error_message
    assert not sr.test_compatibility("compat-value", Schema(USER_V2_BAD, "AVRO"))
    assert sr.test_compatibility("compat-value", Schema(USER_V2_OK, "AVRO"))
    assert sr.get_versions("compat-value") == [1]
    sr.set_compatibility("compat-value", "NONE")
    second = sr.register_schema("compat-value", Schema(USER_V2_BAD, "AVRO"))
    assert second != first and sr.get_versions("compat-value") == [1, 2]
    assert sr.get_compatibility("compat-value") == "NONE"
    # the same content under another subject reuses the id (ids are global, by content)
    assert sr.register_schema("other-value", Schema(USER_V2_BAD, "AVRO")) == second


def test_validation_refuses_unregistered_ids_and_raw_bytes_naming_the_record(registry_broker) -> None:
    sr = SchemaRegistryClient({"url": registry_broker.registry_url})
    bootstrap = registry_broker.bootstrap
    create_topic("confluent", bootstrap, "checked", 1, {"confluent.value.schema.validation": "true"})
    sid = sr.register_schema("checked-value", Schema(USER_V1, "AVRO"))
    elsewhere = sr.register_schema("not-this-topic-value", Schema('{"type":"string"}', "AVRO"))
    framed = b"\x00" + sid.to_bytes(4, "big")
    cases = {"registered": framed + b"\x02a\x02", "tombstone": None, "unknown id": b"\x00\x00\x0f\x42\x3f\x00",
             "another subject's id": b"\x00" + elsewhere.to_bytes(4, "big") + b"\x02a", "raw bytes": b"plain text"}
    outcome: dict[str, Any] = {}
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0})
    for name, value in cases.items():
        p.produce("checked", value, key=b"k", on_delivery=lambda err, msg, n=name: outcome.__setitem__(n, err))
        p.flush(30)
    assert outcome["registered"] is None and outcome["tombstone"] is None
    for name in ("unknown id", "another subject's id", "raw bytes"):
        err = outcome[name]
        assert err is not None and err.code() == KafkaError.INVALID_RECORD, (name, err)
    # the answer names the record and why (Produce v8+ record_errors / error_message)
    batch = records.build_batch([(b"k", framed + b"\x02a\x02", ()), (b"k", b"\x00\x00\x0f\x42\x3f\x00", ()),
                                 (b"k", b"plain text", ())], timestamp_ms=int(time.time() * 1000))
    r = _raw_produce(bootstrap, "checked", batch)
    assert r.error_code == ErrorCode.invalid_record.value
    assert [(e.batch_index, e.batch_index_error_message) for e in r.record_errors] == [
        (1, "Schema id 999999 of the value is not registered under subject checked-value in topic partition "
            "checked-0."),
        (2, "The value does not start with a schema id (magic byte 0 and a 4-byte id), and schema validation is "
            "on for values in topic partition checked-0.")]
    assert "2 record errors" in r.error_message


def _raw_produce(bootstrap: str, topic: str, batch: bytes, version: int = 9) -> Any:
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.PRODUCE, version)
        req = m["ProduceRequest"](
            transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
            topic_data=(m["TopicProduceData"](name=topic, partition_data=(
                m["PartitionProduceData"](index=0, records=batch),)),),
        )
        return c.request(apis.PRODUCE, req, version=version).responses[0].partition_responses[0]


def test_rest_errors_deletes_and_modes(registry_broker) -> None:
    r = Registry(registry_broker.registry_url)
    only_here = USER_V1.replace('"User"', '"RestUser"')  # an id no other test's subject shares
    assert r.call("GET", "/subjects/nope/versions") == \
        (404, {"error_code": 40401, "message": "Subject 'nope' not found."})
    assert r.call("GET", "/schemas/ids/424242")[1]["error_code"] == 40403
    assert r.call("GET", "/schemas/types") == (200, ["JSON", "PROTOBUF", "AVRO"])
    status, doc = r.call("POST", "/subjects/rest-value/versions", {"schema": "{not json"})
    assert (status, doc["error_code"]) == (422, 42201)
    status, doc = r.call("POST", "/subjects/rest-value/versions", {"schema": only_here})
    assert status == 200
    sid = doc["id"]
    assert r.call("GET", "/subjects/rest-value/versions/7")[1]["error_code"] == 40402
    assert r.call("GET", "/subjects/rest-value/versions/zero")[1]["error_code"] == 42202
    status, doc = r.call("GET", "/subjects/rest-value/versions/latest")
    assert (status, doc["id"], doc["version"], doc["subject"]) == (200, sid, 1, "rest-value")
    assert r.call("POST", "/subjects/rest-value", {"schema": only_here})[1]["id"] == sid  # lookup
    assert r.call("POST", "/subjects/rest-value", {"schema": '"string"'})[1]["error_code"] == 40403
    assert r.call("PUT", "/config/rest-value", {"compatibility": "SIDEWAYS"})[1]["error_code"] == 42203
    assert r.call("GET", "/config/rest-value")[1]["error_code"] == 40408
    assert r.call("GET", "/config/rest-value?defaultToGlobal=true") == (200, {"compatibilityLevel": "BACKWARD"})
    # modes: READONLY refuses registrations (42205)
    assert r.call("PUT", "/mode/rest-value", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    assert r.call("POST", "/subjects/rest-value/versions", {"schema": USER_V2_OK})[1]["error_code"] == 42205
    assert r.call("DELETE", "/mode/rest-value")[0] == 200
    # soft, then hard delete; a hard delete needs a soft one first
    assert r.call("DELETE", "/subjects/rest-value/versions/1?permanent=true")[1]["error_code"] == 40407
    assert r.call("DELETE", "/subjects/rest-value/versions/1") == (200, 1)
    assert r.call("DELETE", "/subjects/rest-value/versions/1")[1]["error_code"] == 40406
    assert r.call("GET", "/subjects/rest-value/versions")[1]["error_code"] == 40401
    assert r.call("GET", "/subjects/rest-value/versions?deleted=true") == (200, [1])
    assert r.call("GET", f"/schemas/ids/{sid}")[0] == 200  # a soft-deleted schema is still served by id
    assert r.call("DELETE", "/subjects/rest-value/versions/1?permanent=true") == (200, 1)
    assert r.call("GET", f"/schemas/ids/{sid}")[1]["error_code"] == 40403
    assert "rest-value" not in r.call("GET", "/subjects?deleted=true")[1]


def test_ids_survive_a_restart_and_are_never_reused(tmp_path) -> None:
    address = f"127.0.0.1:{free_port()}"
    overrides = {**TEST_OVERRIDES, "schema.registry.listen": address}
    b = BrokerProcess(tmp_path / "broker", overrides=overrides).start()
    url = f"http://{address}"
    try:
        sr = SchemaRegistryClient({"url": url})
        a = sr.register_schema("a-value", Schema(USER_V1, "AVRO"))
        last = sr.register_schema("b-value", Schema('{"type":"string"}', "AVRO"))
        sr.delete_subject("b-value")
        sr.delete_subject("b-value", permanent=True)  # the largest id is gone from every subject
    finally:
        _stop_cleanly(b)
    b = BrokerProcess(tmp_path / "broker", overrides=overrides).start()
    try:
        sr = SchemaRegistryClient({"url": url})
        assert json.loads(sr.get_schema(a).schema_str) == json.loads(USER_V1)
        assert sr.get_latest_version("a-value").schema_id == a
        again = sr.register_schema("b-value", Schema('{"type":"string"}', "AVRO"))
        assert again > last, (again, last)  # a new id, never the permanently deleted one
    finally:
        _stop_cleanly(b)
