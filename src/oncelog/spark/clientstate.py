"""What a client and the cluster looked like when a call timed out (R23, R24; issue 13).

``ClientCallTimeout`` (guard.py) carries a description of the state the call ran into, so that
the task's failure — which Spark shows — says whether the broker was down, restarting, or up
while the client waited anyway (a client bug). Two sources, both bounded:

- ``ClientEvents``: the last errors the client reported through its ``error_cb`` (librdkafka's
  own account of its connections: "Disconnected", "Connection refused", "1/1 brokers are
  down", ...). They are kept only when the client serves its event queue (``poll``, ``flush``,
  ``consume``), which the caller may do right before describing.
- ``probe_cluster``: one Metadata request from a fresh, short-lived AdminClient, bounded by a
  deadline: does the cluster answer now, and with which brokers.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

#: The Metadata request of ``probe_cluster`` waits this long at most.
PROBE_TIMEOUT_S = 3.0


class ClientEvents:
    """The last ``keep`` distinct errors a librdkafka client reported; ``on_error`` is its
    ``error_cb``. librdkafka does not say when an error happened, and errors reach the callback
    only when the client's queue is served, so the order is all that is kept. Thread-safe
    enough for one writer (the thread serving the client's queue) and any reader."""

    def __init__(self, keep: int = 4) -> None:
        self._events: deque[str] = deque(maxlen=keep)

    def on_error(self, err: Any) -> None:
        try:
            text = f"{err.name()}: {err.str()}"
        except Exception:  # not a KafkaError: keep what it says
            text = str(err)
        if text in self._events:
            self._events.remove(text)
        self._events.append(text)

    def describe(self) -> str:
        events = list(self._events)
        if not events:
            return "the client reported no errors"
        return "the client reported (latest last): " + "; ".join(events)


def probe_cluster(conf: dict[str, str], timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """Ask the cluster for its brokers with a fresh AdminClient; a sentence saying whether and
    how it answered. Never raises; returns within about ``timeout_s`` plus the guard's grace."""
    from confluent_kafka.admin import AdminClient

    from oncelog.spark.guard import ClientCallTimeout, Guarded, deadline_after

    started = time.monotonic()
    probe: Guarded[Any] | None = None
    try:
        probe = Guarded("cluster probe", AdminClient(dict(conf)))
        md = probe.call("metadata", lambda a: a.list_topics(timeout=timeout_s), deadline_after(timeout_s))
        took = 1000 * (time.monotonic() - started)
        brokers = ", ".join(f"{b.id} at {b.host}:{b.port}" for b in sorted(md.brokers.values(), key=lambda b: b.id))
        return f"the cluster answered a Metadata request in {took:.0f} ms (brokers: {brokers or 'none'})"
    except ClientCallTimeout:
        return f"the cluster did not answer a Metadata request within {timeout_s:.0f}s"
    except Exception as exc:
        return f"the cluster did not answer a Metadata request ({exc})"
    finally:
        if probe is not None:
            probe.retire()


#: The client properties a probe (or any connection-only client) needs from a full configuration.
CONNECTION_PREFIXES = (
    "bootstrap.servers", "security.protocol", "client.id", "socket.", "ssl.", "sasl.", "broker.address.family",
    "metadata.recovery.", "reconnect.",
)


def connection_conf(conf: dict[str, str]) -> dict[str, str]:
    """Connection properties only (what an AdminClient or a metadata-only consumer needs)."""
    return {k: v for k, v in conf.items() if k.startswith(CONNECTION_PREFIXES)}
