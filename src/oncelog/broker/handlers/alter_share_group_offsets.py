"""AlterShareGroupOffsets (91): set a share group's start offset per partition (KIP-932, issue
30): the partition starts over there with nothing in flight, durable before the answer. The
group must have no members (NON_EMPTY_GROUP); a group unknown here is created, as Kafka does
(an operator may position a group before its consumers start). Served by the group's coordinator
(NOT_COORDINATOR elsewhere), which knows its members; in cluster mode it writes the store's rows
whichever broker leads the partitions (broker/coordinators/share_coordinator.py). An unknown topic or partition is
UNKNOWN_TOPIC_OR_PARTITION for it; a negative offset INVALID_REQUEST. ACLs: READ on the group,
READ on each topic."""

from __future__ import annotations

import uuid
from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl, _share
from oncelog.coordinator.group.types import validate_group_id
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, InvalidRequest, KafkaError, UnknownTopicOrPartition
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.ALTER_SHARE_GROUP_OFFSETS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    svc = _share.service(broker)
    g = _acl.gate(broker, client, API_KEY)
    rm = broker.replicas
    errors: dict[tuple[str, int], KafkaError] = {}
    offsets: dict[tuple[uuid.UUID, int], int] = {}
    try:
        validate_group_id(req.group_id)
        _acl.check(g, "group", req.group_id)
        broker.groups.check_coordinator(req.group_id)  # where the group's members are known
        for t in req.topics:
            meta = rm.topics.get(t.topic_name)
            for p in t.partitions:
                try:
                    if g is not None:
                        _acl.check(g, "topic", t.topic_name)
                    if meta is None or meta.internal or not 0 <= p.partition_index < meta.num_partitions:
                        raise UnknownTopicOrPartition(f"{t.topic_name}-{p.partition_index} does not exist")
                    if p.start_offset < 0:
                        raise InvalidRequest(f"start offset {p.start_offset} of {t.topic_name}-{p.partition_index}")
                    offsets[(meta.topic_id, p.partition_index)] = p.start_offset
                except KafkaError as exc:
                    errors[(t.topic_name, p.partition_index)] = exc
        await svc.alter_offsets(req.group_id, offsets)
    except KafkaError as exc:
        return m.AlterShareGroupOffsetsResponse(error_code=exc.code, error_message=str(exc), responses=())
    return m.AlterShareGroupOffsetsResponse(
        error_code=ErrorCode.none, error_message=None,
        responses=tuple(m.AlterShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name, topic_id=rm.topics[t.topic_name].topic_id if t.topic_name in rm.topics else None,
            partitions=tuple(m.AlterShareGroupOffsetsResponsePartition(
                partition_index=p.partition_index,
                error_code=errors[(t.topic_name, p.partition_index)].code if (t.topic_name, p.partition_index) in errors
                else ErrorCode.none,
                error_message=str(errors[(t.topic_name, p.partition_index)])
                if (t.topic_name, p.partition_index) in errors else None)
                for p in t.partitions)) for t in req.topics))
