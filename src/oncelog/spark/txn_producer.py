"""The exactly-once writer's transactional producers: every call bounded, cached per worker.

``TxnProducer`` is a confluent-kafka transactional ``Producer`` for one transactional id whose
calls that can wait — ``init_transactions``, ``begin_transaction``,
``send_offsets_to_transaction``, ``commit_transaction``, ``abort_transaction`` — run through a
``Guarded`` (guard.py) with a deadline: ``requestTimeoutMs`` for each, ``flushTimeoutMs`` for
the commit (its flush and EndTxn, retries included). A call past its deadline raises
``ClientCallTimeout`` (call, transactional id, what the client and the cluster looked like) and
the producer is abandoned; ``discard`` throws a producer away after any other failure. Either
way its open transaction, if any, is aborted when it is closed (on the guard's thread) or by the
next attempt's ``init_transactions``, which fences it.

``Producers`` keeps them per worker process, one per (transactional id, configuration), so a
task partition's next micro-batch skips InitProducerId (exactly_once.py explains why reuse is
safe).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Callable

from oncelog.spark.clientstate import ClientEvents, connection_conf, probe_cluster
from oncelog.spark.guard import Guarded, deadline_after
from oncelog.spark.options import SinkOptions

log = logging.getLogger(__name__)

#: Attempts for calls that fail with a retriable error, within the call's time budget.
RETRIES = 5
#: How long describing a timed-out producer waits for its queued error events.
STATE_POLL_S = 1.0


class _ExpectedFencing(logging.Filter):
    """librdkafka reports a fenced producer as a fatal error (levels 0-3). Here fencing is part
    of the protocol — a cached producer found stale is replaced — so those lines go to DEBUG;
    everything else the client says keeps its level."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "fenced by a newer instance" in record.getMessage():
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


#: Where the transactional producers' own log lines go (served when the producer is polled).
_client_log = logging.getLogger("oncelog.spark.librdkafka")
_client_log.addFilter(_ExpectedFencing())


def _poll_quietly(producer: Any) -> None:
    try:
        producer.poll(0)
    except Exception as exc:  # only for a description; the call's timeout is the error
        log.debug("oncelog sink: poll for client state failed: %s", exc)


def close_producer(producer: Any) -> None:
    """Release a producer that is being thrown away: drop its unsent records, then close it
    (which aborts its open transaction, if it still can). Runs on the producer's guard thread."""
    try:
        producer.purge()
    finally:
        producer.close()


class TxnProducer:
    """A transactional producer for ``transactional_id`` with bounded calls (module docstring).
    Not thread-safe by itself: one task uses it at a time."""

    def __init__(self, options: SinkOptions, transactional_id: str) -> None:
        from confluent_kafka import Producer

        self.transactional_id = transactional_id
        self.options = options
        self.events = ClientEvents()
        # Delivery reports for failures only: a failed record fails commit_transaction anyway,
        # and a report per record would cost the worker a Python-level event per row.
        producer = Producer({
            **options.producer_config(), "transactional.id": transactional_id, "logger": _client_log,
            "error_cb": self.events.on_error, "delivery.report.only.error": True,
        })
        self._client: Guarded[Any] = Guarded(
            transactional_id, producer, close=close_producer, state=lambda: self._state(producer))

    # -- the calls ---------------------------------------------------------------------------

    @property
    def raw(self) -> Any:
        """The confluent-kafka Producer, for ``produce`` (which never waits). Do not keep it."""
        return self._client.raw

    def init_transactions(self) -> None:
        """InitProducerId: fences every earlier producer of the id and finishes its transaction.
        It may first wait for that transaction's abort, so it gets twice the request timeout."""
        t = self.options.request_timeout_ms / 1000
        self._retrying("init_transactions", lambda p, s: p.init_transactions(s), per_call_s=2 * t, budget_s=2 * t)

    def begin_transaction(self) -> None:
        self._client.call("begin_transaction", lambda p: p.begin_transaction(), deadline_after(0))

    def send_offsets_to_transaction(self, what: str, offsets: list[Any], group_metadata: Any) -> None:
        """Adds ``offsets`` of the group in ``group_metadata`` to the open transaction;
        ``what`` says which offsets (for errors)."""
        t = self.options.request_timeout_ms / 1000
        self._client.call(
            f"send_offsets_to_transaction ({what})",
            lambda p: p.send_offsets_to_transaction(offsets, group_metadata, t), deadline_after(t))

    def commit_transaction(self, what: str) -> None:
        """Flush and commit, retrying retriable errors, all within ``flushTimeoutMs``."""
        t = self.options.flush_timeout_ms / 1000
        self._retrying(f"commit_transaction ({what})", lambda p, s: p.commit_transaction(s), per_call_s=t, budget_s=t)

    def abort_transaction(self) -> None:
        t = self.options.request_timeout_ms / 1000
        self._client.call("abort_transaction", lambda p: p.abort_transaction(t), deadline_after(t))

    def discard(self) -> None:
        """Throw the producer away (closed on its guard's thread; open transaction aborted)."""
        self._client.retire()

    # -- plumbing ----------------------------------------------------------------------------

    def _retrying(self, what: str, call: Callable[[Any, float], Any], *, per_call_s: float, budget_s: float) -> None:
        """``call(producer, timeout)`` until it succeeds, a non-retriable error, RETRIES attempts
        or the end of ``budget_s``; each attempt's timeout is what is left of the budget."""
        from confluent_kafka import KafkaException

        until = time.monotonic() + budget_s
        for attempt in range(RETRIES):
            left = max(0.001, min(per_call_s, until - time.monotonic()))
            try:
                self._client.call(what, lambda p: call(p, left), deadline_after(left))
                return
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                pause = min(0.1 * 2**attempt, 2.0)
                retriable = err is not None and err.retriable() and not err.txn_requires_abort()
                if retriable and attempt + 1 < RETRIES and time.monotonic() + pause < until:
                    log.warning("oncelog sink: %s of %s failed, retrying: %s", what, self.transactional_id, err)
                    time.sleep(pause)
                    continue
                raise

    def _state(self, producer: Any) -> str:
        """The client's last errors and whether the cluster answers; bounded. The error events
        queued while the call hung are served first, by a ``poll(0)`` on a throwaway thread
        (it does not wait, but the client is suspect, so the task does not wait on it either)."""
        t = threading.Thread(target=_poll_quietly, args=(producer,), name="oncelog-state-poll", daemon=True)
        t.start()
        t.join(STATE_POLL_S)
        return f"{self.events.describe()}; {probe_cluster(connection_conf(self.options.client))}"


class Producers:
    """Transactional producers kept per worker process, one per transactional id and
    configuration, at most ``MAX``; the least recently used is discarded beyond that."""

    MAX = 16

    def __init__(self) -> None:
        self._cache: "OrderedDict[tuple[Any, ...], TxnProducer]" = OrderedDict()

    @staticmethod
    def _key(options: SinkOptions, tid: str) -> tuple[Any, ...]:
        return (tid, tuple(sorted(options.producer_config().items())), options.request_timeout_ms,
                options.flush_timeout_ms)

    def get(self, options: SinkOptions, tid: str) -> tuple[TxnProducer, bool]:
        """A cached producer of ``tid`` (False) or a fresh, initialised one (True)."""
        key = self._key(options, tid)
        p = self._cache.get(key)
        if p is not None:
            self._cache.move_to_end(key)
            return p, False
        return self.fresh(options, tid), True

    def fresh(self, options: SinkOptions, tid: str) -> TxnProducer:
        """A new producer of ``tid`` whose ``init_transactions`` has fenced every earlier one;
        the cached one, if any, is discarded first."""
        self.drop(options, tid)
        p = TxnProducer(options, tid)
        try:
            p.init_transactions()
        except BaseException:
            p.discard()
            raise
        self._cache[self._key(options, tid)] = p
        while len(self._cache) > self.MAX:
            _, old = self._cache.popitem(last=False)
            old.discard()
        return p

    def drop(self, options: SinkOptions, tid: str) -> None:
        """Discard the cached producer of ``tid`` (after a failure: it may hold an open
        transaction, or be wedged)."""
        p = self._cache.pop(self._key(options, tid), None)
        if p is not None:
            p.discard()

