"""ACL enforcement matrix (issue 18): every API the broker serves, each refused without the ACL
its rule needs (acl/rules.py) with Kafka's error code, and allowed once the ACL is added, on the
same live connection (no reconnect: changes apply to the next request). The requests are crafted
with kio from the subject's host; grants go through CreateAcls/DeleteAcls from the admin's host
(tests/acl_harness.py). Real clients cover the scenarios in test_acl_clients.py.

The principal is a parameter: today every connection is User:ANONYMOUS (PLAINTEXT); with SASL the
same cases run for an authenticated principal.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pytest

import acl_harness as h
from oncelog.acl.model import AclOperation as Op, ResourceType as R
from oncelog.client import ProtocolClient
from oncelog.process import BrokerProcess
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.integration
TOPIC, OTHER, GROUP, TXN = "acl-t", "acl-hidden", "acl-g", "acl-tx"
MS = datetime.timedelta(milliseconds=1)


@pytest.fixture(scope="module", params=[h.ANONYMOUS])
def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, ...]]:
    b = h.start_acl_broker(tmp_path_factory.mktemp("acl") / "broker")
    grants = h.Grants(b, request.param)
    admin = h.admin_client(b)
    subject = ProtocolClient(b.bootstrap, source_host=h.SUBJECT_HOST, client_id="acl-subject")
    try:
        for t in (TOPIC, OTHER):
            c = admin.classes(apis.CREATE_TOPICS, 5)
            resp = admin.request(apis.CREATE_TOPICS, c["CreateTopicsRequest"](topics=(c["CreatableTopic"](
                name=t, num_partitions=1, replication_factor=1, assignments=(), configs=()),),
                timeout=10000 * MS, validate_only=False), version=5)
            assert resp.topics[0].error_code == E.none
        _TOPIC_ID[0] = _topic_id(admin)  # ShareFetch names topics by id
        m = admin.classes(apis.OFFSET_COMMIT, 2)  # a group to list: "acl-listed", with one committed offset
        r = admin.request(apis.OFFSET_COMMIT, m["OffsetCommitRequest"](
            group_id="acl-listed", generation_id_or_member_epoch=-1, member_id="", retention_time=-1 * MS,
            topics=(m["OffsetCommitRequestTopic"](name=TOPIC, partitions=(m["OffsetCommitRequestPartition"](
                partition_index=0, committed_offset=0, committed_metadata=""),)),)), version=2)
        assert r.topics[0].partitions[0].error_code == E.none
        yield b, grants, subject, admin
    finally:
        subject.close()
        admin.close()
        grants.close()
        assert b.stop() == 0, b.log_tail()


def cls(c: ProtocolClient, api: int, v: int) -> dict[str, type]:
    return c.classes(api, v)


# -- the requests: each returns the error code the rule under test answers -------------------------

def produce_like_fetch(c: ProtocolClient) -> E:
    m = cls(c, apis.FETCH, 12)
    r = c.request(apis.FETCH, m["FetchRequest"](max_wait=0 * MS, min_bytes=0, topics=(m["FetchTopic"](
        topic=TOPIC, partitions=(m["FetchPartition"](partition=0, fetch_offset=0, partition_max_bytes=1024),)),),
        forgotten_topics_data=()), version=12)
    return E(r.responses[0].partitions[0].error_code)


def list_offsets(c: ProtocolClient) -> E:
    m = cls(c, apis.LIST_OFFSETS, 7)
    r = c.request(apis.LIST_OFFSETS, m["ListOffsetsRequest"](replica_id=-1, isolation_level=0, topics=(m["ListOffsetsTopic"](
        name=TOPIC, partitions=(m["ListOffsetsPartition"](partition_index=0, timestamp=-1),)),)), version=7)
    return E(r.topics[0].partitions[0].error_code)


def metadata_named(c: ProtocolClient) -> E:
    m = cls(c, apis.METADATA, 12)
    r = c.request(apis.METADATA, m["MetadataRequest"](topics=(m["MetadataRequestTopic"](name=OTHER, topic_id=uuid.UUID(int=0)),),
                                                     allow_auto_topic_creation=False,
                                                     include_topic_authorized_operations=True), version=12)
    if r.topics[0].error_code == E.none:  # KIP-430: what DESCRIBE alone allows
        assert r.topics[0].topic_authorized_operations == 1 << int(Op.DESCRIBE)
    return E(r.topics[0].error_code)


def metadata_all_hides(c: ProtocolClient) -> E:
    m = cls(c, apis.METADATA, 12)
    r = c.request(apis.METADATA, m["MetadataRequest"](topics=None, allow_auto_topic_creation=False,
                                                     include_topic_authorized_operations=False), version=12)
    return E.none if OTHER in {t.name for t in r.topics} else E.topic_authorization_failed


def metadata_auto_create(c: ProtocolClient) -> E:
    m = cls(c, apis.METADATA, 12)
    r = c.request(apis.METADATA, m["MetadataRequest"](topics=(m["MetadataRequestTopic"](name="acl-auto", topic_id=uuid.UUID(int=0)),),
                                                     allow_auto_topic_creation=True,
                                                     include_topic_authorized_operations=False), version=12)
    return E(r.topics[0].error_code)


def offset_commit(c: ProtocolClient) -> E:
    m = cls(c, apis.OFFSET_COMMIT, 2)
    r = c.request(apis.OFFSET_COMMIT, m["OffsetCommitRequest"](
        group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", retention_time=-1 * MS,
        topics=(m["OffsetCommitRequestTopic"](name=TOPIC, partitions=(m["OffsetCommitRequestPartition"](
            partition_index=0, committed_offset=0, committed_metadata=""),)),)), version=2)
    return E(r.topics[0].partitions[0].error_code)


def offset_fetch(c: ProtocolClient) -> E:
    m = cls(c, apis.OFFSET_FETCH, 7)
    r = c.request(apis.OFFSET_FETCH, m["OffsetFetchRequest"](group_id=GROUP, topics=(m["OffsetFetchRequestTopic"](
        name=TOPIC, partition_indexes=(0,)),)), version=7)
    if r.error_code != E.none:
        return E(r.error_code)
    return E(r.topics[0].partitions[0].error_code)


def find_coordinator(key_type: int, key: str) -> Callable[[ProtocolClient], E]:
    def call(c: ProtocolClient) -> E:
        m = cls(c, apis.FIND_COORDINATOR, 4)
        r = c.request(apis.FIND_COORDINATOR, m["FindCoordinatorRequest"](key_type=key_type, coordinator_keys=(key,)),
                      version=4)
        return E(r.coordinators[0].error_code)
    return call


def join_group(c: ProtocolClient) -> E:
    m = cls(c, apis.JOIN_GROUP, 5)
    r = c.request(apis.JOIN_GROUP, m["JoinGroupRequest"](
        group_id=GROUP, session_timeout=10000 * MS, rebalance_timeout=10000 * MS, member_id="", protocol_type="consumer",
        protocols=(m["JoinGroupRequestProtocol"](name="range", metadata=b""),)), version=5)
    return E(r.error_code)


def heartbeat(c: ProtocolClient) -> E:
    m = cls(c, apis.HEARTBEAT, 3)
    return E(c.request(apis.HEARTBEAT, m["HeartbeatRequest"](group_id=GROUP, generation_id=1, member_id="nobody"),
                       version=3).error_code)


def consumer_group_heartbeat(c: ProtocolClient) -> E:
    m = cls(c, apis.CONSUMER_GROUP_HEARTBEAT, 1)
    return E(c.request(apis.CONSUMER_GROUP_HEARTBEAT, m["ConsumerGroupHeartbeatRequest"](
        group_id=GROUP, member_id="nobody", member_epoch=5, topic_partitions=None), version=1).error_code)


def consumer_group_describe(c: ProtocolClient) -> E:
    m = cls(c, apis.CONSUMER_GROUP_DESCRIBE, 1)
    return E(c.request(apis.CONSUMER_GROUP_DESCRIBE, m["ConsumerGroupDescribeRequest"](
        group_ids=(GROUP,), include_authorized_operations=False), version=1).groups[0].error_code)


SHARE_GROUP = "acl-share"  # a share group's id: not one a classic group holds (GROUP_ID_NOT_FOUND then)


def share_group_heartbeat(c: ProtocolClient) -> E:
    m = cls(c, apis.SHARE_GROUP_HEARTBEAT, 1)
    return E(c.request(apis.SHARE_GROUP_HEARTBEAT, m["ShareGroupHeartbeatRequest"](
        group_id=SHARE_GROUP, member_id="nobody", member_epoch=5), version=1).error_code)


def share_group_describe(c: ProtocolClient) -> E:
    m = cls(c, apis.SHARE_GROUP_DESCRIBE, 1)
    return E(c.request(apis.SHARE_GROUP_DESCRIBE, m["ShareGroupDescribeRequest"](
        group_ids=(SHARE_GROUP,), include_authorized_operations=False), version=1).groups[0].error_code)


def _topic_id(c: ProtocolClient) -> uuid.UUID:
    m = cls(c, apis.METADATA, 12)
    res = c.request(apis.METADATA, m["MetadataRequest"](topics=(m["MetadataRequestTopic"](
        name=TOPIC, topic_id=uuid.UUID(int=0)),), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False), version=12)
    return res.topics[0].topic_id


def share_fetch(partition_error: bool) -> Callable[[ProtocolClient], E]:
    def call(c: ProtocolClient) -> E:
        hb = cls(c, apis.SHARE_GROUP_HEARTBEAT, 1)  # only a member opens a share session
        joined = c.request(apis.SHARE_GROUP_HEARTBEAT, hb["ShareGroupHeartbeatRequest"](
            group_id=SHARE_GROUP, member_id="acl-member", member_epoch=0, subscribed_topic_names=(TOPIC,)), version=1)
        if joined.error_code != E.none:
            return E(joined.error_code)
        m = cls(c, apis.SHARE_FETCH, 1)
        topic = m["FetchTopic"](topic_id=_TOPIC_ID[0], partitions=(m["FetchPartition"](
            partition_index=0, acknowledgement_batches=()),))
        res = c.request(apis.SHARE_FETCH, m["ShareFetchRequest"](
            group_id=SHARE_GROUP, member_id="acl-member", share_session_epoch=0, max_wait=0 * MS, min_bytes=1,
            max_records=1, batch_size=1, topics=(topic,), forgotten_topics_data=()), version=1)
        if partition_error and res.error_code == E.none:
            return E(res.responses[0].partitions[0].error_code)
        return E(res.error_code)
    return call


def share_acknowledge(c: ProtocolClient) -> E:
    m = cls(c, apis.SHARE_ACKNOWLEDGE, 1)
    return E(c.request(apis.SHARE_ACKNOWLEDGE, m["ShareAcknowledgeRequest"](
        group_id=SHARE_GROUP, member_id="nobody", share_session_epoch=3, topics=()), version=1).error_code)


def describe_share_group_offsets(c: ProtocolClient) -> E:
    m = cls(c, apis.DESCRIBE_SHARE_GROUP_OFFSETS, 1)
    return E(c.request(apis.DESCRIBE_SHARE_GROUP_OFFSETS, m["DescribeShareGroupOffsetsRequest"](groups=(
        m["DescribeShareGroupOffsetsRequestGroup"](group_id=SHARE_GROUP, topics=None),)), version=1).groups[0].error_code)


def alter_share_group_offsets(c: ProtocolClient) -> E:
    m = cls(c, apis.ALTER_SHARE_GROUP_OFFSETS, 0)
    return E(c.request(apis.ALTER_SHARE_GROUP_OFFSETS, m["AlterShareGroupOffsetsRequest"](
        group_id="acl-share-nogroup", topics=()), version=0).error_code)


def delete_share_group_offsets(c: ProtocolClient) -> E:
    m = cls(c, apis.DELETE_SHARE_GROUP_OFFSETS, 0)
    return E(c.request(apis.DELETE_SHARE_GROUP_OFFSETS, m["DeleteShareGroupOffsetsRequest"](
        group_id="acl-share-nogroup", topics=()), version=0).error_code)


_TOPIC_ID: list[Any] = [None]  # the test topic's id (the env fixture sets it)


def sync_group(c: ProtocolClient) -> E:
    m = cls(c, apis.SYNC_GROUP, 5)
    return E(c.request(apis.SYNC_GROUP, m["SyncGroupRequest"](
        group_id=GROUP, generation_id=1, member_id="nobody", group_instance_id=None, protocol_type="consumer",
        protocol_name="range", assignments=()), version=5).error_code)


def leave_group(c: ProtocolClient) -> E:
    m = cls(c, apis.LEAVE_GROUP, 4)
    return E(c.request(apis.LEAVE_GROUP, m["LeaveGroupRequest"](group_id=GROUP, members=(m["MemberIdentity"](
        member_id="nobody", group_instance_id=None),)), version=4).error_code)


def list_groups_filtered(c: ProtocolClient) -> E:
    m = cls(c, apis.LIST_GROUPS, 4)
    r = c.request(apis.LIST_GROUPS, m["ListGroupsRequest"](states_filter=()), version=4)
    return E.none if "acl-listed" in {g.group_id for g in r.groups} else E.group_authorization_failed


def describe_groups(c: ProtocolClient) -> E:
    m = cls(c, apis.DESCRIBE_GROUPS, 5)
    r = c.request(apis.DESCRIBE_GROUPS, m["DescribeGroupsRequest"](groups=(GROUP,), include_authorized_operations=True),
                  version=5)
    return E(r.groups[0].error_code)


def delete_groups(c: ProtocolClient) -> E:
    m = cls(c, apis.DELETE_GROUPS, 2)
    return E(c.request(apis.DELETE_GROUPS, m["DeleteGroupsRequest"](groups_names=("acl-nogroup",)),
                       version=2).results[0].error_code)


def offset_delete(c: ProtocolClient) -> E:
    m = cls(c, apis.OFFSET_DELETE, 0)
    r = c.request(apis.OFFSET_DELETE, m["OffsetDeleteRequest"](group_id="acl-nogroup", topics=(m["OffsetDeleteRequestTopic"](
        name=TOPIC, partitions=(m["OffsetDeleteRequestPartition"](partition_index=0),)),)), version=0)
    return E(r.error_code)


def create_topics(c: ProtocolClient) -> E:
    m = cls(c, apis.CREATE_TOPICS, 5)
    r = c.request(apis.CREATE_TOPICS, m["CreateTopicsRequest"](topics=(m["CreatableTopic"](
        name="acl-new", num_partitions=1, replication_factor=1, assignments=(), configs=()),),
        timeout=10000 * MS, validate_only=True), version=5)
    return E(r.topics[0].error_code)


def delete_topics(c: ProtocolClient) -> E:
    m = cls(c, apis.DELETE_TOPICS, 4)
    r = c.request(apis.DELETE_TOPICS, m["DeleteTopicsRequest"](topic_names=("acl-nonexistent",), timeout=5000 * MS),
                  version=4)
    return E(r.responses[0].error_code)


def delete_records(c: ProtocolClient) -> E:
    m = cls(c, apis.DELETE_RECORDS, 2)
    r = c.request(apis.DELETE_RECORDS, m["DeleteRecordsRequest"](topics=(m["DeleteRecordsTopic"](
        name=TOPIC, partitions=(m["DeleteRecordsPartition"](partition_index=0, offset=0),)),), timeout=5000 * MS),
        version=2)
    return E(r.topics[0].partitions[0].error_code)


def create_partitions(c: ProtocolClient) -> E:
    m = cls(c, apis.CREATE_PARTITIONS, 3)
    r = c.request(apis.CREATE_PARTITIONS, m["CreatePartitionsRequest"](topics=(m["CreatePartitionsTopic"](
        name=TOPIC, count=2, assignments=None),), timeout=5000 * MS, validate_only=True), version=3)
    return E(r.results[0].error_code)


def init_producer_id(tid: str | None) -> Callable[[ProtocolClient], E]:
    def call(c: ProtocolClient) -> E:
        m = cls(c, apis.INIT_PRODUCER_ID, 4)
        return E(c.request(apis.INIT_PRODUCER_ID, m["InitProducerIdRequest"](
            transactional_id=tid, transaction_timeout=60000 * MS, producer_id=-1, producer_epoch=-1),
            version=4).error_code)
    return call


def add_partitions_to_txn(c: ProtocolClient) -> E:
    m = cls(c, apis.ADD_PARTITIONS_TO_TXN, 3)
    r = c.request(apis.ADD_PARTITIONS_TO_TXN, m["AddPartitionsToTxnRequest"](
        v3_and_below_transactional_id=TXN, v3_and_below_producer_id=999, v3_and_below_producer_epoch=0,
        v3_and_below_topics=(m["AddPartitionsToTxnTopic"](name=TOPIC, partitions=(0,)),)), version=3)
    return E(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


def add_offsets_to_txn(c: ProtocolClient) -> E:
    m = cls(c, apis.ADD_OFFSETS_TO_TXN, 3)
    return E(c.request(apis.ADD_OFFSETS_TO_TXN, m["AddOffsetsToTxnRequest"](
        transactional_id=TXN, producer_id=999, producer_epoch=0, group_id=GROUP), version=3).error_code)


def end_txn(c: ProtocolClient) -> E:
    m = cls(c, apis.END_TXN, 3)
    return E(c.request(apis.END_TXN, m["EndTxnRequest"](transactional_id=TXN, producer_id=999, producer_epoch=0,
                                                         committed=False), version=3).error_code)


def txn_offset_commit(c: ProtocolClient) -> E:
    m = cls(c, apis.TXN_OFFSET_COMMIT, 3)
    r = c.request(apis.TXN_OFFSET_COMMIT, m["TxnOffsetCommitRequest"](
        transactional_id=TXN, group_id=GROUP, producer_id=999, producer_epoch=0, generation_id=-1, member_id="",
        group_instance_id=None, topics=(m["TxnOffsetCommitRequestTopic"](name=TOPIC, partitions=(
            m["TxnOffsetCommitRequestPartition"](partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                                                 committed_metadata=""),)),)), version=3)
    return E(r.topics[0].partitions[0].error_code)


def write_txn_markers(c: ProtocolClient) -> E:
    m = cls(c, apis.WRITE_TXN_MARKERS, 1)
    r = c.request(apis.WRITE_TXN_MARKERS, m["WriteTxnMarkersRequest"](markers=(m["WritableTxnMarker"](
        producer_id=999, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
        topics=(m["WritableTxnMarkerTopic"](name=TOPIC, partition_indexes=(0,)),)),)), version=1)
    return E(r.markers[0].topics[0].partitions[0].error_code)


def describe_configs(rtype: int, name: str) -> Callable[[ProtocolClient], E]:
    def call(c: ProtocolClient) -> E:
        m = cls(c, apis.DESCRIBE_CONFIGS, 4)
        r = c.request(apis.DESCRIBE_CONFIGS, m["DescribeConfigsRequest"](resources=(m["DescribeConfigsResource"](
            resource_type=rtype, resource_name=name, configuration_keys=None),), include_synonyms=False,
            include_documentation=False), version=4)
        return E(r.results[0].error_code)
    return call


def alter_configs(incremental: bool) -> Callable[[ProtocolClient], E]:
    def call(c: ProtocolClient) -> E:
        if incremental:
            m = cls(c, apis.INCREMENTAL_ALTER_CONFIGS, 1)
            r = c.request(apis.INCREMENTAL_ALTER_CONFIGS, m["IncrementalAlterConfigsRequest"](resources=(
                m["AlterConfigsResource"](resource_type=2, resource_name=TOPIC, configs=(m["AlterableConfig"](
                    name="retention.ms", config_operation=0, value="100000"),)),), validate_only=True), version=1)
        else:
            m = cls(c, apis.ALTER_CONFIGS, 2)
            r = c.request(apis.ALTER_CONFIGS, m["AlterConfigsRequest"](resources=(m["AlterConfigsResource"](
                resource_type=2, resource_name=TOPIC, configs=(m["AlterableConfig"](name="retention.ms", value="100000"),)),),
                validate_only=True), version=2)
        return E(r.responses[0].error_code)
    return call


def whole(api: int, v: int, cls_name: str, **kw: Any) -> Callable[[ProtocolClient], E]:
    def call(c: ProtocolClient) -> E:
        return E(c.request(api, cls(c, api, v)[cls_name](**kw), version=v).error_code)
    return call


def alter_replica_log_dirs(c: ProtocolClient) -> E:
    """A move to a directory that is not the broker's: refused per partition
    (CLUSTER_AUTHORIZATION_FAILED) or, allowed, LOG_DIR_NOT_FOUND."""
    m = cls(c, apis.ALTER_REPLICA_LOG_DIRS, 2)
    r = c.request(apis.ALTER_REPLICA_LOG_DIRS, m["AlterReplicaLogDirsRequest"](dirs=(m["AlterReplicaLogDir"](
        path="/nowhere", topics=(m["AlterReplicaLogDirTopic"](name=TOPIC, partitions=(0,)),)),)), version=2)
    return E(r.results[0].partitions[0].error_code)


def alter_scram(c: ProtocolClient) -> E:
    """Deleting a credential nobody has: refused (CLUSTER_AUTHORIZATION_FAILED) or, allowed,
    RESOURCE_NOT_FOUND."""
    m = cls(c, apis.ALTER_USER_SCRAM_CREDENTIALS, 0)
    r = c.request(apis.ALTER_USER_SCRAM_CREDENTIALS, m["AlterUserScramCredentialsRequest"](
        deletions=(m["ScramCredentialDeletion"](name="nobody", mechanism=1),), upsertions=()), version=0)
    return E(r.results[0].error_code)


def describe_topic_partitions(c: ProtocolClient) -> E:
    m = cls(c, apis.DESCRIBE_TOPIC_PARTITIONS, 0)
    r = c.request(apis.DESCRIBE_TOPIC_PARTITIONS, m["DescribeTopicPartitionsRequest"](
        topics=(m["TopicRequest"](name=TOPIC),), response_partition_limit=100, cursor=None), version=0)
    return E(r.topics[0].error_code)


def offset_for_leader_epoch(c: ProtocolClient) -> E:
    m = cls(c, apis.OFFSET_FOR_LEADER_EPOCH, 4)
    r = c.request(apis.OFFSET_FOR_LEADER_EPOCH, m["OffsetForLeaderEpochRequest"](replica_id=-1, topics=(
        m["OffsetForLeaderTopic"](topic=TOPIC, partitions=(m["OffsetForLeaderPartition"](
            partition=0, current_leader_epoch=-1, leader_epoch=0),)),)), version=4)
    return E(r.topics[0].partitions[0].error_code)


def describe_producers(c: ProtocolClient) -> E:
    m = cls(c, apis.DESCRIBE_PRODUCERS, 0)
    r = c.request(apis.DESCRIBE_PRODUCERS, m["DescribeProducersRequest"](topics=(m["TopicRequest"](
        name=TOPIC, partition_indexes=(0,)),)), version=0)
    return E(r.topics[0].partitions[0].error_code)


def describe_transactions(c: ProtocolClient) -> E:
    m = cls(c, apis.DESCRIBE_TRANSACTIONS, 0)
    r = c.request(apis.DESCRIBE_TRANSACTIONS, m["DescribeTransactionsRequest"](transactional_ids=(TXN,)), version=0)
    return E(r.transaction_states[0].error_code)


def describe_acls(c: ProtocolClient) -> E:
    m = cls(c, apis.DESCRIBE_ACLS, 3)
    return E(c.request(apis.DESCRIBE_ACLS, m["DescribeAclsRequest"](
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
        host_filter=None, operation=1, permission_type=1), version=3).error_code)


def create_acls(c: ProtocolClient) -> E:
    m = cls(c, apis.CREATE_ACLS, 3)
    r = c.request(apis.CREATE_ACLS, m["CreateAclsRequest"](creations=(m["AclCreation"](
        resource_type=2, resource_name="acl-unused", resource_pattern_type=3, principal="User:nobody", host="*",
        operation=3, permission_type=3),)), version=3)
    return E(r.results[0].error_code)


def delete_acls(c: ProtocolClient) -> E:
    m = cls(c, apis.DELETE_ACLS, 3)
    r = c.request(apis.DELETE_ACLS, m["DeleteAclsRequest"](filters=(m["DeleteAclsFilter"](
        resource_type_filter=2, resource_name_filter="acl-unused", pattern_type_filter=3, principal_filter="User:nobody",
        host_filter=None, operation=1, permission_type=1),)), version=3)
    return E(r.filter_results[0].error_code)


@dataclass
class Case:
    api: str
    call: Callable[[ProtocolClient], E]
    denied: E
    key: list[tuple[R, str, Op]]  # the ACLs that decide (absent: refused; present: allowed)
    base: list[tuple[R, str, Op]] = field(default_factory=list)  # held during the case
    allowed: E | None = E.none  # the code once allowed (None: anything but ``denied``)


C = "kafka-cluster"
_T, _G, _X, _C = R.TOPIC, R.GROUP, R.TRANSACTIONAL_ID, R.CLUSTER
TG, TA, CA = E.topic_authorization_failed, E.group_authorization_failed, E.cluster_authorization_failed
XA = E.transactional_id_authorization_failed
D = "describe"
CASES = [
    Case("Fetch", produce_like_fetch, TG, [(_T, TOPIC, Op.READ)]),
    Case("ListOffsets", list_offsets, TG, [(_T, TOPIC, Op.DESCRIBE)]),
    Case("Metadata named", metadata_named, TG, [(_T, OTHER, Op.DESCRIBE)]),
    Case("Metadata all (hidden)", metadata_all_hides, TG, [(_T, OTHER, Op.READ)]),
    Case("Metadata auto-create", metadata_auto_create, TG, [(_T, "acl-auto", Op.CREATE)],
         base=[(_T, "acl-auto", Op.DESCRIBE)]),
    Case("OffsetCommit group", offset_commit, TA, [(_G, GROUP, Op.READ)], base=[(_T, TOPIC, Op.READ)]),
    Case("OffsetCommit topic", offset_commit, TG, [(_T, TOPIC, Op.READ)], base=[(_G, GROUP, Op.READ)]),
    Case("OffsetFetch group", offset_fetch, TA, [(_G, GROUP, Op.DESCRIBE)], base=[(_T, TOPIC, Op.DESCRIBE)]),
    Case("OffsetFetch topic", offset_fetch, TG, [(_T, TOPIC, Op.DESCRIBE)], base=[(_G, GROUP, Op.READ)]),
    Case("FindCoordinator group", find_coordinator(0, GROUP), TA, [(_G, GROUP, Op.DESCRIBE)]),
    Case("FindCoordinator txn", find_coordinator(1, TXN), XA, [(_X, TXN, Op.DESCRIBE)]),
    Case("JoinGroup", join_group, TA, [(_G, GROUP, Op.READ)], allowed=None),
    Case("Heartbeat", heartbeat, TA, [(_G, GROUP, Op.READ)], allowed=None),
    Case("SyncGroup", sync_group, TA, [(_G, GROUP, Op.READ)], allowed=None),
    Case("ConsumerGroupHeartbeat", consumer_group_heartbeat, TA, [(_G, GROUP, Op.READ)], allowed=None),
    Case("ConsumerGroupDescribe", consumer_group_describe, TA, [(_G, GROUP, Op.DESCRIBE)], allowed=None),
    Case("LeaveGroup", leave_group, TA, [(_G, GROUP, Op.READ)], allowed=None),
    Case("ShareGroupHeartbeat", share_group_heartbeat, TA, [(_G, SHARE_GROUP, Op.READ)], allowed=None),
    Case("ShareGroupDescribe", share_group_describe, TA, [(_G, SHARE_GROUP, Op.DESCRIBE)], allowed=None),
    Case("ShareFetch group", share_fetch(False), TA, [(_G, SHARE_GROUP, Op.READ)], base=[(_T, TOPIC, Op.READ)],
         allowed=None),
    Case("ShareFetch topic", share_fetch(True), TG, [(_T, TOPIC, Op.READ)], base=[(_G, SHARE_GROUP, Op.READ)],
         allowed=E.none),
    Case("ShareAcknowledge", share_acknowledge, TA, [(_G, SHARE_GROUP, Op.READ)], allowed=None),
    Case("DescribeShareGroupOffsets", describe_share_group_offsets, TA, [(_G, SHARE_GROUP, Op.DESCRIBE)], allowed=None),
    Case("AlterShareGroupOffsets", alter_share_group_offsets, TA, [(_G, "acl-share-nogroup", Op.READ)],
         allowed=None),
    Case("DeleteShareGroupOffsets", delete_share_group_offsets, TA, [(_G, "acl-share-nogroup", Op.DELETE)],
         allowed=None),
    Case("ListGroups (filtered)", list_groups_filtered, TA, [(_G, "acl-listed", Op.DESCRIBE)]),
    Case("DescribeGroups", describe_groups, TA, [(_G, GROUP, Op.DESCRIBE)]),
    Case("DeleteGroups", delete_groups, TA, [(_G, "acl-nogroup", Op.DELETE)], allowed=None),
    Case("OffsetDelete", offset_delete, TA, [(_G, "acl-nogroup", Op.DELETE)], base=[(_T, TOPIC, Op.READ)],
         allowed=None),
    Case("CreateTopics", create_topics, TG, [(_T, "acl-new", Op.CREATE)]),
    Case("CreateTopics (cluster)", create_topics, TG, [(_C, C, Op.CREATE)]),
    Case("DeleteTopics", delete_topics, TG, [(_T, "acl-nonexistent", Op.DELETE)], allowed=E.unknown_topic_or_partition),
    Case("DeleteRecords", delete_records, TG, [(_T, TOPIC, Op.DELETE)]),
    Case("CreatePartitions", create_partitions, TG, [(_T, TOPIC, Op.ALTER)]),
    Case("InitProducerId transactional", init_producer_id(TXN), XA, [(_X, TXN, Op.WRITE)]),
    Case("InitProducerId idempotent (WRITE on a topic)", init_producer_id(None), CA, [(_T, OTHER, Op.WRITE)]),
    Case("InitProducerId idempotent (IDEMPOTENT_WRITE)", init_producer_id(None), CA, [(_C, C, Op.IDEMPOTENT_WRITE)]),
    Case("AddPartitionsToTxn txn", add_partitions_to_txn, XA, [(_X, TXN, Op.WRITE)], base=[(_T, TOPIC, Op.WRITE)],
         allowed=None),
    Case("AddPartitionsToTxn topic", add_partitions_to_txn, TG, [(_T, TOPIC, Op.WRITE)], base=[(_X, TXN, Op.WRITE)],
         allowed=None),
    Case("AddOffsetsToTxn txn", add_offsets_to_txn, XA, [(_X, TXN, Op.WRITE)], base=[(_G, GROUP, Op.READ)], allowed=None),
    Case("AddOffsetsToTxn group", add_offsets_to_txn, TA, [(_G, GROUP, Op.READ)], base=[(_X, TXN, Op.WRITE)],
         allowed=None),
    Case("EndTxn", end_txn, XA, [(_X, TXN, Op.WRITE)], allowed=None),
    Case("TxnOffsetCommit txn", txn_offset_commit, XA, [(_X, TXN, Op.WRITE)],
         base=[(_G, GROUP, Op.READ), (_T, TOPIC, Op.READ)], allowed=None),
    Case("TxnOffsetCommit group", txn_offset_commit, TA, [(_G, GROUP, Op.READ)],
         base=[(_X, TXN, Op.WRITE), (_T, TOPIC, Op.READ)], allowed=None),
    Case("WriteTxnMarkers", write_txn_markers, CA, [(_C, C, Op.CLUSTER_ACTION)]),
    Case("DescribeConfigs topic", describe_configs(2, TOPIC), TG, [(_T, TOPIC, Op.DESCRIBE_CONFIGS)]),
    Case("DescribeConfigs broker", describe_configs(4, "1"), CA, [(_C, C, Op.ALTER_CONFIGS)]),
    Case("AlterConfigs", alter_configs(False), TG, [(_T, TOPIC, Op.ALTER_CONFIGS)]),
    Case("IncrementalAlterConfigs", alter_configs(True), TG, [(_T, TOPIC, Op.ALTER_CONFIGS)]),
    Case("DescribeUserScramCredentials", whole(apis.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                                               "DescribeUserScramCredentialsRequest", users=None), CA, [(_C, C, Op.DESCRIBE)]),
    Case("AlterUserScramCredentials", alter_scram, CA, [(_C, C, Op.ALTER)], allowed=E.resource_not_found),
    Case("DescribeLogDirs", whole(apis.DESCRIBE_LOG_DIRS, 4, "DescribeLogDirsRequest", topics=None), CA,
         [(_C, C, Op.DESCRIBE)]),
    Case("AlterReplicaLogDirs", alter_replica_log_dirs, CA, [(_C, C, Op.ALTER)], allowed=E.log_dir_not_found),
    Case("ListConfigResources", whole(apis.LIST_CONFIG_RESOURCES, 1, "ListConfigResourcesRequest", resource_types=()),
         CA, [(_C, C, Op.DESCRIBE_CONFIGS)]),
    Case("ElectLeaders", whole(apis.ELECT_LEADERS, 2, "ElectLeadersRequest", election_type=0, topic_partitions=None,
                               timeout=5000 * MS), CA, [(_C, C, Op.ALTER)]),
    Case("ListPartitionReassignments", whole(apis.LIST_PARTITION_REASSIGNMENTS, 0, "ListPartitionReassignmentsRequest",
                                             timeout=5000 * MS, topics=None), CA, [(_C, C, Op.DESCRIBE)]),
    Case("AlterPartitionReassignments", whole(apis.ALTER_PARTITION_REASSIGNMENTS, 0,
                                              "AlterPartitionReassignmentsRequest", timeout=5000 * MS, topics=()),
         CA, [(_C, C, Op.ALTER)]),
    Case("DescribeQuorum", whole(apis.DESCRIBE_QUORUM, 0, "DescribeQuorumRequest", topics=()), CA,
         [(_C, C, Op.DESCRIBE)]),
    Case("DescribeTopicPartitions", describe_topic_partitions, TG, [(_T, TOPIC, Op.DESCRIBE)]),
    Case("OffsetForLeaderEpoch", offset_for_leader_epoch, TG, [(_T, TOPIC, Op.DESCRIBE)]),
    Case("DescribeProducers", describe_producers, TG, [(_T, TOPIC, Op.READ)]),
    Case("DescribeTransactions", describe_transactions, XA, [(_X, TXN, Op.DESCRIBE)], allowed=None),
    Case("DescribeAcls", describe_acls, CA, [(_C, C, Op.DESCRIBE)]),
    Case("CreateAcls", create_acls, CA, [(_C, C, Op.ALTER)]),
    Case("DeleteAcls", delete_acls, CA, [(_C, C, Op.ALTER)]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.api for c in CASES])
def test_refused_then_allowed(env: tuple[Any, ...], case: Case) -> None:
    _b, grants, subject, _admin = env
    grants.revoke_all()
    try:
        grants.grant(*(grants.binding(*x) for x in case.base))
        assert case.call(subject) == case.denied, f"{case.api} without {case.key}"
        grants.grant(*(grants.binding(*x) for x in case.key))
        got = case.call(subject)  # the same connection: the change applies to its next request
        if case.allowed is None:
            assert got != case.denied, f"{case.api} with {case.key}: {got.name}"
        else:
            assert got == case.allowed, f"{case.api} with {case.key}: {got.name}"
    finally:
        grants.revoke_all()


def test_deny_wins_and_prefixed(env: tuple[Any, ...]) -> None:
    _b, grants, subject, _admin = env
    grants.revoke_all()
    try:
        grants.grant(grants.binding(_T, "acl-", Op.READ, pattern=h.PatternType.PREFIXED))
        assert produce_like_fetch(subject) == E.none
        grants.grant(grants.binding(_T, TOPIC, Op.READ, deny=True))
        assert produce_like_fetch(subject) == TG
        assert list_offsets(subject) == E.none  # a DENY of READ does not deny DESCRIBE
        grants.grant(grants.binding(_T, TOPIC, Op.ALL, deny=True))
        assert list_offsets(subject) == TG
    finally:
        grants.revoke_all()


def test_every_routed_api_is_in_the_matrix() -> None:
    """Each API the broker routes appears in CASES (ApiVersions needs nothing)."""
    from oncelog.broker.routes import ROUTES

    import re

    names = {re.sub(r"(?<!^)(?=[A-Z])", "_", c.api.split(" ")[0]).lower() for c in CASES} | {
        "api_versions", "produce", "list_transactions", "describe_cluster",
        "sasl_handshake", "sasl_authenticate"}  # the SASL APIs need nothing (served before authentication)
    missing = {apis.api_name(k) for k in ROUTES} - names
    assert not missing, missing  # Produce, ListTransactions, DescribeCluster: test_acl_clients.py
