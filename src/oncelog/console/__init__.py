"""The web console (docs/CONSOLE.md): off unless ``console.listen``.

One page (``static/``: HTML, CSS and JavaScript modules shipped in the package, with uPlot for
the charts vendored under ``static/vendor/``; nothing fetched from elsewhere) that shows the
brokers, topics and partitions, groups with their lag, transactions with the hanging ones and
an abort button, a message browser, each partition's transaction timeline, and charts of the
last hour.

* ``snapshot`` derives the state document (pure) from the broker's state as
  ``broker/observability/observe.py`` copies it on the event loop (the snapshot ``/metrics``
  reads too);
* ``browse``, ``messages`` and ``timeline`` are the message browser and the timeline (pure, over
  a reader of the broker's own partition reads: ``loop_calls.LoopReader``);
* ``access`` is the login, the sessions and what each principal may see; ``loop_calls`` every
  call into the broker's event loop;
* ``transactions`` is the hanging check and the abort, as a Kafka client of this broker using
  the code of ``oncelog transactions`` (so ACLs apply to it as to any client);
* ``api`` answers the routes, ``server`` is the HTTP endpoint on a daemon thread.

The charts' history is the broker's (``broker/observability/history.py``): ``sample`` is called
by the broker every ``console.history.interval.ms`` (its housekeeping timer).

``Console`` ties them to a broker: ``console_for(broker)`` (None when ``console.listen`` is
unset: no thread, no socket), ``serve()`` in ``Broker.start`` and ``close()`` in ``Broker.stop``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import TYPE_CHECKING, Any

from oncelog.broker.observability import history
from oncelog.broker.observability.observe import BrokerState, take
from oncelog.console import snapshot
from oncelog.console.access import PasswordGate, Sessions
from oncelog.console.api import Api
from oncelog.console.server import ConsoleHTTPServer, StateSource, static_files
from oncelog.console.transactions import TxnLink
from oncelog.hostport import parse_listen
from oncelog.protocol.errors import InvalidConfig

if TYPE_CHECKING:
    from oncelog.broker.observability.observed import ObservedBroker

log = logging.getLogger(__name__)

__all__ = ["Console", "console_for"]

#: why abort is off when ACLs are on and the console was given no principal to act as
ABORT_NEEDS_PRINCIPAL = ("abort is disabled: an authorizer is configured and console.client.config names no "
                         "principal for the console to act as (docs/CONSOLE.md)")


class Console:
    """The console of one broker. ``serve()`` and ``close()`` are called on the event loop's
    thread (``close`` through ``asyncio.to_thread``: it waits for the HTTP thread)."""

    def __init__(self, broker: "ObservedBroker", host: str, port: int) -> None:
        from oncelog.client import read_command_config

        self.broker = broker
        self.host, self.port = host, port
        cfg = broker.config
        try:
            security = read_command_config(cfg.console_client_config)
        except OSError as exc:
            raise InvalidConfig(f"console.client.config: cannot read {cfg.console_client_config}: {exc}") from None
        disabled = ABORT_NEEDS_PRINCIPAL if cfg.authorizer_class_name and security is None else None
        self.txns = TxnLink(self._bootstrap, security=security, max_timeout_ms=cfg.transaction_max_timeout_ms,
                            abort_disabled=disabled)
        self.state: StateSource | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.sessions = Sessions()
        self.gate = PasswordGate()
        #: the charts' last hour (bounded: broker/observability/history.py)
        self.history = history.History(cfg.console_history_interval_ms / 1000)
        self._doc: tuple[BrokerState, dict[str, Any], dict[str, Any], bytes] | None = None
        self._doc_lock = threading.Lock()
        self._server: ConsoleHTTPServer | None = None
        self._thread: threading.Thread | None = None

    async def sample(self) -> None:
        """One sample of the charts' history (the broker's timer calls it on the event loop)."""
        await history.sample(self.broker, self.history, self.broker.metrics)

    def document(self, raw: BrokerState, hanging: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """The ``/api/state`` document of this snapshot and hanging result, and its encoding:
        built once and reused while both are the same objects (several open pages cost one)."""
        with self._doc_lock:
            cached = self._doc
            if cached is not None and cached[0] is raw and cached[1] is hanging:
                return cached[2], cached[3]
            doc = snapshot.state(raw, hanging, raw.now_ms)
            doc["abort"] = {"enabled": self.txns.abort_disabled is None, "why_not": self.txns.abort_disabled}
            body = json.dumps(doc, separators=(",", ":")).encode()
            self._doc = (raw, hanging, doc, body)
            return doc, body

    def _bootstrap(self) -> str:
        """The broker's primary listener, as this host reaches it (a wildcard bind is loopback)."""
        host, port = self.broker.server.host, self.broker.server.port
        if host in ("", "0.0.0.0"):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def serve(self) -> tuple[str, int]:
        """Listen and serve on a daemon thread; returns the bound address. Must be called on the
        event loop. Raises OSError when the address refuses."""
        self.loop = asyncio.get_running_loop()
        self.history.baseline(self.broker.clock.now_ms())  # the request counters start at 0 with the broker
        self.state = StateSource(self.loop, lambda: take(self.broker))
        self._server = ConsoleHTTPServer((self.host, self.port), Api(self), static_files(), ipv6=":" in self.host)
        self.host, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._server.serve_forever, name="oncelog-console", daemon=True)
        self._thread.start()
        shown = f"[{self.host}]" if ":" in self.host else self.host
        log.info("console on http://%s:%d/", shown, self.port)
        return self.host, self.port

    def close(self) -> None:
        """Stop serving; idempotent. Requests in progress are not waited for (daemon threads)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def console_for(broker: "ObservedBroker") -> Console | None:
    """The broker's console per its configuration: None when ``console.listen`` is unset.
    Raises InvalidConfig when ``console.client.config`` cannot be read."""
    listen = broker.config.console_listen
    if listen is None:
        return None
    host, port = parse_listen(listen)
    return Console(broker, host, port)
