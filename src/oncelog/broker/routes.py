"""The routing table: API key -> handler, one module per API (``broker/handlers/``).

This table is what the broker serves and what ApiVersions advertises: ``advertised_versions``
is ``protocol.apis.SUPPORTED_VERSIONS`` restricted to it (as Kafka 4.2 advertises them,
``apis.advertised``), and a test holds the keys equal, so an API is advertised exactly when a
handler serves it.
"""

from __future__ import annotations

import importlib
from typing import Any, Awaitable, Iterable

from oncelog.broker.context import BrokerContext, Client, Handler
from oncelog.protocol import apis
from oncelog.protocol.framing import Request

__all__ = ["HANDLER_MODULES", "ROUTES", "LazyHandler", "advertised_versions", "load"]

#: The handler modules (``broker/handlers/NAME.py``); each serves the API ``apis.NAME.upper()``
#: and says so in its ``API_KEY`` (a test holds the two equal).
HANDLER_MODULES: tuple[str, ...] = (
    "add_offsets_to_txn", "add_partitions_to_txn", "alter_configs", "api_versions", "create_topics", "delete_groups",
    "delete_records", "delete_topics", "describe_cluster", "describe_configs", "describe_groups", "end_txn", "fetch",
    "find_coordinator", "heartbeat", "incremental_alter_configs", "init_producer_id", "join_group", "leave_group",
    "list_groups", "list_offsets", "metadata", "offset_commit", "offset_delete", "offset_fetch",
    "offset_for_leader_epoch", "produce", "sync_group", "txn_offset_commit", "write_txn_markers",
    "describe_producers", "describe_transactions", "list_transactions",  # issue 17
    "alter_partition_reassignments", "create_partitions", "describe_log_dirs", "describe_quorum",  # issue 16
    "describe_topic_partitions", "elect_leaders", "list_partition_reassignments",
    "sasl_handshake", "sasl_authenticate", "describe_user_scram_credentials", "alter_user_scram_credentials",  # issue 18
    "create_acls", "delete_acls", "describe_acls",  # issue 18
    "consumer_group_heartbeat", "consumer_group_describe",  # issue 30 (KIP-848)
    "share_group_heartbeat", "share_group_describe", "share_fetch", "share_acknowledge",  # issue 30 (KIP-932)
    "describe_share_group_offsets", "alter_share_group_offsets", "delete_share_group_offsets",
    "alter_replica_log_dirs", "list_config_resources",
)


class LazyHandler:
    """A handler whose module is imported at its first request (or ``load()``), not at start.

    Calling it is calling the module's ``handle``: importing the 47 handler modules, and what
    they alone import, was about a tenth of a broker's start-up (issue 19). The import runs on
    the event loop at the API's first request; ``load`` does it earlier for the APIs a client
    asks first (``apis.FIRST_REQUESTS``, before the ready line)."""

    __slots__ = ("module", "_handle")

    def __init__(self, module: str) -> None:
        self.module = module
        self._handle: Handler | None = None

    def load(self) -> Handler:
        handle = self._handle
        if handle is None:
            handle = self._handle = importlib.import_module(f"oncelog.broker.handlers.{self.module}").handle
        return handle

    def __call__(self, broker: BrokerContext, request: Request, client: Client) -> Awaitable[Any]:
        return (self._handle or self.load())(broker, request, client)

    def __repr__(self) -> str:
        return f"LazyHandler({self.module!r})"


ROUTES: dict[int, Handler] = {getattr(apis, name.upper()): LazyHandler(name) for name in HANDLER_MODULES}

def load(api_keys: Iterable[int] = apis.FIRST_REQUESTS) -> None:
    """Import the handlers of ``api_keys`` now (the broker does so before its ready line)."""
    for key in api_keys:
        handler = ROUTES[key]
        if isinstance(handler, LazyHandler):
            handler.load()


def advertised_versions() -> dict[int, tuple[int, int]]:
    return apis.advertised({k: v for k, v in apis.SUPPORTED_VERSIONS.items() if k in ROUTES})
