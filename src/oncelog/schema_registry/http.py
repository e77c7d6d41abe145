"""The registry's HTTP endpoint: ``oncelog.http_server.BoundedHTTPServer`` (the console's and
the metrics endpoint's server), so it is bounded the same way against hostile clients: at most
``MAX_CONNECTIONS`` served at once (more are closed at once), every request within
``schema.registry.request.timeout.ms`` in all (``REQUEST_DEADLINE_S`` by default; a client that trickles bytes or never reads is dropped when it
passes), header lines and counts bounded by ``http.server``; and here a body longer than
``max_body`` is refused with 413 before it is read, a body must say its ``Content-Length``
(411), a JSON body nested deeper than ``formats.MAX_NESTING`` is refused (400, before any
schema library sees it). With TLS (the broker has a keystore) each connection's handshake runs
on its own thread within the same deadline, never on the accepting thread.

Answers are JSON (``application/vnd.schemaregistry.v1+json``); errors are
``{"error_code", "message"}`` with the status of the code (errors.py). Nothing a request does
raises into the broker: an unexpected exception is a 500 with code 50001 and a log line.
"""

from __future__ import annotations

import json
import logging
import ssl
import urllib.parse
from typing import Any, Callable

from oncelog.http_server import BoundedHTTPServer, DeadlineHandler
from oncelog.schema_registry import errors
from oncelog.schema_registry.api import Call, RegistryApi, _Raw
from oncelog.schema_registry.auth import AllowAll, Authenticator, Guard
from oncelog.schema_registry.formats import check_nesting

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 64
#: a whole request, body and answer included (a registration may compile a .proto: protoc's deadline is 20 s)
REQUEST_DEADLINE_S = 30.0
MAX_BODY = 4 * 1024 * 1024
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryHTTPServer(BoundedHTTPServer):
    """``authorizer``: returns the broker's ACL authorizer, or None when ACLs are off (then no
    login is asked); ``authenticator`` checks HTTP Basic logins."""

    def __init__(self, address: tuple[str, int], api: RegistryApi, *, authorizer: Callable[[], Any],
                 authenticator: Authenticator | None, ssl_context: ssl.SSLContext | None = None,
                 max_body: int = MAX_BODY, request_deadline_s: float = REQUEST_DEADLINE_S, ipv6: bool = False) -> None:
        self.api = api
        self.authorizer = authorizer
        self.authenticator = authenticator
        self.ssl_context = ssl_context
        self.max_body = max_body
        super().__init__(address, Handler, max_connections=MAX_CONNECTIONS, request_deadline_s=request_deadline_s,
                         ipv6=ipv6)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """On the connection's own thread: the TLS handshake first (bounded), then requests."""
        if self.ssl_context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(self.request_deadline_s)
        try:
            tls = self.ssl_context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError) as exc:
            log.debug("schema registry: TLS handshake with %s failed: %s", client_address, exc)
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            tls.close()


class Handler(DeadlineHandler):
    server: RegistryHTTPServer
    server_version = "oncelog-schema-registry"

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _answer(self, status: int, doc: Any, *, close: bool = False, challenge: bool = False) -> None:
        if isinstance(doc, _Raw):
            body, ctype = str(doc).encode(), CONTENT_TYPE
        else:
            body, ctype = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode(), CONTENT_TYPE
        if close:
            self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if challenge:
            self.send_header("WWW-Authenticate", 'Basic realm="oncelog-schema-registry"')
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _body(self, method: str) -> Any:
        """The request's JSON body (None when it has none). Raises RegistryError; the connection
        is closed when the body is not read."""
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise errors.RegistryError(411, "Content-Length required (no chunked bodies)")
        length = self.headers.get("Content-Length")
        if length is None:
            if method in ("POST", "PUT"):
                self.close_connection = True
                raise errors.RegistryError(411, "Content-Length required")
            return None
        if not length.isdigit():
            self.close_connection = True
            raise errors.RegistryError(400, "bad Content-Length")
        n = int(length)
        if n > self.server.max_body:
            self.close_connection = True  # the body is never read
            raise errors.RegistryError(413, f"request body longer than {self.server.max_body} bytes")
        raw = self.rfile.read(n) if n else b""
        if len(raw) != n:
            self.close_connection = True
            raise errors.RegistryError(400, "the body ended early")
        if not raw.strip():
            return None
        try:
            doc = json.loads(raw)
        except RecursionError:
            raise errors.RegistryError(400, "the body nests too deeply") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise errors.RegistryError(400, f"the body is not JSON: {exc}") from None
        try:
            check_nesting(doc)
        except errors.RegistryError as exc:
            raise errors.RegistryError(400, f"the body: {exc.message}") from None
        return doc

    def _serve(self, method: str) -> None:
        try:
            body = self._body(method)
            guard: Any = AllowAll()
            authorizer = self.server.authorizer()
            if authorizer is not None and self.server.authenticator is not None:
                principal = self.server.authenticator.principal(self.headers.get("Authorization"))
                guard = Guard(authorizer, principal, self.client_address[0])
            url = urllib.parse.urlsplit(self.path)
            query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
            status, doc = self.server.api.handle(Call(method, url.path, query, body, guard))
            self._answer(status, doc)
        except errors.RegistryError as exc:
            self._answer(exc.status, exc.to_json(), close=self.close_connection, challenge=exc.code == 40101)
        except (OSError, TimeoutError):
            raise
        except Exception as exc:  # noqa: BLE001 - a bug or a library's surprise: a 500, never the broker's crash
            log.exception("schema registry: %s %s failed", method, self.path[:200])
            self._answer(500, {"error_code": 50001, "message": f"Error in the backend data store - {exc!r}"})
