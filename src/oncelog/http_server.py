"""The bounded HTTP server under oncelog's HTTP surfaces: the console and the metrics endpoint.

A stdlib ``ThreadingHTTPServer`` (daemon threads) made safe against hostile clients:

* at most ``max_connections`` connections are served at once; one more is closed at once, not
  queued (a thread each: the broker never holds an unbounded number of threads for HTTP);
* every request has a deadline for the WHOLE request (``request_deadline_s``), from the moment
  the server starts waiting for it to the last byte of its answer, not per read: a client that
  trickles a byte every few seconds, or sends half a request and waits, is dropped when the
  deadline passes (``DeadlineReader`` / ``DeadlineWriter`` set the socket's timeout to what is
  left of the deadline before each read and write). A keep-alive connection's wait for its next
  request is a new request with a new deadline.

Header lines and counts are bounded by ``http.server``. Subclasses of ``DeadlineHandler`` route
the requests; ``BoundedHTTPServer.handle_error`` logs at debug level only (a client's trouble).
"""

from __future__ import annotations

import io
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

#: the whole request, headers, body and answer, in seconds
REQUEST_DEADLINE_S = 10.0
#: an answer's write gets at least this long, even when building it (the server's own work)
#: used up the deadline: a slow answer is not the client's fault
MIN_WRITE_S = 2.0


class DeadlineReader(io.RawIOBase):
    """A socket's reading side whose every ``recv`` waits at most until ``handler.deadline``
    (monotonic seconds); past it, TimeoutError (``http.server`` closes the connection)."""

    def __init__(self, sock: socket.socket, handler: "DeadlineHandler") -> None:
        super().__init__()
        self._sock = sock
        self._handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        left = self._handler.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's deadline passed")
        self._sock.settimeout(left)
        return self._sock.recv_into(b)


class DeadlineWriter(io.RawIOBase):
    """A socket's writing side bounded by the same deadline, or MIN_WRITE_S per write when less
    is left (``sendall``'s timeout is for the whole call since Python 3.5)."""

    def __init__(self, sock: socket.socket, handler: "DeadlineHandler") -> None:
        super().__init__()
        self._sock = sock
        self._handler = handler

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self._sock.settimeout(max(self._handler.deadline - time.monotonic(), MIN_WRITE_S))
        self._sock.sendall(b)
        return len(b)


class DeadlineHandler(BaseHTTPRequestHandler):
    """A request handler whose requests each have ``request_deadline_s`` in all (the server's).
    Its ``Server`` header is ``server_version`` alone (no Python version), and its access log
    lines go at debug level to the logger of the subclass's module."""

    server: "BoundedHTTPServer"
    protocol_version = "HTTP/1.1"
    #: when the request being read or answered must be done (monotonic seconds): set as each
    #: request starts to be awaited (``handle_one_request``), before anything is read
    deadline = 0.0

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # http.server's own file objects, replaced by the bounded ones
        self.rfile = io.BufferedReader(DeadlineReader(self.connection, self), 64 * 1024)
        self.wfile = DeadlineWriter(self.connection, self)  # unbuffered, as http.server's own

    def handle_one_request(self) -> None:
        self.deadline = time.monotonic() + self.server.request_deadline_s
        super().handle_one_request()

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        logging.getLogger(type(self).__module__).debug("%s: %s " + format, self.server_version,
                                                       self.address_string(), *args)


class BoundedHTTPServer(ThreadingHTTPServer):
    """A thread per connection (daemon), at most ``max_connections`` of them; each request
    bounded by ``request_deadline_s``. ``ipv6``: listen on an IPv6 address."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], handler: type[DeadlineHandler], *, max_connections: int,
                 request_deadline_s: float = REQUEST_DEADLINE_S, ipv6: bool = False) -> None:
        if ipv6:
            self.address_family = socket.AF_INET6
        self.max_connections = max_connections
        self.request_deadline_s = request_deadline_s
        self.active = 0
        self._active_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._active_lock:
            if self.active >= self.max_connections:
                self.shutdown_request(request)  # too many at once: closed, not queued
                return
            self.active += 1
        try:
            super().process_request(request, client_address)
        except BaseException:
            with self._active_lock:  # no thread started: the slot is free again
                self.active -= 1
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._active_lock:
                self.active -= 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("http: request from %s failed", client_address, exc_info=True)
