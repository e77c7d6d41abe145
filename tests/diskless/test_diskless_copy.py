"""The exactly-once copy of ``oncelog verify copy`` (oncelog_tools/verify/copy.py) on diskless
input and output topics (issue 29), in small: three brokers on a real PostgreSQL and a real
SeaweedFS; copiers (confluent-kafka, read_committed, sendOffsetsToTransaction, a third of their
transactions aborted) and a concurrent read_committed reader, while the cluster suffers seeded
faults — broker SIGKILL, SIGSTOP past the session, PostgreSQL restarts, SeaweedFS SIGKILLed and
restarted — the copiers SIGKILLs, and SeaweedFS is also SIGKILLed and restarted twice on a timer
(so at least two store faults land whatever the draw). 0 anomalies: lost, duplicate, aborted
read, out of order, inconsistent offsets."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from oncelog_tools.verify import copy


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

    def timer() -> None:
        for wait_s in (12.0, 15.0):
            if stop.wait(wait_s):
                return
            store_fault()

    props = {"diskless.storage.url": f"s3://{own_seaweed.bucket}/copy",
             "diskless.storage.endpoint": own_seaweed.endpoint, "diskless.commit.interval.ms": "100"}
    t = threading.Thread(target=timer, daemon=True)
    t.start()
    try:
        result = copy.run(tmp_path, records=3_000, partitions=3, broker_kills=6, copier_kills=2, seed=29,
                          time_limit=400, txn_records=50, txn_pause_ms=400, cluster=3, diskless=props,
                          diskless_env=own_seaweed.env(), store_fault=store_fault)
        ended = time.monotonic()
    finally:
        stop.set()
        t.join(60)
    assert result.broker_kills == 6 and result.copier_kills == 2
    assert len([s for s in store_faults if s < ended]) >= 2, "the object store faults came after the copy"
    assert result.copied == 3_000, result
    assert result.anomalies == [], result.anomalies
