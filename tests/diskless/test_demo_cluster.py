"""``make demo-cluster`` in small (issue 29): ``python -m oncelog_tools.demo.cluster`` as a user
runs it — PostgreSQL, SeaweedFS and three brokers, diskless input and output topics, ``make demo``'s
generator and Spark pipeline — with 1,200 orders instead of 6,000. The three faults (a broker
SIGKILL, SeaweedFS SIGKILLed and restarted, the Spark application SIGKILLed and restarted from
its checkpoint) must land while the generator writes and Spark runs, the output must grow again
after each, the read_committed verification must PASS (exit status 0), and every process the
demo started must be gone when it returns."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ORDERS = 1200


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie is gone too (its parent, the demo, has exited; init reaps it).
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.timeout(330)
def test_demo_cluster_is_exactly_once_through_its_faults(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    try:
        run = subprocess.run(
            [sys.executable, "-m", "oncelog_tools.demo.cluster", "--orders", str(ORDERS), "--rate", "20",
             "--outage", "6", "--dir", str(work)],
            capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"},
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"make demo-cluster did not finish in 300 s:\n{exc.stdout}\n{exc.stderr}")
    out = run.stdout + run.stderr
    assert run.returncode == 0 and "PASS: every record exactly once" in out, out[-12000:]
    # Each fault fired while the pipeline ran, and the pipeline's output grew again after it.
    for fired in ("SIGKILL broker", "SIGKILL SeaweedFS", "SIGKILL Spark inside micro-batch"):
        assert fired in out, f"{fired!r} never fired:\n{out[-8000:]}"
    # Spark died after its sink tasks had written records of the micro-batch, before the batch
    # was committed: its re-execution must neither lose nor repeat them.
    assert re.search(r"its sink tasks had written [1-9]", out), out[-8000:]
    for kind in ("broker", "object store", "spark"):
        assert f"after the {kind} fault: output growing again" in out, out[-8000:]
    assert "could not land" not in out
    # The verification counted every committed order (1,200 each in orders and inventory).
    for topic in ("orders", "inventory"):
        assert re.search(rf"{topic}\s*│\s*{ORDERS:,}\s*│\s*{ORDERS:,}\s*│\s*0\s*│\s*0\s*│", out), out[-6000:]
    # Nothing the demo started outlives it: brokers, SeaweedFS (pids it printed), Spark.
    pids = {int(p) for p in re.findall(r"\(pid (\d+)", out)}
    assert pids, out[-4000:]
    assert all(_gone(p) for p in pids), [p for p in pids if not _gone(p)]
