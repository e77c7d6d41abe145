"""Run an ``oncelog broker`` as a child process: start it, wait for its ready line, kill it.

Used by the demo, the benchmarks, the fault scenarios and the integration tests, so they all
exercise the real command line and the real process, exactly as a user would run it. Every wait
is bounded.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

READY = re.compile(r"^oncelog broker ready on (\S+):(\d+)$")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class BrokerProcess:
    """One broker process. ``start()`` returns once the broker accepts connections.

    The port is fixed at construction (a free loopback port by default) so that a restarted
    broker comes back at the same address, as clients expect.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        overrides: dict[str, str] | None = None,
        log_path: Path | None = None,
        env: dict[str, str] | None = None,
        node_id: int | None = None,
        store: str | None = None,
    ) -> None:
        """``node_id`` and ``store`` (a PostgreSQL URL) start a cluster member (issue 15)."""
        self.node_id = node_id
        self.store = store
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port or free_port(host)
        self.overrides = dict(overrides or {})
        self.log_path = log_path or (self.data_dir.parent / f"{self.data_dir.name}.broker.log")
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_file = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "oncelog", "broker", "--data-dir", str(self.data_dir), "--listen", self.bootstrap]
        if self.node_id is not None:
            cmd += ["--node-id", str(self.node_id)]
        if self.store is not None:
            cmd += ["--store", self.store]
        for k, v in self.overrides.items():
            cmd += ["-o", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("broker already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        self.proc = subprocess.Popen(
            self.command(), stdout=subprocess.PIPE, stderr=self._log_file, env=env, start_new_session=True
        )
        ready = threading.Event()
        lines: list[str] = []

        def watch() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                lines.append(line)
                if READY.match(line):
                    ready.set()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if self.proc.poll() is not None:
                watcher.join(timeout=5)  # its standard output says why (an invalid property, ...)
                output = "\n".join(lines[-20:])
                raise RuntimeError(f"broker exited with {self.proc.returncode}; output: {output}; log: {self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"broker not ready after {timeout}s; log: {self.log_tail()}")
        return self

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to flush or clean up."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        self._close_log()

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for a clean exit; returns the exit status."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
                raise
        self._close_log()
        return self.proc.returncode

    def restart(self, *, hard: bool = True) -> "BrokerProcess":
        if hard:
            self.kill()
        else:
            self.stop()
        return self.start()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.kill()
