"""Routes decoded requests to handlers and translates errors into Kafka error codes.

The one boundary where exceptions become codes: a handler raises ``KafkaError`` for a
whole-request failure and it becomes that API's error response; per-partition errors are put
into the response by the handler itself. Any other exception escaping a handler is a bug: it is
logged with its traceback and answered with UNKNOWN_SERVER_ERROR, and the broker goes on.

``HANDLERS`` is the routing table, one module per API (``oncelog.broker.handlers.<api>``), each
exposing ``API_KEY`` and ``async def handle(broker, request)``. Only APIs in this table are
advertised by ApiVersions.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from oncelog.broker import messages
from oncelog.broker.handlers import api_versions
from oncelog.protocol import apis, framing
from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker

log = logging.getLogger(__name__)

Handler = Callable[["Broker", framing.Request], Awaitable[Any]]

#: Requests larger than this (Produce excepted) are decoded and answered off the event loop.
OFFLOAD_BYTES = 256 * 1024

#: The peer ("host:port") of the request being handled, for handlers that record it (JoinGroup).
current_peer: ContextVar[str] = ContextVar("current_peer", default="")
#: Resolved when the connection of the request being handled closes; a handler that waits on
#: purpose (Fetch long poll) stops waiting then. Set once per connection by its serving task.
connection_closed: ContextVar["asyncio.Future[None] | None"] = ContextVar("connection_closed", default=None)

#: The handler modules, one per API (``oncelog.broker.handlers.<name>``).
HANDLER_MODULES = (
    "add_offsets_to_txn",
    "add_partitions_to_txn",
    "api_versions",
    "create_topics",
    "delete_groups",
    "delete_records",
    "delete_topics",
    "describe_cluster",
    "describe_configs",
    "describe_groups",
    "end_txn",
    "fetch",
    "find_coordinator",
    "heartbeat",
    "init_producer_id",
    "join_group",
    "leave_group",
    "list_groups",
    "list_offsets",
    "metadata",
    "offset_commit",
    "offset_delete",
    "offset_fetch",
    "produce",
    "sync_group",
    "txn_offset_commit",
)

HANDLERS: dict[int, Handler] = {
    m.API_KEY: m.handle
    for m in (importlib.import_module(f"oncelog.broker.handlers.{name}") for name in HANDLER_MODULES)
}


def advertised_versions() -> dict[int, tuple[int, int]]:
    return {k: v for k, v in apis.SUPPORTED_VERSIONS.items() if k in HANDLERS}


class CloseConnection(Exception):
    """The request cannot be answered; the connection must be closed (after logging why)."""


async def dispatch(broker: "Broker", frame: bytes, peer: str) -> list[Any] | None:
    """Handle one request frame. Returns the response parts, or None when no response is due
    (acks=0 produce). Raises CloseConnection when the peer broke the protocol."""
    head = framing.peek_head(frame)
    handler = HANDLERS.get(head.api_key)
    if handler is None:
        raise CloseConnection(f"unsupported api key {head.api_key} from {peer}")
    lo, hi = apis.SUPPORTED_VERSIONS[head.api_key]
    if not lo <= head.api_version <= hi:
        if head.api_key == apis.API_VERSIONS:
            # KIP-511: answer a too-new ApiVersions with a v0 body listing what we support.
            body = api_versions.unsupported_version_response()
            return framing.encode_response(apis.API_VERSIONS, 0, head.correlation_id, body)
        raise CloseConnection(
            f"{apis.api_name(head.api_key)} v{head.api_version} from {peer} is outside the supported range {lo}..{hi}"
        )
    # A large request that is not a Produce (thousands of topics in one Metadata request) is
    # decoded, and its answer encoded, in a worker thread: both are pure, and the event loop
    # keeps serving other connections meanwhile. Produce is read in O(partitions), never here.
    offload = len(frame) > OFFLOAD_BYTES and head.api_key != apis.PRODUCE
    try:
        request = await asyncio.to_thread(framing.decode_request, frame) if offload else framing.decode_request(frame)
    except (framing.FrameError, KafkaError) as exc:
        raise CloseConnection(f"{exc} (from {peer})") from None
    current_peer.set(peer)
    try:
        body = await handler(broker, request)
    except CloseConnection:
        raise  # a handler's verdict on the connection (a failed acks=0 produce), not a bug
    except KafkaError as exc:
        log.debug("%s v%d failed: %r", apis.api_name(head.api_key), head.api_version, exc)
        body = messages.error_response(head.api_key, head.api_version, exc.code)
    except Exception:
        log.exception("bug: %s v%d from %s raised", apis.api_name(head.api_key), head.api_version, peer)
        body = messages.error_response(head.api_key, head.api_version, ErrorCode.unknown_server_error)
    if body is None:
        return None
    if offload:
        return await asyncio.to_thread(framing.encode_response, head.api_key, head.api_version, head.correlation_id, body)
    return framing.encode_response(head.api_key, head.api_version, head.correlation_id, body)
