"""The routing table of cluster mode (issue 15): ``routes.ROUTES`` without what cluster mode
does not serve (``NOT_SERVED``: the share-group APIs of KIP-932, whose state lives in the
embedded broker's ``__share_group_state``; DeleteTopics is served since it deletes in the store).

Every handler is ``ROUTES``' handler: the handlers ask ``BrokerContext.cluster`` where cluster
mode answers differently (FindCoordinator names the leader of the key's internal partition;
Metadata and DescribeCluster list every live broker; CreateTopics, CreatePartitions,
DeleteTopics and the config APIs write to the store).
"""

from __future__ import annotations

from oncelog.broker.context import Handler
from oncelog.broker.routes import ROUTES
from oncelog.protocol import apis

__all__ = ["CLUSTER_ROUTES", "NOT_SERVED"]

#: share groups (KIP-932) are served by the embedded broker only: their state is not in the store yet
NOT_SERVED: frozenset[int] = frozenset({apis.SHARE_GROUP_HEARTBEAT, apis.SHARE_GROUP_DESCRIBE, apis.SHARE_FETCH,
                                        apis.SHARE_ACKNOWLEDGE, apis.DESCRIBE_SHARE_GROUP_OFFSETS,
                                        apis.ALTER_SHARE_GROUP_OFFSETS, apis.DELETE_SHARE_GROUP_OFFSETS})

CLUSTER_ROUTES: dict[int, Handler] = {key: handler for key, handler in ROUTES.items() if key not in NOT_SERVED}
