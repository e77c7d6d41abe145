"""``oncelog broker``: its options, defined once, and the command itself (issue 19: start-up).

``OPTIONS`` is the one definition of the command's options. ``cli.py`` turns it into the Typer
command (``--help``, the usage errors and the rest of the CLI are Typer's), and
``python -m oncelog broker ...`` parses it here with ``argparse`` (``fast_parse``), without
importing Typer: Typer coerces every option through pydantic, which with Typer itself is about
a quarter of a broker's CPU before its ready line. ``fast_parse`` gives up (returns ``None``) on
anything but a plain, valid command line — ``--help``, an unknown or malformed option, a missing
required one — and the caller then runs the Typer command, so what a person sees for those is
unchanged.

This module imports nothing heavy at top level: a broker process imports it first.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

__all__ = ["OPTIONS", "Opt", "fast_parse", "run_broker"]

_REQUIRED: Any = ...


@dataclass(frozen=True)
class Opt:
    """One option: the parameter ``name`` of ``run_broker``, its ``flags``, the type of its
    value (``annotation``, as Typer reads it), its ``default`` (``...``: required) and ``help``."""

    name: str
    flags: tuple[str, ...]
    annotation: Any
    default: Any
    help: Optional[str] = None


OPTIONS: tuple[Opt, ...] = (
    Opt("data_dir", ("--data-dir",), Path, _REQUIRED, "directory for logs and metadata (log.dirs)"),
    Opt("listen", ("--listen",), str, "127.0.0.1:9092", "HOST:PORT to accept connections on (port 0: any free port)"),
    Opt("config", ("--config",), Optional[Path], None, "a server.properties file"),
    Opt("override", ("--override", "-o"), list[str], [], "a Kafka broker property, key=value (repeatable)"),
    Opt("advertised_host", ("--advertised-host",), Optional[str], None, "host name clients should use"),
    Opt("node_id", ("--node-id",), Optional[int], None, "this broker's node id (node.id)"),
    Opt("store", ("--store",), Optional[str], None,
        "cluster mode: postgresql://USER@HOST:PORT/DB keeping partitions, leaders and "
        "metadata (docs/CLUSTER.md); without it, a single embedded broker on local files"),
    Opt("log_level", ("--log-level",), str, "INFO", None),
)


class _GiveUp(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # never print or exit: the caller falls back to Typer
        raise _GiveUp(message)


def _base(annotation: Any) -> Any:
    """``Optional[X]`` -> X; ``list[X]`` -> X; else the annotation."""
    args = getattr(annotation, "__args__", None)
    if args:
        return next(a for a in args if a is not type(None))
    return annotation


def fast_parse(argv: list[str]) -> Optional[dict[str, Any]]:
    """The keyword arguments of ``run_broker`` for ``argv`` (what follows ``broker``), or None
    when ``argv`` is not a plain valid command line (then Typer's command must handle it)."""
    if any(a in ("-h", "--help") or a == "--" for a in argv):
        return None
    p = _Parser(add_help=False, allow_abbrev=False)
    for o in OPTIONS:
        kw: dict[str, Any] = {"dest": o.name, "type": _base(o.annotation)}
        if getattr(o.annotation, "__origin__", None) is list:
            kw.update(action="append", default=None)
        elif o.default is _REQUIRED:
            kw["required"] = True
        else:
            kw["default"] = o.default
        p.add_argument(*o.flags, **kw)
    try:
        ns = p.parse_args(argv)
    except (_GiveUp, ValueError, TypeError):
        return None
    out = vars(ns)
    for o in OPTIONS:
        if getattr(o.annotation, "__origin__", None) is list and out[o.name] is None:
            out[o.name] = list(o.default)
    if any("=" not in item for item in out["override"]):
        return None  # Typer's command reports it as a usage error
    return out


def _parse_props(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            import typer

            raise typer.BadParameter(f"expected key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _refuse(message: str) -> None:
    from oncelog.cli_output import console

    console.print(message, highlight=False)
    raise SystemExit(2)


def run_broker(data_dir: Path, listen: str = "127.0.0.1:9092", config: Optional[Path] = None,
               override: Optional[list[str]] = None, advertised_host: Optional[str] = None,
               node_id: Optional[int] = None, store: Optional[str] = None, log_level: str = "INFO") -> None:
    """Run a broker in the foreground until SIGTERM (exit status 2 for a refused configuration)."""
    from oncelog.broker.broker import Broker
    from oncelog.broker.configuration.config import BrokerConfig
    from oncelog.hostport import parse_host_port
    from oncelog.protocol.errors import KafkaError

    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from oncelog import logs

    logs.install()  # repeated lines (refused connections, failing reads) never become a storm
    host, port = parse_host_port(listen)
    try:
        cfg = BrokerConfig.from_properties_file(config) if config else BrokerConfig()
        cfg = cfg.with_overrides(_parse_props(override or []))
    except KafkaError as exc:
        _refuse(f"[red]invalid configuration:[/red] {exc}")
    import dataclasses

    cfg = dataclasses.replace(cfg, data_dir=data_dir, host=host, port=port, advertised_host=advertised_host or cfg.advertised_host)
    if node_id is not None:
        cfg = dataclasses.replace(cfg, node_id=node_id)
    if store is not None and not store.startswith(("postgresql://", "postgres://")):
        _refuse(f"[red]--store {store!r}: expected postgresql://USER@HOST:PORT/DB[/red]")
    if store is not None:
        from oncelog.cluster import missing_driver

        missing = missing_driver()
        if missing is not None:  # one line, not ModuleNotFoundError's traceback (issue 26)
            from rich.markup import escape

            _refuse(f"[red]{escape(missing)}[/red]")
    _raise_open_files_limit()
    try:
        b = Broker(cfg, store=store)  # listeners, TLS keys and SASL settings are checked here (issue 18)
    except KafkaError as exc:
        _refuse(f"[red]invalid configuration:[/red] {exc}")
    _run(b)


def _raise_open_files_limit() -> None:
    """Lift the soft limit on open files to the hard limit, as the JVM does for Kafka.

    Each partition keeps three descriptors open (its active segment's log and two indexes),
    plus one per client connection; the common soft default of 1,024 is reached at about 300
    partitions. Past the limit the broker can neither accept connections nor create topics."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            logging.getLogger("oncelog").warning("could not raise the open-files limit from %d: %s", soft, exc)
            return
    logging.getLogger("oncelog").info(
        "open-files limit %d: about %d partitions (3 descriptors each) and connections",
        resource.getrlimit(resource.RLIMIT_NOFILE)[0], resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 3)


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
        _refuse(f"[red]ONCELOG_EVENT_LOOP={choice!r}: expected uvloop or asyncio[/red]")
    runner(_serve(b))


async def _serve(b: "object") -> None:
    from oncelog.protocol.errors import KafkaError

    log = logging.getLogger("oncelog")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        host, port = await b.start()  # type: ignore[attr-defined]
    except (KafkaError, OSError) as exc:  # the data directory or the address refuses: say why, once
        log.error("cannot start: %s", exc)
        raise SystemExit(1) from None
    # Other listeners first (issue 18): tools wait for the one ready line and parse it.
    for lst, lhost, lport in getattr(b, "bound_listeners", lambda: [])():
        if (lhost, lport) != (host, port):
            print(f"oncelog listener {lst.name} ({lst.protocol}) ready on {lhost}:{lport}", flush=True)
    print(f"oncelog broker ready on {host}:{port}", flush=True)
    await stop.wait()
    log.info("stopping")
    await b.stop()  # type: ignore[attr-defined]
    log.info("stopped cleanly")
