"""The exactly-once copy of ``oncelog verify copy`` (oncelog_tools/verify/copy.py) on diskless
input and output topics (issue 29), in small: three brokers on a real PostgreSQL and a real
SeaweedFS; copiers (confluent-kafka, read_committed, sendOffsetsToTransaction, a third of their
transactions aborted) and a concurrent read_committed reader, while the cluster suffers seeded
faults — broker SIGKILL, SIGSTOP past the session, PostgreSQL restarts, SeaweedFS SIGKILLed and
restarted — the copiers SIGKILLs, and SeaweedFS is also SIGKILLed and restarted twice on a timer
(so at least two store faults land whatever the draw). The brokers reach SeaweedFS through the
loopback S3 fault proxy (oncelog.testing.s3_fault_proxy) whose fault windows are drawn among the
faults too (``store_faults``: delays under and past the request timeout, 503 SlowDown, 500 after
the write, resets mid-request and mid-response), and three windows open on a timer: every PUT
answered 500 after it was written, half the requests reset mid-response, and every PUT reset for
8 s (longer than the brokers' call deadline, 6 s: uploads fail, their batches are refused and
retried by the producers). A writer that committed the coordinates of an upload that failed
fails this test (lost records, once a leader change makes a broker read the store: checked by
hand, RELIABILITY.md "1e"). 0 anomalies:
lost, duplicate, aborted read, out of order, inconsistent offsets."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from oncelog.testing.s3_fault_proxy import S3FaultProxy
from oncelog_tools.verify import copy
from oncelog_tools.verify.store_faults import BROKER_PROPERTIES, StoreFaults


# a broken broker makes the copiers stall until time_limit (400 s), then the final read (120 s): room for both
@pytest.mark.timeout(600)
def test_transactional_copy_on_diskless_topics_under_faults(tmp_path: Path, own_seaweed) -> None:
    lock = threading.Lock()
    store_faults: list[float] = []

    def store_fault() -> str:
        with lock:
            own_seaweed.kill()
            own_seaweed.start()
            store_faults.append(time.monotonic())
        return "object store SIGKILL + restart"

    stop = threading.Event()

    proxy = S3FaultProxy(own_seaweed.s3_port, seed=29).start()
    windows: list[float] = []

    def timer() -> None:
        # first, every PUT reset for longer than the call deadline (uploads fail), while the
        # cluster faults still come (a new leader reads the store, not its predecessor's cache)
        for wait_s, action in ((4.0, lambda: proxy.window("reset-request", 8.0, ops=("PUT",))),
                               (10.0, lambda: proxy.window("internal-error", 3.0, ops=("PUT",))),
                               (5.0, store_fault), (7.0, lambda: proxy.window("reset-response", 3.0, probability=0.5)),
                               (8.0, store_fault)):
            if stop.wait(wait_s):
                return
            action()
            if action is not store_fault:
                windows.append(time.monotonic())

    props = {"diskless.storage.url": f"s3://{own_seaweed.bucket}/copy", "diskless.storage.endpoint": proxy.endpoint,
             "diskless.commit.interval.ms": "100", **BROKER_PROPERTIES}
    t = threading.Thread(target=timer, daemon=True)
    t.start()
    try:
        result = copy.run(tmp_path, records=3_000, partitions=3, broker_kills=6, copier_kills=2, seed=29,
                          time_limit=400, txn_records=50, txn_pause_ms=400, cluster=3, diskless=props,
                          diskless_env=own_seaweed.env(), store_fault=store_fault, store_faults=6,
                          proxy_fault=StoreFaults(proxy).draw)
        ended = time.monotonic()
    finally:
        stop.set()
        t.join(60)
        proxy.close()
    assert result.anomalies == [], result.anomalies
    assert result.copied == 3_000, result
    assert result.broker_kills == 6 and result.copier_kills == 2 and result.store_faults == 6
    assert sum(n for k, n in result.faults.items() if k.startswith("object-store proxy")) == 6, result.faults
    assert len([w for w in windows if w < ended]) == 3, "the proxy windows came after the copy"
    assert proxy.hits.get(("internal-error", "PUT"), 0) >= 1, proxy.hits
    assert proxy.counts["reset-response"] >= 1, proxy.counts
    assert proxy.hits.get(("reset-request", "PUT"), 0) >= 1, proxy.hits
    assert len([s for s in store_faults if s < ended]) >= 2, "the object store faults came after the copy"
