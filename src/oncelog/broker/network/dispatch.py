"""From a request frame to its response parts: decode, route, handle, encode; and the one
boundary where exceptions become Kafka error codes.

A handler raises ``KafkaError`` for a whole-request failure and it becomes that API's error
response; per-partition errors are put into the response by the handler itself. Any other
exception escaping a handler is a bug: it is logged with its traceback and answered with
UNKNOWN_SERVER_ERROR, and the broker goes on. Encoding the answer is inside the same boundary:
an answer its version cannot carry (a null where the schema has none) is a bug too, logged and
answered with UNKNOWN_SERVER_ERROR (the connection is closed if even that cannot be encoded);
bug lines have a fixed template, so the broker's log limiter (``oncelog.logs``) holds them to a
few per window whatever a client sends. ``CloseConnection`` (a handler's verdict, or a
protocol violation found here) propagates to the server, which closes that one connection.

Routing is the ``routes.ROUTES`` table, the same in both modes; the versions checked are the
advertised ones. Before a request is handled, ``fence`` runs (the membership's
``fence_if_lease_lapsed``: a cluster member whose lease ran out answers nothing from its
leaderships; embedded it does nothing).

Metrics (issue 19): with ``metrics.listen`` set, each request is counted here, its time from
arrival to encoded response observed, and its whole-request error code counted
(``broker/observability/metrics.py``); without, ``metrics`` is None and that is the only check made.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from oncelog.broker.context import BrokerContext, Client, CloseConnection, Handler
from oncelog.broker.handlers import api_versions
from oncelog.protocol import apis, framing, messages
from oncelog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from oncelog.broker.request_stats import RequestStats

log = logging.getLogger(__name__)

#: Requests larger than this (Produce excepted) are decoded and answered off the event loop.
OFFLOAD_BYTES = 256 * 1024
#: Requests announcing more array entries than this (Produce excepted) have their answer encoded
#: off the event loop: a small request can ask for a large answer (100,000 empty topic names
#: fit in 200 KB; schema_reader.MAX_REQUEST_ENTRIES bounds them).
OFFLOAD_ENTRIES = 5_000


class Dispatcher:
    """``handle(frame, client)``: the one callable the server knows."""

    def __init__(self, broker: BrokerContext, routes: dict[int, Handler], *, fence: Callable[[], None] = lambda: None,
                 metrics: "RequestStats | None" = None) -> None:
        self.broker = broker
        self.routes = routes
        self.versions = {k: v for k, v in apis.SUPPORTED_VERSIONS.items() if k in routes}  # served
        self.advertised = apis.advertised(self.versions)  # what ApiVersions says (Kafka 4.2's)
        self.fence = fence
        self.metrics = metrics

    async def handle(self, frame: bytes, client: Client) -> list[Any] | None:
        """Handle one request frame. Returns the response parts, or None when no response is
        due (acks=0 produce). Raises CloseConnection when the peer broke the protocol."""
        metrics = self.metrics
        started = time.perf_counter() if metrics is not None else 0.0
        head = framing.peek_head(frame)
        handler = self.routes.get(head.api_key)
        # An API or version outside the served table closes the connection, as Kafka 4's network
        # layer does (Processor.parseRequestHeader throws, and any exception there closes the
        # channel without an answer): Produce v0-v2 too, which Kafka advertises but refuses so.
        if handler is None:
            raise CloseConnection(f"unsupported api key {head.api_key} ({apis.api_name(head.api_key)}) from {client.peer}")
        lo, hi = self.versions[head.api_key]
        if not lo <= head.api_version <= hi:
            if head.api_key == apis.API_VERSIONS:
                # KIP-511: answer a too-new ApiVersions with a v0 body listing what we support.
                body = api_versions.body(self.advertised, 0, ErrorCode.unsupported_version)
                return framing.encode_response(apis.API_VERSIONS, 0, head.correlation_id, body)
            raise CloseConnection(
                f"{apis.api_name(head.api_key)} v{head.api_version} from {client.peer} is an unsupported version "
                f"(served: {lo}..{hi})"
            )
        # A large request that is not a Produce (thousands of topics in one Metadata request) is
        # decoded, and its answer encoded, in a worker thread: both are pure, and the event loop
        # keeps serving other connections meanwhile. Produce is read in O(partitions), never here.
        offload = len(frame) > OFFLOAD_BYTES and head.api_key != apis.PRODUCE
        try:
            request = await asyncio.to_thread(framing.decode_request, frame) if offload else framing.decode_request(frame)
        except (framing.FrameError, KafkaError) as exc:
            raise CloseConnection(f"{exc} (from {client.peer})") from None
        offload = offload or (request.entries > OFFLOAD_ENTRIES and head.api_key != apis.PRODUCE)
        error = 0
        self.fence()  # cluster mode: a zombie answers nothing from its leaderships
        try:
            body = await handler(self.broker, request, client)
        except CloseConnection:
            raise  # a handler's verdict on the connection (a failed acks=0 produce), not a bug
        except KafkaError as exc:
            log.debug("%s v%d failed: %r", apis.api_name(head.api_key), head.api_version, exc)
            body = messages.error_response(head.api_key, head.api_version, exc.code)
            error = exc.code
        except Exception:
            log.exception("bug: %s v%d from %s raised", apis.api_name(head.api_key), head.api_version, client.peer)
            body = messages.error_response(head.api_key, head.api_version, ErrorCode.unknown_server_error)
            error = ErrorCode.unknown_server_error
        if body is None:
            out = None
        else:
            try:
                if offload:
                    out = await asyncio.to_thread(framing.encode_response, head.api_key, head.api_version,
                                                  head.correlation_id, body)
                else:
                    out = framing.encode_response(head.api_key, head.api_version, head.correlation_id, body)
            except Exception:  # a handler built an answer its version cannot carry: a bug, inside the boundary
                log.exception("bug: the %s v%d answer to %s could not be encoded", apis.api_name(head.api_key),
                              head.api_version, client.peer)
                error = ErrorCode.unknown_server_error
                out = self._error_answer(head, error)
        if metrics is not None:
            metrics.request(head.api_key, time.perf_counter() - started, int(error))
        return out

    @staticmethod
    def _error_answer(head: framing.RequestHead, code: ErrorCode) -> list[Any]:
        """The whole-request error answer; CloseConnection if even that cannot be encoded."""
        try:
            body = messages.error_response(head.api_key, head.api_version, code)
            return framing.encode_response(head.api_key, head.api_version, head.correlation_id, body)
        except Exception as exc:
            raise CloseConnection(f"no {apis.api_name(head.api_key)} v{head.api_version} answer could be encoded "
                                  f"({type(exc).__name__})") from None
