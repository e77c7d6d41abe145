"""JoinGroup (11): join a classic group, or rejoin it for a rebalance (R3).

The answer is parked until the join phase of the rebalance ends (group coordinator,
membership.py). v4+: a new dynamic member first gets MEMBER_ID_REQUIRED with the id to rejoin
with (KIP-394); v5+: static membership (group.instance.id); v7: protocol type in the answer;
v8: a reason for the (re)join (KIP-800), not kept; v9: ``skip_assignment`` in the answer (KIP-814),
always false: a static leader that rejoins a Stable group is answered with the current leader
id, not its own (as before KIP-814), so it never computes an assignment that nobody would use.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl, _share
from oncelog.broker.handlers._group import client_host, ms
from oncelog.protocol.messages import Builder
from oncelog.coordinator.group.types import validate_group_id
from oncelog.coordinator.group.types import JoinRequest
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, InconsistentGroupProtocol, KafkaError
from oncelog.protocol.framing import Request

API_KEY = apis.JOIN_GROUP


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    v = request.api_version
    m = Builder(API_KEY, v)
    instance_id = getattr(req, "group_instance_id", None)
    try:
        groups = broker.groups
        validate_group_id(req.group_id)
        _acl.check(_acl.gate(broker, client, API_KEY), "group", req.group_id)  # ACLs (issue 18): READ on the group
        _share.refuse_share_group_id(broker, req.group_id, InconsistentGroupProtocol)  # issue 30 (KIP-932)
        session = ms(req.session_timeout)
        rebalance = ms(req.rebalance_timeout) if v >= 1 else session
        res = await groups.join_group(
            JoinRequest(
                group_id=req.group_id,
                member_id=req.member_id,
                group_instance_id=instance_id,
                protocol_type=req.protocol_type,
                protocols=tuple((p.name, p.metadata) for p in req.protocols),
                session_timeout_ms=session,
                rebalance_timeout_ms=rebalance if rebalance >= 0 else session,
                client_id=request.client_id or "",
                client_host=client_host(client),
                require_known_member_id=v >= 4 and instance_id is None,
            )
        )
    except KafkaError as exc:
        return m.JoinGroupResponse(
            error_code=exc.code, generation_id=-1, protocol_type=None, protocol_name=None if v >= 7 else "",
            leader="", member_id=getattr(exc, "member_id", req.member_id), members=(),
        )
    return m.JoinGroupResponse(
        error_code=ErrorCode.none,
        generation_id=res.generation,
        protocol_type=res.protocol_type,
        protocol_name=res.protocol_name if v >= 7 else (res.protocol_name or ""),
        leader=res.leader_id,
        member_id=res.member_id,
        members=tuple(
            m.JoinGroupResponseMember(member_id=mid, group_instance_id=iid, metadata=meta) for mid, iid, meta in res.members
        ),
    )
