"""Cluster mode: who the members of a share group are, asked of the group's coordinator (KIP-932).

A share group's members heartbeat to its group coordinator (the leader of the group's
``__consumer_offsets`` partition), while its share sessions are opened at the leaders of the
partitions it fetches. A leader lets only members open a session: it asks the coordinator with a
ShareGroupDescribe over the inter-broker connections (membership/peer_client.py), when a session
opens and, for the sessions it keeps, every third of a session timeout
(broker/coordinators/share_coordinator.py).
"""

from __future__ import annotations

import logging
from typing import Callable

from oncelog.broker.partitions.peers import PeerRequests
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.messages import Builder

__all__ = ["RemoteShareMembers"]

log = logging.getLogger(__name__)

DESCRIBE_VERSION = 1
TIMEOUT_S = 5.0


class RemoteShareMembers:
    """``coordinator_of(group)``: the node id of the group's coordinator (-1: none live now);
    ``local(group)``: the member ids this broker has when it coordinates the group itself
    (None otherwise)."""

    def __init__(self, node_id: int, coordinator_of: Callable[[str], int], peers: PeerRequests,
                 local: Callable[[str], "set[str] | None"]) -> None:
        self.node_id = node_id
        self.coordinator_of = coordinator_of
        self.peers = peers
        self.local = local

    async def members(self, group_id: str) -> set[str] | None:
        """The ids of the group's members at its coordinator (empty: the group has none, or the
        coordinator does not know it); None when the coordinator cannot be asked or cannot
        answer now (not elected, unreachable, loading, moved)."""
        node = self.coordinator_of(group_id)
        if node < 0:
            return None
        if node == self.node_id:
            return self.local(group_id)
        m = Builder(apis.SHARE_GROUP_DESCRIBE, DESCRIBE_VERSION, response=False)
        body = m.ShareGroupDescribeRequest(group_ids=(group_id,), include_authorized_operations=False)
        try:
            resp = await self.peers.request(node, apis.SHARE_GROUP_DESCRIBE, DESCRIBE_VERSION, body, timeout_s=TIMEOUT_S)
        except KafkaError as exc:
            log.info("share group %s: its coordinator (node %d) cannot be asked for its members: %s", group_id, node, exc)
            return None
        group = resp.groups[0] if resp.groups else None
        if group is None:
            return None
        code = ErrorCode(group.error_code)
        if code == ErrorCode.none:
            return {mb.member_id for mb in group.members}
        if code == ErrorCode.group_id_not_found:
            return set()
        log.info("share group %s: node %d describes it with %s", group_id, node, code.name)
        return None
