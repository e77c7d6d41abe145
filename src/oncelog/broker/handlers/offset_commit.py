"""OffsetCommit (8): a group's consumed positions, stored in ``__consumer_offsets`` (R3).

A member of a group names its member id and the current generation (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS otherwise); a consumer that assigns partitions itself
commits with generation -1 into a group without members. Errors are per partition; partitions of
topics that do not exist get UNKNOWN_TOPIC_OR_PARTITION and are not stored. v2..v4 may carry a
retention time for the commit; v6+ the leader epoch; v7+ the group.instance.id. v9+: a
generation for a group that does not exist is GROUP_ID_NOT_FOUND (ILLEGAL_GENERATION before, as
Kafka); v10+ names topics by id (an unknown id: UNKNOWN_TOPIC_ID).
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.broker.handlers._group import authorize_offsets, ms, requested_offsets, topic_key
from oncelog.protocol.messages import Builder
from oncelog.coordinator.group.types import validate_group_id
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.types import TopicPartition
from oncelog.protocol.framing import Request

API_KEY = apis.OFFSET_COMMIT
#: OffsetCommit v9+ answers GROUP_ID_NOT_FOUND where older versions answer ILLEGAL_GENERATION
GROUP_NOT_FOUND_FROM = 9


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    codes, offsets = requested_offsets(broker, req.topics)
    g = _acl.gate(broker, client, API_KEY)
    if g is not None:  # ACLs (issue 18): READ on the group, READ on each topic
        authorize_offsets(g, req.group_id, codes, offsets)
    retention = getattr(req, "retention_time", None)
    try:
        groups = broker.groups
        validate_group_id(req.group_id, allow_empty=True)
        if offsets:
            errors = await groups.commit_offsets(
                req.group_id, req.generation_id_or_member_epoch, req.member_id, getattr(req, "group_instance_id", None),
                offsets, retention_ms=ms(retention) if retention is not None else -1, api_version=request.api_version,
            )
            for tp, err in errors.items():
                codes[tp] = ErrorCode.none if err is None else err.code
    except KafkaError as exc:
        code = exc.code
        if code == ErrorCode.group_id_not_found and request.api_version < GROUP_NOT_FOUND_FROM:
            code = ErrorCode.illegal_generation
        for tp in offsets:
            codes[tp] = code
    out = []
    for t in req.topics:
        name = topic_key(broker, t)
        out.append(m.OffsetCommitResponseTopic(
            name=name, topic_id=getattr(t, "topic_id", None),
            partitions=tuple(
                m.OffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=codes[TopicPartition(name, p.partition_index)]
                )
                for p in t.partitions
            ),
        ))
    return m.OffsetCommitResponse(topics=tuple(out))
