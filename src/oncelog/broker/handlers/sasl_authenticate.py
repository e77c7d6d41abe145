"""SaslAuthenticate (36) reaching the dispatcher (issue 18): on a listener without SASL, or on a
connection already authenticated: ILLEGAL_SASL_STATE, as Kafka answers. The tokens of a real
exchange are handled by the connection's SASL gate (broker/auth/gate.py) before this."""

from __future__ import annotations

import datetime
from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import Builder
from oncelog.protocol.framing import Request

API_KEY = apis.SASL_AUTHENTICATE


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    return Builder(API_KEY, request.api_version).SaslAuthenticateResponse(
        error_code=ErrorCode.illegal_sasl_state, error_message="SaslAuthenticate is not expected on this connection",
        auth_bytes=b"", session_lifetime=datetime.timedelta(0))
