"""Produce pipelining: a connection's next Produce is handled while its earlier ones wait for
their COMMITs (cluster mode, issue 28).

Why. A server handles a connection's requests in arrival order and answers in that order
(server.py). In cluster mode a Produce waits for the group commit (a PostgreSQL COMMIT) of its
batches; handled strictly one at a time, a producer that keeps k Produce requests in flight on a
connection (librdkafka sends one per partition) waits k COMMITs for the last answer, one
round after the other, and the broker's committer sees one request of that connection per
round. Long answers make librdkafka's idempotent producer spin: while a partition has a request
in flight and its next batch is past linger.ms, its broker thread polls without sleeping until
the answer comes (the cause of issue 28's collapse of six brokers: clients at 13.7 cores).

How. The server starts such a request as a task in a context where ``submitted`` releases the
connection: the Produce handler calls it once every batch of the request has taken its place
in its producer's line on its partition (``Partition.append_validated``), i.e. once
nothing a later request does can get ahead of it; the server then reads and starts the next
Produce of the connection, so all of them are in the same (or the next) commit round. The
answers still go out in request order: the server awaits the tasks oldest first. Any other
request waits until every earlier one is answered, as before.

WriteTxnMarkers (a transaction coordinator on another broker writing markers here) is pipelined
the same way: its handler calls ``submitted`` once every marker of the request has its place in
its producer's line (handlers/write_txn_markers.py), so the markers of several transactions
sent by one coordinator share this broker's commit rounds (issue 28).

``submitted`` is a no-op outside such a context (the embedded broker, a test calling a handler).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Callable

__all__ = ["release_with", "submitted"]

_release: ContextVar[Callable[[], None] | None] = ContextVar("oncelog_pipeline_release", default=None)


def release_with(fn: Callable[[], None]) -> None:
    """In the current context (a request's task, about to run), ``submitted`` calls ``fn``."""
    _release.set(fn)


def submitted() -> None:
    """The running request's order relative to its connection's next request is fixed: the
    server may start the next one (see the module docstring). Idempotent."""
    fn = _release.get()
    if fn is not None:
        fn()
