"""A client call that hangs fails the write task in bounded time, and the retried task writes its
rows once (R24; issue 13). The exactly-once write protocol is run directly
(``exactly_once.write_task``, no Spark), against a real broker.

1. A hang on demand: the cached producer's ``send_offsets_to_transaction`` is made to block (the
   call librdkafka #5511/#5456 leave hanging). The watchdog fails the task with
   ``ClientCallTimeout`` naming the call, the transactional id and the state it saw (the cluster
   answering); the retry's new producer fences the abandoned one and writes the batch once.
2. The real thing: librdkafka's own defaults (re-bootstrap, 10 s reconnect backoff), which the
   sink changes, and a restart of the only broker between two batches. After a restart
   librdkafka's coordinator requests may hang forever or time out; either way the task ends
   within the bound, and the retry writes once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from oncelog.spark import exactly_once
from oncelog.spark.exactly_once import TaskIdent
from oncelog.spark.guard import GRACE_S, ClientCallTimeout
from oncelog.spark.options import SinkOptions
from sparkutil import create_topics, read_all

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

REQUEST_TIMEOUT_S = 3.0
#: The longest a task may take to fail: a call's deadline (its timeout plus the guard's grace),
#: plus the cluster probe that describes the state (3 s plus grace), plus slack for a loaded machine.
TASK_BOUND_S = 2 * (REQUEST_TIMEOUT_S + GRACE_S) + 3.0 + GRACE_S + 5.0


def _rows(tag: str, n: int) -> list:
    return [pa.RecordBatch.from_pydict({"key": [f"k{i}".encode() for i in range(n)], "value": [f"{tag}-{i}".encode() for i in range(n)]})]


def _options(bs: str, **extra: str) -> SinkOptions:
    return SinkOptions.parse({
        "kafka.bootstrap.servers": bs, "topic": "out", "delivery.guarantee": "exactly_once",
        "requestTimeoutMs": str(int(REQUEST_TIMEOUT_S * 1000)), **extra,
    })


def _values(*batches: tuple[str, int]) -> Counter:
    return Counter(f"{tag}-{i}".encode() for tag, n in batches for i in range(n))


class _Wedged:
    """Stands for a producer whose ``send_offsets_to_transaction`` never returns; everything
    else goes to the real one."""

    def __init__(self, real: Any, release: threading.Event) -> None:
        self._real = real
        self._release = release

    def send_offsets_to_transaction(self, *args: Any) -> None:
        self._release.wait(60)
        raise RuntimeError("released")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_a_hung_send_offsets_fails_the_task_in_bounded_time_and_the_retry_writes_once(broker) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"out": 2})
    opts = _options(bs)
    tid = TaskIdent("q-wedged", 0, 0).transactional_id(opts.transactional_id_prefix)
    assert exactly_once.write_task(_rows("b0", 20), TaskIdent("q-wedged", 0, 0), opts).records == 20

    cached, fresh = exactly_once._producers.get(opts, tid)
    assert not fresh
    release = threading.Event()
    guarded = cached._client
    guarded._client = _Wedged(guarded._client, release)
    try:
        t0 = time.monotonic()
        with pytest.raises(ClientCallTimeout) as info:
            exactly_once.write_task(_rows("b1", 20), TaskIdent("q-wedged", 1, 0), opts)
        took = time.monotonic() - t0
    finally:
        release.set()
    err = info.value
    print(f"task failed after {took:.1f}s: {err}")
    assert REQUEST_TIMEOUT_S + GRACE_S <= took < TASK_BOUND_S
    assert err.call == "send_offsets_to_transaction (marker of batch 1)" and err.client == tid
    assert f"{broker.port}" in err.state and "the cluster answered a Metadata request" in err.state
    assert guarded.abandoned

    again = exactly_once.write_task(_rows("b1", 20), TaskIdent("q-wedged", 1, 0), opts)
    assert again.records == 20 and not again.skipped
    assert Counter(v for *_, v in read_all(bs, "out", 2)) == _values(("b0", 20), ("b1", 20))


def test_with_librdkafkas_defaults_a_broker_restart_never_stalls_a_task(broker) -> None:
    bs = broker.bootstrap
    create_topics(bs, {"out": 2})
    # librdkafka's own defaults, which the sink changes (options.CLIENT_DEFAULTS).
    opts = _options(bs, **{"kafka.metadata.recovery.strategy": "rebootstrap", "kafka.reconnect.backoff.max.ms": "10000"})
    written = [("b0", 20)]
    assert exactly_once.write_task(_rows("b0", 20), TaskIdent("q-hang", 0, 0), opts).records == 20
    for batch in (1, 2):
        broker.kill()
        time.sleep(1.0)
        broker.start()
        tag = f"b{batch}"
        for attempt in range(3):  # what Spark does: the task is retried
            t0 = time.monotonic()
            try:
                msg = exactly_once.write_task(_rows(tag, 20), TaskIdent("q-hang", batch, 0), opts)
            except Exception as exc:
                took = time.monotonic() - t0
                print(f"batch {batch} attempt {attempt} failed after {took:.1f}s: {type(exc).__name__}: {exc}")
                assert took < TASK_BOUND_S, f"the task took {took:.1f}s to fail"
                continue
            print(f"batch {batch} attempt {attempt} wrote {msg.records} records in {time.monotonic() - t0:.1f}s")
            assert time.monotonic() - t0 < TASK_BOUND_S
            break
        else:
            raise AssertionError(f"batch {batch} not written in 3 attempts")
        written.append((tag, 20))
    assert Counter(v for *_, v in read_all(bs, "out", 2)) == _values(*written)
