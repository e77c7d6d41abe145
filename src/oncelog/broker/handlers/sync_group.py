"""SyncGroup (14): the leader hands in the assignment, every member gets its own (R3).

Parked until the leader's assignment is stored in ``__consumer_offsets``. As Kafka, a SyncGroup
that reaches a coordinator still loading its partition gets REBALANCE_IN_PROGRESS (the group's
rebalance state is lost with the old coordinator; older clients do not know
COORDINATOR_LOAD_IN_PROGRESS here). v5: protocol type and name are checked and returned.
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

API_KEY = apis.SYNC_GROUP


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    try:
        groups = broker.groups
        validate_group_id(req.group_id)
        _acl.check(_acl.gate(broker, client, API_KEY), "group", req.group_id)  # ACLs (issue 18): READ on the group
        res = await groups.sync_group(
            req.group_id, req.generation_id, req.member_id, getattr(req, "group_instance_id", None),
            getattr(req, "protocol_type", None), getattr(req, "protocol_name", None),
            {a.member_id: a.assignment for a in req.assignments},
        )
    except KafkaError as exc:
        code = ErrorCode.rebalance_in_progress if exc.code == ErrorCode.coordinator_load_in_progress else exc.code
        return m.SyncGroupResponse(error_code=code, protocol_type=None, protocol_name=None, assignment=b"")
    return m.SyncGroupResponse(
        error_code=ErrorCode.none, protocol_type=res.protocol_type, protocol_name=res.protocol_name,
        assignment=res.assignment,
    )
