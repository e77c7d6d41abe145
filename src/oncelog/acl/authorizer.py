"""The authorizer: Kafka's StandardAuthorizer decisions over an index of ACL bindings. Pure: no
I/O, no clock; the broker's shell feeds it bindings (``replace``) and asks it questions.

A check (``authorize``) is decided in this order, as Kafka does:
1. a super user (``super.users``) is allowed everything;
2. the bindings that apply to the resource are gathered: LITERAL on its name, LITERAL on ``*``,
   and PREFIXED on every prefix of its name. Those whose principal (exact, or ``User:*``) and
   host (exact, or ``*``) match the request take part;
3. any such DENY naming the operation (or ALL) denies — DENY wins;
4. any such ALLOW naming the operation, ALL, or an operation that implies it (DESCRIBE is
   implied by READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS) allows;
5. otherwise: denied, unless no binding at all (of any principal) applies to the resource and
   ``allow.everyone.if.no.acl.found`` is set.

Cost: bindings are indexed by (resource type, literal name) and, for prefixes, by (resource
type, prefix) with the set of prefix lengths in use, so a check costs a few dictionary lookups
plus one per distinct prefix length, whatever the number of bindings.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from oncelog.acl.model import (
    CLUSTER_NAME, SUPPORTED_OPERATIONS, WILDCARD, WILDCARD_PRINCIPAL, AclBinding, AclFilter, AclOperation,
    PatternType, PermissionType, ResourceType, implied_by,
)

__all__ = ["Authorizer", "AuthorizerSettings", "parse_super_users"]

_ALLOW, _DENY = PermissionType.ALLOW, PermissionType.DENY


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users``: principals separated by ``;`` (Kafka's format), blanks ignored."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


@dataclass(frozen=True, slots=True)
class AuthorizerSettings:
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


class Authorizer:
    """The bindings and the decisions. Single-threaded (the broker's event loop)."""

    def __init__(self, settings: AuthorizerSettings, bindings: Iterable[AclBinding] = ()) -> None:
        self.settings = settings
        self._bindings: frozenset[AclBinding] = frozenset()
        self._literal: dict[tuple[ResourceType, str], tuple[AclBinding, ...]] = {}
        self._prefixed: dict[tuple[ResourceType, str], tuple[AclBinding, ...]] = {}
        self._prefix_lengths: dict[ResourceType, tuple[int, ...]] = {}
        self.replace(bindings)

    # -- the bindings -------------------------------------------------------------------------

    @property
    def bindings(self) -> frozenset[AclBinding]:
        return self._bindings

    def replace(self, bindings: Iterable[AclBinding]) -> None:
        """Make ``bindings`` the whole set (rebuilding the index); the next check sees them."""
        self._bindings = frozenset(bindings)
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = defaultdict(list)
        prefixed: dict[tuple[ResourceType, str], list[AclBinding]] = defaultdict(list)
        lengths: dict[ResourceType, set[int]] = defaultdict(set)
        for b in self._bindings:
            if b.pattern_type == PatternType.LITERAL:
                literal[(b.resource_type, b.name)].append(b)
            else:
                prefixed[(b.resource_type, b.name)].append(b)
                lengths[b.resource_type].add(len(b.name))
        self._literal = {k: tuple(v) for k, v in literal.items()}
        self._prefixed = {k: tuple(v) for k, v in prefixed.items()}
        self._prefix_lengths = {k: tuple(sorted(v)) for k, v in lengths.items()}

    def matching(self, flt: AclFilter) -> list[AclBinding]:
        """The bindings ``flt`` selects, in a stable order (resource, then entry)."""
        return sorted((b for b in self._bindings if flt.matches(b)), key=_order)

    # -- decisions ----------------------------------------------------------------------------

    def _applicable(self, rtype: ResourceType, name: str) -> list[AclBinding]:
        out: list[AclBinding] = []
        lit = self._literal
        got = lit.get((rtype, name))
        if got:
            out.extend(got)
        if name != WILDCARD:
            got = lit.get((rtype, WILDCARD))
            if got:
                out.extend(got)
        lengths = self._prefix_lengths.get(rtype)
        if lengths:
            pre = self._prefixed
            n = len(name)
            for k in lengths:
                if k > n:
                    break
                got = pre.get((rtype, name[:k]))
                if got:
                    out.extend(got)
        return out

    def authorize(self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        """May ``principal`` connecting from ``host`` perform ``op`` on the resource? (see the
        module docstring for the order of the rules)"""
        if principal in self.settings.super_users:
            return True
        acls = self._applicable(rtype, name)
        if not acls:
            return self.settings.allow_everyone_if_no_acl_found
        grants = implied_by(op)
        allowed = False
        for b in acls:
            if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
                continue
            if b.host != host and b.host != WILDCARD:
                continue
            if b.permission == _DENY:
                if b.operation == op or b.operation == AclOperation.ALL:
                    return False
            elif b.operation in grants:
                allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, op: AclOperation, rtype: ResourceType) -> bool:
        """Kafka's ``authorizeByResourceType``: could ``principal`` perform ``op`` on *some*
        resource of the type? True for a super user or where a check of an arbitrary name would
        pass; otherwise true when an ALLOW (naming ``op`` or ALL) exists that no DENY dominates: a
        LITERAL allow not denied by the same literal name nor by a PREFIXED deny of one of its
        prefixes, or a PREFIXED allow none of whose prefixes is denied. A LITERAL ``*`` deny denies
        outright; a LITERAL ``*`` allow allows (unless so denied). (Used by InitProducerId without
        a transactional id: WRITE on any topic.)"""
        if self.authorize(principal, host, op, rtype, "hardcode"):
            return True
        deny_lit: set[str] = set()
        deny_pre: set[str] = set()
        allow: list[AclBinding] = []
        wildcard_allow = False
        for b in self._bindings:
            if b.resource_type != rtype or b.operation not in (op, AclOperation.ALL):
                continue
            if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
                continue
            if b.host != host and b.host != WILDCARD:
                continue
            if b.permission == _DENY:
                if b.pattern_type == PatternType.LITERAL:
                    if b.name == WILDCARD:
                        return False
                    deny_lit.add(b.name)
                else:
                    deny_pre.add(b.name)
            elif b.pattern_type == PatternType.LITERAL and b.name == WILDCARD:
                wildcard_allow = True
            else:
                allow.append(b)
        if wildcard_allow:
            return True
        for b in allow:
            if b.pattern_type == PatternType.LITERAL and b.name in deny_lit:
                continue
            if not any(b.name[:k] in deny_pre for k in range(1, len(b.name) + 1)):
                return True
        return False

    def operations(self, principal: str, host: str, rtype: ResourceType, name: str) -> int:
        """The KIP-430 bitfield: one bit per supported operation of the type that is allowed."""
        bits = 0
        for op in SUPPORTED_OPERATIONS[rtype]:
            if self.authorize(principal, host, op, rtype, name):
                bits |= 1 << int(op)
        return bits

    def cluster(self, principal: str, host: str, op: AclOperation) -> bool:
        return self.authorize(principal, host, op, ResourceType.CLUSTER, CLUSTER_NAME)


def _order(b: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (int(b.resource_type), b.name, int(b.pattern_type), b.principal, b.host, int(b.operation),
            int(b.permission))
