"""The object-store client's retry policy, deadline and error typing (issue 29), with an injected
clock and sleep: no time passes. The backend here is a scripted stand-in for ONE seam of ours
(``Backend``); the S3 behaviour itself is tested against a real SeaweedFS in tests/diskless."""

from __future__ import annotations

import asyncio
import hashlib
import random
import subprocess
import sys

import pytest

from oncelog.protocol.errors import ErrorCode, InvalidConfig
from oncelog.diskless.object_store import (AlreadyExists, BeyondEnd, NotFound, ObjectInfo, ObjectNotFound, ObjectStore,
                                          ObjectStoreConfig, ObjectStoreFailed, ObjectStoreTimeout,
                                          ObjectStoreUnavailable, ObjectTruncated, RetryPolicy, Transient)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


class Scripted:
    """A backend whose every call takes the next outcome from ``script`` (an exception to raise,
    or a value); each attempt costs ``cost_s`` of the fake clock."""

    def __init__(self, clock: FakeClock, script: list, cost_s: float = 0.0) -> None:
        self.clock, self.script, self.cost_s = clock, list(script), cost_s
        self.calls: list[tuple] = []
        self.objects: dict[str, bytes] = {}

    async def _step(self, call: tuple):
        self.calls.append(call)
        self.clock.now += self.cost_s
        outcome = self.script.pop(0) if self.script else None
        if isinstance(outcome, Exception):
            raise outcome
        if callable(outcome):
            return outcome()
        return outcome

    async def put_if_absent(self, key, data):
        return await self._step(("put", key, data))

    async def etag(self, key):
        data = self.objects.get(key)
        if data is None:
            raise NotFound(key)
        return '"' + hashlib.md5(data).hexdigest() + '"'

    async def get_range(self, key, start, end):
        return await self._step(("get", key, start, end))

    async def delete(self, keys):
        return await self._step(("delete", tuple(keys)))

    async def list_page(self, prefix, after):
        return await self._step(("list", prefix, after))


def make(script, *, cost_s=0.0, deadline_s=5.0, timeout_s=1.0, prefix="pre"):
    clock = FakeClock()
    cfg = ObjectStoreConfig(bucket="b", prefix=prefix, request_timeout_s=timeout_s, call_deadline_s=deadline_s,
                            backoff_initial_s=0.1, backoff_max_s=1.0)
    backend = Scripted(clock, script, cost_s)
    store = ObjectStore(cfg, backend, clock=clock, sleep=clock.sleep, rng=random.Random(7))
    return store, backend, clock


def run(coro):
    return asyncio.run(coro)


def test_backoff_is_full_jitter_under_an_exponential_cap() -> None:
    policy = RetryPolicy(0.1, 1.0)
    rng = random.Random(1)
    for retry, cap in [(0, 0.1), (1, 0.2), (2, 0.4), (3, 0.8), (4, 1.0), (10, 1.0), (500, 1.0)]:
        draws = [policy.delay(retry, rng) for _ in range(200)]
        assert all(0.0 <= d <= cap for d in draws)
        assert max(draws) > cap * 0.8, "full jitter spans the whole interval"


def test_transient_failures_are_retried_until_success() -> None:
    store, backend, clock = make([Transient("connection refused"), Transient("status code: 503 SlowDown"),
                                  b"abcd"])
    assert run(store.get_range("k", 10, 14)) == b"abcd"
    assert [c[0] for c in backend.calls] == ["get"] * 3
    assert backend.calls[0][1] == "pre/k", "keys are under the configured prefix"
    assert len(clock.sleeps) == 2 and store.retries == 2
    assert 0 <= clock.sleeps[0] <= 0.1 and 0 <= clock.sleeps[1] <= 0.2


def test_a_store_that_stays_down_fails_at_the_deadline_with_kafka_storage_error() -> None:
    store, backend, clock = make([Transient("connection refused")] * 1000, cost_s=0.05, deadline_s=5.0)
    start = clock.now
    with pytest.raises(ObjectStoreUnavailable) as err:
        run(store.get_range("k", 0, 1))
    assert err.value.code == ErrorCode.kafka_storage_error and err.value.retriable
    assert clock.now - start <= 5.0 + 1e-9, "never past the deadline"
    assert len(backend.calls) > 5
    assert "connection refused" in str(err.value)


def test_a_store_that_keeps_timing_out_fails_with_request_timed_out() -> None:
    store, backend, clock = make([Transient("operation timed out", timeout=True)] * 1000, cost_s=1.0,
                                 deadline_s=5.0)
    with pytest.raises(ObjectStoreTimeout) as err:
        run(store.get_range("k", 0, 1))
    assert err.value.code == ErrorCode.request_timed_out


def test_an_attempt_that_hangs_is_cut_at_the_request_timeout() -> None:
    async def scenario():
        cfg = ObjectStoreConfig(bucket="b", request_timeout_s=0.05, call_deadline_s=0.3,
                                backoff_initial_s=0.01, backoff_max_s=0.02)

        class Hangs(Scripted):
            async def get_range(self, key, start, end):
                self.calls.append(("get",))
                await asyncio.sleep(3600)

        backend = Hangs(FakeClock(), [])
        store = ObjectStore(cfg, backend)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(ObjectStoreTimeout):
            await store.get_range("k", 0, 1)
        return loop.time() - t0, len(backend.calls)

    took, calls = run(scenario())
    assert took < 2.0 and calls >= 2


def test_permanent_failures_are_not_retried() -> None:
    store, backend, _ = make([PermissionError("403 SignatureDoesNotMatch")])
    with pytest.raises(ObjectStoreFailed) as err:
        run(store.delete(["a", "b"]))
    assert err.value.code == ErrorCode.kafka_storage_error
    assert len(backend.calls) == 1


def test_missing_object_is_object_not_found() -> None:
    store, _, _ = make([NotFound("no such key")])
    with pytest.raises(ObjectNotFound):
        run(store.get_range("k", 0, 4))


def test_every_call_raises_only_kafka_errors() -> None:
    """A missing bucket answers NotFound to a PUT or a LIST: the caller sees a KafkaError
    (the dispatcher's boundary translates it), never the backend's internal exceptions."""
    store, _, _ = make([NotFound("no such bucket")])
    with pytest.raises(ObjectStoreFailed, match="no such bucket"):
        run(store.put_if_absent("k", b"x"))

    async def collect():
        return [o async for o in store.list("a/")]

    store, _, _ = make([NotFound("no such bucket")])
    with pytest.raises(ObjectStoreFailed, match="no such bucket"):
        run(collect())
    store, _, _ = make([AlreadyExists("?")])
    with pytest.raises(ObjectStoreFailed):
        run(store.get_range("k", 0, 1))
    store, _, _ = make([NotFound("gone")])
    run(store.delete(["k"]))  # deleting what is not there is not an error


def test_a_short_read_is_refused() -> None:
    store, _, _ = make([b"ab"])
    with pytest.raises(ObjectStoreFailed, match="2 bytes returned, 4 expected") as exc:
        run(store.get_range("k", 0, 4))
    assert isinstance(exc.value, ObjectTruncated) and exc.value.available == b"ab"  # the bytes it still has


def test_a_range_past_the_end_is_a_truncated_object_not_retried() -> None:
    """HTTP 416 (the object ends before the range starts): ObjectTruncated at once, no retry."""
    store, backend, _ = make([BeyondEnd("416 Range Not Satisfiable"), b"never asked"])
    with pytest.raises(ObjectTruncated, match="ends before byte 4") as exc:
        run(store.get_range("k", 4, 8))
    assert exc.value.available == b"" and store.retries == 0


def test_bad_ranges_and_keys_are_refused_before_any_call() -> None:
    store, backend, _ = make([])
    for start, end in [(-1, 3), (5, 5), (6, 2)]:
        with pytest.raises(ValueError):
            run(store.get_range("k", start, end))
    for key in ["", "/abs", "a//b"]:
        with pytest.raises(ValueError):
            run(store.put_if_absent(key, b"x"))
    assert backend.calls == []


def test_conditional_create_reports_a_taken_key() -> None:
    store, _, _ = make([None])
    assert run(store.put_if_absent("k", b"x")) is True
    store, _, _ = make([AlreadyExists("k")])
    assert run(store.put_if_absent("k", b"x")) is False


def test_conditional_create_recognises_its_own_upload_after_a_lost_answer() -> None:
    """The first PUT reached the store but its answer was lost (timeout); the retry finds the key
    taken. The content is ours: the call created it. Someone else's content: it did not."""
    data = b"object body"
    store, backend, _ = make([])

    def stored_then_lost():
        backend.objects["pre/k"] = data
        raise Transient("operation timed out", timeout=True)

    backend.script = [lambda: stored_then_lost(), AlreadyExists("pre/k")]
    assert run(store.put_if_absent("k", data)) is True

    store, backend, _ = make([])
    backend.objects["pre/k"] = b"someone else's"
    backend.script = [Transient("operation timed out", timeout=True), AlreadyExists("pre/k")]
    assert run(store.put_if_absent("k", data)) is False


def test_list_restarts_after_the_last_key_it_yielded() -> None:
    p1 = [ObjectInfo("pre/a/1", 1, None), ObjectInfo("pre/a/2", 2, None)]
    p2 = [ObjectInfo("pre/a/3", 3, None)]
    store, backend, _ = make([(p1, True), Transient("connection reset by peer"), (p2, False)])

    async def collect():
        return [o async for o in store.list("a/")]

    got = run(collect())
    assert [(o.key, o.size) for o in got] == [("a/1", 1), ("a/2", 2), ("a/3", 3)]
    assert [c[2] for c in backend.calls] == [None, "pre/a/2", "pre/a/2"]


def test_config_from_the_contract_properties() -> None:
    env = {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"}
    cfg = ObjectStoreConfig.from_properties({"diskless.storage.url": "s3://bucket/some/prefix/",
                                             "diskless.storage.endpoint": "http://127.0.0.1:9000",
                                             "diskless.storage.call.deadline.ms": "1500"}, environ=env)
    assert (cfg.bucket, cfg.prefix, cfg.endpoint) == ("bucket", "some/prefix", "http://127.0.0.1:9000")
    assert (cfg.access_key_id, cfg.secret_access_key, cfg.call_deadline_s) == ("AK", "SK", 1.5)
    cfg = ObjectStoreConfig.from_properties({"diskless.storage.url": "s3://bucket"}, environ={})
    assert (cfg.prefix, cfg.endpoint, cfg.access_key_id) == ("", None, None)
    for bad in [{}, {"diskless.storage.url": "http://bucket/p"}, {"diskless.storage.url": "s3:///p"},
                {"diskless.storage.url": "s3://b/p?x=1"},
                {"diskless.storage.url": "s3://b", "diskless.storage.endpoint": "127.0.0.1:9000"},
                {"diskless.storage.url": "s3://b", "diskless.storage.request.timeout.ms": "fast"},
                {"diskless.storage.url": "s3://b", "diskless.storage.call.deadline.ms": "0"},
                {"diskless.storage.url": "s3://b", "diskless.storage.retry.backoff.ms": "500",
                 "diskless.storage.retry.backoff.max.ms": "100"}]:
        with pytest.raises(InvalidConfig):
            ObjectStoreConfig.from_properties(bad, environ={})


def test_the_client_library_is_imported_only_when_a_store_is_opened() -> None:
    """The embedded broker never needs the `diskless` extra: importing the module (and the
    broker) does not import obstore."""
    code = ("import sys; import oncelog.diskless.object_store, oncelog.broker.broker; "
            "assert 'obstore' not in sys.modules, 'obstore imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_failure_whose_text_merely_contains_503_still_leaves_the_create_s_outcome_unknown() -> None:
    """Issue 29 (the fault proxy's find): obstore's error text carries the URL (port, key) and the
    attempt's duration, e.g. ``… in 1.503ms - HTTP error: error sending request`` for a connection
    reset after the server stored the object. The client once took any "503" in the text for "the
    store surely did not act", so the retry's AlreadyExists was reported as someone else's object
    and the engine failed the upload (``exists already … a bug``). Only a real 503 status says so."""
    data = b"object body"
    store, backend, _ = make([])

    def stored_then_reset():
        backend.objects["pre/k"] = data
        raise Transient("Error performing PUT http://127.0.0.1:45031/b/pre/k in 1.503ms - HTTP error: "
                        "error sending request")

    backend.script = [lambda: stored_then_reset(), AlreadyExists("pre/k")]
    assert run(store.put_if_absent("k", data)) is True


def test_the_classifier_marks_only_a_503_answer_as_not_acted_on() -> None:
    from obstore import exceptions as ox

    from oncelog.diskless.object_store import ObstoreBackend

    slow = ObstoreBackend._classify(ox.GenericError(
        "Generic S3 error: Error performing PUT http://127.0.0.1:4/b/k in 1.2ms - Server returned non-2xx "
        "status code: 503 Service Unavailable: <Error><Code>SlowDown</Code></Error>"))
    reset = ObstoreBackend._classify(ox.GenericError(
        "Generic S3 error: Error performing PUT http://127.0.0.1:45031/b/k in 1.503ms - HTTP error: error "
        "sending request"))
    internal = ObstoreBackend._classify(ox.GenericError(
        "Generic S3 error: Error performing PUT http://127.0.0.1:4503/b/k in 2ms - Server returned non-2xx "
        "status code: 500 Internal Server Error: <Error><Code>InternalError</Code></Error>"))
    assert isinstance(slow, Transient) and slow.not_acted
    assert isinstance(reset, Transient) and not reset.not_acted
    assert isinstance(internal, Transient) and not internal.not_acted


def test_the_classifier_reads_a_416_answer_as_a_range_past_the_end() -> None:
    from obstore import exceptions as ox

    from oncelog.diskless.object_store import ObstoreBackend

    past = ObstoreBackend._classify(ox.GenericError(
        "Generic S3 error: Error performing GET http://127.0.0.1:60811/b/x/a in 550µs - Server returned non-2xx "
        "status code: 416 Range Not Satisfiable: <Error><Code>InvalidRange</Code></Error>"))
    forbidden = ObstoreBackend._classify(ox.GenericError(
        "Generic S3 error: Error performing GET http://127.0.0.1:416/b/x/a in 1ms - Server returned non-2xx "
        "status code: 403 Forbidden"))
    assert isinstance(past, BeyondEnd)
    assert not isinstance(forbidden, (BeyondEnd, Transient))  # a port named 416 is not a status
