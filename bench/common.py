"""Pieces shared by the benchmark scripts and the ``python -m bench`` suite (issue 7).

``RssSampler`` (a process's peak RSS and CPU time, psutil), ``md_table`` (a Markdown table),
``median_range`` (a "median (min–max)" cell), and for the cluster-mode benches: ``pg_and_workdir``
(a PostgreSQL server and a scratch folder for one run), ``pg_processes`` and ``cpu_seconds``
(where the CPU went), ``stop_brokers`` and ``drop_database`` (clean-up that never raises).
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil


class RssSampler:
    """Samples a process's RSS every ``interval`` seconds in a daemon thread; ``peak()`` gives
    the maximum since the last ``reset()``."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.proc = psutil.Process(pid)
        self.interval = interval
        self._peak = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> int:
        try:
            rss = self.proc.memory_info().rss
        except psutil.Error:
            return 0
        with self._lock:
            self._peak = max(self._peak, rss)
        return rss

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def reset(self) -> None:
        with self._lock:
            self._peak = 0
        self.sample()

    def cpu(self) -> float:
        try:
            t = self.proc.cpu_times()
        except psutil.Error:
            return 0.0
        return t.user + t.system

    def peak(self) -> int:
        self.sample()
        with self._lock:
            return self._peak

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class GroupSampler:
    """``RssSampler`` over several processes (the brokers of a cluster): ``peak()`` is the
    largest single broker's peak, ``cpu()`` the sum of their CPU times; ``proc`` is the first's."""

    def __init__(self, pids: list[int], interval: float = 0.1) -> None:
        self.samplers = [RssSampler(p, interval) for p in pids]
        self.proc = self.samplers[0].proc

    def sample(self) -> int:
        return max(s.sample() for s in self.samplers)

    def reset(self) -> None:
        for s in self.samplers:
            s.reset()

    def cpu(self) -> float:
        return sum(s.cpu() for s in self.samplers)

    def peak(self) -> int:
        return max(s.peak() for s in self.samplers)

    def stop(self) -> None:
        for s in self.samplers:
            s.stop()


def sampler_for(system) -> "RssSampler | GroupSampler":  # type: ignore[no-untyped-def]
    pids = getattr(system, "pids", None)
    return GroupSampler(pids) if pids else RssSampler(system.pid)


def md_table(headers: tuple[str, ...] | list[str], body: list[tuple[str, ...]] | list[list[str]]) -> list[str]:
    """Lines of a Markdown table."""
    return ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|",
            *("| " + " | ".join(row) + " |" for row in body)]


def median_range(vs: list[float], fmt: str, scale: float = 1.0) -> str:
    """``vs / scale`` as "median (min–max)", each formatted with ``fmt``."""
    vs = [v / scale for v in vs]
    return f"{fmt.format(statistics.median(vs))} ({fmt.format(min(vs))}–{fmt.format(max(vs))})"


@contextlib.contextmanager
def pg_and_workdir(prefix: str) -> Iterator[tuple[Any, Path]]:
    """A started ``oncelog.testing.pgserver.PgServer`` and a temporary folder named ``prefix…``;
    both are gone (the server stopped) when the block ends, however it ends."""
    from oncelog.testing.pgserver import PgServer

    pg = PgServer().start()
    try:
        with tempfile.TemporaryDirectory(prefix=prefix) as d:
            yield pg, Path(d)
    finally:
        pg.close()


def pg_processes(pg: Any) -> list[psutil.Process]:
    """The PostgreSQL server's postmaster and all its children, now."""
    pm = int((pg.data / "postmaster.pid").read_text().split()[0])
    p = psutil.Process(pm)
    return [p, *p.children(recursive=True)]


def cpu_seconds(procs: list[psutil.Process]) -> float:
    """User + system CPU seconds of ``procs`` so far (a process that is gone counts 0)."""
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def stop_brokers(procs: list[Any]) -> None:
    """Stop each ``BrokerProcess`` (30 s each), killing one that does not stop."""
    for b in procs:
        try:
            b.stop(timeout=30)
        except Exception:  # noqa: BLE001
            b.kill()


def drop_database(pg: Any, name: str) -> None:
    """Drop database ``name`` of ``pg`` if it can; clean-up never raises."""
    try:
        pg.drop_database(name)
    except Exception:  # noqa: BLE001
        pass
