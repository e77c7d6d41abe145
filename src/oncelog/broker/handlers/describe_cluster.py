"""DescribeCluster (60): the brokers, the cluster id and the controller: this broker alone when
embedded; in cluster mode every live broker as registered in the store (handlers/_cluster.py).
Authorized operations when asked: those allowed (all without an authorizer; 0 without DESCRIBE on the cluster: _acl.py, issue 18). v2's
``include_fenced_brokers`` changes nothing: a broker listed is live, never fenced."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl, _cluster
from oncelog.protocol.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.framing import Request

API_KEY = apis.DESCRIBE_CLUSTER


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    m = Builder(API_KEY, request.api_version)
    return m.DescribeClusterResponse(
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=1,
        cluster_id=broker.cluster_id,
        controller_id=_cluster.controller_id(broker),
        brokers=tuple(m.DescribeClusterBroker(broker_id=n.node_id, host=n.host, port=n.port, rack=n.rack, is_fenced=False)
                      for n in _cluster.nodes(broker)),
        cluster_authorized_operations=_acl.cluster_operations(_acl.gate(broker, client, API_KEY), request.body),
    )
