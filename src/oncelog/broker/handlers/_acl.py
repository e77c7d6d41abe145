"""Authorization in the handlers (issue 18): the ``Gate`` a handler asks, and the
authorized-operations bitfields (KIP-430).

``gate(broker, client, API_KEY)`` is None when ACLs are off (``authorizer.class.name`` empty):
a handler then skips every check, so ACLs off costs one attribute test per request. Otherwise
the gate answers for the client's principal and host, reading the operation, the resource type
and the error code of each check from ``acl/rules.RULES[API_KEY][role]``; a handler names only
the role and the resource name. Decisions are never cached: an ACL change applies to the next
request on every connection.

Authorized operations: with no authorizer, every operation the resource type supports (as Kafka
does); with one, exactly those the principal is allowed. A request that does not ask for them
gets ``NOT_REQUESTED`` (Integer.MIN_VALUE).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from oncelog.acl.authorizer import Authorizer
from oncelog.acl.model import CLUSTER_NAME, SUPPORTED_OPERATIONS, ResourceType
from oncelog.acl.rules import RULES, Need
from oncelog.broker.context import BrokerContext, Client
from oncelog.protocol.errors import ErrorCode, error_for

if TYPE_CHECKING:
    from kio.static.protocol import RequestPayload  # kio's type of every request (the flag differs by API)

log = logging.getLogger(__name__)

__all__ = ["CLUSTER", "GROUP", "Gate", "NOT_REQUESTED", "TOPIC", "TRANSACTIONAL_ID", "authorized_operations", "gate"]

NOT_REQUESTED = -2147483648


def _bits(rtype: ResourceType) -> int:
    return sum(1 << int(op) for op in SUPPORTED_OPERATIONS[rtype])


TOPIC = _bits(ResourceType.TOPIC)
GROUP = _bits(ResourceType.GROUP)
CLUSTER = _bits(ResourceType.CLUSTER)
TRANSACTIONAL_ID = _bits(ResourceType.TRANSACTIONAL_ID)
_ALL_BITS = {ResourceType.TOPIC: TOPIC, ResourceType.GROUP: GROUP, ResourceType.CLUSTER: CLUSTER,
             ResourceType.TRANSACTIONAL_ID: TRANSACTIONAL_ID}


class Gate:
    """The checks of one request: principal and host fixed, rules of one API."""

    __slots__ = ("_az", "_host", "_principal", "_rules")

    def __init__(self, authorizer: Authorizer, principal: str, host: str, rules: dict[str, Need]) -> None:
        self._az = authorizer
        self._principal = principal
        self._host = host
        self._rules = rules

    @property
    def principal(self) -> str:
        return self._principal

    def allowed(self, role: str, name: str = CLUSTER_NAME) -> bool:
        n = self._rules[role]
        return self._az.authorize(self._principal, self._host, n.operation, n.resource, name)

    def denied(self, role: str, name: str = CLUSTER_NAME) -> ErrorCode | None:
        """The rule's error code when the check fails, else None."""
        n = self._rules[role]
        if self._az.authorize(self._principal, self._host, n.operation, n.resource, name):
            return None
        assert n.error is not None, f"rule {role} has no error code"
        log.debug("denied: %s from %s may not %s %s %s", self._principal, self._host, n.operation.name,
                  n.resource.name, name)
        return n.error

    def require(self, role: str, name: str = CLUSTER_NAME) -> None:
        """Raises the rule's KafkaError (for the dispatcher to answer) when the check fails."""
        code = self.denied(role, name)
        if code is not None:
            n = self._rules[role]
            raise error_for(code, f"{self._principal} may not {n.operation.name} {n.resource.name} {name}")

    def any_allowed(self, role: str) -> bool:
        """The rule's operation allowed on some resource of its type (``authorizeByResourceType``)."""
        n = self._rules[role]
        return self._az.authorize_any(self._principal, self._host, n.operation, n.resource)

    def operations(self, rtype: ResourceType, name: str) -> int:
        return self._az.operations(self._principal, self._host, rtype, name)


def gate(broker: BrokerContext, client: Client, api_key: int) -> Gate | None:
    """The request's gate, or None when ACLs are off (everything allowed)."""
    acls = broker.acls
    if acls is None:
        return None
    return Gate(acls.authorizer, client.principal, client.host, RULES[api_key])


def authorized_operations(g: Gate | None, req: "RequestPayload", flag: str, rtype: ResourceType, name: str = CLUSTER_NAME) -> int:
    """KIP-430: NOT_REQUESTED unless the request's boolean ``flag`` is set; every supported
    operation without an authorizer; the allowed ones with."""
    if not getattr(req, flag, False):
        return NOT_REQUESTED
    if g is None:
        return _ALL_BITS[rtype]
    return g.operations(rtype, name)


def cluster_operations(g: Gate | None, req: "RequestPayload") -> int:
    """KIP-430 cluster operations (Metadata v8-10, DescribeCluster): 0 without DESCRIBE on the
    cluster (the rule ``cluster_ops``), as Kafka."""
    if g is not None and getattr(req, "include_cluster_authorized_operations", False) and not g.allowed("cluster_ops"):
        return 0
    return authorized_operations(g, req, "include_cluster_authorized_operations", ResourceType.CLUSTER)


def denied(g: Gate | None, role: str, name: str = CLUSTER_NAME) -> ErrorCode | None:
    """``g.denied(role, name)``, or None (allowed) when ACLs are off."""
    return None if g is None else g.denied(role, name)


def refuse(code: ErrorCode, principal: str, what: str) -> None:
    """Raise the KafkaError of ``code`` naming who was refused what."""
    raise error_for(code, f"{principal} is not authorized: {what}")


def check(g: Gate | None, role: str, name: str = CLUSTER_NAME) -> None:
    """``g.require(role, name)`` when ACLs are on: raises the rule's KafkaError if refused."""
    if g is not None:
        g.require(role, name)


#: config resource type (DescribeConfigs / AlterConfigs) -> the role of its ACL check and whether
#: the resource name is the checked name (TOPIC 2, GROUP 32) or the cluster (BROKER 4, BROKER_LOGGER 8)
_CONFIG_ROLES = {2: ("topic", True), 32: ("group", True), 4: ("cluster", False), 8: ("cluster", False)}


def check_config_resource(g: Gate | None, resource_type: int, name: str) -> None:
    """ACLs of the config APIs (issue 18): DESCRIBE_CONFIGS / ALTER_CONFIGS (per the API's rule)
    on the topic or group, or on the cluster for a broker; raises the rule's error."""
    if g is None:
        return
    role = _CONFIG_ROLES.get(resource_type)
    if role is not None:
        g.require(role[0], name if role[1] else CLUSTER_NAME)
