"""The routing table of cluster mode (issue 15): ``routes.ROUTES`` without what cluster mode
does not serve (``NOT_SERVED``; empty today: DeleteTopics, the last one, is served since it
deletes in the store).

Every handler is ``ROUTES``' handler: the handlers ask ``BrokerContext.cluster`` where cluster
mode answers differently (FindCoordinator names the leader of the key's internal partition;
Metadata and DescribeCluster list every live broker; CreateTopics, CreatePartitions,
DeleteTopics and the config APIs write to the store).
"""

from __future__ import annotations

from oncelog.broker.context import Handler
from oncelog.broker.routes import ROUTES

__all__ = ["CLUSTER_ROUTES", "NOT_SERVED"]

NOT_SERVED: frozenset[int] = frozenset()

CLUSTER_ROUTES: dict[int, Handler] = {key: handler for key, handler in ROUTES.items() if key not in NOT_SERVED}
