"""The routing table of cluster mode (issue 15): ``routes.ROUTES`` without what cluster mode
does not serve yet.

DeleteTopics is not served (not advertised): deleting a topic's rows and moving its leaders
away from every broker at once is not built (docs/CLUSTER.md). Everything else is ``ROUTES``'
handler: the handlers ask ``BrokerContext.cluster`` where cluster mode answers differently
(FindCoordinator names the leader of the key's internal partition; Metadata and DescribeCluster
list every live broker).
"""

from __future__ import annotations

from oncelog.broker.context import Handler
from oncelog.broker.routes import ROUTES
from oncelog.protocol import apis

__all__ = ["CLUSTER_ROUTES"]

NOT_SERVED = frozenset({apis.DELETE_TOPICS})

CLUSTER_ROUTES: dict[int, Handler] = {key: handler for key, handler in ROUTES.items() if key not in NOT_SERVED}
