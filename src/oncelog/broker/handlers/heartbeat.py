"""Heartbeat (12): a member is alive; the answer tells it whether to rejoin (R3).

REBALANCE_IN_PROGRESS: rejoin; ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID: the member was dropped;
FENCED_INSTANCE_ID (v3+): another consumer took over its group.instance.id. While the
coordinator is loading the group's partition the heartbeat is answered with no error, as Kafka
does: the member is known once loading ends.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl

from oncelog.protocol.messages import Builder
from oncelog.coordinator.group.types import validate_group_id
from oncelog.protocol import apis
from oncelog.protocol.errors import CoordinatorLoadInProgress, ErrorCode, KafkaError
from oncelog.protocol.framing import Request

API_KEY = apis.HEARTBEAT


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    try:
        groups = broker.groups
        validate_group_id(req.group_id)
        _acl.check(_acl.gate(broker, client, API_KEY), "group", req.group_id)  # ACLs (issue 18): READ on the group
        groups.heartbeat(req.group_id, req.generation_id, req.member_id, getattr(req, "group_instance_id", None))
    except CoordinatorLoadInProgress:
        return m.HeartbeatResponse(error_code=ErrorCode.none)
    except KafkaError as exc:
        return m.HeartbeatResponse(error_code=exc.code)
    return m.HeartbeatResponse(error_code=ErrorCode.none)
