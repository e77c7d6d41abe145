"""The routing table of cluster mode (issue 15): ``routes.ROUTES`` with what this slice of
cluster mode does not serve yet answered plainly.

Groups and transactions need their coordinators, which cluster mode does not run yet (their
``__consumer_offsets`` / ``__transaction_state`` partitions are not moved between brokers):
every group and transaction API answers COORDINATOR_NOT_AVAILABLE, as FindCoordinator does, and
InitProducerId serves idempotent producers (no transactional id; ids from the store) only.
DeleteTopics is not served (not advertised). Everything else is ``ROUTES``' handler.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client, Handler
from oncelog.broker.handlers import init_producer_id
from oncelog.broker.routes import ROUTES
from oncelog.protocol import apis
from oncelog.protocol.errors import CoordinatorNotAvailable
from oncelog.protocol.framing import Request

__all__ = ["CLUSTER_ROUTES"]

#: APIs that need a group or transaction coordinator
COORDINATED = frozenset({
    apis.JOIN_GROUP, apis.SYNC_GROUP, apis.HEARTBEAT, apis.LEAVE_GROUP, apis.OFFSET_COMMIT, apis.OFFSET_FETCH,
    apis.DESCRIBE_GROUPS, apis.LIST_GROUPS, apis.DELETE_GROUPS, apis.OFFSET_DELETE,
    apis.ADD_PARTITIONS_TO_TXN, apis.ADD_OFFSETS_TO_TXN, apis.END_TXN, apis.TXN_OFFSET_COMMIT,
})
NOT_SERVED = frozenset({apis.DELETE_TOPICS})


async def no_coordinator(broker: BrokerContext, request: Request, client: Client) -> Any:
    raise CoordinatorNotAvailable(f"{apis.api_name(request.api_key)}: no group or transaction coordinator in "
                                  "cluster mode yet")


async def idempotent_producer_id(broker: BrokerContext, request: Request, client: Client) -> Any:
    if request.body.transactional_id is not None:
        raise CoordinatorNotAvailable("no transaction coordinator in cluster mode yet")
    return await init_producer_id.handle(broker, request, client)


CLUSTER_ROUTES: dict[int, Handler] = {
    key: (no_coordinator if key in COORDINATED else handler)
    for key, handler in ROUTES.items() if key not in NOT_SERVED
}
CLUSTER_ROUTES[apis.INIT_PRODUCER_ID] = idempotent_producer_id
