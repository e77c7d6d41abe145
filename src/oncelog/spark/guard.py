"""Deadlines for the connector's client calls (R23, R24; issue 13).

Theory of operation. Every librdkafka call takes a timeout, and some do not honour it: after
the only broker restarts, a transactional producer's ``send_offsets_to_transaction`` can wait
forever for a group coordinator whose broker handle a re-bootstrap decommissioned (librdkafka
#5511), because the coordinator request's timeout is never checked (#5456). Made on the task's
own thread, such a call would stall the task, and with it the query, for good.

So each client the connector creates lives in a ``Guarded``, and every call that can wait goes
through it: the call runs on the guard's helper thread while the caller waits at most the call's
deadline. When the deadline passes, the caller gets ``ClientCallTimeout`` — naming the call,
the client and what the client and the cluster looked like — and the client is *abandoned*:
the guard refuses further calls (``ClientAbandoned``), the caller drops it, and the helper thread
closes the client and ends if the hung call ever returns. A transactional producer abandoned
with its transaction open is fenced by the next attempt's ``init_transactions`` (same
transactional id, new epoch), which also aborts that transaction.

Where a client is destroyed matters: destroying a client that librdkafka has wedged can block
as well (a decommissioned broker thread that never lets go). So a client is closed, and its
guard's reference dropped, only on the helper thread (``retire``, or after an abandoned call) —
never on the caller's thread; ``close`` makes the Python object's own destructor a no-op.
Callers use the client only inside ``call`` and for the calls that cannot wait (``raw``).

Deadlines are set a little above the timeout passed to the call itself (``GRACE_S``), so that
whenever the client does honour its timeout, its own error — which says more — is the one raised.
Not guarded, because they cannot wait: ``produce`` (returns at once; a full queue is a
``BufferError``), ``poll(0)``, and waiting on an admin request's future (``result(timeout)`` is
bounded in Python; ``wait_future`` turns its timeout into ``ClientCallTimeout``).

Calls through one guard are serialised; a ``Guarded`` may be used from several threads.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from typing import Any, Callable, Generic, TypeVar

C = TypeVar("C")
T = TypeVar("T")

#: How much longer than the call's own timeout the guard waits before it gives up on the call.
GRACE_S = 5.0


class ClientCallTimeout(TimeoutError):
    """A client call did not return by its deadline; the client is abandoned (module docstring).

    The task fails with this error and Spark runs it again, with a new client."""

    def __init__(self, call: str, client: str, deadline_s: float, state: str) -> None:
        self.call = call
        self.client = client
        self.deadline_s = deadline_s
        self.state = state
        super().__init__(
            f"{call} of {client} did not return within {deadline_s:.1f}s; {state}; "
            "the client is abandoned (a retry of the task starts with a new one)"
        )


class ClientAbandoned(RuntimeError):
    """A call on a client that was abandoned or retired. A bug in the caller, which must drop a
    client as soon as one of its calls timed out."""


def deadline_after(timeout_s: float) -> float:
    """The guard's deadline for a call that was given ``timeout_s`` as its own timeout."""
    return timeout_s + GRACE_S


class _Job:
    __slots__ = ("fn", "done", "result", "error")

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


_RETIRE = object()


class Guarded(Generic[C]):
    """One client and the helper thread its calls run on (module docstring).

    ``name`` names the client in errors (a transactional id, "consumer of t-0", ...);
    ``close(client)`` releases it (``Producer.close``, ``Consumer.close``; None: just drop it);
    ``state()`` describes the client and the cluster when a deadline passes — it runs on the
    caller's thread and must be bounded itself."""

    def __init__(
        self, name: str, client: C, *, close: Callable[[C], Any] | None = None,
        state: Callable[[], str] | None = None,
    ) -> None:
        self.name = name
        self._client: C | None = client
        self._close = close
        self._state = state
        self._lock = threading.Lock()
        self._jobs: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._usable = True
        self.abandoned = False

    @property
    def raw(self) -> C:
        """The client, for calls that cannot wait (``produce``, ``poll(0)``). Do not keep it."""
        client = self._client
        if client is None or not self._usable:
            raise ClientAbandoned(f"{self.name}: the client was abandoned or retired")
        return client

    def call(self, what: str, fn: Callable[[C], T], deadline_s: float) -> T:
        """``fn(client)``, run on the helper thread: its result, or the exception it raised.

        Raises ``ClientCallTimeout`` when ``fn`` has not returned after ``deadline_s`` seconds
        (the client is then abandoned), ``ClientAbandoned`` if it already was."""
        with self._lock:
            if not self._usable:
                raise ClientAbandoned(f"{what} of {self.name}: the client was abandoned or retired")
            self._start()
            job = _Job(fn)
            self._jobs.put(job)
            finished = job.done.wait(deadline_s)
            if not finished:
                self._usable = False
                self.abandoned = True
                self._jobs.put(_RETIRE)  # closes the client once the hung call returns, if ever
        if not finished:
            raise ClientCallTimeout(what, self.name, deadline_s, self._describe())
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[no-any-return]

    def retire(self) -> None:
        """Close and drop the client on the helper thread, after the calls queued before; no
        call is accepted afterwards. Idempotent."""
        with self._lock:
            if not self._usable:
                return
            self._usable = False
            self._start()
            self._jobs.put(_RETIRE)

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name=f"oncelog-guard {self.name}", daemon=True)
            self._thread.start()

    def _describe(self) -> str:
        if self._state is None:
            return "no client state available"
        try:
            return self._state()
        except Exception as exc:  # the description is best effort; the timeout is the error
            return f"client state unavailable ({type(exc).__name__}: {exc})"

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _RETIRE:
                client, self._client = self._client, None
                if client is not None and self._close is not None:
                    try:
                        self._close(client)
                    except Exception:  # closing is best effort: the client is being thrown away
                        pass
                return
            try:
                job.result = job.fn(self._client)
            except BaseException as exc:  # handed to the caller, raised there
                job.error = exc
            job.done.set()
            del job


def wait_future(fut: "concurrent.futures.Future[T]", *, what: str, client: str, timeout_s: float,
                state: Callable[[], str] | None = None) -> T:
    """``fut.result()`` within ``timeout_s``; a timeout raises ``ClientCallTimeout``."""
    try:
        return fut.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        desc = "no client state available"
        if state is not None:
            try:
                desc = state()
            except Exception as exc:
                desc = f"client state unavailable ({type(exc).__name__}: {exc})"
        raise ClientCallTimeout(what, client, timeout_s, desc) from None
