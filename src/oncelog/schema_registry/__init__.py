"""The schema registry served by the broker (docs/SCHEMA-REGISTRY.md): Confluent's Schema
Registry REST API, stored in the compacted topic ``_schemas``, and schema-id validation of
produced records for topics that ask for it.

* ``formats/`` parse and compare Avro, JSON Schema and Protobuf (pure, with their libraries);
* ``records`` the records of ``_schemas`` (Confluent's format), ``state`` what they say,
  ``planner`` the writes decided from it (pure);
* ``store`` reads and writes ``_schemas`` through the broker's own listener (confluent-kafka),
  fenced by one transactional id so ids are unique across brokers;
* ``api`` the REST routes, ``auth`` logins and ACLs, ``http`` the bounded HTTP endpoint;
* ``validation`` the produce path's check.

``SchemaRegistry`` ties them to a broker: ``registry_for(broker)`` (None when
``schema.registry.listen`` is unset: no thread, no socket), ``serve()`` and ``open()`` in
``Broker.start`` (the endpoint first; the store once the broker listens), ``close()`` in
``Broker.stop``. The parsing libraries are the optional ``schema-registry`` extra, imported
only when a registry or a validated topic needs them.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Protocol

from oncelog.hostport import parse_listen
from oncelog.protocol.errors import InvalidConfig

if TYPE_CHECKING:
    from oncelog.broker.configuration.config import BrokerConfig
    from oncelog.schema_registry.http import RegistryHTTPServer
    from oncelog.schema_registry.store import SchemaStore
    from oncelog.schema_registry.validation import SchemaIds

log = logging.getLogger(__name__)

__all__ = ["SchemaRegistry", "registry_for", "schema_ids_for"]

class Broker(Protocol):
    """What the registry reads of the broker that serves it (oncelog.broker.broker.Broker has
    it): a Protocol, so the registry imports nothing of the broker's root (no import circle)."""

    config: "BrokerConfig"
    server: Any  # the primary listener's server: ``host`` and ``port``
    users: Any  # the broker's CredentialService: ``store``
    acls: Any  # the broker's AclService (``authorizer``), or None without an authorizer
    schema_registry: "SchemaRegistry | None"


MISSING_EXTRA = ("the schema registry needs the `schema-registry` extra (pip install 'oncelog[schema-registry]'): {}")


def _bootstrap(broker: Broker) -> str:
    """The broker's primary listener, as this host reaches it (a wildcard bind is loopback)."""
    host, port = broker.server.host, broker.server.port
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def store_for(broker: Broker) -> "SchemaStore":
    """The broker's ``_schemas`` store (not started). Raises InvalidConfig."""
    from oncelog.client import read_command_config

    try:
        from oncelog.schema_registry.store import SchemaStore
        import confluent_kafka  # noqa: F401 - checked here so the error names the extra
    except ImportError as exc:
        raise InvalidConfig(MISSING_EXTRA.format(exc)) from None
    cfg = broker.config
    try:
        client = read_command_config(cfg.schema_registry_client_config) or {}
    except OSError as exc:
        raise InvalidConfig(f"schema.registry.client.config: cannot read {cfg.schema_registry_client_config}: "
                            f"{exc}") from None
    return SchemaStore(lambda: _bootstrap(broker), topic=cfg.kafkastore_topic,
                       default_level=cfg.schema_compatibility_level, client=client)


class SchemaRegistry:
    """The registry of one broker. ``serve``, ``open`` and ``close`` are called from the event
    loop's thread (``close`` through ``asyncio.to_thread``)."""

    def __init__(self, broker: Broker, host: str, port: int) -> None:
        self.broker = broker
        self.host, self.port = host, port
        self.store = store_for(broker)
        self._server: RegistryHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._opened = False

    def _ssl_context(self) -> Any:
        """HTTPS with the broker's keystore when it has one (ssl.keystore.location)."""
        cfg = self.broker.config
        if not cfg.ssl_keystore_location:
            return None
        from oncelog.broker.auth import tls

        return tls.server_context(cfg, "schema-registry")

    def serve(self) -> tuple[str, int]:
        """Bind and serve on a daemon thread; returns the bound address. Raises OSError."""
        from oncelog.schema_registry.api import RegistryApi
        from oncelog.schema_registry.auth import Authenticator
        from oncelog.schema_registry.http import RegistryHTTPServer

        broker = self.broker
        authenticator = Authenticator(lambda: broker.users.store)
        self._server = RegistryHTTPServer(
            (self.host, self.port), RegistryApi(self.store),
            authorizer=lambda: broker.acls.authorizer if broker.acls is not None else None,
            authenticator=authenticator, ssl_context=self._ssl_context(),
            request_deadline_s=broker.config.schema_registry_request_timeout_ms / 1000, ipv6=":" in self.host)
        self.host, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._server.serve_forever, name="oncelog-schema-registry",
                                        daemon=True)
        self._thread.start()
        scheme = "https" if self._server.ssl_context is not None else "http"
        shown = f"[{self.host}]" if ":" in self.host else self.host
        log.info("schema registry on %s://%s:%d/ (topic %s)", scheme, shown, self.port, self.store.topic)
        return self.host, self.port

    def open(self) -> None:
        """Start reading ``_schemas`` (once the broker listens)."""
        if not self._opened:
            self._opened = True
            self.store.start()

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.store.close()


def registry_for(broker: Broker) -> SchemaRegistry | None:
    """The broker's registry per its configuration: None when ``schema.registry.listen`` is
    unset. Raises InvalidConfig (a missing extra, an unreadable client config)."""
    listen = broker.config.schema_registry_listen
    if listen is None:
        return None
    host, port = parse_listen(listen)
    return SchemaRegistry(broker, host, port)


def schema_ids_for(broker: Broker) -> "SchemaIds":
    """The produce path's schema-id check: the registry's store when this broker serves one,
    else a reader of ``_schemas`` started at the first batch that needs it."""
    from oncelog.schema_registry.validation import SchemaIds

    def store() -> "SchemaStore":
        registry = broker.schema_registry
        if registry is not None:
            registry.open()
            return registry.store
        s = store_for(broker)
        s.start()
        return s
    return SchemaIds(store)
