"""ACLs with authenticated principals (issue 18): two SCRAM users on a SASL_PLAINTEXT listener,
the ACLs and users written before the broker starts (``oncelog users add`` / ``oncelog acls add
--data-dir``, as ``kafka-storage format --add-scram`` and an ACL bootstrap would), checked
through confluent-kafka and kafka-python.

``bob`` may write the topic but not use ``alice``'s transactional id: his InitProducerId gets
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and alice's open transaction is untouched (not fenced,
not aborted): she commits it and a read_committed reader sees it. ``bob`` may not read the
topic (TOPIC_AUTHORIZATION_FAILED); ``admin`` is a super user.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oncelog.process import BrokerProcess, free_port

PASSWORDS = {"admin": "admin-pw-123", "alice": "alice-pw-123", "bob": "bob-pw-123"}
TOPIC, TXN_ID = "orders", "alice-tx"


def _oncelog(*args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "oncelog", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture
def sasl_broker(tmp_path: Path):  # type: ignore[no-untyped-def]
    data = tmp_path / "broker"
    for user, pw in PASSWORDS.items():
        _oncelog("users", "add", user, "--password", pw, "--mechanism", "SCRAM-SHA-256", "--data-dir", str(data))
    _oncelog("acls", "add", "--data-dir", str(data), "--allow-principal", "User:alice", "--producer",
             "--topic", TOPIC, "--transactional-id", TXN_ID)
    _oncelog("acls", "add", "--data-dir", str(data), "--allow-principal", "User:bob", "--operation", "Write",
             "--operation", "Describe", "--topic", TOPIC)
    plain, sasl = free_port(), free_port()
    b = BrokerProcess(data, port=plain, overrides={
        "group.initial.rebalance.delay.ms": "0",
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
    })
    b.start()
    try:
        yield f"127.0.0.1:{sasl}"
    finally:
        assert b.stop() == 0, b.log_tail()


def _conf(bootstrap: str, user: str) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user, "sasl.password": PASSWORDS[user]}


def test_a_principal_without_the_transactional_id_cannot_touch_its_owners_transaction(sasl_broker: str) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(_conf(sasl_broker, "admin"))
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)

    alice = Producer({**_conf(sasl_broker, "alice"), "transactional.id": TXN_ID})
    alice.init_transactions(30)
    alice.begin_transaction()
    alice.produce(TOPIC, b"alice-1")
    assert alice.flush(30) == 0

    bob = Producer({**_conf(sasl_broker, "bob"), "transactional.id": TXN_ID})
    with pytest.raises(KafkaException) as refused:
        bob.init_transactions(30)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    alice.produce(TOPIC, b"alice-2")  # still her epoch: the refused InitProducerId fenced nobody
    alice.commit_transaction(30)

    reader = Consumer({**_conf(sasl_broker, "admin"), "group.id": "audit", "auto.offset.reset": "earliest",
                       "isolation.level": "read_committed", "enable.auto.commit": False})
    reader.subscribe([TOPIC])
    got: list[bytes] = []
    for _ in range(60):  # bounded: 60 polls of at most 0.5 s
        m = reader.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
        if len(got) == 2:
            break
    reader.close()
    assert got == [b"alice-1", b"alice-2"]


def test_a_principal_that_may_write_but_not_read_is_refused_the_fetch(sasl_broker: str) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import TopicAuthorizationFailedError

    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(_conf(sasl_broker, "admin"))
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    c = KafkaConsumer(bootstrap_servers=sasl_broker, security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                      sasl_plain_username="bob", sasl_plain_password=PASSWORDS["bob"], auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        c.assign([TopicPartition(TOPIC, 0)])
        with pytest.raises(TopicAuthorizationFailedError):
            for _ in range(10):  # bounded
                c.poll(timeout_ms=500)
    finally:
        c.close()
