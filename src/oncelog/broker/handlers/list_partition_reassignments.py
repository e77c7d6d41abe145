"""ListPartitionReassignments (46): reassignments in progress (v0). There never is one: a
partition's only replica is its leader (the store keeps the data in cluster mode), so the answer
is Kafka's for a cluster with nothing moving: no error, no topics."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.LIST_PARTITION_REASSIGNMENTS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    _acl.check(_acl.gate(broker, client, API_KEY), "cluster")  # ACLs (issue 18, acl/rules.py)
    m = Builder(API_KEY, request.api_version)
    return m.ListPartitionReassignmentsResponse(error_code=ErrorCode.none, error_message=None, topics=())
