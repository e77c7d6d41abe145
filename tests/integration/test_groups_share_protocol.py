"""Share-group requests crafted by hand (KIP-932, issue 30; R22): each bad request gets its Kafka
error code and the broker stays up: share-session epochs, acknowledgements on a request that
opens a session, a session opened by a client that is no member, acknowledgements of records
the member does not hold (another member's, twice,
far outside the records in flight), unknown topic ids (answered, never kept in the session),
a share group id held by a consumer group, an empty member id.
"""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

import pytest

from kafka_clients import create_topic, produce
from oncelog.client import ProtocolClient
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import make
from test_groups_share import FAST, set_group_configs

pytestmark = pytest.mark.integration
MS = datetime.timedelta(milliseconds=1)


def _topic_id(c: ProtocolClient, topic: str) -> uuid.UUID:
    v = c.version_for(apis.METADATA)
    m = c.classes(apis.METADATA, v)
    res = c.request(apis.METADATA, make(m["MetadataRequest"], topics=(make(m["MetadataRequestTopic"], name=topic,
                                                                             topic_id=uuid.UUID(int=0)),),
                                        allow_auto_topic_creation=False, include_topic_authorized_operations=False),
                    version=v)
    return res.topics[0].topic_id


def _heartbeat(c: ProtocolClient, group: str, member: str, epoch: int, topics: tuple[str, ...] | None) -> Any:
    m = c.classes(apis.SHARE_GROUP_HEARTBEAT, 1)
    return c.request(apis.SHARE_GROUP_HEARTBEAT, make(m["ShareGroupHeartbeatRequest"], group_id=group, member_id=member,
                                                      member_epoch=epoch, rack_id=None, subscribed_topic_names=topics),
                     version=1)


def _fetch(c: ProtocolClient, member: str, epoch: int, tid: uuid.UUID, acks: tuple = (), *, partition: int = 0,
           max_records: int = 100, wait_ms: int = 0) -> Any:
    m = c.classes(apis.SHARE_FETCH, 1)
    batches = tuple(make(m["AcknowledgementBatch"], first_offset=f, last_offset=last, acknowledge_types=types)
                    for f, last, types in acks)
    topic = make(m["FetchTopic"], topic_id=tid, partitions=(
        make(m["FetchPartition"], partition_index=partition, acknowledgement_batches=batches),))
    return c.request(apis.SHARE_FETCH, make(m["ShareFetchRequest"], group_id="sgp", member_id=member,
                                            share_session_epoch=epoch, max_wait=wait_ms * MS, min_bytes=1,
                                            max_bytes=1 << 20, max_records=max_records, batch_size=max_records,
                                            topics=(topic,), forgotten_topics_data=()), version=1)


def _part(res: Any) -> Any:
    assert res.error_code == ErrorCode.none, res
    return res.responses[0].partitions[0]


def test_hostile_share_requests_get_their_error_codes(broker_factory) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import Consumer

    b = broker_factory("share-hostile", FAST)
    create_topic("confluent", b.bootstrap, "qh", 1)
    produce("confluent", b.bootstrap, "qh", [(0, None, b"v%d" % i) for i in range(20)])
    set_group_configs(b.bootstrap, "sgp", {"share.auto.offset.reset": "earliest"})
    with ProtocolClient(b.bootstrap) as c:
        tid = _topic_id(c, "qh")
        assert _heartbeat(c, "sgp", "", 0, ("qh",)).error_code == ErrorCode.invalid_request
        hb = _heartbeat(c, "sgp", "m1", 0, ("qh",))
        assert hb.error_code == ErrorCode.none and hb.member_epoch >= 1
        assert hb.assignment.topic_partitions == ()  # as Kafka: assigned once its share state is initialized
        hb = _heartbeat(c, "sgp", "m1", hb.member_epoch, None)
        assert [t.topic_id for t in hb.assignment.topic_partitions] == [tid]
        assert _heartbeat(c, "sgp", "m1", hb.member_epoch + 5, None).error_code == ErrorCode.fenced_member_epoch
        assert _heartbeat(c, "sgp", "ghost", 3, None).error_code == ErrorCode.unknown_member_id

        # sessions: N without one; acknowledgements when opening; then the epochs in order
        assert _fetch(c, "m1", 1, tid).error_code == ErrorCode.share_session_not_found
        assert _fetch(c, "m1", 0, tid, ((0, 0, (1,)),)).error_code == ErrorCode.invalid_request
        first = _part(_fetch(c, "m1", 0, tid, max_records=5))
        acquired = [(r.first_offset, r.last_offset, r.delivery_count) for r in first.acquired_records]
        assert acquired and acquired[0][0] == 0 and all(r[2] == 1 for r in acquired)
        assert _fetch(c, "m1", 5, tid).error_code == ErrorCode.invalid_share_session_epoch
        # only a member opens a session; another member may not acknowledge m1's records
        assert _fetch(c, "stranger", 0, tid).error_code == ErrorCode.unknown_member_id
        assert _heartbeat(c, "sgp", "m2", 0, ("qh",)).error_code == ErrorCode.none
        _part(_fetch(c, "m2", 0, tid, max_records=0))
        p = _part(_fetch(c, "m2", 1, tid, ((0, 0, (1,)),), max_records=0))
        assert p.acknowledge_error_code == ErrorCode.invalid_record_state
        # far outside what is in flight: refused at once, nothing iterated
        started = time.monotonic()
        p = _part(_fetch(c, "m1", 1, tid, ((0, 2**62, (1,)),), max_records=0))
        assert p.acknowledge_error_code == ErrorCode.invalid_record_state and time.monotonic() - started < 5
        p = _part(_fetch(c, "m1", 2, tid, ((0, 0, (9,)),), max_records=0))  # no such acknowledge type
        assert p.acknowledge_error_code == ErrorCode.invalid_request
        p = _part(_fetch(c, "m1", 3, tid, ((0, 0, (1,)),), max_records=0))
        assert p.acknowledge_error_code == ErrorCode.none
        p = _part(_fetch(c, "m1", 4, tid, ((0, 0, (1,)),), max_records=0))  # twice
        assert p.acknowledge_error_code == ErrorCode.invalid_record_state
        # an unknown topic id or partition: answered, not kept in the session
        p = _part(_fetch(c, "m1", 5, uuid.uuid4()))
        assert p.error_code == ErrorCode.unknown_topic_id
        p = _part(_fetch(c, "m1", 6, tid, partition=7))
        assert p.error_code == ErrorCode.unknown_topic_or_partition
        # acknowledgement on ShareAcknowledge with epoch 0: refused
        m = c.classes(apis.SHARE_ACKNOWLEDGE, 1)
        ack = c.request(apis.SHARE_ACKNOWLEDGE, make(m["ShareAcknowledgeRequest"], group_id="sgp", member_id="m1",
                                                     share_session_epoch=0, topics=()), version=1)
        assert ack.error_code == ErrorCode.invalid_request
    # a consumer group's id is not a share group's
    cons = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "kip848-owned", "group.protocol": "consumer"})
    cons.subscribe(["qh"])
    try:
        deadline = time.monotonic() + 30
        while not cons.assignment() and time.monotonic() < deadline:
            cons.poll(0.2)
        assert cons.assignment()
        with ProtocolClient(b.bootstrap) as c:
            assert _heartbeat(c, "kip848-owned", "s1", 0, ("qh",)).error_code == ErrorCode.group_id_not_found
    finally:
        cons.close()
    # and a share group's id is not a consumer group's nor a classic group's
    with ProtocolClient(b.bootstrap) as c:
        m = c.classes(apis.CONSUMER_GROUP_HEARTBEAT, 1)
        res = c.request(apis.CONSUMER_GROUP_HEARTBEAT, make(
            m["ConsumerGroupHeartbeatRequest"], group_id="sgp", member_id="c1", member_epoch=0, instance_id=None,
            rack_id=None, rebalance_timeout=30000 * MS, subscribed_topic_names=("qh",), server_assignor=None,
            topic_partitions=()), version=1)
        assert res.error_code == ErrorCode.group_id_not_found, res
        m = c.classes(apis.JOIN_GROUP, 5)
        res = c.request(apis.JOIN_GROUP, make(
            m["JoinGroupRequest"], group_id="sgp", session_timeout=10000 * MS, rebalance_timeout=10000 * MS,
            member_id="", group_instance_id=None, protocol_type="consumer",
            protocols=(m["JoinGroupRequestProtocol"](name="range", metadata=b""),)), version=5)
        assert res.error_code == ErrorCode.inconsistent_group_protocol, res
    assert b.proc.poll() is None  # the broker is still up


def test_share_fetch_v2_record_limit_and_lock_renewal(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """ShareFetch v2 (KIP-1222): acquire mode 1 caps the records at max_records inside one batch;
    a renewal (is_renew_ack, acknowledge type 4) keeps a lock past its first deadline; type 4
    without is_renew_ack is INVALID_REQUEST."""
    b = broker_factory("share-v2", FAST)
    create_topic("confluent", b.bootstrap, "qv2", 1)
    produce("confluent", b.bootstrap, "qv2", [(0, None, b"v%d" % i) for i in range(20)], extra={"linger.ms": 200})
    set_group_configs(b.bootstrap, "sgv2", {"share.auto.offset.reset": "earliest",
                                            "share.record.lock.duration.ms": "2000"})
    with ProtocolClient(b.bootstrap) as c:
        tid = _topic_id(c, "qv2")
        m = c.classes(apis.SHARE_FETCH, 2)

        def fetch(epoch: int, *, acks: tuple = (), renew: bool = False, max_records: int = 3) -> Any:
            batches = tuple(make(m["AcknowledgementBatch"], first_offset=f, last_offset=last, acknowledge_types=t)
                            for f, last, t in acks)
            topic = make(m["FetchTopic"], topic_id=tid, partitions=(
                make(m["FetchPartition"], partition_index=0, acknowledgement_batches=batches),))
            return c.request(apis.SHARE_FETCH, make(
                m["ShareFetchRequest"], group_id="sgv2", member_id="v2", share_session_epoch=epoch, max_wait=0 * MS,
                min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=max_records,
                share_acquire_mode=1, is_renew_ack=renew, topics=(topic,), forgotten_topics_data=()), version=2)

        hb = c.classes(apis.SHARE_GROUP_HEARTBEAT, 1)
        assert c.request(apis.SHARE_GROUP_HEARTBEAT, make(hb["ShareGroupHeartbeatRequest"], group_id="sgv2",
                                                          member_id="v2", member_epoch=0, rack_id=None,
                                                          subscribed_topic_names=("qv2",)),
                         version=1).error_code == ErrorCode.none
        first = _part(fetch(0))
        got = [(r.first_offset, r.last_offset) for r in first.acquired_records]
        assert got == [(0, 2)], got  # 20 records in one batch: only 3 taken
        assert fetch(1, acks=((0, 0, (4,)),)).error_code == ErrorCode.invalid_request  # renew needs is_renew_ack
        time.sleep(1.2)
        p = _part(fetch(1, acks=((0, 2, (4,)),), renew=True))  # renewed at ~1.2 s: lock until ~3.2 s
        assert p.acknowledge_error_code == ErrorCode.none and not p.acquired_records  # a renewal fetches nothing
        time.sleep(1.3)  # ~2.5 s: past the first deadline, within the renewed one
        p = _part(fetch(2, acks=((0, 2, (1,)),), max_records=0))
        assert p.acknowledge_error_code == ErrorCode.none  # still ours: the renewal held the lock
