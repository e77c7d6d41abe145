"""The console's HTTP endpoint: a stdlib ``ThreadingHTTPServer`` on a daemon thread.

Routes (everything else is 404; methods other than GET/HEAD/POST are 501):

* ``GET /`` the page; ``GET /static/NAME`` its code and style (``_STATIC``: fixed names, read once
  from the package with ``importlib.resources`` at start): no file path is ever built from a URL.
* ``GET /api/...`` and ``POST /api/...``: console/api.py (the state, the message browser, the
  timeline, the history, the session, the abort). A POST must say ``Content-Type:
  application/json`` and carry ``X-Oncelog-Console: <its action>`` (``_POSTS``): a page of
  another origin cannot send that header without a CORS preflight, which this server never
  grants, so a link or form elsewhere cannot log in, log out or abort.

Threads. The event loop owns the broker's state: a request never reads it. ``/api/state``
schedules ``observe.take`` on the loop (broker/observability/observe.py, the snapshot /metrics reads too;
``run_coroutine_threadsafe``, at most ``SNAPSHOT_TIMEOUT_S``) and builds the document on its own
thread; a snapshot younger than
``STATE_MIN_INTERVAL_S`` (or ``LOOP_SHARE`` times what it took) is reused, and so is its encoded
document, so any number of open consoles cost the loop at most one snapshot per interval and
at most 2% of its time. find-hanging and abort are Kafka requests to the broker's own listener
from the worker thread (console/transactions.py).

Who may ask. The console is off unless ``console.listen`` is set, and binds where that says
(loopback in every example); with an authorizer it needs a login (console/access.py). Every request must name this
server in its ``Host`` header: an IP literal or ``localhost`` or the host of ``console.listen``,
with the port it listens on (``host_allowed``); a page that reaches the port through a DNS
name of its own (DNS rebinding) is refused with 403 before anything is read or done. A request
with an ``Origin`` (every browser POST, every cross-origin fetch) must come from this very origin,
and a browser's ``Sec-Fetch-Site`` must say same-origin (``origin_allowed``). The abort itself
only ever aborts a hanging transaction (console/transactions.py).

Hostile clients. ``oncelog.http_server.BoundedHTTPServer``: each request has a deadline of
``REQUEST_TIMEOUT_S`` for the whole request, not per read (a client that trickles bytes is dropped
when it passes), at most ``MAX_CONNECTIONS`` are served at once (more are closed at once), a
body longer than ``MAX_BODY`` is refused (413) without being read, and header lines and counts
are bounded by ``http.server``. Nothing a request does raises into the broker.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import threading
import time
from importlib import resources
from typing import Any, Callable, Coroutine

from oncelog.broker.observability.observe import BrokerState
from oncelog.console.access import COOKIE
from oncelog.console.api import Api, Call, parse_abort
from oncelog.http_server import BoundedHTTPServer, DeadlineHandler

log = logging.getLogger(__name__)

__all__ = ["ConsoleHTTPServer", "StateSource", "host_allowed", "origin_allowed", "parse_abort", "session_token",
           "static_files"]

SNAPSHOT_TIMEOUT_S = 5.0
STATE_MIN_INTERVAL_S = 1.0
#: a snapshot is reused for at least LOOP_SHARE times as long as it held the event loop (<= 2%)
LOOP_SHARE = 50
REQUEST_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 32
MAX_BODY = 4096
#: the longest query string an /api/ GET may have
MAX_QUERY = 2048
#: the POST routes and the X-Oncelog-Console value each must carry (a cross-site form cannot send it)
_POSTS = {"/api/transactions/abort": "abort", "/api/login": "login", "/api/logout": "logout"}

_JS, _CSS = "text/javascript; charset=utf-8", "text/css; charset=utf-8"
#: the page and its code: fixed names, never a path built from a URL (``vendor/``: uPlot, see
#: static/vendor/README.md)
_STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
           "/static/console.css": ("console.css", _CSS),
           **{f"/static/{name}": (name, _JS) for name in (
               "console.js", "dom.js", "views.js", "messages.js", "timeline.js", "charts.js", "login.js")},
           "/static/vendor/uPlot.iife.min.js": ("vendor/uPlot.iife.min.js", _JS),
           "/static/vendor/uPlot.min.css": ("vendor/uPlot.min.css", _CSS)}
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


def static_files() -> dict[str, tuple[bytes, str]]:
    """URL path -> (content, content type), from the package data."""
    root = resources.files("oncelog.console") / "static"
    return {path: (root.joinpath(*name.split("/")).read_bytes(), ctype) for path, (name, ctype) in _STATIC.items()}


class StateSource:
    """``/api/state`` documents: snapshots taken on the event loop, reused for
    ``min_interval_s``. Thread-safe. ``take()`` (a coroutine: ``observe.take`` of the broker)
    runs on ``loop``; ``clock`` is monotonic seconds."""

    def __init__(self, loop: asyncio.AbstractEventLoop, take: Callable[[], Coroutine[Any, Any, BrokerState]], *,
                 min_interval_s: float = STATE_MIN_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._loop = loop
        self._take = take
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._raw: BrokerState | None = None
        self._at = float("-inf")
        self.snapshots = 0  # how many were taken (tests, the bench)

    def interval_s(self, last: BrokerState) -> float:
        """How long ``last`` is reused: ``min_interval_s``, or longer when taking it held the
        loop long enough that one a second would cost the loop more than 1/LOOP_SHARE of its
        time (a broker with many thousands of partitions)."""
        return max(self.min_interval_s, last.loop_s * LOOP_SHARE)

    def invalidate(self) -> None:
        """The next ``raw()`` takes a fresh snapshot (after an abort changed the broker)."""
        with self._lock:
            self._at = float("-inf")

    def raw(self) -> BrokerState:
        """A snapshot at most ``min_interval_s`` old. Raises TimeoutError or the snapshot's error."""
        with self._lock:
            if self._raw is None or self._clock() - self._at >= self.interval_s(self._raw):
                if self._loop.is_closed():
                    raise RuntimeError("the broker is stopping")
                self._raw = asyncio.run_coroutine_threadsafe(self._take(), self._loop).result(SNAPSHOT_TIMEOUT_S)
                self._at = self._clock()
                self.snapshots += 1
            return self._raw


def host_allowed(host_header: str | None, listen_host: str, port: int) -> bool:
    """Whether a request's ``Host`` header names this console (pure): the port it listens on
    (80 when none is given) and a host that is an IP literal, ``localhost``, or the host of
    ``console.listen``. A DNS name of anyone else's (a rebinding attack's) is refused."""
    if not host_header:
        return False
    value = host_header.strip().lower()
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return False
        port_text = rest[1:] if rest else "80"
    else:
        host, sep, port_text = value.rpartition(":")
        if not sep:
            host, port_text = value, "80"
    if not port_text.isdigit() or int(port_text) != port or not host:
        return False
    if host in ("localhost", listen_host.strip("[]").lower()):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def origin_allowed(origin: str | None, fetch_site: str | None, host_header: str) -> bool:
    """Whether a request comes from the console's own page (pure): no ``Origin`` (a non-browser
    client) or exactly ``http://<Host>``, and no ``Sec-Fetch-Site`` or same-origin / none."""
    if origin is not None and origin.strip().lower() != "http://" + host_header.strip().lower():
        return False
    return fetch_site is None or fetch_site.strip().lower() in ("same-origin", "none")


class ConsoleHTTPServer(BoundedHTTPServer):
    """Threads per connection (daemon), at most ``MAX_CONNECTIONS`` of them, each request within
    ``REQUEST_TIMEOUT_S``. ``listen_host``: the host of ``console.listen`` (``host_allowed``);
    ``api``: answers every ``/api/`` route (console/api.py)."""

    def __init__(self, address: tuple[str, int], api: "Api", files: dict[str, tuple[bytes, str]], *,
                 ipv6: bool = False, listen_host: str | None = None) -> None:
        self.api = api
        self.files = files
        self.listen_host = address[0] if listen_host is None else listen_host
        super().__init__(address, Handler, max_connections=MAX_CONNECTIONS, request_deadline_s=REQUEST_TIMEOUT_S,
                         ipv6=ipv6)


def session_token(cookie_header: str | None) -> str | None:
    """The console's session token from a ``Cookie`` header (pure); None when absent."""
    if not cookie_header or len(cookie_header) > 8192:
        return None
    for item in cookie_header.split(";"):
        name, sep, value = item.strip().partition("=")
        if sep and name == COOKIE:
            return value.strip() or None
    return None


class Handler(DeadlineHandler):
    server: ConsoleHTTPServer
    server_version = "oncelog-console"

    def _send(self, status: int, body: bytes, ctype: str, *, head: bool = False, cache: bool = False,
              cookies: list[str] = ()) -> None:  # type: ignore[assignment]
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=60" if cache else "no-store")
        for k, v in _SECURITY_HEADERS.items():
            self.send_header(k, v)
        for c in cookies:
            self.send_header("Set-Cookie", c)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, status: int, doc: Any, *, head: bool = False) -> None:
        self._send(status, json.dumps(doc, separators=(",", ":")).encode(), "application/json", head=head)

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message})

    def _refused(self, *, head: bool = False) -> bool:
        """Answers 403 and returns True when the request does not name this console (Host) or
        does not come from its page (Origin, Sec-Fetch-Site)."""
        host = self.headers.get("Host")
        if not host_allowed(host, self.server.listen_host, self.server.server_address[1]):
            self.close_connection = True
            self._json(403, {"error": "the Host header does not name this console (an IP address or localhost "
                                      "and its port, or the host of console.listen)"}, head=head)
            return True
        if not origin_allowed(self.headers.get("Origin"), self.headers.get("Sec-Fetch-Site"), host or ""):
            self.close_connection = True
            self._json(403, {"error": "cross-origin requests are refused"}, head=head)
            return True
        return False

    def _api(self, method: str, path: str, query: str, body: bytes, *, head: bool = False) -> None:
        call = Call(method, path, query, body, self.client_address[0], session_token(self.headers.get("Cookie")))
        reply = self.server.api.handle(call)
        payload = reply.body if reply.body is not None else json.dumps(reply.doc, separators=(",", ":")).encode()
        self._send(reply.status, payload, "application/json", head=head, cookies=reply.cookies)

    def do_HEAD(self) -> None:
        self._get(head=True)

    def do_GET(self) -> None:
        self._get(head=False)

    def _get(self, *, head: bool) -> None:
        if self._refused(head=head):
            return
        path, _, query = self.path.partition("?")
        if path in self.server.files:
            body, ctype = self.server.files[path]
            self._send(200, body, ctype, head=head, cache=path != "/")
        elif path.startswith("/api/") and len(query) <= MAX_QUERY:
            self._api("GET", path, query, b"", head=head)
        else:
            self._json(404 if len(query) <= MAX_QUERY else 414, {"error": "not found"}, head=head)

    def do_POST(self) -> None:
        if self._refused():
            return
        path = self.path.split("?", 1)[0]
        action = _POSTS.get(path)
        if action is None:
            self.close_connection = True
            self._error(404, "not found")
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            self._error(411, "Content-Length required")
            return
        if int(length) > MAX_BODY:
            self.close_connection = True  # the body is never read
            self._error(413, f"body longer than {MAX_BODY} bytes")
            return
        body = self.rfile.read(int(length))
        if self.headers.get("X-Oncelog-Console") != action or \
                self.headers.get_content_type() != "application/json":
            self._error(403, f"send Content-Type: application/json and X-Oncelog-Console: {action}")
            return
        self._api("POST", path, "", body)
