"""Shared by the ACL integration tests (issue 18): a broker with ACLs on whose admin is
``User:ANONYMOUS`` connecting from 127.0.0.2 (host-based ACLs seeded offline with ``oncelog acls
add --data-dir``), and grants/revocations for the principal under test, which connects from
127.0.0.1. Until SASL lands every connection is User:ANONYMOUS; the principal is a parameter so
the same tests run with SASL principals later.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from oncelog.acl.model import (
    CLUSTER_NAME, AclBinding, AclFilter, AclOperation, PatternType, PermissionType, ResourceType,
)
from oncelog.admin.acls import WireAcls
from oncelog.client import ProtocolClient
from oncelog.process import BrokerProcess

ADMIN_HOST = "127.0.0.2"
SUBJECT_HOST = "127.0.0.1"
ANONYMOUS = "User:ANONYMOUS"
ACL_OVERRIDES = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "",
    "allow.everyone.if.no.acl.found": "false",
}


def seed_admin(data_dir: Path, principal: str = ANONYMOUS) -> None:
    """Before the broker starts: ``principal`` from ADMIN_HOST may do everything (the CLI's
    offline mode, as an operator would)."""
    for args in (["--cluster"], ["--topic", "*"], ["--group", "*"], ["--transactional-id", "*"]):
        subprocess.run([sys.executable, "-m", "oncelog", "acls", "add", "--data-dir", str(data_dir),
                        "--allow-principal", principal, "--allow-host", ADMIN_HOST, "--operation", "All", *args],
                       check=True, capture_output=True, timeout=60)


def start_acl_broker(path: Path, overrides: dict[str, str] | None = None) -> BrokerProcess:
    seed_admin(path)
    return BrokerProcess(path, overrides={"group.initial.rebalance.delay.ms": "0", **ACL_OVERRIDES,
                                          **(overrides or {})}).start()


def admin_client(b: BrokerProcess) -> ProtocolClient:
    return ProtocolClient(b.bootstrap, source_host=ADMIN_HOST, client_id="acl-admin")


class Grants:
    """Grant and revoke ACLs of one principal connecting from SUBJECT_HOST, through the admin's
    connection (the admin's own ACLs, from ADMIN_HOST, are never touched)."""

    def __init__(self, b: BrokerProcess, principal: str) -> None:
        self.acls = WireAcls(b.bootstrap, source_host=ADMIN_HOST)
        self.principal = principal

    def binding(self, rtype: ResourceType, name: str, op: AclOperation, *, deny: bool = False,
                pattern: PatternType = PatternType.LITERAL) -> AclBinding:
        return AclBinding(rtype, CLUSTER_NAME if rtype == ResourceType.CLUSTER else name, pattern, self.principal,
                          SUBJECT_HOST, op, PermissionType.DENY if deny else PermissionType.ALLOW)

    def grant(self, *bindings: AclBinding) -> None:
        if bindings:
            self.acls.add(list(bindings))

    def revoke_all(self) -> None:
        """Every ACL of the principal from SUBJECT_HOST."""
        for b in self.acls.list([AclFilter(ResourceType.ANY, None, PatternType.ANY, self.principal, None,
                                           AclOperation.ANY, PermissionType.ANY)]):
            if b.host == SUBJECT_HOST:
                self.acls.remove([AclFilter(b.resource_type, b.name, b.pattern_type, b.principal, b.host, b.operation,
                                            b.permission)])

    def close(self) -> None:
        self.acls.close()
