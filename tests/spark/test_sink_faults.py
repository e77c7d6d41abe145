"""The exactly-once sink when the whole Spark application is SIGKILLed (R24, R25).

One pipeline (``eos_driver.py``: ``in`` → map → ``out``, exactly-once sink, master
``local[2,3]`` = 2 threads, 3 attempts per task) runs in a child process and is killed — the
driver's Python, its JVM and every Python worker, at once (``oncelog_tools.spark.procs.kill_tree``) —
at each point where Spark can lose its driver, then restarted from its checkpoint:

1. task attempts fail and are retried within the run (one with its transaction open, one after
   its transaction committed); then, with all input processed, the application is killed
   **between batches** (batch N in Spark's commit log, no batch N+1 planned);
2. more input; killed **inside a write task**, with the task's transaction open (the fault
   ``before_commit:hang`` writes a file and waits; the test kills when it appears);
3. restarted, Spark re-executes that batch; killed **inside the driver-side commit** of it
   (``driver_commit:hang``): every task has committed, Spark has not logged the batch;
4. restarted with Trigger.AvailableNow: the batch is executed a third time, then the rest.

After every run the output read with read_committed has no duplicates and nothing it should not
have; at the end it is exactly the input, once, and the input offsets committed in the output
transactions equal the input's end. One chain instead of one test per point: each Spark start
costs 6-20 s here.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from driverproc import Driver
from driverproc import batch_files as _batch_files
from sparkutil import create_topics, group_offsets, items, latest_offsets, produce, read_all

# Four Spark starts (6-20 s each here, more under load): above the suite's 300 s default.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

T0 = time.monotonic()


def _assert_no_duplicates(bs: str, allowed: Counter) -> Counter:
    got = Counter(v for *_, v in read_all(bs, "out", 2))
    dups = {v: n for v, n in got.items() if n > 1}
    assert not dups, f"{len(dups)} records written more than once, e.g. {list(dups.items())[:3]}"
    assert not got - allowed, f"unexpected records: {list((got - allowed).items())[:3]}"
    return got


def test_spark_killed_between_batches_inside_a_task_and_inside_commit_then_restarted(broker, tmp_path) -> None:
    global T0
    T0 = time.monotonic()
    bs = broker.bootstrap
    create_topics(bs, {"in": 2, "out": 2})
    ckpt, faults = tmp_path / "ckpt", tmp_path / "faults"
    faults.mkdir()
    first = items(1200, 2, "a")
    produce(bs, "in", first)
    want = Counter(v + b"!" for _, _, v in first)

    # 1. Task attempts fail and are retried by Spark (local[2,3]); then idle, killed between batches.
    d = Driver(bs, ckpt, tmp_path / "run1.log", trigger="continuous", t0=T0,
               faults="before_commit:fail@1,after_commit:fail@2", fault_dir=faults)
    d.wait_for("batches 0-3 in Spark's commit log", lambda: {0, 1, 2, 3} <= _batch_files(ckpt / "commits"))
    time.sleep(1.0)  # no new input: the query is idle, between batches
    assert _batch_files(ckpt / "offsets") == _batch_files(ckpt / "commits"), "a batch is still running"
    d.kill()
    assert (faults / "before_commit@1").exists() and (faults / "after_commit@2").exists(), "faults did not fire"
    assert Counter(v for *_, v in read_all(bs, "out", 2)) == want, "retried tasks: output is not exact"
    done = max(_batch_files(ckpt / "commits"))

    second = items(1200, 2, "b")
    produce(bs, "in", second)
    want += Counter(v + b"!" for _, _, v in second)

    # 2. Killed inside a write task: its transaction is open when the process tree dies.
    d = Driver(bs, ckpt, tmp_path / "run2.log", trigger="continuous", t0=T0, faults="before_commit:hang", fault_dir=faults)
    d.wait_for("a write task hanging before its commit", (faults / "before_commit@any").exists)
    time.sleep(0.3)  # its records leave the producer (linger.ms=5) for the open transaction
    d.kill()
    hung_batch = int((faults / "before_commit@any").read_text().split()[3])
    assert hung_batch == done + 1
    assert len(read_all(bs, "out", 2, isolation="read_uncommitted")) > len(read_all(bs, "out", 2)), (
        "the killed task's open transaction should hold uncommitted records"
    )
    _assert_no_duplicates(bs, want)

    # 3. Restarted: the batch is re-executed; killed inside the driver-side commit of it.
    d = Driver(bs, ckpt, tmp_path / "run3.log", trigger="continuous", t0=T0, faults="driver_commit:hang", fault_dir=faults)
    d.wait_for("the driver-side commit", (faults / "driver_commit@any").exists)
    d.kill()
    assert int((faults / "driver_commit@any").read_text().split()[3]) == hung_batch
    assert hung_batch not in _batch_files(ckpt / "commits")
    _assert_no_duplicates(bs, want)

    # 4. Restarted to the end: the batch runs a third time (every task finds its marker), then the rest.
    d = Driver(bs, ckpt, tmp_path / "run4.log", trigger="available_now", t0=T0)
    assert d.finish() == 0, d.tail()
    got = _assert_no_duplicates(bs, want)
    assert got == want, f"missing: {sum((want - got).values())}"
    # Uncommitted leftovers were aborted: nothing is pending on the output any more.
    assert len(read_all(bs, "out", 2, isolation="read_uncommitted")) >= len(read_all(bs, "out", 2))
    import json

    qid = json.loads((ckpt / "metadata").read_text())["id"]
    ends = latest_offsets(bs, "in", 2)
    assert group_offsets(bs, f"oncelog-spark-{qid}") == {("in", p): n for p, n in ends.items()}
