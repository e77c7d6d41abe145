"""DeleteAcls (31): remove the ACL bindings each filter selects, durably (issue 18).

Needs ALTER on the CLUSTER (acl/rules.py), else every filter answers
CLUSTER_AUTHORIZATION_FAILED. A filter with UNKNOWN values answers INVALID_REQUEST; the valid
filters' matches are removed together (one atomic write) and each filter lists what it matched.
With no authorizer, SECURITY_DISABLED for each.
"""

from __future__ import annotations

from typing import Any

from oncelog.acl.model import AclFilter
from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.DELETE_ACLS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    g = _acl.gate(broker, client, API_KEY)

    def all_(code: ErrorCode, message: str) -> Any:
        return m.DeleteAclsResponse(filter_results=tuple(
            m.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=()) for _ in req.filters))

    if broker.acls is None or g is None:
        return all_(ErrorCode.security_disabled, "No Authorizer is configured on the broker")
    code = g.denied("cluster")
    if code is not None:
        return all_(code, f"{g.principal} may not ALTER the cluster's ACLs")
    parsed: list[AclFilter | KafkaError] = []
    for f in req.filters:
        try:
            parsed.append(AclFilter.of(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                       f.principal_filter, f.host_filter, f.operation, f.permission_type))
        except KafkaError as exc:
            parsed.append(exc)
    valid = [p for p in parsed if isinstance(p, AclFilter)]
    matched = iter(await broker.acls.delete(valid)) if valid else iter(())
    results = []
    for p in parsed:
        if isinstance(p, KafkaError):
            results.append(m.DeleteAclsFilterResult(error_code=p.code, error_message=str(p), matching_acls=()))
            continue
        results.append(m.DeleteAclsFilterResult(
            error_code=ErrorCode.none, error_message=None,
            matching_acls=tuple(
                m.DeleteAclsMatchingAcl(error_code=ErrorCode.none, error_message=None, resource_type=int(b.resource_type),
                                        resource_name=b.name, pattern_type=int(b.pattern_type), principal=b.principal,
                                        host=b.host, operation=int(b.operation), permission_type=int(b.permission))
                for b in next(matched)
            ),
        ))
    return m.DeleteAclsResponse(filter_results=tuple(results))
