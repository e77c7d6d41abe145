"""The metrics endpoint's HTTP server: ``GET /metrics`` answered with ``BrokerMetrics.render()``
(broker/observability/metrics.py), on ``oncelog.http_server.BoundedHTTPServer``: at most ``max_connections``
connections at once, each request within ``request_deadline_s`` in all (issue 26 row 8; the
values are broker/observability/metrics.py's ``MAX_CONNECTIONS`` and ``REQUEST_DEADLINE_S``, passed by
``BrokerMetrics.serve``: this module imports nothing of metrics.py, which imports it).
Imported only when ``metrics.listen`` is set."""

from __future__ import annotations

from typing import Protocol

from oncelog.http_server import BoundedHTTPServer, DeadlineHandler


class Rendered(Protocol):
    """What the server serves (``BrokerMetrics``): the encoded answer of a scrape."""

    def render(self) -> bytes: ...


class MetricsHTTPServer(BoundedHTTPServer):
    """``GET /metrics`` (and ``/``) -> ``BrokerMetrics.render()``; at most ``max_connections``
    connections, each request within ``request_deadline_s``."""

    def __init__(self, address: tuple[str, int], metrics: Rendered, *, max_connections: int,
                 request_deadline_s: float, ipv6: bool = False) -> None:
        self.metrics = metrics
        super().__init__(address, MetricsHandler, max_connections=max_connections,
                         request_deadline_s=request_deadline_s, ipv6=ipv6)


class MetricsHandler(DeadlineHandler):
    server: MetricsHTTPServer
    server_version = "oncelog-metrics"

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def _answer(self, *, head: bool) -> None:
        from prometheus_client import CONTENT_TYPE_LATEST

        if self.path.split("?", 1)[0] in ("/metrics", "/"):
            status, body, ctype = 200, self.server.metrics.render(), CONTENT_TYPE_LATEST
        else:
            status, body, ctype = 404, b"not found: the metrics are at /metrics\n", "text/plain; charset=utf-8"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)
