"""R17: consume-transform-produce with sendOffsetsToTransaction, exactly once, while the copier is
SIGKILLed and restarted several times and a third of its transactions abort."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections import Counter

import pytest

from kafka_clients import CLIENTS, consume, create_topic, produce

pytestmark = pytest.mark.integration

PARTITIONS = 4
#: Records per client and size. The four kills land in the first ~5 s (seeded sleeps of 0.8-2 s
#: after each start), during which a copier copies a few thousand records at most; the rest is
#: copied by the last, unkilled copier. ``small`` (``make test``) leaves it well over half of the
#: input; ``full`` (marker ``long``, ``make test-long``) is the size this test had before the
#: suite was trimmed (the confluent-kafka copier took ~75 s of it).
RECORDS = {
    "small": {"confluent": 15_000, "kafka-python": 15_000, "aiokafka": 25_000},
    "full": {"confluent": 50_000, "kafka-python": 30_000, "aiokafka": 60_000},
}


def _start(client: str, bootstrap: str, seed: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "oncelog_tools.verify.copier", client, bootstrap, "input", "output", str(PARTITIONS), f"copier-{client}",
         f"copy-{client}", str(seed)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        # paced so that the kills land while copying, however fast the machine is
        env={**os.environ, "ONCELOG_COPIER_MAX_POLL": "200", "ONCELOG_COPIER_PAUSE_MS": "20"},
    )


@pytest.mark.slow
@pytest.mark.parametrize("size", ["small", pytest.param("full", marks=pytest.mark.long)])
@pytest.mark.parametrize("client", CLIENTS)
def test_copier_killed_repeatedly_copies_exactly_once(broker, client: str, size: str) -> None:
    n = RECORDS[size][client]
    create_topic("confluent", broker.bootstrap, "input", PARTITIONS)
    create_topic("confluent", broker.bootstrap, "output", PARTITIONS)
    items = [(i % PARTITIONS, f"k{i}".encode(), f"rec-{i:06d}".encode()) for i in range(n)]
    produce("confluent", broker.bootstrap, "input", items)
    rng = random.Random(42)
    kills = 0
    deadline = time.monotonic() + 240
    seed = 0
    while kills < 4 and time.monotonic() < deadline:
        proc = _start(client, broker.bootstrap, seed)
        seed += 1
        time.sleep(rng.uniform(0.8, 2.0))
        if proc.poll() is not None:
            break  # finished before we could kill it
        proc.kill()
        proc.wait(10)
        kills += 1
    proc = _start(client, broker.bootstrap, seed)
    out, _ = proc.communicate(timeout=max(30.0, deadline - time.monotonic()))
    assert proc.returncode == 0, out
    assert kills >= 2, "the copier finished before it could be killed twice; copy more records"
    got = consume("confluent", broker.bootstrap, "output", list(range(PARTITIONS)), expected=n,
                  isolation="read_committed", timeout=120, settle=2.0)
    values = Counter(v for *_, v in got)
    dups = [v for v, c in values.items() if c > 1]
    assert not dups, f"{len(dups)} records copied twice, e.g. {dups[:3]}"
    assert set(values) == {b"copied:" + v for _, _, v in items}
    # per partition, the output keeps the input's order
    by_part: dict[int, list[bytes]] = {}
    for p, _off, _k, v in sorted(got, key=lambda r: (r[0], r[1])):
        by_part.setdefault(p, []).append(v)
    for p, vs in by_part.items():
        expected = [b"copied:" + v for q, _, v in items if q == p]
        assert vs == expected, f"partition {p} out of order"
