"""ShareGroupHeartbeat (76): membership of a share group (KIP-932, issue 30).

A member joins with epoch 0 and the member id it generated, heartbeats with its epoch, leaves
with -1 (its acquired records are released). The answer carries the member's epoch, the
heartbeat interval (``group.share.heartbeat.interval.ms``) and, when it changed, its assignment
by topic id (coordinator/share/group.py). A group id a classic or consumer group has is
GROUP_ID_NOT_FOUND with a message, as Kafka. Errors: INVALID_REQUEST,
UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, GROUP_MAX_SIZE_REACHED (the group is full, or the
broker coordinates ``group.share.max.groups`` groups with members), with a message. ACLs, as
Kafka's ``handleShareGroupHeartbeat``: READ on the group, and DESCRIBE on every subscribed topic
name (TOPIC_AUTHORIZATION_FAILED for the heartbeat otherwise: no topic a member may not describe
is subscribed, assigned or shown).
"""

from __future__ import annotations

import datetime
from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl, _share
from oncelog.broker.handlers._group import client_host
from oncelog.coordinator.group.types import validate_group_id
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, GroupIdNotFound, InvalidRequest, KafkaError, TopicAuthorizationFailed
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.SHARE_GROUP_HEARTBEAT
_MS = datetime.timedelta(milliseconds=1)


def _refuse_other_kinds(broker: BrokerContext, group_id: str) -> None:
    """A classic or consumer group of that id exists: GROUP_ID_NOT_FOUND (Kafka's answer)."""
    rows, _ = broker.groups.list_groups()
    for row in rows:
        if row[0] == group_id:
            raise GroupIdNotFound(f"Group {group_id} is not a share group (it is a {row[3]} group).")


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    try:
        if not req.group_id:
            raise InvalidRequest("GroupId can't be empty.")
        validate_group_id(req.group_id)
        g = _acl.gate(broker, client, API_KEY)
        _acl.check(g, "group", req.group_id)
        if g is not None and req.subscribed_topic_names and any(
                not g.allowed("topic", name) for name in set(req.subscribed_topic_names)):
            raise TopicAuthorizationFailed("The member may not describe every topic it subscribes to.")
        broker.groups.check_coordinator(req.group_id)  # cluster mode: the members are kept at the coordinator
        if req.member_epoch == 0:
            _refuse_other_kinds(broker, req.group_id)
        subscribed = None if req.subscribed_topic_names is None else tuple(req.subscribed_topic_names)
        answer = await _share.service(broker).heartbeat(
            req.group_id, req.member_id, req.member_epoch, req.rack_id, subscribed,
            request.client_id or "", client_host(client))
    except KafkaError as exc:
        return m.ShareGroupHeartbeatResponse(error_code=exc.code, error_message=str(exc) or None, member_id=None,
                                             member_epoch=-1, heartbeat_interval=0 * _MS, assignment=None)
    assignment = None
    if answer.assignment is not None:
        assignment = m.Assignment(topic_partitions=tuple(
            m.TopicPartitions(topic_id=tid, partitions=tuple(sorted(ps)))
            for tid, ps in sorted(answer.assignment.items(), key=lambda kv: str(kv[0]))))
    return m.ShareGroupHeartbeatResponse(
        error_code=ErrorCode.none, error_message=None, member_id=answer.member_id, member_epoch=answer.member_epoch,
        heartbeat_interval=_share.service(broker).groups.heartbeat_interval_ms * _MS, assignment=assignment)
