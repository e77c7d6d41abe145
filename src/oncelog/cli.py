"""The ``oncelog`` command line.

``oncelog broker --data-dir DIR --listen HOST:PORT`` runs a broker in the foreground. Once it
accepts connections it prints exactly one line, ``oncelog broker ready on HOST:PORT``, to standard
output (tools wait for it); logs go to standard error. SIGTERM or SIGINT stops it cleanly: no new
connections, open ones closed, every log flushed and closed, exit status 0.

``oncelog topics create|list|describe|delete`` administer topics over the wire, like any client.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import signal
import sys
import uuid
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from oncelog.client import ProtocolClient, parse_host_port
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.verify.cli import verify_app

app = typer.Typer(add_completion=False, no_args_is_help=True, help="oncelog: a Kafka-compatible, exactly-once broker")
topics_app = typer.Typer(no_args_is_help=True, help="Create, list, describe and delete topics.")
app.add_typer(topics_app, name="topics")
app.add_typer(verify_app, name="verify")
console = Console()

BOOTSTRAP = typer.Option("127.0.0.1:9092", "--bootstrap-server", "-b", help="HOST:PORT of a broker")


def _parse_props(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise typer.BadParameter(f"expected key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


@app.command()
def broker(
    data_dir: Path = typer.Option(..., "--data-dir", help="directory for logs and metadata (log.dirs)"),
    listen: str = typer.Option("127.0.0.1:9092", "--listen", help="HOST:PORT to accept connections on (port 0: any free port)"),
    config: Optional[Path] = typer.Option(None, "--config", help="a server.properties file"),
    override: list[str] = typer.Option([], "--override", "-o", help="a Kafka broker property, key=value (repeatable)"),
    advertised_host: Optional[str] = typer.Option(None, "--advertised-host", help="host name clients should use"),
    log_level: str = typer.Option("INFO", "--log-level"),
) -> None:
    """Run a broker in the foreground until SIGTERM."""
    from oncelog.broker.broker import Broker
    from oncelog.broker.config import BrokerConfig

    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    host, port = parse_host_port(listen)
    try:
        cfg = BrokerConfig.from_properties_file(config) if config else BrokerConfig()
        cfg = cfg.with_overrides(_parse_props(override))
    except KafkaError as exc:
        console.print(f"[red]invalid configuration:[/red] {exc}", highlight=False)
        raise typer.Exit(2)
    import dataclasses

    cfg = dataclasses.replace(cfg, data_dir=data_dir, host=host, port=port, advertised_host=advertised_host or cfg.advertised_host)
    _run(Broker(cfg))


def _run(b: "object") -> None:
    """Run the broker on the event loop named by ``ONCELOG_EVENT_LOOP``: ``asyncio`` (default:
    the standard selector loop, which serves fetches with sendfile(2)) or ``uvloop`` (no
    sendfile, fetch data is copied). docs/PERFORMANCE.md has the measurements behind the
    default: large fetches cost the broker less CPU on asyncio + sendfile."""
    import os

    choice = os.environ.get("ONCELOG_EVENT_LOOP", "asyncio")
    runner = asyncio.run
    if choice == "uvloop":
        try:
            import uvloop  # type: ignore[import-not-found]

            runner = uvloop.run
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            pass
    elif choice != "asyncio":
        console.print(f"[red]ONCELOG_EVENT_LOOP={choice!r}: expected uvloop or asyncio[/red]", highlight=False)
        raise typer.Exit(2)
    runner(_serve(b))


async def _serve(b: "object") -> None:
    log = logging.getLogger("oncelog")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    host, port = await b.start()  # type: ignore[attr-defined]
    print(f"oncelog broker ready on {host}:{port}", flush=True)
    await stop.wait()
    log.info("stopping")
    await b.stop()  # type: ignore[attr-defined]
    log.info("stopped cleanly")


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
    from oncelog.broker.messages import make

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
    req = m["ListOffsetsRequest"](
        replica_id=-1,
        isolation_level=0,
        topics=(m["ListOffsetsTopic"](name=topic, partitions=tuple(
            m["ListOffsetsPartition"](partition_index=i, current_leader_epoch=-1, timestamp=ts) for i in range(n))),),
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
