"""CreateAcls (30): add ACL bindings, durably, effective on every connection's next request
(issue 18).

Needs ALTER on the CLUSTER (acl/rules.py), else every creation answers
CLUSTER_AUTHORIZATION_FAILED. Each creation is validated on its own (``AclBinding.of``): an
invalid one answers INVALID_REQUEST with the reason, the valid ones are stored together (one
atomic write). With no authorizer, SECURITY_DISABLED for each.
"""

from __future__ import annotations

from typing import Any

from oncelog.acl.model import AclBinding
from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.CREATE_ACLS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    g = _acl.gate(broker, client, API_KEY)

    def all_(code: ErrorCode, message: str) -> Any:
        return m.CreateAclsResponse(results=tuple(m.AclCreationResult(error_code=code, error_message=message)
                                                  for _ in req.creations))

    if broker.acls is None or g is None:
        return all_(ErrorCode.security_disabled, "No Authorizer is configured on the broker")
    code = g.denied("cluster")
    if code is not None:
        return all_(code, f"{g.principal} may not ALTER the cluster's ACLs")
    results: list[tuple[ErrorCode, str | None]] = []
    valid: list[AclBinding] = []
    for c in req.creations:
        try:
            valid.append(AclBinding.of(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal,
                                       c.host, c.operation, c.permission_type))
            results.append((ErrorCode.none, None))
        except KafkaError as exc:
            results.append((exc.code, str(exc)))
    if valid:
        await broker.acls.create(valid)
    return m.CreateAclsResponse(results=tuple(m.AclCreationResult(error_code=c, error_message=msg)
                                              for c, msg in results))
