"""SaslHandshake (17) reaching the dispatcher (issue 18): on a listener without SASL, or on a
connection already authenticated while ``connections.max.reauth.ms`` is 0. Kafka answers both
with ILLEGAL_SASL_STATE. On a SASL listener the handshake itself (and a KIP-368
re-authentication) is handled by the connection's SASL gate (broker/auth/gate.py, server.py)."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import Builder
from oncelog.protocol.framing import Request

API_KEY = apis.SASL_HANDSHAKE


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    return Builder(API_KEY, request.api_version).SaslHandshakeResponse(error_code=ErrorCode.illegal_sasl_state,
                                                                       mechanisms=())
