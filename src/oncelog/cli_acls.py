"""``oncelog acls add|remove|list``: manage ACLs (issue 18) in the words of Kafka's
``kafka-acls.sh`` (``--allow-principal User:alice --operation Read --topic t``,
``--resource-pattern-type prefixed``, ``--producer`` / ``--consumer``). The work is
``admin.acls``; this module parses options and prints (a rich table, or ``--json``).

``--bootstrap-server`` talks to a running broker (CreateAcls / DeleteAcls / DescribeAcls);
``--data-dir`` edits an embedded broker's ``acls.json`` while no broker runs on it, and
``--store URL`` a cluster's ACLs in its PostgreSQL store: how the first ACLs are given before
anyone can authenticate as a super user.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional

import typer
from oncelog.cli_output import Table, console, emit_json, fail

from oncelog.acl.model import AclBinding, PatternType, PermissionType
from oncelog.admin.acls import AclOptions, AclsError, FileAcls, WireAcls, binding_json

app = typer.Typer(no_args_is_help=True, help="Add, remove and list ACLs (kafka-acls.sh's options).")

BOOTSTRAP = typer.Option(None, "--bootstrap-server", "-b", help="HOST:PORT of a broker (default 127.0.0.1:9092)")
DATA_DIR = typer.Option(None, "--data-dir", help="edit this embedded broker's acls.json instead (no broker running)")
STORE = typer.Option(None, "--store", help="edit a cluster's ACLs in its PostgreSQL store (postgresql://…)")
JSON = typer.Option(False, "--json", help="print JSON (for scripts) instead of a table")
ALLOW_P = typer.Option([], "--allow-principal", help="principal to allow, e.g. User:alice or User:* (repeatable)")
DENY_P = typer.Option([], "--deny-principal", help="principal to deny (repeatable)")
ALLOW_H = typer.Option([], "--allow-host", help="host of the allow principals (default *)")
DENY_H = typer.Option([], "--deny-host", help="host of the deny principals (default *)")
OPS = typer.Option([], "--operation", help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                                           "DescribeConfigs, AlterConfigs, IdempotentWrite, TwoPhaseCommit, All")
TOPICS = typer.Option([], "--topic", help="topic (repeatable; with prefixed: a prefix; * for every topic)")
GROUPS = typer.Option([], "--group", help="consumer group (repeatable)")
TXN_IDS = typer.Option([], "--transactional-id", help="transactional id (repeatable)")
CLUSTER = typer.Option(False, "--cluster", help="the cluster resource")
PATTERN = typer.Option(None, "--resource-pattern-type", help="literal (default), prefixed; list/remove also any, match")


_emit = emit_json
_fail = fail


def _target(bootstrap: Optional[str], data_dir: Optional[Path], store: Optional[str] = None) -> WireAcls | FileAcls:
    if sum(x is not None for x in (bootstrap, data_dir, store)) > 1:
        raise AclsError("give one of --bootstrap-server, --data-dir, --store")
    if store is not None:
        from oncelog.cluster import missing_driver

        missing = missing_driver()
        if missing is not None:
            raise AclsError(missing)
    if data_dir is not None or store is not None:
        return FileAcls(data_dir, store)
    return WireAcls(bootstrap or "127.0.0.1:9092")


def _print(bindings: list[AclBinding], as_json: bool, key: str) -> None:
    if as_json:
        _emit({key: [binding_json(b) for b in bindings]})
        return
    t = Table()
    for c in ("resource", "pattern", "principal", "host", "operation", "permission"):
        t.add_column(c)
    for b in bindings:
        t.add_row(f"{b.resource_type.name}:{b.name}", b.pattern_type.name, b.principal, b.host, b.operation.name,
                  b.permission.name)
    console.print(t)


def _options(allow_p: list[str], deny_p: list[str], allow_h: list[str], deny_h: list[str], ops: list[str],
             topics: list[str], groups: list[str], txn_ids: list[str], cluster: bool, pattern: Optional[str],
             producer: bool = False, consumer: bool = False, idempotent: bool = False) -> AclOptions:
    return AclOptions(allow_principals=allow_p, deny_principals=deny_p, allow_hosts=allow_h, deny_hosts=deny_h,
                      operations=ops, topics=topics, groups=groups, transactional_ids=txn_ids, cluster=cluster,
                      pattern_type=pattern, producer=producer, consumer=consumer, idempotent=idempotent)


@app.command("add")
def add(
    bootstrap: Optional[str] = BOOTSTRAP, data_dir: Optional[Path] = DATA_DIR, store: Optional[str] = STORE,
    allow_principal: list[str] = ALLOW_P, deny_principal: list[str] = DENY_P,
    allow_host: list[str] = ALLOW_H, deny_host: list[str] = DENY_H, operation: list[str] = OPS,
    topic: list[str] = TOPICS, group: list[str] = GROUPS, transactional_id: list[str] = TXN_IDS,
    cluster: bool = CLUSTER, resource_pattern_type: Optional[str] = PATTERN,
    producer: bool = typer.Option(False, "--producer", help="WRITE, DESCRIBE, CREATE on the topics (and the ids)"),
    consumer: bool = typer.Option(False, "--consumer", help="READ, DESCRIBE on the topics, READ on the groups"),
    idempotent: bool = typer.Option(False, "--idempotent", help="with --producer: IDEMPOTENT_WRITE on the cluster"),
    as_json: bool = JSON,
) -> None:
    """Add ACLs: every principal x host x operation on every resource named."""
    try:
        bindings = _options(allow_principal, deny_principal, allow_host, deny_host, operation, topic, group,
                            transactional_id, cluster, resource_pattern_type, producer, consumer, idempotent).bindings()
        with _target(bootstrap, data_dir, store) as t:
            t.add(bindings)
    except (AclsError, OSError) as exc:
        _fail(str(exc), as_json)
        return
    _print(bindings, as_json, "added")


@app.command("remove")
def remove(
    bootstrap: Optional[str] = BOOTSTRAP, data_dir: Optional[Path] = DATA_DIR, store: Optional[str] = STORE,
    allow_principal: list[str] = ALLOW_P, deny_principal: list[str] = DENY_P,
    allow_host: list[str] = ALLOW_H, deny_host: list[str] = DENY_H, operation: list[str] = OPS,
    topic: list[str] = TOPICS, group: list[str] = GROUPS, transactional_id: list[str] = TXN_IDS,
    cluster: bool = CLUSTER, resource_pattern_type: Optional[str] = PATTERN, as_json: bool = JSON,
) -> None:
    """Remove the ACLs matching the options (every ACL of the resources named when no principal or
    operation narrows it down)."""
    try:
        opts = _options(allow_principal, deny_principal, allow_host, deny_host, operation, topic, group,
                        transactional_id, cluster, resource_pattern_type)
        if not opts.resources(PatternType.LITERAL):
            raise AclsError("name a resource: --topic, --group, --transactional-id or --cluster")
        with _target(bootstrap, data_dir, store) as t:
            gone = t.remove(opts.filters())
    except (AclsError, OSError) as exc:
        _fail(str(exc), as_json)
        return
    _print(gone, as_json, "removed")


@app.command("list")
def list_(
    bootstrap: Optional[str] = BOOTSTRAP, data_dir: Optional[Path] = DATA_DIR, store: Optional[str] = STORE,
    principal: list[str] = typer.Option([], "--principal", help="only ACLs of this principal"),
    topic: list[str] = TOPICS, group: list[str] = GROUPS, transactional_id: list[str] = TXN_IDS,
    cluster: bool = CLUSTER, resource_pattern_type: Optional[str] = PATTERN, as_json: bool = JSON,
) -> None:
    """List ACLs: of the resources named (every ACL when none is)."""
    try:
        opts = _options(principal, [], [], [], [], topic, group, transactional_id, cluster, resource_pattern_type)
        flts = opts.filters()
        if principal:  # --principal lists both permissions
            flts = [dataclasses.replace(f, permission=PermissionType.ANY) for f in flts]
        with _target(bootstrap, data_dir, store) as t:
            found = t.list(flts)
    except (AclsError, OSError) as exc:
        _fail(str(exc), as_json)
        return
    _print(found, as_json, "acls")
