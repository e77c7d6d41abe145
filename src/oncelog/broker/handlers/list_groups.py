"""ListGroups (16): every group this broker coordinates, with its protocol type and (v4+) its
state, optionally filtered by state (v4+) and (v5+, KIP-848) by group type, both case-insensitive
as in Kafka. A group is "classic" (the JoinGroup/SyncGroup protocol) or "consumer" (the
consumer rebalance protocol, KIP-848; protocol type "consumer") or "share" (KIP-932: a share
group with members here, its coordinator, or without since this start). While a partition of ``__consumer_offsets`` is still
loading, the answer lists the groups loaded so far with COORDINATOR_LOAD_IN_PROGRESS, as Kafka."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl

from oncelog.protocol.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.framing import Request

API_KEY = apis.LIST_GROUPS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    groups, loading = broker.groups.list_groups()
    shares = broker.shares  # share groups (KIP-932) with members here: type and protocol type "share"
    groups = groups + [(gid, "share", state, "share") for gid, state in shares.listed()]
    g = _acl.gate(broker, client, API_KEY)
    if g is not None and not g.allowed("cluster"):  # ACLs (issue 18): the groups it may describe
        groups = [row for row in groups if g.allowed("group", row[0])]
    wanted = {s.lower() for s in getattr(req, "states_filter", ()) or ()}
    types = {t.lower() for t in getattr(req, "types_filter", ()) or ()}
    return m.ListGroupsResponse(
        error_code=ErrorCode.coordinator_load_in_progress if loading else ErrorCode.none,
        groups=tuple(
            m.ListedGroup(group_id=gid, protocol_type=ptype, group_state=state, group_type=gtype)
            for gid, ptype, state, gtype in sorted(groups)
            if (not wanted or state.lower() in wanted) and (not types or gtype in types)
        ),
    )
