"""The object-store client (src/oncelog/diskless/object_store.py, issue 29) against a real
SeaweedFS S3 server on loopback: the four calls, the conditional create, a SIGKILL and restart
of the server in the middle of a sequence, and slow / failing / refusing calls through a loopback
fault proxy (tests/faultproxy.py)."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from faultproxy import FaultProxy
from oncelog.protocol.errors import ErrorCode
from oncelog.diskless.object_store import (ObjectNotFound, ObjectStore, ObjectStoreTimeout,
                                          ObjectStoreUnavailable)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

#: patient enough for a loaded 2-core machine, short enough for a test
FAST = {"diskless.storage.request.timeout.ms": 2000, "diskless.storage.call.deadline.ms": 6000,
        "diskless.storage.retry.backoff.ms": 20, "diskless.storage.retry.backoff.max.ms": 200}


def run(coro, timeout: float = 120):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def test_put_get_ranges_list_delete(seaweed, make_config) -> None:
    store = ObjectStore(make_config(seaweed))
    body = os.urandom(3 << 20)

    async def scenario():
        assert await store.put_if_absent("objects/0001", body) is True
        assert await store.put_if_absent("objects/0002", b"second") is True
        assert await store.put_if_absent("other/0003", b"third") is True
        parts = [await store.get_range("objects/0001", s, e)
                 for s, e in [(0, 1), (4096, 8192), (len(body) - 10, len(body)), (0, len(body))]]
        listed = [(o.key, o.size) async for o in store.list("objects/")]
        everything = [o.key async for o in store.list()]
        await store.delete(["objects/0001", "objects/never-written"])
        after = [o.key async for o in store.list("objects/")]
        with pytest.raises(ObjectNotFound):
            await store.get_range("objects/0001", 0, 1)
        return parts, listed, everything, after

    parts, listed, everything, after = run(scenario())
    assert parts == [body[:1], body[4096:8192], body[-10:], body]
    assert listed == [("objects/0001", len(body)), ("objects/0002", 6)]
    assert everything == ["objects/0001", "objects/0002", "other/0003"]
    assert after == ["objects/0002"]
    assert store.retries == 0


def test_list_pages_through_many_objects(seaweed, make_config) -> None:
    store = ObjectStore(make_config(seaweed))
    store.backend.list_chunk = 7

    async def scenario():
        await asyncio.gather(*(store.put_if_absent(f"o/{i:04d}", b"x") for i in range(40)))
        return [o.key async for o in store.list("o/")]

    assert run(scenario()) == [f"o/{i:04d}" for i in range(40)]


def test_conditional_create_is_refused_on_an_existing_key(seaweed, make_config) -> None:
    store = ObjectStore(make_config(seaweed))

    async def scenario():
        first = await store.put_if_absent("k", b"original")
        second = await store.put_if_absent("k", b"overwrite?")
        return first, second, await store.get_range("k", 0, 8)

    assert run(scenario()) == (True, False, b"original")


def test_calls_during_a_server_kill_are_retried_and_succeed_after_the_restart(own_seaweed, make_config) -> None:
    """SIGKILL the server between two writes; calls made while it is down are retried (connection
    refused) and complete once it is back, within their deadline; what was written before is there."""
    cfg = make_config(own_seaweed, tuning={**FAST, "diskless.storage.call.deadline.ms": 60000})
    store = ObjectStore(cfg)
    run(store.put_if_absent("before", b"written before the kill"))
    own_seaweed.kill()
    restarted = threading.Event()

    def restart_later() -> None:
        time.sleep(1.0)
        own_seaweed.start()
        restarted.set()

    t = threading.Thread(target=restart_later)
    t.start()
    try:
        async def scenario():
            return await asyncio.gather(store.put_if_absent("during", b"written while down"),
                                        store.get_range("before", 0, 7))
        created, got = run(scenario())
    finally:
        t.join(90)
    assert restarted.is_set()
    assert created is True and got == b"written"
    assert store.retries > 0, "the calls met the dead server and retried"
    assert run(store.get_range("during", 0, 7)) == b"written"


def test_a_server_that_stays_down_fails_with_a_typed_error_at_the_deadline(own_seaweed, make_config) -> None:
    cfg = make_config(own_seaweed, tuning={**FAST, "diskless.storage.call.deadline.ms": 1500})
    store = ObjectStore(cfg)
    run(store.put_if_absent("k", b"x"))
    own_seaweed.kill()
    t0 = time.monotonic()
    with pytest.raises(ObjectStoreUnavailable) as err:
        run(store.get_range("k", 0, 1))
    took = time.monotonic() - t0
    assert err.value.code == ErrorCode.kafka_storage_error
    assert took < 1.5 + 2.0, f"the deadline held ({took:.2f} s)"
    assert store.retries > 0


@pytest.fixture
def proxy(seaweed):
    p = FaultProxy(seaweed.s3_port)
    yield p
    p.close()


def test_503_slowdown_is_retried(seaweed, make_config, proxy) -> None:
    store = ObjectStore(make_config(seaweed, endpoint=proxy.endpoint, tuning=FAST))
    run(store.put_if_absent("k", b"value"))
    proxy.set_mode("503", count=3)
    assert run(store.get_range("k", 0, 5)) == b"value"
    assert proxy.faulted == 3 and store.retries >= 3


def test_503_forever_fails_with_kafka_storage_error(seaweed, make_config, proxy) -> None:
    store = ObjectStore(make_config(seaweed, endpoint=proxy.endpoint, tuning=FAST))
    proxy.set_mode("503")
    with pytest.raises(ObjectStoreUnavailable, match="503|SlowDown") as err:
        run(store.put_if_absent("k", b"value"))
    assert err.value.code == ErrorCode.kafka_storage_error


def test_dropped_connections_are_retried(seaweed, make_config, proxy) -> None:
    store = ObjectStore(make_config(seaweed, endpoint=proxy.endpoint, tuning=FAST))
    proxy.set_mode("drop", count=2)
    assert run(store.put_if_absent("k", b"value")) is True
    assert proxy.faulted == 2 and store.retries >= 2
    assert run(store.get_range("k", 0, 5)) == b"value"


def test_a_slow_store_within_the_request_timeout_still_answers(seaweed, make_config, proxy) -> None:
    store = ObjectStore(make_config(seaweed, endpoint=proxy.endpoint, tuning=FAST))
    run(store.put_if_absent("k", b"value"))
    proxy.set_mode("delay", delay_s=0.3)
    t0 = time.monotonic()
    assert run(store.get_range("k", 0, 5)) == b"value"
    assert time.monotonic() - t0 >= 0.3
    assert store.retries == 0


def test_a_store_that_never_answers_fails_with_request_timed_out(seaweed, make_config, proxy) -> None:
    tuning = {**FAST, "diskless.storage.request.timeout.ms": 500, "diskless.storage.call.deadline.ms": 2000}
    store = ObjectStore(make_config(seaweed, endpoint=proxy.endpoint, tuning=tuning))
    proxy.set_mode("blackhole")
    t0 = time.monotonic()
    with pytest.raises(ObjectStoreTimeout) as err:
        run(store.get_range("k", 0, 5))
    took = time.monotonic() - t0
    assert err.value.code == ErrorCode.request_timed_out
    assert 0.4 < took < 2.0 + 2.0, took
    assert proxy.faulted >= 2, "it tried again after the first timeout"


def test_a_create_whose_answer_is_lost_is_still_reported_as_ours(seaweed, make_config, proxy) -> None:
    """The PUT reaches the server but its answer comes after the client gave up (the proxy holds
    the server's bytes): the retry finds the key taken, by our own bytes, so the call created it."""
    tuning = {**FAST, "diskless.storage.request.timeout.ms": 700, "diskless.storage.call.deadline.ms": 8000}
    store = ObjectStore(make_config(seaweed, endpoint=proxy.endpoint, tuning=tuning))
    body = os.urandom(100_000)
    # the first connection's answer would arrive 1.5 s late: the client gives up at 0.7 s
    proxy.set_mode("slow-answer", delay_s=1.5, count=1)
    assert run(store.put_if_absent("lost-answer", body)) is True
    assert store.retries >= 1
    assert run(store.get_range("lost-answer", 0, len(body))) == body


def test_requests_and_bytes_are_counted_per_attempt(seaweed, make_config, proxy) -> None:
    """The counters the metrics and the benchmark read (``oncelog_diskless_object_requests``):
    every attempt counts, as a cloud store bills it, a retried one included; bytes count once."""
    store = ObjectStore(make_config(seaweed, endpoint=proxy.endpoint, tuning=FAST))
    assert run(store.put_if_absent("c/1", b"0123456789")) is True
    assert run(store.put_if_absent("c/1", b"0123456789")) is False  # refused, but sent: billed
    assert run(store.get_range("c/1", 2, 6)) == b"2345"
    proxy.set_mode("503", count=2)
    assert run(store.get_range("c/1", 0, 10)) == b"0123456789"
    assert [o.key for o in run(_listed(store, "c/"))] == ["c/1"]
    run(store.delete(["c/1"]))
    assert store.requests == {"PUT": 2, "GET": 1 + 3, "LIST": 1, "DELETE": 1}
    assert (store.put_bytes, store.get_bytes) == (10, 4 + 10)
    assert store.retries == 2


async def _listed(store: ObjectStore, prefix: str) -> list:
    return [o async for o in store.list(prefix)]
