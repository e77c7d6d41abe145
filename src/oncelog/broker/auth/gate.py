"""The SASL gate of one connection (issue 18): a request frame in, what the server must do out.

Until a connection on a SASL listener is authenticated, the server passes every frame here
first (``gate``). Pure: it decodes the frame, steps the connection's ``SaslSession`` and encodes
the answer; the server (server.py) sends it, waits ``connection.failed.authentication.delay.ms``
first when authentication failed, and closes the connection when told to. Once the session is
authenticated the server stops calling it: frames go straight to the dispatcher.

Nothing a client sent is echoed (issue 26): a failed authentication answers the mechanism's fixed
message (``AuthenticationFailed.client_message``), and a ``close`` reason (logged by the server
in one rate-limited line) shows a client's string only through ``sasl.shown`` (cut short).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from oncelog.broker.auth.sasl import AuthenticationFailed, IllegalSaslState, SaslSession, shown
from oncelog.protocol import apis, framing
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.messages import Builder

__all__ = ["Outcome", "SASL_AUTHENTICATE", "SASL_HANDSHAKE", "gate"]

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


@dataclass(frozen=True, slots=True)
class Outcome:
    """``dispatch``: hand the frame to the dispatcher (ApiVersions). ``parts``: a response to
    send. ``failed``: authentication failed (delay the answer). ``close``: close the connection
    after sending, with this reason logged."""

    dispatch: bool = False
    parts: list[Any] | None = None
    failed: bool = False
    close: str | None = None


def gate(session: SaslSession, frame: bytes) -> Outcome:
    """See the module docstring. Never raises for a client's bytes: every bad input becomes an
    Outcome that closes the connection."""
    if session.raw_tokens:  # after SaslHandshake v0: a bare token, answered by a bare token
        try:
            out = session.token(frame, raw=True)
        except AuthenticationFailed as exc:
            return Outcome(failed=True, close=f"authentication failed: {exc}")
        return Outcome(parts=[len(out).to_bytes(4, "big") + out])
    try:
        head = framing.peek_head(frame)
    except (framing.FrameError, KafkaError, ValueError, IndexError) as exc:
        return Outcome(close=f"malformed request before authentication: {shown(str(exc), 200)}")
    key = head.api_key
    try:
        if key == apis.API_VERSIONS:
            session.api_versions()
            return Outcome(dispatch=True)
        if key not in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            session.other_api(apis.api_name(key))
        try:
            request = framing.decode_request(frame)
        except (framing.FrameError, KafkaError, ValueError) as exc:
            return Outcome(close=f"malformed {apis.api_name(key)} request before authentication: {shown(str(exc), 200)}")
        v = request.api_version
        if key == SASL_HANDSHAKE:
            ok = session.handshake(request.body.mechanism, v)
            body = Builder(key, v).SaslHandshakeResponse(
                error_code=ErrorCode.none if ok else ErrorCode.unsupported_sasl_mechanism, mechanisms=session.enabled)
            parts = framing.encode_response(key, v, head.correlation_id, body)
            if ok:
                return Outcome(parts=parts)
            return Outcome(parts=parts, close=f"SASL mechanism {shown(request.body.mechanism)} is not enabled "
                                              f"(sasl.enabled.mechanisms={','.join(session.enabled)})")
        m = Builder(key, v)
        try:
            out = session.token(request.body.auth_bytes)
        except AuthenticationFailed as exc:
            body = m.SaslAuthenticateResponse(error_code=ErrorCode.sasl_authentication_failed,
                                              error_message=exc.client_message, auth_bytes=b"",
                                              session_lifetime=datetime.timedelta(0))
            return Outcome(parts=framing.encode_response(key, v, head.correlation_id, body), failed=True,
                           close=f"authentication failed: {exc}")
        lifetime = datetime.timedelta(milliseconds=session.lifetime_ms if session.authenticated else 0)
        body = m.SaslAuthenticateResponse(error_code=ErrorCode.none, error_message=None, auth_bytes=out,
                                          session_lifetime=lifetime)
        return Outcome(parts=framing.encode_response(key, v, head.correlation_id, body))
    except IllegalSaslState as exc:
        return Outcome(close=str(exc))
