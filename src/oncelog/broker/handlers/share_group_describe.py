"""ShareGroupDescribe (77): share groups (KIP-932, issue 30) as the service has them: state,
group epoch, assignor (``simple``) and per member its epoch, subscription and assignment. A
group without members that has durable state here (share-partition state, configs) is Empty; a
group that does not exist is GROUP_ID_NOT_FOUND with a message, as Kafka. In cluster mode a
broker that does not coordinate the group answers NOT_COORDINATOR (its members are kept at the
coordinator). ACLs, as Kafka's ``handleShareGroupDescribe``: DESCRIBE on each group; a group one
of whose members is assigned a topic the principal may not DESCRIBE answers
TOPIC_AUTHORIZATION_FAILED without its members; authorized operations when asked (KIP-430).
"""

from __future__ import annotations

from typing import Any

from oncelog.acl.model import ResourceType
from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl, _share
from oncelog.coordinator.group.types import validate_group_id
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, GroupIdNotFound, KafkaError, TopicAuthorizationFailed
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.SHARE_GROUP_DESCRIBE


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    g = _acl.gate(broker, client, API_KEY)
    svc = _share.service(broker)
    await svc.ready()
    out = []
    for group_id in req.group_ids:
        ops = _acl.authorized_operations(g, req, "include_authorized_operations", ResourceType.GROUP, group_id)
        try:
            _acl.check(g, "group", group_id)
            validate_group_id(group_id)
            svc.check_coordinator(group_id)  # cluster mode: its members are kept at its coordinator
            group = svc.groups.groups.get(group_id)
            if group is None and not svc.known(group_id):
                raise GroupIdNotFound(f"Group {group_id} not found.")
            assigned = {tid for mb in (group.members.values() if g is not None and group else ()) for tid in mb.assigned}
            names = {meta.name for tid in assigned if (meta := broker.replicas.topic_by_id(tid)) is not None}
            if any(_acl.denied(g, "topic", name) is not None for name in names):
                raise TopicAuthorizationFailed("The group has described topic(s) that the client is not authorized "
                                               "to describe.")
        except KafkaError as exc:
            out.append(m.DescribedGroup(
                error_code=exc.code, error_message=str(exc) or None, group_id=group_id, group_state="Dead",
                group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(), authorized_operations=ops))
            continue
        if group is None:  # no members: its durable state only
            out.append(m.DescribedGroup(
                error_code=ErrorCode.none, error_message=None, group_id=group_id, group_state="Empty", group_epoch=0,
                assignment_epoch=0, assignor_name="simple", members=(), authorized_operations=ops))
            continue
        members = []
        for mb in sorted(group.members.values(), key=lambda x: x.member_id):
            rows = []
            for tid, ps in sorted(mb.assigned.items(), key=lambda kv: str(kv[0])):
                meta = broker.replicas.topic_by_id(tid)
                rows.append(m.TopicPartitions(topic_id=tid, topic_name=meta.name if meta is not None else "",
                                              partitions=tuple(sorted(ps))))
            members.append(m.Member(
                member_id=mb.member_id, rack_id=mb.rack_id, member_epoch=mb.member_epoch, client_id=mb.client_id,
                client_host=mb.client_host, subscribed_topic_names=mb.subscribed,
                assignment=m.Assignment(topic_partitions=tuple(rows))))
        out.append(m.DescribedGroup(
            error_code=ErrorCode.none, error_message=None, group_id=group_id, group_state=group.state,
            group_epoch=group.group_epoch, assignment_epoch=group.group_epoch, assignor_name="simple",
            members=tuple(members), authorized_operations=ops))
    return m.ShareGroupDescribeResponse(groups=tuple(out))
