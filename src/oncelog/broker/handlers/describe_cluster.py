"""DescribeCluster (60): this broker, the cluster id and the controller (also this broker)."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
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
        controller_id=broker.node_id,
        brokers=(m.DescribeClusterBroker(broker_id=broker.node_id, host=broker.advertised_host, port=broker.advertised_port, rack=None),),
        cluster_authorized_operations=-2147483648,
    )
