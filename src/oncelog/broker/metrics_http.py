"""The metrics endpoint's HTTP server: ``GET /metrics`` answered with ``BrokerMetrics.render()``
(broker/metrics.py), on ``oncelog.http_server.BoundedHTTPServer``: at most ``MAX_CONNECTIONS``
connections at once, each request within ``REQUEST_DEADLINE_S`` in all (issue 26 row 8).
Imported only when ``metrics.listen`` is set."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.broker.metrics import MAX_CONNECTIONS, REQUEST_DEADLINE_S
from oncelog.http_server import BoundedHTTPServer, DeadlineHandler

if TYPE_CHECKING:
    from oncelog.broker.metrics import BrokerMetrics


class MetricsHTTPServer(BoundedHTTPServer):
    """``GET /metrics`` (and ``/``) -> ``BrokerMetrics.render()``; at most MAX_CONNECTIONS
    connections, each request within REQUEST_DEADLINE_S."""

    def __init__(self, address: tuple[str, int], metrics: "BrokerMetrics", *, ipv6: bool = False) -> None:
        self.metrics = metrics
        super().__init__(address, MetricsHandler, max_connections=MAX_CONNECTIONS,
                         request_deadline_s=REQUEST_DEADLINE_S, ipv6=ipv6)


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
