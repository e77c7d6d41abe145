"""Client strings PostgreSQL's text type refuses (issue 26 row 11): a NUL byte (or a lone UTF-16
surrogate, which no UTF-8 text can hold) in a SCRAM user name, a config name or value, an ACL's
principal, host or resource name, a group id or a transactional id reaching a cluster-mode
broker. Before: psycopg's DataError escaped, a ``bug:`` line with a traceback was logged, and the
client got empty results or KAFKA_STORAGE_ERROR for a request that can never succeed. Now each
such string is refused at the one boundary where client strings meet the store
(oncelog/storable.py) with the per-resource error Kafka's clients expect, and the rest of the
request is served. Group ids and transactional ids live inside records (bytea), where a NUL
fits: they are served as Kafka serves them."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any, Iterator

import pytest

from cluster_procs import brokers
from oncelog.client import ProtocolClient
from oncelog.process import BrokerProcess
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode

SMALL = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
         "offsets.topic.num.partitions": "2", "transaction.state.log.num.partitions": "2",
         "authorizer.class.name": "oncelog", "super.users": "User:ANONYMOUS"}
NUL = "bad\x00name"
MS = datetime.timedelta(milliseconds=1)


@pytest.fixture
def broker(pg_dsn: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    with brokers(pg_dsn, tmp_path, SMALL, (1,)) as procs:
        yield procs[0]


def _cls(c: ProtocolClient, api: int, v: int) -> Any:
    return c.classes(api, v)


def _no_bug_lines(b: BrokerProcess) -> None:
    tail = b.log_tail(2_000_000)
    assert "bug:" not in tail and "DataError" not in tail and "Traceback" not in tail, tail[-4000:]


def test_scram_user_names_with_nul_get_a_per_user_error(broker: BrokerProcess) -> None:
    with ProtocolClient(broker.bootstrap) as c:
        m = _cls(c, apis.ALTER_USER_SCRAM_CREDENTIALS, 0)
        up = lambda name: m["ScramCredentialUpsertion"](name=name, mechanism=1, iterations=4096,  # noqa: E731
                                                         salt=b"s" * 16, salted_password=b"p" * 32)
        r = c.request(apis.ALTER_USER_SCRAM_CREDENTIALS, m["AlterUserScramCredentialsRequest"](
            deletions=(), upsertions=(up(NUL), up("good"))), version=0)
        codes = {x.user: x.error_code for x in r.results}
        assert codes == {NUL: ErrorCode.unacceptable_credential, "good": ErrorCode.none}, r
        r = c.request(apis.ALTER_USER_SCRAM_CREDENTIALS, m["AlterUserScramCredentialsRequest"](
            deletions=(m["ScramCredentialDeletion"](name=NUL, mechanism=1),), upsertions=()), version=0)
        assert [x.error_code for x in r.results] == [ErrorCode.unacceptable_credential], r

        d = _cls(c, apis.DESCRIBE_USER_SCRAM_CREDENTIALS, 0)
        r = c.request(apis.DESCRIBE_USER_SCRAM_CREDENTIALS, d["DescribeUserScramCredentialsRequest"](
            users=(d["UserName"](name=NUL), d["UserName"](name="good"))), version=0)
        assert r.error_code == ErrorCode.none, r
        codes = {x.user: x.error_code for x in r.results}
        assert codes == {NUL: ErrorCode.resource_not_found, "good": ErrorCode.none}, r
    _no_bug_lines(broker)


def test_config_names_and_values_with_nul_get_invalid_config(broker: BrokerProcess) -> None:
    with ProtocolClient(broker.bootstrap) as c:
        ct = _cls(c, apis.CREATE_TOPICS, 5)
        r = c.request(apis.CREATE_TOPICS, ct["CreateTopicsRequest"](topics=(
            ct["CreatableTopic"](name="t", num_partitions=1, replication_factor=1, assignments=(), configs=()),),
            timeout=30_000 * MS, validate_only=False), version=5)
        assert r.topics[0].error_code == ErrorCode.none, r
        r = c.request(apis.CREATE_TOPICS, ct["CreateTopicsRequest"](topics=(
            ct["CreatableTopic"](name="t2", num_partitions=1, replication_factor=1, assignments=(), configs=(
                ct["CreatableTopicConfig"](name="message.format.version", value="3.0\x00"),)),),
            timeout=30_000 * MS, validate_only=False), version=5)
        assert r.topics[0].error_code == ErrorCode.invalid_config, r

        m = _cls(c, apis.INCREMENTAL_ALTER_CONFIGS, 1)
        res = lambda rtype, rname, name, value: m["AlterConfigsResource"](  # noqa: E731
            resource_type=rtype, resource_name=rname,
            configs=(m["AlterableConfig"](name=name, config_operation=0, value=value),))
        # free-form values (no number, no choice list) reached the store before
        free = (("follower.replication.throttled.replicas", "0:1\x00"), ("message.format.version", "3.0\x00"),
                ("retention.ms", "1\x00"), ("x\x00y", "1"))
        for rtype, rname in ((2, "t"), (4, ""), (4, "1")):
            for name, value in free:
                if rtype == 4 and name == "message.format.version":
                    name = "log.message.format.version"
                elif rtype == 4 and name == "retention.ms":
                    name = "log.retention.ms"
                elif rtype == 4 and name.startswith("follower"):
                    continue  # no broker synonym
                r = c.request(apis.INCREMENTAL_ALTER_CONFIGS, m["IncrementalAlterConfigsRequest"](
                    resources=(res(rtype, rname, name, value), res(2, "t", "retention.ms", "86400000")),
                    validate_only=False), version=1)
                codes = [x.error_code for x in r.responses]
                # an unknown broker config name: INVALID_REQUEST, as Kafka ("cannot update dynamically")
                first = ErrorCode.invalid_request if rtype == 4 and name.startswith("x") else ErrorCode.invalid_config
                assert codes == [first, ErrorCode.none], (rtype, rname, name, value, r)

        a = _cls(c, apis.ALTER_CONFIGS, 2)
        r = c.request(apis.ALTER_CONFIGS, a["AlterConfigsRequest"](resources=(
            a["AlterConfigsResource"](resource_type=4, resource_name="", configs=(
                a["AlterableConfig"](name="log.message.format.version", value="3.0\x00"),)),
            a["AlterConfigsResource"](resource_type=2, resource_name="t", configs=(
                a["AlterableConfig"](name="retention.ms", value="86400000"),))), validate_only=False), version=2)
        assert [x.error_code for x in r.responses] == [ErrorCode.invalid_config, ErrorCode.none], r
    _no_bug_lines(broker)


def test_acls_groups_and_transactional_ids_with_nul_are_refused_cleanly(broker: BrokerProcess) -> None:
    with ProtocolClient(broker.bootstrap) as c:
        m = _cls(c, apis.CREATE_ACLS, 3)
        acl = lambda name, principal, host: m["AclCreation"](  # noqa: E731
            resource_type=2, resource_name=name, resource_pattern_type=3, principal=principal, host=host,
            operation=3, permission_type=3)
        r = c.request(apis.CREATE_ACLS, m["CreateAclsRequest"](creations=(
            acl(NUL, "User:a", "*"), acl("t", "User:a\x00", "*"), acl("t", "User:a", "h\x00"),
            acl("t", "User:a", "*"))), version=3)
        assert [x.error_code for x in r.results] == [ErrorCode.invalid_request] * 3 + [ErrorCode.none], r

        # Group ids and transactional ids are kept inside records (bytea), where a NUL fits: as
        # in Kafka, they are served like any other id.
        f = _cls(c, apis.FIND_COORDINATOR, 4)
        r = c.request(apis.FIND_COORDINATOR, f["FindCoordinatorRequest"](key_type=0, coordinator_keys=(NUL, "g")),
                      version=4)
        assert [x.error_code for x in r.coordinators] == [ErrorCode.none, ErrorCode.none], r
        o = _cls(c, apis.OFFSET_FETCH, 8)
        retriable = (ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator,
                     ErrorCode.coordinator_not_available)
        r = c.request(apis.OFFSET_FETCH, o["OffsetFetchRequest"](groups=(o["OffsetFetchRequestGroup"](
            group_id=NUL, topics=None),), require_stable=False), version=8)
        assert r.groups[0].error_code in (ErrorCode.none, *retriable), r
        i = _cls(c, apis.INIT_PRODUCER_ID, 4)
        r = c.request(apis.INIT_PRODUCER_ID, i["InitProducerIdRequest"](
            transactional_id=NUL, transaction_timeout=60_000 * MS, producer_id=-1, producer_epoch=-1), version=4)
        assert r.error_code in (ErrorCode.none, *retriable), r
    _no_bug_lines(broker)
