"""OffsetDelete (47): delete a group's committed offsets for some partitions (KIP-496).

Allowed when the group is Empty, or, for a consumer group with members, for topics none of them
subscribes to (GROUP_SUBSCRIBED_TO_TOPIC per partition otherwise). Group-level errors:
GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, COORDINATOR_LOAD_IN_PROGRESS, INVALID_GROUP_ID.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl

from oncelog.protocol.messages import Builder
from oncelog.coordinator.group.types import validate_group_id
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.types import TopicPartition
from oncelog.protocol.framing import Request

API_KEY = apis.OFFSET_DELETE


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    codes: dict[TopicPartition, ErrorCode] = {}
    known: list[TopicPartition] = []
    g = _acl.gate(broker, client, API_KEY)
    if g is not None:  # ACLs (issue 18): DELETE on the group (whole request), READ on each topic
        code = g.denied("group", req.group_id)
        if code is not None:
            return m.OffsetDeleteResponse(error_code=code, topics=())
    for t in req.topics:
        topic_denied = _acl.denied(g, "topic", t.name)
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if topic_denied is not None:
                codes[tp] = topic_denied
            elif t.name in broker.replicas.topics:
                known.append(tp)
            else:
                codes[tp] = ErrorCode.unknown_topic_or_partition
    try:
        validate_group_id(req.group_id)
        errors = await broker.groups.delete_offsets(req.group_id, known)
    except KafkaError as exc:
        return m.OffsetDeleteResponse(error_code=exc.code, topics=())
    for tp, err in errors.items():
        codes[tp] = ErrorCode.none if err is None else err.code
    return m.OffsetDeleteResponse(
        error_code=ErrorCode.none,
        topics=tuple(
            m.OffsetDeleteResponseTopic(
                name=t.name,
                partitions=tuple(
                    m.OffsetDeleteResponsePartition(
                        partition_index=p.partition_index, error_code=codes[TopicPartition(t.name, p.partition_index)]
                    )
                    for p in t.partitions
                ),
            )
            for t in req.topics
        ),
    )
