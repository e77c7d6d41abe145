"""DeleteGroups (42): remove groups without members, with their committed offsets (tombstones in
``__consumer_offsets``). Per group: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP (members, or a
transaction still committing offsets for it), COORDINATOR_LOAD_IN_PROGRESS. A share group
(KIP-932) goes with its share-partition state and configs (NON_EMPTY_GROUP while it has members;
in cluster mode the store's rows, written by the group's coordinator whichever broker leads the
partitions: broker/coordinators/share_coordinator.py)."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl, _share

from oncelog.protocol.messages import Builder
from oncelog.coordinator.group.types import validate_group_id
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request

API_KEY = apis.DELETE_GROUPS


def _classic_or_consumer(broker: BrokerContext, group_id: str) -> bool:
    rows, _ = broker.groups.list_groups()
    return any(row[0] == group_id for row in rows)


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    results = []
    g = _acl.gate(broker, client, API_KEY)
    for group_id in req.groups_names:
        try:
            _acl.check(g, "group", group_id)  # ACLs (issue 18): DELETE on the group
            validate_group_id(group_id, allow_empty=True)
            shares = _share.service(broker)
            if not _classic_or_consumer(broker, group_id) and await shares.exists(group_id):
                broker.groups.check_coordinator(group_id)  # where its members are known
                await shares.delete_group(group_id)  # a share group (KIP-932, issue 30)
            else:
                await broker.groups.delete_group(group_id)
            code = ErrorCode.none
        except KafkaError as exc:
            code = exc.code
        results.append(m.DeletableGroupResult(group_id=group_id, error_code=code))
    return m.DeleteGroupsResponse(results=tuple(results))
