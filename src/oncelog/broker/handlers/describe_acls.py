"""DescribeAcls (29): the ACL bindings a filter selects, grouped by resource pattern (issue 18).

Needs DESCRIBE on the CLUSTER (acl/rules.py), else CLUSTER_AUTHORIZATION_FAILED. With no
authorizer configured the answer is SECURITY_DISABLED, as Kafka's. A filter with an UNKNOWN
type, pattern, operation or permission answers INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from oncelog.acl.model import AclBinding, AclFilter
from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.DESCRIBE_ACLS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    g = _acl.gate(broker, client, API_KEY)
    if broker.acls is None or g is None:
        return m.DescribeAclsResponse(error_code=ErrorCode.security_disabled,
                                      error_message="No Authorizer is configured on the broker", resources=())
    g.require("cluster")
    try:
        flt = AclFilter.of(req.resource_type_filter, req.resource_name_filter, req.pattern_type_filter,
                           req.principal_filter, req.host_filter, req.operation, req.permission_type)
    except KafkaError as exc:
        return m.DescribeAclsResponse(error_code=exc.code, error_message=str(exc), resources=())
    groups: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in broker.acls.describe(flt):
        groups.setdefault((int(b.resource_type), b.name, int(b.pattern_type)), []).append(b)
    return m.DescribeAclsResponse(
        error_code=ErrorCode.none, error_message=None,
        resources=tuple(
            m.DescribeAclsResource(
                resource_type=rt, resource_name=name, pattern_type=pt,
                acls=tuple(m.AclDescription(principal=b.principal, host=b.host, operation=int(b.operation),
                                            permission_type=int(b.permission)) for b in acls),
            )
            for (rt, name, pt), acls in groups.items()
        ),
    )
