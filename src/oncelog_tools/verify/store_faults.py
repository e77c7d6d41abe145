"""The object-store faults of ``oncelog verify copy --cluster N --diskless --store-faults K``
(issue 29): fault windows of the loopback S3 fault proxy (oncelog.testing.s3_fault_proxy) that
sits between the brokers and SeaweedFS.

Theory of operation. ``StoreFaults.draw(rng)`` picks one kind, opens a window of it on the proxy
(the proxy closes it by itself after the window's length, so nothing here has to remember to)
and returns the kind's name for the run's summary. The brokers of such a run get a short request
timeout and call deadline (``BROKER_PROPERTIES``) so that both sides of each bound are exercised
in a short window:

- ``delay under the request timeout``: 0.1 s to 80 % of the request timeout per request (calls slow down);
- ``delay past the request timeout``: 0.5 to 2 s more than the request timeout (attempts are cut
  and retried while the request is still forwarded later; a window longer than the call deadline
  with every request hit fails the call: REQUEST_TIMED_OUT to the producer);
- ``503 SlowDown`` (not forwarded), ``500 after the write`` (forwarded, the answer replaced),
  ``reset mid-request``, ``reset mid-response``.

Each window lasts 1 to 8 s and hits each request of every operation (PUT, GET, HEAD, LIST,
DELETE) with a probability drawn in [0.3, 1].
"""

from __future__ import annotations

import random

from oncelog.testing.s3_fault_proxy import S3FaultProxy

__all__ = ["BROKER_PROPERTIES", "KINDS", "StoreFaults"]

REQUEST_TIMEOUT_S = 2.0
CALL_DEADLINE_S = 6.0
#: the brokers' object-store bounds in a run with proxy faults
BROKER_PROPERTIES = {"diskless.storage.request.timeout.ms": str(int(REQUEST_TIMEOUT_S * 1000)),
                     "diskless.storage.call.deadline.ms": str(int(CALL_DEADLINE_S * 1000))}

#: summary name -> (proxy fault, delay bounds)
KINDS: dict[str, tuple[str, tuple[float, float]]] = {
    "object-store proxy: delay under the request timeout": ("delay", (0.1, REQUEST_TIMEOUT_S * 0.8)),
    "object-store proxy: delay past the request timeout": ("delay", (REQUEST_TIMEOUT_S + 0.5, REQUEST_TIMEOUT_S + 2.0)),
    "object-store proxy: 503 SlowDown": ("slowdown", (0.0, 0.0)),
    "object-store proxy: 500 after the write": ("internal-error", (0.0, 0.0)),
    "object-store proxy: reset mid-request": ("reset-request", (0.0, 0.0)),
    "object-store proxy: reset mid-response": ("reset-response", (0.0, 0.0)),
}
WINDOW_S = (1.0, 8.0)


class StoreFaults:
    """Draws and applies one proxy fault window at a time (see the module docstring)."""

    def __init__(self, proxy: S3FaultProxy) -> None:
        self.proxy = proxy
        #: windows longer than the call deadline with every request hit (calls surely failed)
        self.past_deadline = 0

    def draw(self, rng: random.Random) -> str:
        name = rng.choice(sorted(KINDS))
        kind, delay = KINDS[name]
        seconds = rng.uniform(*WINDOW_S)
        probability = rng.choice([1.0, rng.uniform(0.3, 1.0)])
        if kind == "delay" and delay[0] > REQUEST_TIMEOUT_S and probability == 1.0 and seconds > CALL_DEADLINE_S:
            self.past_deadline += 1
        self.proxy.window(kind, seconds, probability=probability, delay_s=delay)
        return name

    def requests_hit(self) -> str:
        """How many requests each proxy fault hit, for the summary."""
        hit = {k: n for k, n in self.proxy.counts.items() if n}
        return (f"{sum(hit.values())} of {self.proxy.requests}"
                + (f" ({', '.join(f'{k} {n}' for k, n in sorted(hit.items()))})" if hit else ""))
