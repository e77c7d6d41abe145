"""LeaveGroup (13): members leave a group, which then rebalances (R3).

v0..v2 name one member; v3+ a batch of members, each by member id or (static members, for
administrative removal) by group.instance.id, with an error per member. Before v3 the member's
error is the response's error. v5 adds a reason per member (KIP-800), which is not kept.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl

from oncelog.protocol.messages import Builder
from oncelog.coordinator.group.types import validate_group_id
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request

API_KEY = apis.LEAVE_GROUP


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    v = request.api_version
    m = Builder(API_KEY, v)
    if v >= 3:
        leaving = [(mi.member_id, mi.group_instance_id) for mi in req.members]
    else:
        leaving = [(req.member_id, None)]
    try:
        groups = broker.groups
        validate_group_id(req.group_id)
        _acl.check(_acl.gate(broker, client, API_KEY), "group", req.group_id)  # ACLs (issue 18): READ on the group
        errors = await groups.leave_group(req.group_id, leaving)
    except KafkaError as exc:
        return m.LeaveGroupResponse(error_code=exc.code, members=())
    codes = [ErrorCode.none if e is None else e.code for e in errors]
    if v < 3:
        return m.LeaveGroupResponse(error_code=codes[0], members=())
    return m.LeaveGroupResponse(
        error_code=ErrorCode.none,
        members=tuple(
            m.MemberResponse(member_id=mid, group_instance_id=iid, error_code=code)
            for (mid, iid), code in zip(leaving, codes)
        ),
    )
