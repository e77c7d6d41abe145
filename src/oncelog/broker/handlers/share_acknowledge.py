"""ShareAcknowledge (79): a share-group member's acknowledgements (KIP-932, issue 30): ACCEPT,
RELEASE, REJECT, GAP (and RENEW, v2) per record range, for records it holds. The request
continues the member's share session (epoch N > 0) or closes it (-1: the member's records still
acquired are then released); epoch 0 is INVALID_REQUEST. Applied per partition all or nothing,
durable before the answer (broker/coordinators/share_coordinator.py); a record the member does not hold
(lock expired, another member's, acknowledged already) is INVALID_RECORD_STATE for its partition.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl, _share
from oncelog.broker.handlers.share_fetch import leader, topic_denied
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, InvalidRequest, KafkaError
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.SHARE_ACKNOWLEDGE
_MS = datetime.timedelta(milliseconds=1)


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    svc = _share.service(broker)
    g = _acl.gate(broker, client, API_KEY)
    try:
        if not req.group_id or not req.member_id:
            raise InvalidRequest("GroupId and MemberId can't be empty.")
        if req.share_session_epoch == 0:
            raise InvalidRequest("ShareAcknowledge cannot open a share session (epoch 0)")
        _acl.check(g, "group", req.group_id)
        acks = _share.acks_of(req.topics, bool(getattr(req, "is_renew_ack", False)))
        await svc.ready()
        session = svc.sessions.open(req.group_id, req.member_id, req.share_session_epoch, svc.is_member,
                                    now=broker.clock.now_ms())
    except KafkaError as exc:
        return m.ShareAcknowledgeResponse(error_code=exc.code, error_message=str(exc) or None,
                                          acquisition_lock_timeout=0 * _MS, responses=(), node_endpoints=())
    denied = topic_denied(broker, g, {tid for tid, _ in acks})
    results: dict[tuple[uuid.UUID, int], KafkaError | None] = await svc.acknowledge(
        req.group_id, req.member_id, {k: v for k, v in acks.items() if k[0] not in denied})
    if session is None:
        await svc.close_session(req.group_id, req.member_id)
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for tid, p in acks:
        err = denied.get(tid) or results.get((tid, p))
        by_topic.setdefault(tid, []).append(m.PartitionData(
            partition_index=p, error_code=err.code if err else ErrorCode.none, error_message=str(err) if err else None,
            current_leader=leader(broker, m, tid, p)))
    lock_ms = int(svc.config(req.group_id, "share.record.lock.duration.ms") or svc.lock_ms)
    return m.ShareAcknowledgeResponse(
        error_code=ErrorCode.none, error_message=None, acquisition_lock_timeout=lock_ms * _MS,
        responses=tuple(m.ShareAcknowledgeTopicResponse(topic_id=tid, partitions=tuple(ps))
                        for tid, ps in by_topic.items()),
        node_endpoints=())
