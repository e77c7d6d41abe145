"""ConsumerGroupDescribe (69): consumer groups of the consumer rebalance protocol (KIP-848,
issue 30) as the coordinator has them: state, group epoch, target assignment epoch, assignor,
and per member its epoch, subscription, current assignment and target assignment (topics by id
and name). A group that does not exist, or is a classic group, is GROUP_ID_NOT_FOUND with a
message, as Kafka. v1 adds the member type (1: a consumer-protocol member). ACLs: DESCRIBE on
each group; authorized operations when asked (KIP-430); and, as Kafka, DESCRIBE on every topic
of the group's assignments and target assignments: a group naming one the client may not
describe answers TOPIC_AUTHORIZATION_FAILED ("The group has described topic(s) that the client
is not authorized to describe.") without its members.
"""

from __future__ import annotations

from typing import Any

from oncelog.acl.model import ResourceType
from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.coordinator.group.consumer_group import Assignment
from oncelog.coordinator.group.types import validate_group_id
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.CONSUMER_GROUP_DESCRIBE
CONSUMER_MEMBER = 1  # member_type: -1 unknown, 0 classic, 1 consumer
#: Kafka's message for a group naming a topic the client may not describe
HIDDEN_TOPICS = "The group has described topic(s) that the client is not authorized to describe."


def _topic_names(broker: BrokerContext, group: Any) -> set[str]:
    """The names of the topics in the members' assignments and target assignments."""
    ids: set[Any] = set()
    for mb in group.members.values():
        ids.update(mb.assigned)
        ids.update(mb.revoking)
    for target in group.target.values():
        ids.update(target)
    return {meta.name for tid in ids if (meta := broker.replicas.topic_by_id(tid)) is not None}


def _assignment(broker: BrokerContext, m: Builder, a: "Assignment") -> Any:
    rows = []
    for tid, ps in sorted(a.items(), key=lambda kv: str(kv[0])):
        meta = broker.replicas.topic_by_id(tid)
        rows.append(m.TopicPartitions(topic_id=tid, topic_name=meta.name if meta is not None else "",
                                      partitions=tuple(sorted(ps))))
    return m.Assignment(topic_partitions=tuple(rows))


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    g = _acl.gate(broker, client, API_KEY)
    out = []
    for group_id in req.group_ids:
        ops = _acl.authorized_operations(g, req, "include_authorized_operations", ResourceType.GROUP, group_id)
        try:
            _acl.check(g, "group", group_id)
            validate_group_id(group_id)
            group = broker.groups.describe_consumer_group(group_id)
        except KafkaError as exc:
            out.append(m.DescribedGroup(
                error_code=exc.code, error_message=str(exc) or None, group_id=group_id, group_state="Dead",
                group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(), authorized_operations=ops))
            continue
        if g is not None and not all(g.allowed("topic", name) for name in _topic_names(broker, group)):
            out.append(m.DescribedGroup(
                error_code=ErrorCode.topic_authorization_failed, error_message=HIDDEN_TOPICS, group_id=group_id,
                group_state="Dead", group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(),
                authorized_operations=ops))
            continue
        settings = broker.groups.settings.consumer
        assignor = next((mb.server_assignor for mb in group.members.values() if mb.server_assignor),
                        None) or settings.assignors[0]
        out.append(m.DescribedGroup(
            error_code=ErrorCode.none, error_message=None, group_id=group_id, group_state=group.state,
            group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch, assignor_name=assignor,
            authorized_operations=ops,
            members=tuple(
                m.Member(
                    member_id=mb.member_id, instance_id=mb.instance_id, rack_id=mb.rack_id,
                    member_epoch=mb.member_epoch, client_id=mb.client_id, client_host=mb.client_host,
                    subscribed_topic_names=mb.subscribed_names, subscribed_topic_regex=mb.subscribed_regex,
                    assignment=_assignment(broker, m, mb.assigned),
                    target_assignment=_assignment(broker, m, group.target.get(mb.member_id, {})),
                    member_type=CONSUMER_MEMBER,
                )
                for mb in sorted(group.members.values(), key=lambda x: x.member_id)
            ),
        ))
    return m.ConsumerGroupDescribeResponse(groups=tuple(out))
