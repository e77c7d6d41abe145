"""The console's hanging-transaction check and abort: the code of ``oncelog transactions``.

The console does not read or write transaction state behind the broker's back. It is a Kafka
client of the broker it runs in: ``TransactionsAdmin`` (admin/transactions.py) connected to the
broker's own listener, with the client properties of ``console.client.config`` when set. So

* "hanging" is exactly what ``oncelog transactions find-hanging`` says (``find_hanging``, with
  the broker's ``transaction.max.timeout.ms``), and
* the abort button is exactly ``oncelog transactions abort --start-offset`` (``abort_at``),
  never forced: it aborts only a transaction that find-hanging's definition says hangs (with
  the broker's ``transaction.max.timeout.ms``) and refuses a live one (409), then sends a
  WriteTxnMarkers request that the broker authorizes like any other (ClusterAction on the
  Cluster when ACLs are on), as the principal the console logs in as.

With an authorizer configured and no ``console.client.config``, abort is disabled outright:
then whoever reaches the console's HTTP port would act as the anonymous principal, and the
broker's operator has not said who that should be (docs/CONSOLE.md, "Security").

Blocking: every call here does socket I/O and runs on an HTTP worker thread, never on the event
loop. The find-hanging result is kept for ``ttl_s`` (it asks every partition's producers), one
check at a time; other requests meanwhile get the last result. An abort clears it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from oncelog.admin.transactions import DEFAULT_MAX_TXN_TIMEOUT_MS, NotHanging, TransactionsAdmin
from oncelog.protocol.errors import KafkaError

#: how long a find-hanging result is shown before it is checked again (seconds)
HANGING_TTL_S = 10.0
#: the console's Kafka client's socket timeout (seconds)
CLIENT_TIMEOUT_S = 5.0
#: producer ids whose transactional id is kept, and asked about in one ListTransactions
MAX_NAMED = 4096
MAX_ASKED = 256


class AbortRefused(Exception):
    """An abort the console did not send or the broker refused; ``status`` is the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class TxnLink:
    """find-hanging (cached) and abort over the broker's own Kafka listener. Thread-safe.

    ``bootstrap``: returns the ``HOST:PORT`` to connect to (the broker's listener, known once it
    listens). ``abort_disabled``: why abort is off, or None. ``now_ms``: the wall clock
    (find-hanging compares it with producers' timestamps). ``admin``: builds the client (tests
    pass a fake)."""

    def __init__(self, bootstrap: Callable[[], str], *, security: dict[str, str] | None = None,
                 max_timeout_ms: int = DEFAULT_MAX_TXN_TIMEOUT_MS, abort_disabled: str | None = None,
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000), ttl_s: float = HANGING_TTL_S,
                 admin: Callable[..., Any] = TransactionsAdmin) -> None:
        self._bootstrap = bootstrap
        self._security = security
        self.max_timeout_ms = max_timeout_ms
        self.abort_disabled = abort_disabled
        self._now_ms = now_ms
        self.ttl_s = ttl_s
        self._admin = admin
        self._checking = threading.Lock()  # one find-hanging at a time
        self._aborting = threading.Lock()  # one abort at a time
        self._last: dict[str, Any] = {"checked_ms": None, "error": None, "items": []}
        self._naming = threading.Lock()
        self._named: dict[int, tuple[str | None, float]] = {}  # producer id -> (transactional id, when asked)
        self._last_at = float("-inf")

    def _connect(self) -> Any:
        return self._admin(self._bootstrap(), timeout=CLIENT_TIMEOUT_S, security=self._security,
                           client_id="oncelog-console")

    def hanging(self) -> dict[str, Any]:
        """The last find-hanging result, checked again first if older than ``ttl_s`` and no
        other thread is checking: ``{"checked_ms", "error", "items": [Hanging.to_json()…]}``.
        Never raises: a failure is the result's ``error`` (the items are then empty)."""
        if time.monotonic() - self._last_at >= self.ttl_s and self._checking.acquire(blocking=False):
            try:
                self._last = self._check()
                self._last_at = time.monotonic()
            finally:
                self._checking.release()
        return self._last

    def _check(self) -> dict[str, Any]:
        now = self._now_ms()
        try:
            with self._connect() as a:
                found, errors = a.find_hanging(now, max_timeout_ms=self.max_timeout_ms)
        except KafkaError as exc:
            return {"checked_ms": now, "error": f"{exc.code.name.upper()}: {exc}", "items": []}
        except (OSError, ConnectionError, LookupError, ValueError) as exc:
            return {"checked_ms": now, "error": f"cannot ask the broker: {exc}", "items": []}
        shown = [f"{tp}: {e}" for tp, e in sorted(errors.items())[:5]]
        if len(errors) > 5:
            shown.append(f"and {len(errors) - 5} more partitions")
        err = "; ".join(shown) or None
        return {"checked_ms": now, "error": err, "items": [h.to_json() for h in found]}

    def invalidate(self) -> None:
        """The next ``hanging()`` checks again."""
        self._last_at = float("-inf")

    def transactional_ids(self, producer_ids: set[int]) -> dict[int, str]:
        """The transactional ids of ``producer_ids`` as every broker's coordinator knows them
        (ListTransactions filtered by producer id, ``oncelog transactions list``): in cluster mode
        a producer's coordinator may be another broker. Answers are kept ``ttl_s`` (at most
        ``MAX_NAMED`` producer ids); a failure names nothing."""
        now = time.monotonic()
        with self._naming:
            for pid in [p for p, (_, at) in self._named.items() if now - at >= self.ttl_s]:
                del self._named[pid]
            missing = sorted(p for p in producer_ids if p not in self._named)[:MAX_ASKED]
            if missing:
                try:
                    with self._connect() as a:
                        listed, _problems = a.list(producer_ids=missing)
                except (KafkaError, OSError, ConnectionError, LookupError, ValueError):
                    listed = []
                found = {x.producer_id: x.transactional_id for x in listed}
                for pid in missing:
                    if len(self._named) >= MAX_NAMED:
                        self._named.pop(next(iter(self._named)))
                    self._named[pid] = (found.get(pid), now)
            return {p: self._named[p][0] for p in producer_ids if p in self._named and self._named[p][0]}

    def abort(self, topic: str, partition: int, start_offset: int) -> dict[str, Any]:
        """``oncelog transactions abort --topic T --partition P --start-offset O``: the same
        ``TransactionsAdmin.abort_at``. Returns what was aborted. Raises AbortRefused: 403 when
        abort is disabled or the broker denied it (an authorization error), 404 when no open
        transaction starts there, 409 for other broker errors, 503 when the broker cannot be
        reached; 409 too when the transaction is not hanging (``NotHanging``: live transactions
        are never aborted from the console)."""
        if self.abort_disabled is not None:
            raise AbortRefused(403, self.abort_disabled)
        with self._aborting:
            try:
                with self._connect() as a:
                    p = a.abort_at(topic, partition, start_offset, now_ms=self._now_ms(),
                                   max_timeout_ms=self.max_timeout_ms)
            except LookupError as exc:
                raise AbortRefused(404, str(exc)) from None
            except NotHanging as exc:
                raise AbortRefused(409, f"abort refused: {exc}") from None
            except KafkaError as exc:
                status = 403 if "authorization" in exc.code.name else 409
                raise AbortRefused(status, f"abort refused: {exc.code.name.upper()} ({exc})") from None
            except (OSError, ConnectionError) as exc:
                raise AbortRefused(503, f"cannot reach the broker: {exc}") from None
            finally:
                self.invalidate()
        return {"aborted": True, "topic": topic, "partition": partition, "start_offset": start_offset,
                "producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
                "coordinator_epoch": max(p.coordinator_epoch, 0)}
