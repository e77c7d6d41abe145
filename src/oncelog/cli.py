"""The ``oncelog`` command line.

``oncelog broker --data-dir DIR --listen HOST:PORT`` runs a broker in the foreground; with
``--node-id N --store postgresql://USER@HOST:PORT/DB`` it is a member of a cluster whose
partitions, leaders and metadata live in PostgreSQL (docs/CLUSTER.md). Once it
accepts connections it prints exactly one line, ``oncelog broker ready on HOST:PORT``, to standard
output (tools wait for it); logs go to standard error. SIGTERM or SIGINT stops it cleanly: no new
connections, open ones closed, every log flushed and closed, exit status 0.

``oncelog topics create|list|describe|delete`` administer topics over the wire, like any client.
``oncelog groups list|describe|reset-offsets`` do the same for consumer groups.
``oncelog transactions list|describe|producers|find-hanging|abort`` see and repair transactions
(cli_transactions.py, docs/TRANSACTIONS.md).
``oncelog users add|remove|list`` manage SCRAM credentials (cli_users.py, docs/SECURITY.md).
"""

from __future__ import annotations

import datetime
import logging
import sys
import uuid
from pathlib import Path
from typing import Optional

import typer

from oncelog.cli_output import Table, console
from oncelog.cli_broker import _parse_props
from oncelog.client import ProtocolClient, parse_host_port
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.messages import make
from oncelog_tools.verify.cli import verify_app

app = typer.Typer(add_completion=False, no_args_is_help=True, help="oncelog: a Kafka-compatible, exactly-once broker")
topics_app = typer.Typer(no_args_is_help=True, help="Create, list, describe and delete topics.")
app.add_typer(topics_app, name="topics")
app.add_typer(verify_app, name="verify")
groups_app = typer.Typer(no_args_is_help=True, help="List and describe consumer groups; reset their offsets.")
app.add_typer(groups_app, name="groups")
from oncelog.cli_transactions import app as transactions_app  # noqa: E402  (issue 17)

app.add_typer(transactions_app, name="transactions")
from oncelog.cli_users import app as users_app  # noqa: E402  (issue 18)

app.add_typer(users_app, name="users")

from oncelog.cli_acls import app as acls_app  # noqa: E402  (issue 18)

app.add_typer(acls_app, name="acls")

BOOTSTRAP = typer.Option("127.0.0.1:9092", "--bootstrap-server", "-b", help="HOST:PORT of a broker")


def _broker_command() -> None:
    """Register ``broker``: ``cli_broker.run_broker`` with ``cli_broker.OPTIONS`` as its Typer
    options (the one definition of them; ``python -m oncelog broker`` parses the same without
    Typer when it can)."""
    import inspect

    from oncelog import cli_broker

    def broker(**kwargs: object) -> None:
        """Run a broker in the foreground until SIGTERM."""
        try:
            cli_broker.run_broker(**kwargs)  # type: ignore[arg-type]
        except SystemExit as exc:
            raise typer.Exit(exc.code if isinstance(exc.code, int) else 1) from None

    params = [
        inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, annotation=o.annotation,
                          default=typer.Option(o.default, *o.flags, help=o.help))
        for o in cli_broker.OPTIONS
    ]
    broker.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
    broker.__annotations__ = {o.name: o.annotation for o in cli_broker.OPTIONS} | {"return": None}
    app.command("broker")(broker)


_broker_command()


def _check(code: int, what: str, message: str | None = None) -> None:
    if code != 0:
        console.print(f"[red]{what}: {ErrorCode(code).name}[/red] {message or ''}", highlight=False)
        raise typer.Exit(1)


@topics_app.command("create")
def topics_create(
    name: str,
    partitions: int = typer.Option(1, "--partitions", "-p"),
    replication_factor: int = typer.Option(1, "--replication-factor", "-r"),
    config: list[str] = typer.Option([], "--config", "-c", help="topic config key=value (repeatable)"),
    bootstrap: str = BOOTSTRAP,
) -> None:
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.CREATE_TOPICS)
        req = m["CreateTopicsRequest"](
            topics=(
                m["CreatableTopic"](
                    name=name,
                    num_partitions=partitions,
                    replication_factor=replication_factor,
                    assignments=(),
                    configs=tuple(m["CreatableTopicConfig"](name=k, value=v) for k, v in _parse_props(config).items()),
                ),
            ),
            timeout=datetime.timedelta(seconds=30),
            validate_only=False,
        )
        res = c.request(apis.CREATE_TOPICS, req).topics[0]
        _check(res.error_code, f"cannot create {name}", res.error_message)
        console.print(f"created topic [bold]{name}[/bold] with {partitions} partition(s)")


def _metadata(c: ProtocolClient, names: list[str] | None) -> object:
    v = c.version_for(apis.METADATA)
    m = c.classes(apis.METADATA, v)
    topics = None if names is None else tuple(m["MetadataRequestTopic"](topic_id=uuid.UUID(int=0), name=n) for n in names)
    kw = {"topics": topics}
    from oncelog.protocol.messages import make

    return c.request(apis.METADATA, make(m["MetadataRequest"], allow_auto_topic_creation=False,
                                         include_topic_authorized_operations=False,
                                         include_cluster_authorized_operations=False, **kw), version=v)


@topics_app.command("list")
def topics_list(bootstrap: str = BOOTSTRAP, internal: bool = typer.Option(False, "--internal")) -> None:
    with ProtocolClient(bootstrap) as c:
        md = _metadata(c, None)
        for t in sorted(md.topics, key=lambda t: t.name):  # type: ignore[attr-defined]
            if t.is_internal and not internal:
                continue
            console.print(t.name, highlight=False)


@topics_app.command("describe")
def topics_describe(name: str, bootstrap: str = BOOTSTRAP) -> None:
    with ProtocolClient(bootstrap) as c:
        md = _metadata(c, [name])
        t = md.topics[0]  # type: ignore[attr-defined]
        _check(t.error_code, f"cannot describe {name}")
        lo = _offsets(c, name, len(t.partitions), -2)
        hi = _offsets(c, name, len(t.partitions), -1)
        table = Table(title=f"{name}  (id {t.topic_id})")
        for col in ("partition", "leader", "replicas", "isr", "start offset", "end offset", "records"):
            table.add_column(col, justify="right")
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            i = p.partition_index
            table.add_row(str(i), str(p.leader_id), ",".join(map(str, p.replica_nodes)), ",".join(map(str, p.isr_nodes)),
                          str(lo[i]), str(hi[i]), str(hi[i] - lo[i]))
        console.print(table)


def _offsets(c: ProtocolClient, topic: str, n: int, ts: int) -> dict[int, int]:
    m = c.classes(apis.LIST_OFFSETS)
    req = make(  # make: v10+ has a timeout, older versions do not
        m["ListOffsetsRequest"],
        replica_id=-1,
        isolation_level=0,
        topics=(m["ListOffsetsTopic"](name=topic, partitions=tuple(
            m["ListOffsetsPartition"](partition_index=i, current_leader_epoch=-1, timestamp=ts) for i in range(n))),),
        timeout=datetime.timedelta(seconds=30),
    )
    res = c.request(apis.LIST_OFFSETS, req)
    return {p.partition_index: p.offset for t in res.topics for p in t.partitions}


@topics_app.command("delete")
def topics_delete(name: str, bootstrap: str = BOOTSTRAP) -> None:
    with ProtocolClient(bootstrap) as c:
        v = c.version_for(apis.DELETE_TOPICS)
        m = c.classes(apis.DELETE_TOPICS, v)
        if "DeleteTopicState" in m:
            req = m["DeleteTopicsRequest"](topics=(m["DeleteTopicState"](name=name, topic_id=uuid.UUID(int=0)),),
                                           timeout=datetime.timedelta(seconds=30))
        else:
            req = m["DeleteTopicsRequest"](topic_names=(name,), timeout=datetime.timedelta(seconds=30))
        res = c.request(apis.DELETE_TOPICS, req, version=v).responses[0]
        _check(res.error_code, f"cannot delete {name}", getattr(res, "error_message", None))
        console.print(f"deleted topic [bold]{name}[/bold]")


# -- consumer groups ----------------------------------------------------------------------------


#: OffsetCommit and OffsetFetch name topics by id from v10 (KIP-848): the CLI names them by name
BY_NAME_MAX_VERSION = {apis.OFFSET_COMMIT: 9, apis.OFFSET_FETCH: 9}


def _group_request(c: ProtocolClient, api_key: int, cls: str, **fields: object) -> object:
    from oncelog.protocol.messages import make

    v = min(c.version_for(api_key), BY_NAME_MAX_VERSION.get(api_key, 1 << 15))
    return c.request(api_key, make(c.classes(api_key, v)[cls], **fields), version=v)


def _describe_group(c: ProtocolClient, group: str) -> object:
    res = _group_request(c, apis.DESCRIBE_GROUPS, "DescribeGroupsRequest", groups=(group,),
                         include_authorized_operations=False)
    return res.groups[0]  # type: ignore[attr-defined]


def _committed(c: ProtocolClient, group: str) -> dict[tuple[str, int], int]:
    """Every committed offset of ``group``."""
    v = min(c.version_for(apis.OFFSET_FETCH), BY_NAME_MAX_VERSION[apis.OFFSET_FETCH])
    m = c.classes(apis.OFFSET_FETCH, v)
    from oncelog.protocol.messages import make

    if "OffsetFetchRequestGroup" in m:
        req = make(m["OffsetFetchRequest"], groups=(make(m["OffsetFetchRequestGroup"], group_id=group, topics=None),),
                   require_stable=False)
        res = c.request(apis.OFFSET_FETCH, req, version=v).groups[0]
    else:
        res = c.request(apis.OFFSET_FETCH, make(m["OffsetFetchRequest"], group_id=group, topics=None,
                                                 require_stable=False), version=v)
    _check(res.error_code, f"cannot fetch the offsets of {group}")
    return {(t.name, p.partition_index): p.committed_offset for t in res.topics for p in t.partitions
            if p.committed_offset >= 0}


def _partition_count(c: ProtocolClient, topic: str) -> int:
    t = _metadata(c, [topic]).topics[0]  # type: ignore[attr-defined]
    _check(t.error_code, f"unknown topic {topic}")
    return len(t.partitions)


@groups_app.command("list")
def groups_list(bootstrap: str = BOOTSTRAP) -> None:
    """Every consumer group, with its protocol type, state and type (classic or consumer)."""
    with ProtocolClient(bootstrap) as c:
        res = _group_request(c, apis.LIST_GROUPS, "ListGroupsRequest", states_filter=(), types_filter=())
        if res.error_code:  # type: ignore[attr-defined]
            console.print(f"[yellow]partial list: {ErrorCode(res.error_code).name}[/yellow]")  # type: ignore[attr-defined]
        table = Table()
        for col in ("group", "protocol type", "state", "type"):
            table.add_column(col)
        for g in sorted(res.groups, key=lambda g: g.group_id):  # type: ignore[attr-defined]
            table.add_row(g.group_id, g.protocol_type, getattr(g, "group_state", ""), getattr(g, "group_type", ""))
        console.print(table)


@groups_app.command("describe")
def groups_describe(group: str, bootstrap: str = BOOTSTRAP) -> None:
    """Members and their assignments, committed offsets, log end offsets and lag."""
    from oncelog.coordinator.group.consumer_protocol import assigned_partitions

    with ProtocolClient(bootstrap) as c:
        d = _describe_group(c, group)
        if d.group_state == "Dead" or d.error_code == ErrorCode.group_id_not_found:  # type: ignore[attr-defined]
            consumer = _describe_consumer_group(c, group)
            if consumer is not None:  # a consumer group (KIP-848)
                _show_consumer_group(c, group, consumer)
                return
            from oncelog.cli_share import show_share_group

            if show_share_group(c, group, console):  # a share group (KIP-932)
                return
        _check(d.error_code, f"cannot describe {group}")  # type: ignore[attr-defined]
        console.print(f"group [bold]{group}[/bold]: state {d.group_state}, protocol "  # type: ignore[attr-defined]
                      f"{d.protocol_type or '-'}/{d.protocol_data or '-'}, {len(d.members)} member(s)",  # type: ignore[attr-defined]
                      highlight=False)
        owner: dict[tuple[str, int], str] = {}
        members = Table(title="members")
        for col in ("member id", "instance id", "client id", "host", "assignment"):
            members.add_column(col)
        for mb in d.members:  # type: ignore[attr-defined]
            parts = assigned_partitions(mb.member_assignment) if d.protocol_type == "consumer" else None  # type: ignore[attr-defined]
            for topic, ps in (parts or {}).items():
                for p in ps:
                    owner[(topic, p)] = mb.member_id
            shown = ", ".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted((parts or {}).items()))
            members.add_row(mb.member_id, mb.group_instance_id or "-", mb.client_id, mb.client_host, shown or "-")
        if d.members:  # type: ignore[attr-defined]
            console.print(members)
        _show_offsets(c, group, owner)


def _describe_consumer_group(c: ProtocolClient, group: str) -> object | None:
    """The group as ConsumerGroupDescribe (KIP-848) has it; None when it is no consumer group."""
    if apis.CONSUMER_GROUP_DESCRIBE not in c.versions:
        return None
    res = _group_request(c, apis.CONSUMER_GROUP_DESCRIBE, "ConsumerGroupDescribeRequest", group_ids=(group,),
                         include_authorized_operations=False)
    g = res.groups[0]  # type: ignore[attr-defined]
    return None if g.error_code == ErrorCode.group_id_not_found else g


def _parts(a: object) -> str:
    return ", ".join(f"{t.topic_name or t.topic_id}:{','.join(map(str, sorted(t.partitions)))}"  # type: ignore[attr-defined]
                     for t in sorted(a.topic_partitions, key=lambda t: t.topic_name)) or "-"  # type: ignore[attr-defined]


def _show_consumer_group(c: ProtocolClient, group: str, g: object) -> None:
    """Members with their epochs, subscriptions, current and target assignments; offsets."""
    _check(g.error_code, f"cannot describe {group}")  # type: ignore[attr-defined]
    console.print(f"group [bold]{group}[/bold]: consumer group (KIP-848), state {g.group_state}, "  # type: ignore[attr-defined]
                  f"group epoch {g.group_epoch}, target assignment epoch {g.assignment_epoch}, "  # type: ignore[attr-defined]
                  f"assignor {g.assignor_name}, {len(g.members)} member(s)", highlight=False)  # type: ignore[attr-defined]
    members = Table(title="members")
    for col in ("member id", "instance id", "epoch", "client id", "host", "subscription", "assignment", "target"):
        members.add_column(col)
    owner: dict[tuple[str, int], str] = {}
    for mb in g.members:  # type: ignore[attr-defined]
        for t in mb.assignment.topic_partitions:
            for p in t.partitions:
                owner[(t.topic_name, p)] = mb.member_id
        sub = ", ".join(mb.subscribed_topic_names) + (f" /{mb.subscribed_topic_regex}/" if mb.subscribed_topic_regex else "")
        members.add_row(mb.member_id, mb.instance_id or "-", str(mb.member_epoch), mb.client_id, mb.client_host,
                        sub or "-", _parts(mb.assignment), _parts(mb.target_assignment))
    if g.members:  # type: ignore[attr-defined]
        console.print(members)
    _show_offsets(c, group, owner)


def _show_offsets(c: ProtocolClient, group: str, owner: dict[tuple[str, int], str]) -> None:
    committed = _committed(c, group)
    offsets = Table(title="offsets")
    for col in ("topic", "partition", "committed", "log end", "lag", "member"):
        offsets.add_column(col, justify="right" if col in ("partition", "committed", "log end", "lag") else "left")
    for topic in sorted({t for t, _ in committed} | {t for t, _ in owner}):
        ends = _offsets(c, topic, _partition_count(c, topic), -1)
        for p in sorted(ends):
            if (topic, p) not in committed and (topic, p) not in owner:
                continue
            done = committed.get((topic, p))
            lag = str(max(ends[p] - done, 0)) if done is not None else "-"
            offsets.add_row(topic, str(p), "-" if done is None else str(done), str(ends[p]), lag,
                            owner.get((topic, p), "-"))
    console.print(offsets)


@groups_app.command("reset-offsets")
def groups_reset_offsets(
    group: str,
    topic: list[str] = typer.Option(..., "--topic", "-t", help="TOPIC or TOPIC:P1,P2 (repeatable)"),
    to_earliest: bool = typer.Option(False, "--to-earliest"),
    to_latest: bool = typer.Option(False, "--to-latest"),
    to_offset: Optional[int] = typer.Option(None, "--to-offset"),
    shift_by: Optional[int] = typer.Option(None, "--shift-by", help="move the committed offsets by N (may be negative)"),
    execute: bool = typer.Option(False, "--execute", help="commit the new offsets (default: only show them)"),
    bootstrap: str = BOOTSTRAP,
) -> None:
    """Set a group's committed offsets (like kafka-consumer-groups --reset-offsets); the group must have no active members. Without --execute the plan is only printed."""
    if sum((to_earliest, to_latest, to_offset is not None, shift_by is not None)) != 1:
        raise typer.BadParameter("give exactly one of --to-earliest, --to-latest, --to-offset, --shift-by")
    with ProtocolClient(bootstrap) as c:
        committed = _committed(c, group)
        plan: list[tuple[str, int, int | None, int]] = []
        for spec in topic:
            name, _, parts = spec.partition(":")
            n = _partition_count(c, name)
            wanted = [int(p) for p in parts.split(",")] if parts else list(range(n))
            lo, hi = _offsets(c, name, n, -2), _offsets(c, name, n, -1)
            for p in wanted:
                if p not in hi:
                    raise typer.BadParameter(f"{name} has no partition {p}")
                current = committed.get((name, p))
                if to_earliest:
                    new = lo[p]
                elif to_latest:
                    new = hi[p]
                elif to_offset is not None:
                    new = to_offset
                else:
                    new = (current if current is not None else lo[p]) + (shift_by or 0)
                plan.append((name, p, current, min(max(new, lo[p]), hi[p])))
        table = Table(title=f"new offsets of {group}" + ("" if execute else " (dry run: add --execute)"))
        for col in ("topic", "partition", "current", "new"):
            table.add_column(col, justify="left" if col == "topic" else "right")
        for name, p, current, new in plan:
            table.add_row(name, str(p), "-" if current is None else str(current), str(new))
        console.print(table)
        if not execute:
            return
        d = _describe_group(c, group)
        if d.members:  # type: ignore[attr-defined]
            console.print(f"[red]group {group} has {len(d.members)} active member(s); stop them first[/red]")  # type: ignore[attr-defined]
            raise typer.Exit(1)
        m = c.classes(apis.OFFSET_COMMIT, min(c.version_for(apis.OFFSET_COMMIT), BY_NAME_MAX_VERSION[apis.OFFSET_COMMIT]))
        from oncelog.protocol.messages import make

        by_topic: dict[str, list[object]] = {}
        for name, p, _, new in plan:
            by_topic.setdefault(name, []).append(make(m["OffsetCommitRequestPartition"], partition_index=p,
                                                      committed_offset=new, committed_leader_epoch=-1,
                                                      committed_metadata=""))
        res = _group_request(
            c, apis.OFFSET_COMMIT, "OffsetCommitRequest", group_id=group, generation_id_or_member_epoch=-1,
            member_id="", group_instance_id=None, retention_time=datetime.timedelta(milliseconds=-1),
            topics=tuple(make(m["OffsetCommitRequestTopic"], name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        )
        for t in res.topics:  # type: ignore[attr-defined]
            for p in t.partitions:
                _check(p.error_code, f"cannot commit {t.name}-{p.partition_index}")
        console.print(f"committed {len(plan)} offset(s) for group [bold]{group}[/bold]")


def main() -> None:
    """The ``oncelog`` command. A broker that cannot be reached (refused, timed out, TLS
    refused) is one line and exit code 1 for every admin verb, never a traceback."""
    try:
        app()
    except OSError as exc:
        import sys

        if sys.argv[1:2] == ["broker"]:
            raise
        where = " ".join(a for a in sys.argv[1:3] if not a.startswith("-"))
        print(f"oncelog {where}: cannot reach the broker: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
