"""The request-path counters (issue 19, docs/METRICS.md): what the dispatcher (one request) and
the Produce and Fetch handlers (one partition's batches) count, as plain ints in plain dicts, and
what the observer copies into each snapshot (broker/observability/). A leaf: it imports nothing of
the broker, so the request path, the context and the observer all name its type without an
import circle.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

__all__ = ["LATENCY_BUCKETS", "RequestStats"]

#: request latency buckets (seconds): Kafka's request times are graphed from 1 ms to the 500 ms
#: long-poll cap and beyond
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class RequestStats:
    """The request-path counters, as plain ints in plain dicts: updated on the event loop only
    (a dict lookup and a few additions: about a microsecond), copied into each snapshot on
    the loop, and exported at scrape time. ``prometheus_client``'s own metric objects take a
    lock per update (several microseconds a request), so they are kept off the hot path."""

    __slots__ = ("per_api", "errors", "topic_in", "topic_out")

    def __init__(self) -> None:
        #: api key -> [count, sum of seconds, one count per LATENCY_BUCKETS bucket, then +Inf]
        self.per_api: dict[int, list[Any]] = {}
        self.errors: dict[tuple[int, int], int] = {}  # (api key, error code) -> count
        self.topic_in: dict[str, list[int]] = {}  # topic -> [bytes, records]
        self.topic_out: dict[str, int] = {}  # topic -> bytes

    def request(self, api_key: int, seconds: float, error: int) -> None:
        """One request handled in ``seconds``; ``error`` its whole-request error code (0: none)."""
        s = self.per_api.get(api_key)
        if s is None:
            s = self.per_api[api_key] = [0, 0.0] + [0] * (len(LATENCY_BUCKETS) + 1)
        s[0] += 1
        s[1] += seconds
        s[2 + bisect_left(LATENCY_BUCKETS, seconds)] += 1  # the first bucket whose bound is >= seconds
        if error:
            self.error(api_key, error)

    def error(self, api_key: int, code: int) -> None:
        """One error code answered (a whole request's, or one partition's)."""
        key = (api_key, code)
        self.errors[key] = self.errors.get(key, 0) + 1

    def produced(self, topic: str, nbytes: int, nrecords: int) -> None:
        """One batch of ``nrecords`` records, ``nbytes`` long, accepted for ``topic``."""
        c = self.topic_in.get(topic)
        if c is None:
            c = self.topic_in[topic] = [0, 0]
        c[0] += nbytes
        c[1] += nrecords

    def fetched(self, topic: str, nbytes: int) -> None:
        """``nbytes`` of whole batches of ``topic`` put into a Fetch answer."""
        self.topic_out[topic] = self.topic_out.get(topic, 0) + nbytes

    def copy(self) -> "RequestStats":
        """A copy for a snapshot (on the event loop)."""
        c = RequestStats()
        c.per_api = {k: list(v) for k, v in self.per_api.items()}
        c.errors = dict(self.errors)
        c.topic_in = {k: list(v) for k, v in self.topic_in.items()}
        c.topic_out = dict(self.topic_out)
        return c
