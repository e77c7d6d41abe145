"""The read-only web console (issue 19 section 3, docs/CONSOLE.md): off unless ``console.listen``.

One page (``static/``: HTML, CSS and plain JavaScript shipped in the package, nothing fetched
from elsewhere) that polls ``/api/state`` every two seconds and shows the brokers, topics and
partitions (log start, LSO, log end), consumer groups with their members and lag, and the
transactions (state, age, partitions) with the hanging ones marked and an abort button.

* ``snapshot`` derives the document (pure) from the broker's state as ``broker/observability/observe.py``
  copies it on the event loop (the snapshot ``/metrics`` reads too);
* ``transactions`` is the hanging check and the abort, as a Kafka client of this broker using
  the code of ``oncelog transactions`` (so ACLs apply to it as to any client);
* ``server`` is the HTTP endpoint on a daemon thread.

``Console`` ties them to a broker: ``console_for(broker)`` (None when ``console.listen`` is
unset: no thread, no socket), ``serve()`` in ``Broker.start`` and ``close()`` in ``Broker.stop``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING

from oncelog.broker.observability.observe import take
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
        self._server: ConsoleHTTPServer | None = None
        self._thread: threading.Thread | None = None

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
        self.state = StateSource(asyncio.get_running_loop(), lambda: take(self.broker))
        self._server = ConsoleHTTPServer((self.host, self.port), self.state, self.txns, static_files(),
                                         ipv6=":" in self.host)
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
