"""DeleteShareGroupOffsets (92): a share group (KIP-932, issue 30) forgets its state on whole
topics: the next fetch starts per ``share.auto.offset.reset``. The group must have no members
(NON_EMPTY_GROUP); unknown here: GROUP_ID_NOT_FOUND; an unknown topic UNKNOWN_TOPIC_OR_PARTITION.
Served by the group's coordinator (NOT_COORDINATOR elsewhere), which knows its members. ACLs:
DELETE on the group, READ on each topic (as Kafka)."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl, _share
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, GroupIdNotFound, KafkaError, UnknownTopicOrPartition
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.DELETE_SHARE_GROUP_OFFSETS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    svc = _share.service(broker)
    g = _acl.gate(broker, client, API_KEY)
    rm = broker.replicas
    errors: dict[str, KafkaError] = {}
    try:
        _acl.check(g, "group", req.group_id)
        broker.groups.check_coordinator(req.group_id)  # where the group's members are known
        await svc.ready()
        if not await svc.exists(req.group_id):
            raise GroupIdNotFound(f"Group {req.group_id} not found.")
        ids = set()
        for t in req.topics:
            try:
                if g is not None:
                    _acl.check(g, "topic", t.topic_name)
                meta = rm.topics.get(t.topic_name)
                if meta is None:
                    raise UnknownTopicOrPartition(f"topic {t.topic_name} does not exist")
                ids.add(meta.topic_id)
            except KafkaError as exc:
                errors[t.topic_name] = exc
        await svc.delete_offsets(req.group_id, ids)
    except KafkaError as exc:
        return m.DeleteShareGroupOffsetsResponse(error_code=exc.code, error_message=str(exc), responses=())
    return m.DeleteShareGroupOffsetsResponse(
        error_code=ErrorCode.none, error_message=None,
        responses=tuple(m.DeleteShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name, topic_id=rm.topics[t.topic_name].topic_id if t.topic_name in rm.topics else None,
            error_code=errors[t.topic_name].code if t.topic_name in errors else ErrorCode.none,
            error_message=str(errors[t.topic_name]) if t.topic_name in errors else None) for t in req.topics))
