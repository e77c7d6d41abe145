"""Deadlines for client calls (guard.py, clientstate.py; issue 13): a call that hangs fails its
caller in bounded time with an error naming the call, the client and its state; the client is
abandoned and closed on the guard's thread, never on the caller's. No Spark; a broker only for
the cluster probe."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from oncelog.process import free_port
from oncelog.spark.clientstate import ClientEvents, probe_cluster
from oncelog.spark.guard import ClientAbandoned, ClientCallTimeout, Guarded, wait_future


class FakeClient:
    """A client whose ``hang`` call blocks until released, recording where it was closed."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.closed_on: str | None = None

    def hang(self) -> str:
        assert self.release.wait(30), "never released"
        return "late"

    def close(self) -> None:
        self.closed_on = threading.current_thread().name


def test_calls_return_results_and_raise_their_errors_on_the_caller() -> None:
    g = Guarded("fake", FakeClient(), close=FakeClient.close)
    assert g.call("add", lambda c: 2 + 3, 1.0) == 5
    with pytest.raises(KeyError, match="nope"):
        g.call("fail", lambda c: {}["nope"], 1.0)
    assert g.call("again", lambda c: "still usable", 1.0) == "still usable"
    g.retire()


def test_a_hung_call_times_out_naming_call_client_and_state_and_the_client_is_abandoned() -> None:
    client = FakeClient()
    g = Guarded("oncelog-spark-q-3", client, close=FakeClient.close, state=lambda: "1/1 brokers are down")
    t0 = time.monotonic()
    with pytest.raises(ClientCallTimeout) as info:
        g.call("send_offsets_to_transaction (input offsets)", lambda c: c.hang(), 0.3)
    assert 0.3 <= time.monotonic() - t0 < 2.0
    err = info.value
    assert (err.call, err.client, err.state) == ("send_offsets_to_transaction (input offsets)", "oncelog-spark-q-3",
                                                 "1/1 brokers are down")
    assert "did not return within 0.3s" in str(err) and "abandoned" in str(err)
    assert g.abandoned
    with pytest.raises(ClientAbandoned):
        g.call("commit_transaction", lambda c: None, 1.0)
    with pytest.raises(ClientAbandoned):
        g.raw
    # Not closed while the call is still inside the client; closed on the guard's thread after.
    time.sleep(0.1)
    assert client.closed_on is None
    client.release.set()
    deadline = time.monotonic() + 10
    while client.closed_on is None:
        assert time.monotonic() < deadline, "the abandoned client was never closed"
        time.sleep(0.01)
    assert client.closed_on.startswith("oncelog-guard")


def test_retire_closes_after_queued_calls_on_the_guards_thread_and_is_idempotent() -> None:
    client = FakeClient()
    g = Guarded("fake", client, close=FakeClient.close)
    assert g.call("one", lambda c: 1, 1.0) == 1
    g.retire()
    g.retire()
    deadline = time.monotonic() + 10
    while client.closed_on is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert client.closed_on.startswith("oncelog-guard") and not g.abandoned
    with pytest.raises(ClientAbandoned):
        g.call("two", lambda c: 2, 1.0)


def test_a_failing_state_description_does_not_hide_the_timeout() -> None:
    client = FakeClient()
    g = Guarded("fake", client, state=lambda: 1 / 0)
    with pytest.raises(ClientCallTimeout, match="client state unavailable"):
        g.call("hang", lambda c: c.hang(), 0.1)
    client.release.set()


def test_waiting_on_a_future_is_bounded() -> None:
    fut: concurrent.futures.Future[int] = concurrent.futures.Future()
    with pytest.raises(ClientCallTimeout, match="OffsetFetch of group g did not return within 0.2s; probe"):
        wait_future(fut, what="OffsetFetch", client="group g", timeout_s=0.2, state=lambda: "probe")
    fut.set_result(7)
    assert wait_future(fut, what="OffsetFetch", client="group g", timeout_s=0.2) == 7


def test_client_events_keep_the_last_distinct_errors_in_order() -> None:
    ev = ClientEvents(keep=2)
    assert ev.describe() == "the client reported no errors"
    for text in ("error 0", "error 1", "error 2", "error 1"):
        ev.on_error(text)
    assert ev.describe() == "the client reported (latest last): error 2; error 1"


def test_probe_cluster_says_whether_the_cluster_answers(broker) -> None:
    t0 = time.monotonic()
    dead = probe_cluster({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, timeout_s=1.0)
    assert "did not answer" in dead and time.monotonic() - t0 < 8
    alive = probe_cluster({"bootstrap.servers": broker.bootstrap})
    assert "answered a Metadata request" in alive and f"{broker.port}" in alive
