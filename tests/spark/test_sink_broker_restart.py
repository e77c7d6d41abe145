"""The broker SIGKILLed between a write task's produce and its commit, several times, while an
exactly-once query runs (R24, R25; issue 13): the query makes progress within ``PROGRESS_S``
after the broker is back, and its output is exactly once.

One pipeline (``eos_driver.py``: ``in`` → map → ``out``, 4 input and 4 output partitions,
plain records and transactions — every third aborted — in the input, master ``local[2,3]``)
runs in a child process, with the sink's default client configuration. Each seed (``SIZES``)
makes one broker kill: it picks a micro-batch, a point — ``after_produce`` (the task's rows are
in its open transaction, the input offsets not yet added) or ``before_commit`` (input offsets
added too) — and a downtime of 0.5-1.5 s. The first write task of that batch to reach the point
pauses (the ``pause`` fault writes a file); the test SIGKILLs the broker, restarts it at the
same address after the downtime, and releases the task, which goes on against the restarted
broker. The batch must then be in Spark's commit log within ``PROGRESS_S``. One Spark
application for all the seeds: starting one costs 20-60 s on this machine.

Two sizes: ``2-kills`` (in ``make test``: seeds 5 and 6, one kill at each point, 2,000 plain
records) and ``4-kills`` (marker ``long``, ``make test-long``: seeds 5-8, 4,000 plain records,
the size this test had before the suite was trimmed).

Before issue 13 the released task's next ``send_offsets_to_transaction`` never returned: when
its only broker died, librdkafka (2.10+) re-bootstrapped and decommissioned the broker handle
that its group-coordinator cache still pointed at, and the coordinator request waited for that
handle forever, ignoring the call's timeout (librdkafka #5511 and #5456). The sink's clients
no longer re-bootstrap, and every client call runs under a watchdog; ``test_sink_client_hang``
makes the client bug happen and checks the watchdog.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter

import pytest

from driverproc import Driver, batch_files
from sparkutil import create_topics, group_offsets, items, latest_offsets, produce, produce_in_txn, read_all, txn_producer

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(420)]

PARTITIONS = 4
#: The bound this test asserts: the paused batch is in Spark's commit log this long after the
#: broker is back at the latest.
PROGRESS_S = 60.0
#: size -> (seeds, plain records). One broker kill per seed (point, batch and downtime drawn
#: from it): 5 gives before_commit at batch 2, 6 after_produce at batch 4, 7 before_commit at
#: batch 5, 8 after_produce at batch 8.
SIZES = {"2-kills": ((5, 6), 2000), "4-kills": ((5, 6, 7, 8), 4000)}
MAX_OFFSETS = 400  # per micro-batch, so that the input makes ~8 (2,000 plain) or ~13 (4,000) batches


def _input(bs: str, plain_records: int) -> Counter:
    """``plain_records`` plain records and 9 transactions of 100 (every third aborted); returns
    the values the output must hold, each once."""
    plain = items(plain_records, PARTITIONS, "p")
    produce(bs, "in", plain)
    want = Counter(v + b"!" for _, _, v in plain)
    p = txn_producer(bs, "input-generator")
    for t in range(9):
        txn = [(i % PARTITIONS, f"t{t}-{i}".encode(), f"t{t}-{i:04d}".encode()) for i in range(100)]
        aborted = t % 3 == 2
        produce_in_txn(p, "in", txn, end="abort" if aborted else "commit")
        if not aborted:
            want += Counter(v + b"!" for _, _, v in txn)
    p.flush(30)
    return want


def _kills(seeds: tuple[int, ...]) -> list[tuple[str, int, float]]:
    """(point, batch, downtime) of each seed's kill, in batch order."""
    out = []
    for i, seed in enumerate(seeds):
        rng = random.Random(seed)
        point = rng.choice(("after_produce", "before_commit"))
        out.append((point, 1 + 2 * i + rng.randint(0, 1), rng.uniform(0.5, 1.5)))
    return out


@pytest.mark.parametrize("size", ["2-kills", pytest.param("4-kills", marks=pytest.mark.long)])
def test_query_progresses_after_broker_killed_between_produce_and_commit(broker, tmp_path, size: str) -> None:
    t0 = time.monotonic()
    seeds, plain_records = SIZES[size]
    bs = broker.bootstrap
    create_topics(bs, {"in": PARTITIONS, "out": PARTITIONS})
    want = _input(bs, plain_records)
    ckpt, fault_dir = tmp_path / "ckpt", tmp_path / "faults"
    fault_dir.mkdir()
    kills = _kills(seeds)
    assert {point for point, _b, _d in kills} == {"after_produce", "before_commit"}
    spec = ",".join(f"{point}:pause@{b}" for point, b, _ in kills)
    d = Driver(bs, ckpt, tmp_path / "driver.log", trigger="continuous", max_offsets=MAX_OFFSETS,
               faults=spec, fault_dir=fault_dir, t0=t0)
    progress: list[float] = []
    try:
        for point, b, down in kills:
            marker = fault_dir / f"{point}@{b}"
            d.wait_for(f"a write task of batch {b} paused at {point}", marker.exists)
            d.say(f"batch {b}: task paused at {point}; SIGKILL broker, back in {down:.1f}s")
            broker.kill()
            time.sleep(down)
            broker.start()
            (fault_dir / f"{point}@{b}.release").touch()
            waited = _wait_for_progress(d, ckpt, b, broker)
            progress.append(waited)
            d.say(f"batch {b} committed {waited:.1f}s after the broker was back")
        ends = latest_offsets(bs, "in", PARTITIONS)
        qid = json.loads((ckpt / "metadata").read_text())["id"]
        group = f"oncelog-spark-{qid}"
        d.wait_for("the whole input processed", lambda: group_offsets(bs, group) == {("in", p): n for p, n in ends.items()},
                   poll_s=1.0)
    finally:
        d.kill()
    d.say(f"time to progress after each broker restart: {', '.join(f'{s:.1f}s' for s in progress)}")
    got = Counter(v for *_, v in read_all(bs, "out", PARTITIONS))
    dups = {v: n for v, n in got.items() if n > 1}
    assert not dups, f"{len(dups)} records written more than once, e.g. {list(dups.items())[:3]}"
    assert not got - want, f"unexpected records: {list((got - want).items())[:3]}"
    assert got == want, f"missing: {sum((want - got).values())}"


def _wait_for_progress(d: Driver, ckpt, batch: int, broker) -> float:  # type: ignore[no-untyped-def]
    try:
        return d.wait_for(f"batch {batch} in Spark's commit log within {PROGRESS_S:.0f}s of the broker's restart",
                          lambda: batch in batch_files(ckpt / "commits"), timeout=PROGRESS_S)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- broker log ---\n{broker.log_tail(3000)}") from None
