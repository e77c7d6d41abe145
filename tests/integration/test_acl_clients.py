"""ACLs with real clients (issue 18): confluent-kafka, kafka-python and aiokafka against a broker
with ACLs on, the principal's ACLs changed between steps by the admin (tests/acl_harness.py):

* a transactional producer whose transactional id it may not use gets
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and the victim's open transaction on that id (begun
  while allowed) is untouched: same producer id and epoch, still Ongoing, and it commits;
* a consumer that may read the topic but not the group: refused as a group member, reads with
  assigned partitions (no group);
* a denied DeleteTopics leaves the topic; Metadata hides a topic the principal may not describe;
* Produce refused per topic; ListGroups / ListTransactions filtered; KIP-430 operations;
* the ACL APIs through two real admin clients, durable across a restart; SECURITY_DISABLED off.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

import acl_harness as h
import kafka_clients as kc
from oncelog.acl.model import AclFilter, AclOperation as Op, PatternType, PermissionType, ResourceType as R
from oncelog.client import ProtocolClient
from oncelog.process import BrokerProcess
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.integration
MS = datetime.timedelta(milliseconds=1)


@pytest.fixture(params=[h.ANONYMOUS])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[BrokerProcess, h.Grants, ProtocolClient]]:
    b = h.start_acl_broker(tmp_path / "broker")
    grants = h.Grants(b, request.param)
    admin = h.admin_client(b)
    try:
        yield b, grants, admin
    finally:
        admin.close()
        grants.close()
        assert b.stop() == 0, b.log_tail()


def _create(admin: ProtocolClient, topic: str, partitions: int = 1) -> None:
    m = admin.classes(apis.CREATE_TOPICS, 5)
    r = admin.request(apis.CREATE_TOPICS, m["CreateTopicsRequest"](topics=(m["CreatableTopic"](
        name=topic, num_partitions=partitions, replication_factor=1, assignments=(), configs=()),),
        timeout=10000 * MS, validate_only=False), version=5)
    assert r.topics[0].error_code == E.none


def _describe_txn(admin: ProtocolClient, tid: str) -> Any:
    m = admin.classes(apis.DESCRIBE_TRANSACTIONS, 0)
    return admin.request(apis.DESCRIBE_TRANSACTIONS, m["DescribeTransactionsRequest"](transactional_ids=(tid,)),
                         version=0).transaction_states[0]


def _topics_seen(bootstrap: str) -> set[str]:
    m = ProtocolClient(bootstrap, source_host=h.SUBJECT_HOST)
    try:
        c = m.classes(apis.METADATA, 12)
        r = m.request(apis.METADATA, c["MetadataRequest"](topics=None, allow_auto_topic_creation=False,
                                                         include_topic_authorized_operations=False), version=12)
        return {t.name for t in r.topics}
    finally:
        m.close()


def test_transactional_id_refused_and_the_victim_is_untouched(env: Any) -> None:
    """The victim (kafka-python) opens a transaction while the id is allowed; the id is then
    refused and the attacker (confluent-kafka, then a crafted InitProducerId) is turned away
    before the coordinator is asked, so the victim's transaction keeps its producer id and epoch
    and stays Ongoing. Today victim and attacker are the same principal (User:ANONYMOUS), so the
    victim must not need its id while it is refused: kafka-python asks for its coordinator only
    when it has none (librdkafka re-queries it periodically and would itself be refused); with
    SASL the attacker is simply another principal."""
    from confluent_kafka import KafkaException, Producer
    from kafka import KafkaProducer

    b, g, admin = env
    _create(admin, "txn-data")
    g.grant(g.binding(R.TRANSACTIONAL_ID, "victim-tx", Op.WRITE), g.binding(R.TOPIC, "txn-data", Op.WRITE),
            g.binding(R.TOPIC, "txn-data", Op.READ))
    victim = KafkaProducer(bootstrap_servers=b.bootstrap, transactional_id="victim-tx", max_block_ms=20000)
    victim.init_transactions()
    victim.begin_transaction()
    for i in range(3):
        victim.send("txn-data", f"v{i}".encode(), partition=0)
    victim.flush(timeout=30)
    before = _describe_txn(admin, "victim-tx")
    assert before.transaction_state == "Ongoing"

    # the id is taken away: neither a real client nor a crafted request may use it
    g.acls.remove([AclFilter(R.TRANSACTIONAL_ID, "victim-tx", PatternType.LITERAL, g.principal, None, Op.ANY,
                             PermissionType.ANY)])
    attacker = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "victim-tx"})
    with pytest.raises(KafkaException) as exc:
        attacker.init_transactions(20)
    assert exc.value.args[0].code() == E.transactional_id_authorization_failed, exc.value
    del attacker
    c = ProtocolClient(b.bootstrap, source_host=h.SUBJECT_HOST)
    try:
        m = c.classes(apis.INIT_PRODUCER_ID, 4)
        r = c.request(apis.INIT_PRODUCER_ID, m["InitProducerIdRequest"](transactional_id="victim-tx",
                      transaction_timeout=60000 * MS, producer_id=-1, producer_epoch=-1), version=4)
        assert r.error_code == E.transactional_id_authorization_failed
    finally:
        c.close()
    after = _describe_txn(admin, "victim-tx")
    assert (after.transaction_state, after.producer_id, after.producer_epoch) == (
        "Ongoing", before.producer_id, before.producer_epoch)  # not fenced, not aborted

    g.grant(g.binding(R.TRANSACTIONAL_ID, "victim-tx", Op.WRITE))
    victim.commit_transaction()
    victim.close(timeout=10)
    got = kc.consume("aiokafka", b.bootstrap, "txn-data", [0], expected=3, isolation="read_committed", timeout=30)
    assert [v for *_x, v in got] == [b"v0", b"v1", b"v2"]


def test_consumer_may_read_the_topic_but_not_the_group(env: Any) -> None:
    from confluent_kafka import Consumer, KafkaError
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    b, g, admin = env
    _create(admin, "reads")
    g.grant(g.binding(R.TOPIC, "reads", Op.WRITE))
    kc.produce("kafka-python", b.bootstrap, "reads", [(0, None, f"r{i}".encode()) for i in range(4)])
    g.revoke_all()
    g.grant(g.binding(R.TOPIC, "reads", Op.READ))

    # no group: assigned partitions are enough
    assert len(kc.consume("aiokafka", b.bootstrap, "reads", [0], expected=4, timeout=30)) == 4

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "forbidden", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["reads"])
        error = None
        deadline = time.monotonic() + 30
        while error is None and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is not None:
                error = msg.error()
            assert msg is None or msg.error() is not None, "read as a member of a group it may not use"
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
    finally:
        c.close()
    k = KafkaConsumer("reads", bootstrap_servers=b.bootstrap, group_id="forbidden", auto_offset_reset="earliest",
                      request_timeout_ms=10000)
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                assert not k.poll(timeout_ms=500), "read as a member of a group it may not use"
    finally:
        k.close()

    # the group allowed: the whole membership path (join, sync, heartbeat, commit, leave)
    g.grant(g.binding(R.GROUP, "allowed", Op.READ))
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "allowed", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe(["reads"])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < 4 and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg.value())
        assert got == [b"r0", b"r1", b"r2", b"r3"]
        c.commit(asynchronous=False)
    finally:
        c.close()
    # ListGroups shows only the groups it may describe
    lc = ProtocolClient(b.bootstrap, source_host=h.SUBJECT_HOST)
    try:
        m = lc.classes(apis.LIST_GROUPS, 4)
        listed = {x.group_id for x in lc.request(apis.LIST_GROUPS, m["ListGroupsRequest"](states_filter=()),
                                                 version=4).groups}
    finally:
        lc.close()
    assert "allowed" in listed and "oncelog-none" not in listed


def test_denied_delete_topics_and_hidden_metadata(env: Any) -> None:
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient
    from kafka.errors import TopicAuthorizationFailedError

    b, g, admin = env
    _create(admin, "keep")
    _create(admin, "secret")
    g.grant(g.binding(R.TOPIC, "keep", Op.DESCRIBE))
    assert "secret" not in _topics_seen(b.bootstrap) and "keep" in _topics_seen(b.bootstrap)
    ca = AdminClient({"bootstrap.servers": b.bootstrap})
    assert "secret" not in ca.list_topics(timeout=10).topics
    assert "keep" in ca.list_topics(timeout=10).topics

    ka = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            ka.delete_topics(["keep"])
    finally:
        ka.close()
    fut = ca.delete_topics(["keep"], operation_timeout=10)["keep"]
    with pytest.raises(Exception) as exc:
        fut.result(timeout=30)
    assert "TOPIC_AUTHORIZATION_FAILED" in str(exc.value) or "authoriz" in str(exc.value).lower()
    assert "keep" in _topics_seen(b.bootstrap)  # still there

    g.grant(g.binding(R.TOPIC, "keep", Op.DELETE))
    ca.delete_topics(["keep"], operation_timeout=10)["keep"].result(timeout=30)
    g.grant(g.binding(R.TOPIC, "secret", Op.DESCRIBE))
    assert "keep" not in _topics_seen(b.bootstrap) and "secret" in _topics_seen(b.bootstrap)


def test_produce_refused_per_topic(env: Any) -> None:
    from confluent_kafka import KafkaError, Producer

    b, g, admin = env
    _create(admin, "w")
    g.grant(g.binding(R.TOPIC, "w", Op.DESCRIBE))
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "message.timeout.ms": 10000,
                  "enable.idempotence": False})
    p.produce("w", b"x", partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(20)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors
    g.grant(g.binding(R.TOPIC, "w", Op.WRITE))
    # an idempotent producer: InitProducerId without transactional id is allowed by WRITE on a topic
    assert kc.produce("confluent", b.bootstrap, "w", [(0, None, b"ok")], extra={"enable.idempotence": True})
    assert kc.produce("aiokafka", b.bootstrap, "w", [(0, None, b"ok2")])


def test_list_transactions_and_authorized_operations(env: Any) -> None:
    from confluent_kafka import Producer

    b, g, admin = env
    _create(admin, "ops")
    g.grant(g.binding(R.TRANSACTIONAL_ID, "seen-tx", Op.WRITE), g.binding(R.TRANSACTIONAL_ID, "unseen-tx", Op.WRITE),
            g.binding(R.TOPIC, "ops", Op.WRITE))
    for tid in ("seen-tx", "unseen-tx"):
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid})
        p.init_transactions(30)
        del p  # librdkafka's producer closes when collected
    g.acls.remove([AclFilter(R.TRANSACTIONAL_ID, "unseen-tx", PatternType.LITERAL, g.principal, None, Op.ANY,
                             PermissionType.ANY)])
    c = ProtocolClient(b.bootstrap, source_host=h.SUBJECT_HOST)
    try:
        m = c.classes(apis.LIST_TRANSACTIONS, 1)
        r = c.request(apis.LIST_TRANSACTIONS, m["ListTransactionsRequest"](state_filters=(), producer_id_filters=(),
                                                                        duration_filter=-1), version=1)
        assert {t.transactional_id for t in r.transaction_states} == {"seen-tx"}
        m = c.classes(apis.DESCRIBE_CLUSTER, 1)
        r = c.request(apis.DESCRIBE_CLUSTER, m["DescribeClusterRequest"](include_cluster_authorized_operations=True,
                                                                      endpoint_type=1), version=1)
        assert r.cluster_authorized_operations == 0  # no DESCRIBE on the cluster
        g.grant(g.binding(R.CLUSTER, "", Op.ALTER))
        r = c.request(apis.DESCRIBE_CLUSTER, m["DescribeClusterRequest"](include_cluster_authorized_operations=True,
                                                                      endpoint_type=1), version=1)
        assert r.cluster_authorized_operations == (1 << int(Op.ALTER)) | (1 << int(Op.DESCRIBE))
        m = c.classes(apis.DESCRIBE_GROUPS, 5)
        g.grant(g.binding(R.GROUP, "gg", Op.DELETE))
        r = c.request(apis.DESCRIBE_GROUPS, m["DescribeGroupsRequest"](groups=("gg",),
                                                                    include_authorized_operations=True), version=5)
        assert r.groups[0].authorized_operations == (1 << int(Op.DELETE)) | (1 << int(Op.DESCRIBE))
    finally:
        c.close()


def test_acl_apis_with_two_admin_clients_durable_across_restart(tmp_path: Path) -> None:
    from confluent_kafka.admin import (
        AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, ResourceType,
    )
    from kafka.admin import (
        ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, KafkaAdminClient, ResourcePattern,
        ResourcePatternFilter, ResourceType as KResourceType,
    )

    b = BrokerProcess(tmp_path / "b", overrides={**h.ACL_OVERRIDES, "super.users": "User:ANONYMOUS"}).start()
    try:
        ca = AdminClient({"bootstrap.servers": b.bootstrap})
        binding = AclBinding(ResourceType.TOPIC, "orders-", ResourcePatternType.PREFIXED, "User:alice", "*",
                             AclOperation.READ, AclPermissionType.ALLOW)
        for fut in ca.create_acls([binding], request_timeout=10).values():
            fut.result(timeout=30)
        ka = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10000)
        try:
            result = ka.create_acls([ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.DENY,
                                         ResourcePattern(KResourceType.GROUP, "g1", ACLResourcePatternType.LITERAL))])
            assert not result["failed"], result
            acls, err = ka.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                   ResourcePatternFilter(KResourceType.ANY, None,
                                                                         ACLResourcePatternType.ANY)))
            assert {(a.principal, a.resource_pattern.resource_name) for a in acls} == {("User:alice", "orders-"),
                                                                                      ("User:bob", "g1")}
        finally:
            ka.close()
        b.restart(hard=True)  # kill -9: an acknowledged CreateAcls is durable
        ca = AdminClient({"bootstrap.servers": b.bootstrap})
        flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                               AclPermissionType.ANY)
        found = ca.describe_acls(flt, request_timeout=10).result(timeout=30)
        assert {(x.principal, x.name) for x in found} == {("User:alice", "orders-"), ("User:bob", "g1")}
        match = AclBindingFilter(ResourceType.TOPIC, "orders-eu", ResourcePatternType.MATCH, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY)
        assert [x.name for x in ca.describe_acls(match, request_timeout=10).result(timeout=30)] == ["orders-"]
        deleted = list(ca.delete_acls([flt], request_timeout=10).values())[0].result(timeout=30)
        assert len(deleted) == 2
        assert ca.describe_acls(flt, request_timeout=10).result(timeout=30) == []
    finally:
        assert b.stop() == 0, b.log_tail()


def test_acl_apis_answer_security_disabled_without_an_authorizer(broker: BrokerProcess) -> None:
    c = ProtocolClient(broker.bootstrap)
    try:
        m = c.classes(apis.DESCRIBE_ACLS, 3)
        r = c.request(apis.DESCRIBE_ACLS, m["DescribeAclsRequest"](
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
            host_filter=None, operation=1, permission_type=1), version=3)
        assert r.error_code == E.security_disabled
    finally:
        c.close()


def test_cli_add_list_remove_against_a_broker(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    b = BrokerProcess(tmp_path / "b", overrides={**h.ACL_OVERRIDES, "super.users": "User:ANONYMOUS"}).start()
    try:
        def cli(*args: str) -> dict[str, Any]:
            out = subprocess.run([sys.executable, "-m", "oncelog", "acls", *args, "-b", b.bootstrap, "--json"],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stdout + out.stderr
            return json.loads(out.stdout)

        added = cli("add", "--allow-principal", "User:etl", "--producer", "--topic", "out", "--transactional-id", "etl-1")
        assert {(a["resource_type"], a["operation"]) for a in added["added"]} == {
            ("TOPIC", "WRITE"), ("TOPIC", "DESCRIBE"), ("TOPIC", "CREATE"), ("TRANSACTIONAL_ID", "WRITE"),
            ("TRANSACTIONAL_ID", "DESCRIBE")}
        cli("add", "--deny-principal", "User:mallory", "--operation", "All", "--topic", "o", "--resource-pattern-type",
            "prefixed")
        assert len(cli("list")["acls"]) == 6
        assert [a["principal"] for a in cli("list", "--topic", "out", "--resource-pattern-type", "match")["acls"]
                if a["permission"] == "DENY"] == ["User:mallory"]
        assert len(cli("remove", "--topic", "out")["removed"]) == 3
        assert len(cli("list")["acls"]) == 3
        bad = subprocess.run([sys.executable, "-m", "oncelog", "acls", "add", "-b", b.bootstrap, "--allow-principal",
                              "User:x", "--operation", "ClusterAction", "--topic", "t", "--json"],
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode == 1 and "not supported on TOPIC" in json.loads(bad.stdout)["error"]
    finally:
        assert b.stop() == 0, b.log_tail()
