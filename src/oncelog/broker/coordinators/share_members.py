"""Who the members of a share group are, at its group coordinator (KIP-932): ``ShareMembers``,
one implementation per mode, chosen by the membership when the broker starts.

A share group's members heartbeat to its group coordinator (the leader of the group's
``__consumer_offsets`` partition), while its share sessions are opened at the leaders of the
partitions it fetches. A leader lets only members open a session: it asks the coordinator when a
session opens and, for the sessions it keeps, every third of a session timeout
(broker/coordinators/share_coordinator.py). On the embedded broker the coordinator is this broker
(``LocalShareMembers``: the members it has); in cluster mode (``RemoteShareMembers``) it is asked
with a ShareGroupDescribe over the inter-broker connections (membership/peer_client.py, seen as
partitions/peers.PeerRequests) unless it is this broker.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Protocol

from oncelog.broker.partitions.peers import PeerRequests
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.messages import Builder

if TYPE_CHECKING:
    from oncelog.broker.coordinators.group_coordinator import GroupCoordinator

__all__ = ["LocalShareMembers", "RemoteShareMembers", "ShareMembers"]

log = logging.getLogger(__name__)

DESCRIBE_VERSION = 1
TIMEOUT_S = 5.0


class ShareMembers(Protocol):
    async def members(self, group_id: str, local: set[str]) -> set[str] | None:
        """The ids of the group's members at its coordinator (empty: the group has none, or the
        coordinator does not know it); None when the coordinator cannot be asked or cannot
        answer now. ``local``: the members this broker has (the answer when it is the
        coordinator)."""
        ...

    def check_coordinator(self, group_id: str) -> None:
        """Raises NotCoordinator (COORDINATOR_LOAD_IN_PROGRESS while loading) when the group's
        members are kept by another broker (ShareGroupDescribe is answered there)."""
        ...


class LocalShareMembers:
    """The embedded broker coordinates every share group: its members are the ones it has."""

    async def members(self, group_id: str, local: set[str]) -> set[str] | None:
        return local

    def check_coordinator(self, group_id: str) -> None:
        pass


class RemoteShareMembers:
    """``coordinator_of(group)``: the node id of the group's coordinator (-1: none live now);
    ``groups``: this broker's group coordinator (where the groups it coordinates keep their
    members)."""

    def __init__(self, node_id: int, coordinator_of: Callable[[str], int], peers: PeerRequests,
                 groups: "GroupCoordinator") -> None:
        self.node_id = node_id
        self.coordinator_of = coordinator_of
        self.peers = peers
        self.groups = groups

    def check_coordinator(self, group_id: str) -> None:
        self.groups.check_coordinator(group_id)

    async def members(self, group_id: str, local: set[str]) -> set[str] | None:
        """See ``ShareMembers``: not elected, unreachable, loading, moved: None."""
        node = self.coordinator_of(group_id)
        if node < 0:
            return None
        if node == self.node_id:
            return local
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
