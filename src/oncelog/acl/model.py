"""Kafka's access-control vocabulary, under Kafka's codes (org.apache.kafka.common.acl and
org.apache.kafka.common.resource), and the two values built from it: an ``AclBinding`` (a
resource pattern plus an access-control entry: what CreateAcls stores) and an ``AclFilter``
(what DescribeAcls and DeleteAcls match bindings with). Pure: no I/O.

Codes are Kafka's wire codes (int8): a binding read from the wire or from a file is validated
here (``AclBinding.validate``), so the authorizer only ever holds well-formed bindings.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from oncelog.protocol.errors import InvalidRequest
from oncelog.storable import unstorable

__all__ = [
    "AclBinding", "AclFilter", "AclOperation", "CLUSTER_NAME", "PatternType", "PermissionType", "ResourceType",
    "SUPPORTED_OPERATIONS", "WILDCARD", "WILDCARD_PRINCIPAL", "implied_by",
]

#: the one name a CLUSTER resource has (Kafka's ``Resource.CLUSTER_NAME``)
CLUSTER_NAME = "kafka-cluster"
#: a LITERAL resource name matching every resource of its type
WILDCARD = "*"
#: the principal matching every principal
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filter only: every pattern type, names compared exactly
    MATCH = 2  # filter only: every binding that would apply to the named resource
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class PermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


Op = AclOperation
#: the operations each resource type supports (Kafka's ``AclEntry.supportedOperations``): the
#: bits of the KIP-430 authorized-operations fields, and what CreateAcls accepts for the type
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
                         Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
                           Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE, Op.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (Op.DESCRIBE,),
    ResourceType.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}

_IMPLIED: dict[AclOperation, frozenset[AclOperation]] = {
    Op.DESCRIBE: frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.ALL}),
}


def implied_by(op: AclOperation) -> frozenset[AclOperation]:
    """The operations an ALLOW entry may name to grant ``op``: itself, ALL, and for DESCRIBE
    also READ/WRITE/DELETE/ALTER, for DESCRIBE_CONFIGS also ALTER_CONFIGS (Kafka's implied
    operations). A DENY entry denies only ``op`` itself and ALL."""
    return _IMPLIED.get(op) or frozenset({op, Op.ALL})


def _principal_ok(principal: str) -> bool:
    kind, sep, name = principal.partition(":")
    return bool(sep and kind and name)


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: (resource type, name, pattern type) and (principal, host, operation, permission)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType

    @classmethod
    def of(cls, resource_type: int, name: str, pattern_type: int, principal: str, host: str, operation: int,
           permission: int) -> "AclBinding":
        """A validated binding from wire codes; raises InvalidRequest (CreateAcls answers it per
        creation) for unknown codes, ANY/MATCH/UNKNOWN values, an empty name, a CLUSTER name
        other than ``kafka-cluster``, or a principal that is not ``Type:name``. As Kafka's broker,
        an operation the resource type does not support is accepted (it never matches a check);
        the CLI refuses it, as kafka-acls.sh does."""
        try:
            b = cls(ResourceType(resource_type), name, PatternType(pattern_type), principal, host,
                    AclOperation(operation), PermissionType(permission))
        except ValueError as exc:
            raise InvalidRequest(f"invalid ACL: {exc}") from None
        b.validate()
        return b

    def validate(self) -> None:
        if self.resource_type not in SUPPORTED_OPERATIONS:
            raise InvalidRequest(f"invalid resource type {self.resource_type.name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidRequest(f"invalid pattern type {self.pattern_type.name} (LITERAL or PREFIXED)")
        if self.operation in (Op.ANY, Op.UNKNOWN):
            raise InvalidRequest(f"invalid operation {self.operation.name}")
        if self.permission not in (PermissionType.ALLOW, PermissionType.DENY):
            raise InvalidRequest(f"invalid permission type {self.permission.name}")
        if not self.name:
            raise InvalidRequest("resource name must not be empty")
        if self.resource_type == ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise InvalidRequest(f"the only valid name for the CLUSTER resource is {CLUSTER_NAME}, not {self.name!r}")
        if not _principal_ok(self.principal):
            raise InvalidRequest(f"invalid principal {self.principal!r} (expected Type:name, e.g. User:alice)")
        if not self.host:
            raise InvalidRequest("host must not be empty (use * for every host)")
        for what, value in (("resource name", self.name), ("principal", self.principal), ("host", self.host)):
            why = unstorable(value)
            if why is not None:
                raise InvalidRequest(f"the ACL's {what} {why}")

    def to_json(self) -> list[object]:
        return [int(self.resource_type), self.name, int(self.pattern_type), self.principal, self.host,
                int(self.operation), int(self.permission)]

    @classmethod
    def from_json(cls, row: list[object]) -> "AclBinding":
        rt, name, pt, principal, host, op, perm = row
        return cls.of(int(rt), str(name), int(pt), str(principal), str(host), int(op), int(perm))  # type: ignore[call-overload]

    def __str__(self) -> str:
        return (f"{self.permission.name} {self.principal} {self.operation.name} from {self.host} on "
                f"{self.resource_type.name}:{self.pattern_type.name}:{self.name}")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A DescribeAcls / DeleteAcls filter. None (name, principal, host) matches anything; ANY
    (types, operation, permission) too. Pattern type ANY compares names exactly across pattern
    types; MATCH selects every binding that applies to the named resource (the literal name, the
    ``*`` wildcard, and every prefix of it)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: PermissionType

    @classmethod
    def of(cls, resource_type: int, name: str | None, pattern_type: int, principal: str | None, host: str | None,
           operation: int, permission: int) -> "AclFilter":
        """A validated filter; raises InvalidRequest for unknown codes or UNKNOWN values."""
        try:
            f = cls(ResourceType(resource_type), name, PatternType(pattern_type), principal, host,
                    AclOperation(operation), PermissionType(permission))
        except ValueError as exc:
            raise InvalidRequest(f"invalid ACL filter: {exc}") from None
        for v in (f.resource_type, f.pattern_type, f.operation, f.permission):
            if v.name == "UNKNOWN":
                raise InvalidRequest(f"invalid ACL filter: {type(v).__name__} UNKNOWN")
        return f

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and b.resource_type != self.resource_type:
            return False
        if self.principal is not None and b.principal != self.principal:
            return False
        if self.host is not None and b.host != self.host:
            return False
        if self.operation != Op.ANY and b.operation != self.operation:
            return False
        if self.permission != PermissionType.ANY and b.permission != self.permission:
            return False
        pt = self.pattern_type
        if pt == PatternType.MATCH:
            if self.name is None:
                return True
            if b.pattern_type == PatternType.LITERAL:
                return b.name == self.name or b.name == WILDCARD
            return self.name.startswith(b.name)
        if pt != PatternType.ANY and b.pattern_type != pt:
            return False
        return self.name is None or b.name == self.name


#: the filter matching every binding
MATCH_ALL = AclFilter(ResourceType.ANY, None, PatternType.ANY, None, None, Op.ANY, PermissionType.ANY)
