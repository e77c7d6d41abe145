"""DescribeGroups (15): state, protocol and members of groups; members' subscription metadata
and assignments while the group is Stable (as Kafka). An unknown group is described as Dead with
no error (v0..v5); from v6 (KIP-1043) it is GROUP_ID_NOT_FOUND, and every error of v6 carries its
message. Authorized operations when asked: those allowed (all without an authorizer; _acl.py). ACLs (issue 18): DESCRIBE on each group."""

from __future__ import annotations

from typing import Any

from oncelog.acl.model import ResourceType
from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl

from oncelog.protocol.messages import Builder
from oncelog.coordinator.group.types import validate_group_id
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, GroupIdNotFound, KafkaError
from oncelog.protocol.framing import Request

API_KEY = apis.DESCRIBE_GROUPS
#: DescribeGroups v6+ answers GROUP_ID_NOT_FOUND for a group that does not exist (KIP-1043)
NOT_FOUND_FROM = 6


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    g = _acl.gate(broker, client, API_KEY)
    out = []
    # A group named twice is answered once (issue 26 row 9): its members' metadata and assignments
    # repeated up to the entry bound would make an answer of gigabytes. Kafka's AdminClient and
    # librdkafka never send a group twice, and match answers by group id.
    for group_id in dict.fromkeys(req.groups):
        ops = _acl.authorized_operations(g, req, "include_authorized_operations", ResourceType.GROUP, group_id)
        try:
            _acl.check(g, "group", group_id)  # ACLs (issue 18): DESCRIBE on the group
            validate_group_id(group_id, allow_empty=True)
            s = broker.groups.describe_group(group_id)
            if s.state == "Dead" and request.api_version >= NOT_FOUND_FROM:
                raise GroupIdNotFound(f"Group {group_id} not found.")
        except KafkaError as exc:
            out.append(
                m.DescribedGroup(
                    error_code=exc.code, group_id=group_id, protocol_type="", protocol_data="",
                    group_state="Dead" if isinstance(exc, GroupIdNotFound) else "",
                    members=(), authorized_operations=ops, error_message=str(exc) or None,
                )
            )
            continue
        out.append(
            m.DescribedGroup(
                error_code=ErrorCode.none,
                group_id=group_id,
                group_state=s.state,
                protocol_type=s.protocol_type,
                protocol_data=s.protocol_data,
                members=tuple(
                    m.DescribedGroupMember(
                        member_id=mb.member_id, group_instance_id=mb.group_instance_id, client_id=mb.client_id,
                        client_host=mb.client_host, member_metadata=mb.metadata, member_assignment=mb.assignment,
                    )
                    for mb in s.members
                ),
                authorized_operations=ops,
            )
        )
    return m.DescribeGroupsResponse(groups=tuple(out))
