"""The HTTP-aware object-store fault proxy (src/oncelog/testing/s3_fault_proxy.py, issue 29)
between the project's object-store client (src/oncelog/diskless/object_store.py, its retries and
deadline) and a real SeaweedFS on loopback: one test per fault kind, checking what the client sees
and what the store holds afterwards, plus the proxy's own bounds."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import time

import pytest

from oncelog.diskless.object_store import ObjectStore, ObjectStoreTimeout, ObjectStoreUnavailable
from oncelog.protocol.errors import ErrorCode
from oncelog.testing.s3_fault_proxy import S3FaultProxy, op_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

#: patient enough for a loaded 2-core machine, short enough for a test
FAST = {"diskless.storage.request.timeout.ms": 2000, "diskless.storage.call.deadline.ms": 8000,
        "diskless.storage.retry.backoff.ms": 20, "diskless.storage.retry.backoff.max.ms": 200}


def run(coro, timeout: float = 120):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


@pytest.fixture
def proxy(seaweed):
    p = S3FaultProxy(seaweed.s3_port, seed=29).start()
    yield p
    p.close()


@pytest.fixture
def stores(seaweed, make_config, proxy):
    """(through the proxy, straight to the server): two clients of the same bucket and prefix."""
    cfg = make_config(seaweed, endpoint=proxy.endpoint, tuning=FAST)
    return ObjectStore(cfg), ObjectStore(dataclasses.replace(cfg, endpoint=seaweed.endpoint))


def test_requests_pass_untouched_and_are_classified_by_operation(stores, proxy) -> None:
    store, direct = stores

    async def scenario():
        assert await store.put_if_absent("a/1", b"one") is True
        assert await store.get_range("a/1", 0, 3) == b"one"
        listed = [o.key async for o in store.list("a/")]
        await store.delete(["a/1"])
        return listed

    assert run(scenario()) == ["a/1"]
    assert store.retries == 0
    assert proxy.requests >= 4 and sum(proxy.counts.values()) == 0
    assert (op_of("GET", "/b?list-type=2&prefix=x"), op_of("POST", "/b?delete"), op_of("GET", "/b/k")) == \
        ("LIST", "DELETE", "GET")


def test_a_delay_shorter_than_the_request_timeout_only_slows_the_call(stores, proxy) -> None:
    store, _ = stores
    run(store.put_if_absent("k", b"value"))
    proxy.set_fault("delay", delay_s=(0.5, 0.5), ops=("GET",))
    t0 = time.monotonic()
    assert run(store.get_range("k", 0, 5)) == b"value"
    assert time.monotonic() - t0 >= 0.5
    assert store.retries == 0 and proxy.hits == {("delay", "GET"): 1}


def test_a_put_delayed_past_the_request_timeout_is_retried_and_its_late_copy_refused(stores, proxy) -> None:
    """The first PUT is held 3 s (request timeout 2 s): the client gives up and retries, the retry
    creates the object; the held request reaches the server afterwards and its conditional create
    is refused there. The call reports True once and the object holds the bytes."""
    store, direct = stores
    body = os.urandom(50_000)
    proxy.set_fault("delay", delay_s=(3.0, 3.0), ops=("PUT",), count=1)
    assert run(store.put_if_absent("late", body)) is True
    assert store.retries >= 1
    time.sleep(1.5)  # the held request lands now
    assert run(direct.get_range("late", 0, len(body))) == body
    assert proxy.counts["delay"] == 1


def test_a_store_delayed_past_the_call_deadline_fails_with_request_timed_out(seaweed, make_config, proxy) -> None:
    tuning = {**FAST, "diskless.storage.request.timeout.ms": 500, "diskless.storage.call.deadline.ms": 2000}
    store = ObjectStore(make_config(seaweed, endpoint=proxy.endpoint, tuning=tuning))
    proxy.set_fault("delay", delay_s=(3.0, 3.0))
    t0 = time.monotonic()
    with pytest.raises(ObjectStoreTimeout) as err:
        run(store.get_range("k", 0, 5))
    assert err.value.code == ErrorCode.request_timed_out and err.value.retriable
    assert time.monotonic() - t0 < 2.0 + 2.0
    assert proxy.counts["delay"] >= 2, "it tried again after the first timeout"


def test_503_slowdown_is_not_forwarded_and_is_retried(stores, proxy) -> None:
    store, direct = stores
    proxy.set_fault("slowdown", ops=("PUT",), count=3)
    assert run(store.put_if_absent("slow", b"value")) is True
    assert proxy.counts["slowdown"] == 3 and store.retries >= 3
    assert run(direct.get_range("slow", 0, 5)) == b"value"


def test_503_slowdown_past_the_deadline_fails_with_kafka_storage_error_and_writes_nothing(stores, proxy) -> None:
    store, direct = stores
    proxy.set_fault("slowdown", ops=("PUT",))
    with pytest.raises(ObjectStoreUnavailable, match="SlowDown") as err:
        run(store.put_if_absent("never", b"value"))
    assert err.value.code == ErrorCode.kafka_storage_error
    proxy.clear()

    async def listed():
        return [o.key async for o in direct.list("")]

    assert "never" not in run(listed()), "a 503 is answered without forwarding: nothing written"


def test_a_500_after_the_write_happened_is_retried_and_the_create_is_ours(stores, proxy) -> None:
    """The PUT reaches the server (the object is created) but the answer says 500 InternalError:
    the retry's conditional create is refused, and the client recognises its own bytes (ETag)."""
    store, direct = stores
    body = os.urandom(30_000)
    proxy.set_fault("internal-error", ops=("PUT",), count=1)
    assert run(store.put_if_absent("acted", body)) is True
    assert proxy.hits == {("internal-error", "PUT"): 1} and store.retries >= 1
    assert run(direct.get_range("acted", 0, len(body))) == body


def test_a_taken_key_after_a_lost_attempt_is_ours_only_when_the_bytes_are(stores, proxy) -> None:
    """Someone else wrote the key; our first attempt answers 500 (outcome unknown), the retry finds
    the key taken by other bytes: the call did NOT create it (False), and the bytes are not ours."""
    store, direct = stores
    assert run(direct.put_if_absent("theirs", b"someone else's")) is True
    proxy.set_fault("internal-error", ops=("PUT",), count=1)
    assert run(store.put_if_absent("theirs", b"my own bytes!!")) is False
    assert run(direct.get_range("theirs", 0, 14)) == b"someone else's"


def test_500_on_reads_lists_and_deletes_is_retried(stores, proxy) -> None:
    store, direct = stores
    run(direct.put_if_absent("r/1", b"read me"))

    async def scenario():
        proxy.set_fault("internal-error", ops=("GET",), count=2)
        got = await store.get_range("r/1", 0, 7)
        proxy.set_fault("internal-error", ops=("LIST",), count=2)
        listed = [o.key async for o in store.list("r/")]
        proxy.set_fault("internal-error", ops=("DELETE",), count=2)
        await store.delete(["r/1"])
        return got, listed

    got, listed = run(scenario())
    assert got == b"read me" and listed == ["r/1"]
    assert {op for (_k, op) in proxy.hits} == {"GET", "LIST", "DELETE"} and store.retries >= 6

    async def after():
        return [o.key async for o in direct.list("r/")]

    assert run(after()) == [], "the delete happened"


def test_connections_reset_mid_request_are_retried(stores, proxy) -> None:
    store, direct = stores
    proxy.set_fault("reset-request", ops=("PUT", "GET"), count=4)

    async def scenario():
        assert await store.put_if_absent("reset", b"value") is True
        return await store.get_range("reset", 0, 5)

    assert run(scenario()) == b"value"
    assert proxy.counts["reset-request"] == 4 and store.retries >= 4


def test_connections_reset_mid_response_are_retried_and_a_create_that_landed_is_ours(stores, proxy) -> None:
    store, direct = stores
    body = os.urandom(20_000)

    async def scenario():
        proxy.set_fault("reset-response", ops=("PUT",), count=1)
        created = await store.put_if_absent("half", body)
        proxy.set_fault("reset-response", ops=("GET", "LIST"), count=2)
        got = await store.get_range("half", 0, len(body))
        listed = [o.key async for o in store.list("half")]
        return created, got, listed

    created, got, listed = run(scenario())
    assert created is True and got == body and listed == ["half"]
    assert proxy.counts["reset-response"] == 3 and store.retries >= 3


def test_windows_overlap_and_turn_themselves_off(stores, proxy) -> None:
    """A PUT-only window inside a longer GET-only one: both apply while both are on; each goes
    off by itself at its end."""
    store, _ = stores
    run(store.put_if_absent("w", b"v"))
    proxy.window("slowdown", 1.5, ops=("GET",))
    proxy.window("internal-error", 0.7, ops=("PUT",))
    assert proxy.active == "internal-error"

    async def both():
        return await store.put_if_absent("w2", b"v"), await store.get_range("w", 0, 1)

    assert run(both()) == (True, b"v")
    assert proxy.hits.get(("internal-error", "PUT"), 0) >= 1 and proxy.hits.get(("slowdown", "GET"), 0) >= 1
    time.sleep(1.8)
    assert proxy.active is None
    retries = store.retries
    assert run(store.put_if_absent("after-window", b"v")) is True and store.retries == retries


def test_the_proxy_s_bounds_reset_what_passes_them_and_it_keeps_serving(seaweed, make_config) -> None:
    """A message over ``max_message_bytes`` and connections over ``max_connections`` are reset,
    never buffered or queued; the proxy serves the next request."""
    with S3FaultProxy(seaweed.s3_port, max_message_bytes=64 << 10, max_connections=2, io_timeout_s=5) as p:
        store = ObjectStore(make_config(seaweed, endpoint=p.endpoint, tuning={**FAST,
                                                                               "diskless.storage.call.deadline.ms": 1500}))
        with pytest.raises(ObjectStoreUnavailable):
            run(store.put_if_absent("big", os.urandom(200_000)))
        held = [socket.create_connection(("127.0.0.1", p.port), timeout=5) for _ in range(2)]
        try:
            time.sleep(0.3)
            extra = socket.create_connection(("127.0.0.1", p.port), timeout=5)
            extra.settimeout(5)
            try:
                assert extra.recv(1) == b"", "over the limit: closed at once"
            except ConnectionResetError:
                pass
            extra.close()
            assert p.refused >= 1
        finally:
            for s in held:
                s.close()
        time.sleep(0.3)
        assert run(store.put_if_absent("small", b"fits")) is True
        # the proxy lets go of an exchange's bytes just after it wrote the answer, on its own
        # thread: the client may have the answer a moment before (bounded wait)
        deadline = time.monotonic() + 5
        while p._buffered and time.monotonic() < deadline:
            time.sleep(0.02)
        assert p._buffered == 0
