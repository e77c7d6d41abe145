"""ListConfigResources (74, KIP-1142): the resources that have configs (v0..v1).

v0 was ListClientMetricsResources: the client-metrics resources, of which this broker has none
(no client telemetry, KIP-714), so the list is empty. v1 lists, for each resource type asked
(none asked: every type Kafka lists), the resources DescribeConfigs describes here:

* TOPIC (2): every topic (internal ones included, as Kafka's metadata cache lists them);
* BROKER (4) and BROKER_LOGGER (8): every live broker, by node id (as Kafka; DescribeConfigs
  answers a BROKER_LOGGER with its error, oncelog's loggers are not configs);
* CLIENT_METRICS (16): none;
* GROUP (32): every group with configs of its own (consumer group configs and share groups'
  configs; in cluster mode the store's).

A type Kafka does not list (UNKNOWN, ANY, ...) makes the whole answer UNSUPPORTED_VERSION, as
Kafka answers it. ACLs: DESCRIBE_CONFIGS on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl, _cluster
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.LIST_CONFIG_RESOURCES
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
#: the resource types Kafka lists (``ListConfigResourcesRequest.supportedResourceTypes``)
LISTED = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    _acl.check(_acl.gate(broker, client, API_KEY), "cluster")
    m = Builder(API_KEY, request.api_version)
    if request.api_version == 0:
        return m.ListConfigResourcesResponse(error_code=ErrorCode.none, config_resources=())
    types = tuple(request.body.resource_types) or LISTED
    if any(t not in LISTED for t in types):
        return m.ListConfigResourcesResponse(error_code=ErrorCode.unsupported_version, config_resources=())
    found: list[tuple[str, int]] = []
    if GROUP in types:
        await broker.groups.configs.refresh()  # cluster mode: the store's
        with_configs = {*await broker.shares.groups_with_configs(), *broker.groups.configs.groups()}
        found += [(g, GROUP) for g in sorted(with_configs)]
    for kind in (BROKER_LOGGER, BROKER):
        if kind in types:
            found += [(str(n.node_id), kind) for n in _cluster.nodes(broker)]
    if TOPIC in types:
        found += [(t, TOPIC) for t in sorted(broker.replicas.topics)]
    return m.ListConfigResourcesResponse(error_code=ErrorCode.none, config_resources=tuple(
        m.ConfigResource(resource_name=name, resource_type=kind) for name, kind in found))
