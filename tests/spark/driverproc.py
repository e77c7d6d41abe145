"""Run ``eos_driver.py`` (a Spark application with one exactly-once query) in a child process
that a test can SIGKILL whole: the driver's Python, its JVM and every Python worker.

Every wait is bounded; a child that exits or times out fails the test with the tail of its log.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from oncelog_tools.spark.procs import kill_tree

DRIVER = Path(__file__).with_name("eos_driver.py")
#: Bound on every wait for the child (Spark's start alone takes up to 20 s on a loaded machine).
WAIT_S = 180.0


class Driver:
    """One run of ``eos_driver.py`` in its own session, logging to ``log``."""

    def __init__(
        self, bs: str, ckpt: Path, log: Path, *, trigger: str, master: str = "local[2,3]", max_offsets: int = 300,
        faults: str = "", fault_dir: Path | None = None, sink_options: dict[str, str] | None = None,
        t0: float | None = None,
    ) -> None:
        cmd = [sys.executable, str(DRIVER), "--bootstrap", bs, "--checkpoint", str(ckpt), "--master", master,
               "--trigger", trigger, "--max-offsets", str(max_offsets)]
        if faults:
            cmd += ["--faults", faults, "--fault-dir", str(fault_dir)]
        for k, v in (sink_options or {}).items():
            cmd += ["--sink-option", f"{k}={v}"]
        self.log = log
        self.t0 = time.monotonic() if t0 is None else t0
        self._out = open(log, "wb")
        self.say(f"start {log.name}")
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True)

    def say(self, what: str) -> None:
        print(f"{time.monotonic() - self.t0:6.1f}s {what}", flush=True)

    def tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:]

    def wait_for(self, what: str, cond: Callable[[], bool], timeout: float = WAIT_S, poll_s: float = 0.05) -> float:
        """Wait until ``cond()``; returns the seconds waited. Kills the child and fails if it
        exits first or ``timeout`` passes."""
        start = time.monotonic()
        while not cond():
            if self.proc.poll() is not None:
                raise AssertionError(f"driver exited ({self.proc.returncode}) before {what}:\n{self.tail()}")
            if time.monotonic() - start > timeout:
                self.kill()
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}:\n{self.tail()}")
            time.sleep(poll_s)
        return time.monotonic() - start

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.say(f"kill {self.log.name}")
            kill_tree(self.proc.pid)
        self.proc.wait(timeout=30)
        self._out.close()

    def finish(self) -> int:
        try:
            code = self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"driver did not finish:\n{self.tail()}") from None
        self._out.close()
        self.say(f"finished {self.log.name}")
        return code


def batch_files(d: Path) -> set[int]:
    """The batch ids Spark has written into a checkpoint's ``offsets`` or ``commits`` dir."""
    return {int(f.name) for f in d.iterdir() if f.name.isdigit()} if d.is_dir() else set()
