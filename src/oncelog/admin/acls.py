"""ACL administration (issue 18) behind ``oncelog acls``: bindings and filters from kafka-acls.sh's
options (pure), and the three ACL APIs over the wire, or the embedded broker's ``acls.json``
directly (``--data-dir``, before any broker runs, as ``kafka-storage format --add-scram`` does
for credentials).

Errors: ``AclsError`` with a message naming what failed (an invalid option, a broker refusal
with its Kafka error name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oncelog.acl.authorizer import Authorizer, AuthorizerSettings
from oncelog.acl.file_store import AclFileStore
from oncelog.acl.model import (
    CLUSTER_NAME, SUPPORTED_OPERATIONS, AclBinding, AclFilter, AclOperation, PatternType, PermissionType, ResourceType,
)
from oncelog.client import ProtocolClient
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError

__all__ = ["AclOptions", "AclsError", "WireAcls", "FileAcls", "parse_operation"]


class AclsError(Exception):
    pass


def parse_operation(text: str) -> AclOperation:
    """kafka-acls.sh's spelling (Read, ClusterAction, IdempotentWrite, All…), any case, ``-``/``_`` ok."""
    key = re.sub(r"[-_ ]", "", text).lower()
    for op in AclOperation:
        if op.name.replace("_", "").lower() == key and op not in (AclOperation.UNKNOWN, AclOperation.ANY):
            return op
    raise AclsError(f"unknown operation {text!r} (e.g. Read, Write, Describe, ClusterAction, All)")


def _pattern(text: str) -> PatternType:
    try:
        return PatternType[text.upper()]
    except KeyError:
        raise AclsError(f"unknown resource pattern type {text!r} (literal, prefixed, match, any)") from None


@dataclass
class AclOptions:
    """The options of one ``oncelog acls`` command, in kafka-acls.sh's words."""

    allow_principals: list[str] = field(default_factory=list)
    deny_principals: list[str] = field(default_factory=list)
    allow_hosts: list[str] = field(default_factory=list)
    deny_hosts: list[str] = field(default_factory=list)
    operations: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    transactional_ids: list[str] = field(default_factory=list)
    cluster: bool = False
    pattern_type: str | None = None
    producer: bool = False
    consumer: bool = False
    idempotent: bool = False

    def resources(self, default_pattern: PatternType) -> list[tuple[ResourceType, str, PatternType]]:
        pt = _pattern(self.pattern_type) if self.pattern_type else default_pattern
        out = [(ResourceType.TOPIC, t, pt) for t in self.topics]
        out += [(ResourceType.GROUP, g, pt) for g in self.groups]
        out += [(ResourceType.TRANSACTIONAL_ID, x, pt) for x in self.transactional_ids]
        if self.cluster or (self.producer and self.idempotent):
            out.append((ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
        return out

    def _ops_for(self, rtype: ResourceType) -> list[AclOperation]:
        if self.producer or self.consumer:  # kafka-acls.sh's convenience options
            ops: list[AclOperation] = []
            if self.producer:
                ops += {ResourceType.TOPIC: [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE],
                        ResourceType.TRANSACTIONAL_ID: [AclOperation.WRITE, AclOperation.DESCRIBE],
                        ResourceType.CLUSTER: [AclOperation.IDEMPOTENT_WRITE]}.get(rtype, [])
            if self.consumer:
                ops += {ResourceType.TOPIC: [AclOperation.READ, AclOperation.DESCRIBE],
                        ResourceType.GROUP: [AclOperation.READ]}.get(rtype, [])
            return list(dict.fromkeys(ops))
        return [parse_operation(o) for o in self.operations]

    def bindings(self) -> list[AclBinding]:
        """``add``: every (principal, host, operation) on every resource; raises AclsError."""
        resources = self.resources(PatternType.LITERAL)
        if not resources:
            raise AclsError("name a resource: --topic, --group, --transactional-id or --cluster")
        if not self.allow_principals and not self.deny_principals:
            raise AclsError("name a principal: --allow-principal or --deny-principal (e.g. User:alice)")
        if not (self.operations or self.producer or self.consumer):
            raise AclsError("name an operation: --operation (e.g. Read), or --producer / --consumer")
        out: list[AclBinding] = []
        for rtype, name, pt in resources:
            if pt not in (PatternType.LITERAL, PatternType.PREFIXED):
                raise AclsError("ACLs are added with --resource-pattern-type literal or prefixed")
            for perm, principals, hosts in ((PermissionType.ALLOW, self.allow_principals, self.allow_hosts),
                                            (PermissionType.DENY, self.deny_principals, self.deny_hosts)):
                for principal in principals:
                    for host in hosts or ["*"]:
                        for op in self._ops_for(rtype):
                            if op != AclOperation.ALL and op not in SUPPORTED_OPERATIONS[rtype]:
                                raise AclsError(f"operation {op.name} is not supported on {rtype.name} (supported: "
                                                + ", ".join(o.name for o in SUPPORTED_OPERATIONS[rtype]) + ")")
                            try:
                                out.append(AclBinding.of(rtype, name, pt, principal, host, op, perm))
                            except KafkaError as exc:
                                raise AclsError(str(exc)) from None
        return out

    def filters(self) -> list[AclFilter]:
        """``remove`` / ``list``: one filter per resource (every resource when none is named),
        narrowed by the principals, hosts and operations given (any when not given)."""
        resources: list[tuple[ResourceType, str | None, PatternType]] = list(self.resources(PatternType.LITERAL))
        if not resources:
            resources = [(ResourceType.ANY, None, _pattern(self.pattern_type) if self.pattern_type else PatternType.ANY)]
        entries: list[tuple[str | None, str | None, PermissionType]] = []
        for perm, principals, hosts in ((PermissionType.ALLOW, self.allow_principals, self.allow_hosts),
                                        (PermissionType.DENY, self.deny_principals, self.deny_hosts)):
            for principal in principals:
                for host in hosts or [None]:  # type: ignore[list-item]
                    entries.append((principal, host, perm))
        if not entries:
            entries = [(None, None, PermissionType.ANY)]
        ops: list[AclOperation] = [parse_operation(o) for o in self.operations] or [AclOperation.ANY]
        return [AclFilter(rt, name, pt, principal, host, op, perm)
                for rt, name, pt in resources for principal, host, perm in entries for op in ops]


def binding_json(b: AclBinding) -> dict[str, Any]:
    return {"resource_type": b.resource_type.name, "name": b.name, "pattern_type": b.pattern_type.name,
            "principal": b.principal, "host": b.host, "operation": b.operation.name, "permission": b.permission.name}


def _check(code: Any, message: str | None, what: str) -> None:
    if int(code) != 0:
        raise AclsError(f"{what}: {ErrorCode(int(code)).name.upper()}" + (f" ({message})" if message else ""))


class WireAcls:
    """The three ACL APIs against a running broker."""

    def __init__(self, bootstrap: str, timeout: float = 10.0, source_host: str | None = None) -> None:
        self.client = ProtocolClient(bootstrap, timeout=timeout, client_id="oncelog-acls", source_host=source_host)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "WireAcls":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, bindings: list[AclBinding]) -> None:
        c = self.client.classes(apis.CREATE_ACLS)
        body = c["CreateAclsRequest"](creations=tuple(
            c["AclCreation"](resource_type=int(b.resource_type), resource_name=b.name,
                             resource_pattern_type=int(b.pattern_type), principal=b.principal, host=b.host,
                             operation=int(b.operation), permission_type=int(b.permission)) for b in bindings))
        resp = self.client.request(apis.CREATE_ACLS, body)
        for b, r in zip(bindings, resp.results):
            _check(r.error_code, r.error_message, f"adding {b}")

    def remove(self, filters: list[AclFilter]) -> list[AclBinding]:
        c = self.client.classes(apis.DELETE_ACLS)
        body = c["DeleteAclsRequest"](filters=tuple(
            c["DeleteAclsFilter"](resource_type_filter=int(f.resource_type), resource_name_filter=f.name,
                                  pattern_type_filter=int(f.pattern_type), principal_filter=f.principal,
                                  host_filter=f.host, operation=int(f.operation), permission_type=int(f.permission))
            for f in filters))
        resp = self.client.request(apis.DELETE_ACLS, body)
        out: list[AclBinding] = []
        for r in resp.filter_results:
            _check(r.error_code, r.error_message, "removing ACLs")
            out += [AclBinding.of(a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host, a.operation,
                                  a.permission_type) for a in r.matching_acls]
        return list(dict.fromkeys(out))

    def list(self, filters: list[AclFilter]) -> list[AclBinding]:
        c = self.client.classes(apis.DESCRIBE_ACLS)
        out: list[AclBinding] = []
        for f in filters:
            resp = self.client.request(apis.DESCRIBE_ACLS, c["DescribeAclsRequest"](
                resource_type_filter=int(f.resource_type), resource_name_filter=f.name,
                pattern_type_filter=int(f.pattern_type), principal_filter=f.principal, host_filter=f.host,
                operation=int(f.operation), permission_type=int(f.permission)))
            _check(resp.error_code, resp.error_message, "listing ACLs")
            for res in resp.resources:
                out += [AclBinding.of(res.resource_type, res.resource_name, res.pattern_type, a.principal, a.host,
                                      a.operation, a.permission_type) for a in res.acls]
        return list(dict.fromkeys(out))


class FileAcls:
    """The same three operations on an embedded broker's ``<data-dir>/acls.json`` while no broker
    runs on it (a running broker would not see the change until restarted), or (``store``) on a
    cluster's PostgreSQL store, where running brokers apply the change within a poll."""

    def __init__(self, data_dir: Path | None = None, store: str | None = None) -> None:
        if store is not None:
            from oncelog.cluster.connection import connector
            from oncelog.cluster.acls import StoreAcls
            from oncelog.cluster.schema import ensure_schema

            connect = connector(store)
            conn = connect()
            try:
                ensure_schema(conn)
            finally:
                conn.close()
            self.store: Any = StoreAcls(connect, "oncelog acls")
        else:
            assert data_dir is not None
            Path(data_dir).mkdir(parents=True, exist_ok=True)
            self.store = AclFileStore(Path(data_dir))
        self.az = Authorizer(AuthorizerSettings(), self.store.load())

    def __enter__(self) -> "FileAcls":
        return self

    def __exit__(self, *exc: object) -> None:
        close = getattr(self.store, "close", None)
        if close is not None:
            close()

    def add(self, bindings: list[AclBinding]) -> None:
        self.az.replace(self.store.apply(self.az.bindings, bindings, ()))

    def remove(self, filters: list[AclFilter]) -> list[AclBinding]:
        gone = list(dict.fromkeys(b for f in filters for b in self.az.matching(f)))
        self.az.replace(self.store.apply(self.az.bindings, (), gone))
        return gone

    def list(self, filters: list[AclFilter]) -> list[AclBinding]:
        return list(dict.fromkeys(b for f in filters for b in self.az.matching(f)))
