"""ShareFetch (78): records for a share-group member, acquired for it (KIP-932, issue 30).

The request names the member's share session (epoch 0 opens it, N > 0 continues it, -1 closes
it: coordinator/share/group.py ``Sessions``), the partitions it adds to the session, those it
forgets, and acknowledgement batches for records it holds (applied first, durable before the
answer: broker/coordinators/share_coordinator.py). Then records are acquired from the session's partitions,
up to ``max_records`` (whole batches) and ``max_bytes``; the answer carries the log batches that
hold them and the acquired ranges with their delivery counts; a record outside those ranges
(another member's, an aborted transaction's, a control record) is not the member's to deliver.
When nothing could be acquired the request waits up to ``max_wait`` (at most
``fetch.max.wait.ms``) for new records or released ones. v2 (KIP-1222): ``is_renew_ack`` asks
only to renew locks (acknowledge type 4; nothing is fetched), ``share_acquire_mode`` 1 caps the
records acquired at ``max_records`` (a batch is split).

Only a member of the group opens a session (epoch 0): one this broker has, or in cluster mode
one the group's coordinator confirms (UNKNOWN_MEMBER_ID otherwise); the session ends with the
connection that opened it, or after a session timeout unused.

ACLs, as Kafka's ``handleShareFetchRequest``: READ on the group, then READ on the topic of every
partition of the session and of the request, at each request: a partition whose topic the
principal may no longer read stays in the session but is neither fetched nor acknowledged, and
answers TOPIC_AUTHORIZATION_FAILED in every response until the ACL allows it again.

Errors: top level INVALID_REQUEST (no group or member id; acknowledgements on epoch 0),
UNKNOWN_MEMBER_ID, SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH,
SHARE_SESSION_LIMIT_REACHED, GROUP_AUTHORIZATION_FAILED, COORDINATOR_NOT_AVAILABLE (cluster mode:
the group's coordinator cannot confirm the member now); per partition UNKNOWN_TOPIC_ID,
NOT_LEADER_OR_FOLLOWER, TOPIC_AUTHORIZATION_FAILED, and the acknowledgements'
INVALID_RECORD_STATE / INVALID_REQUEST in ``acknowledge_error_code``.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl, _share
from oncelog.protocol import apis
from oncelog.protocol.errors import (
    ErrorCode,
    InvalidRequest,
    KafkaError,
    TopicAuthorizationFailed,
    UnknownTopicId,
    UnknownTopicOrPartition,
)
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.SHARE_FETCH
RECORD_LIMIT = 1  # v2 share_acquire_mode: at most max_records (0: batch optimized, whole batches)
_MS = datetime.timedelta(milliseconds=1)


def topic_denied(broker: BrokerContext, g: _acl.Gate | None, topic_ids: set[uuid.UUID]) -> dict[uuid.UUID, KafkaError]:
    """Topic id -> TOPIC_AUTHORIZATION_FAILED for the topics the principal may not READ."""
    out: dict[uuid.UUID, KafkaError] = {}
    if g is None:
        return out
    for tid in topic_ids:
        meta = broker.replicas.topic_by_id(tid)
        if meta is not None and _acl.denied(g, "topic", meta.name) is not None:
            out[tid] = TopicAuthorizationFailed(f"{g.principal} may not READ topic {meta.name}")
    return out


def leader(broker: BrokerContext, m: Builder, tid: uuid.UUID, p: int) -> Any:
    """The partition's leader (this broker: share groups are served embedded) and its epoch;
    -1, -1 for a partition that does not exist."""
    meta = broker.replicas.topic_by_id(tid)
    if meta is not None and 0 <= p < meta.num_partitions:
        try:
            return m.LeaderIdAndEpoch(leader_id=broker.node_id,
                                      leader_epoch=broker.replicas.partition(meta.name, p).log.leader_epoch)
        except KafkaError:
            pass
    return m.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)


def _missing(broker: BrokerContext, tid: uuid.UUID, p: int) -> KafkaError | None:
    meta = broker.replicas.topic_by_id(tid)
    if meta is None:
        return UnknownTopicId(f"topic id {tid} is unknown")
    if not 0 <= p < meta.num_partitions:
        return UnknownTopicOrPartition(f"{meta.name}-{p} does not exist")
    return None


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    svc = _share.service(broker)
    g = _acl.gate(broker, client, API_KEY)

    def failed(exc: KafkaError) -> Any:
        return m.ShareFetchResponse(error_code=exc.code, error_message=str(exc) or None,
                                    acquisition_lock_timeout=0 * _MS, responses=(), node_endpoints=())

    try:
        if not req.group_id or not req.member_id:
            raise InvalidRequest("GroupId and MemberId can't be empty.")
        _acl.check(g, "group", req.group_id)
        renew = bool(getattr(req, "is_renew_ack", False))
        acks = _share.acks_of(req.topics, renew)
        if req.share_session_epoch == 0 and acks:
            raise InvalidRequest("acknowledgements cannot be sent on a request that opens a share session (epoch 0)")
        await svc.ready()
        if req.share_session_epoch == 0:
            await svc.check_member(req.group_id, req.member_id)
        session = svc.sessions.open(req.group_id, req.member_id, req.share_session_epoch, svc.is_member,
                                    now=broker.clock.now_ms(), connection=client.closed)
        if req.share_session_epoch == 0:  # what an administrator changed meanwhile is read again
            svc.session_connection(client.closed)
            await svc.session_opened(req.group_id)
    except KafkaError as exc:
        return failed(exc)
    named = [(t.topic_id, p.partition_index) for t in req.topics for p in t.partitions]
    missing = {k: e for k in named if (e := _missing(broker, *k)) is not None}
    if session is not None:  # only partitions that exist: a session's size is bounded by the topics
        session.partitions.update(k for k in named if k not in missing)
        for t in req.forgotten_topics_data:
            session.partitions.difference_update((t.topic_id, p) for p in t.partitions)
    in_session = sorted(session.partitions, key=str) if session is not None else []
    # READ on the topics of the whole session, not only of the partitions this request names
    denied = topic_denied(broker, g, {tid for tid, _ in named} | {tid for tid, _ in in_session} | {tid for tid, _ in acks})
    ack_results = await svc.acknowledge(req.group_id, req.member_id,
                                        {k: v for k, v in acks.items() if k[0] not in denied})
    fetched: dict[Any, Any] = {}
    allowed = [k for k in in_session if k[0] not in denied]
    if session is None:
        await svc.close_session(req.group_id, req.member_id)
    elif req.max_records > 0 and allowed and not renew:  # a renewal fetches nothing (v2)
        fetched = await svc.fetch(req.group_id, req.member_id, allowed, req.max_records,
                                  min(req.max_bytes, broker.config.fetch_max_bytes),  # as Fetch: the broker's cap
                                  int(req.max_wait.total_seconds() * 1000), client.closed,
                                  record_limit=getattr(req, "share_acquire_mode", 0) == RECORD_LIMIT)
    keys = list(dict.fromkeys([*named, *(k for k, r in fetched.items() if r.acquired or r.error), *ack_results,
                               *(k for k in in_session if k[0] in denied)]))
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for tid, p in keys:
        res = fetched.get((tid, p))
        err = denied.get(tid) or missing.get((tid, p)) or (res.error if res is not None else None)
        ack_err = ack_results.get((tid, p))
        if tid in denied and (tid, p) in acks:
            ack_err = denied[tid]
        by_topic.setdefault(tid, []).append(m.PartitionData(
            partition_index=p, error_code=err.code if err else ErrorCode.none, error_message=str(err) if err else None,
            acknowledge_error_code=ack_err.code if ack_err else ErrorCode.none,
            acknowledge_error_message=str(ack_err) if ack_err else None,
            current_leader=leader(broker, m, tid, p),
            records=b"".join(res.data) if res is not None and res.acquired else b"",
            acquired_records=tuple(m.AcquiredRecords(first_offset=r.first_offset, last_offset=r.last_offset,
                                                     delivery_count=r.delivery_count)
                                   for r in (res.acquired if res is not None else ())),
        ))
    lock_ms = int(svc.config(req.group_id, "share.record.lock.duration.ms") or svc.lock_ms)
    return m.ShareFetchResponse(
        error_code=ErrorCode.none, error_message=None, acquisition_lock_timeout=lock_ms * _MS,
        responses=tuple(m.ShareFetchableTopicResponse(topic_id=tid, partitions=tuple(ps)) for tid, ps in by_topic.items()),
        node_endpoints=())
