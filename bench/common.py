"""Pieces shared by the benchmark scripts and the ``python -m bench`` suite (issue 7).

``RssSampler`` (a process's peak RSS and CPU time, psutil) and ``md_table`` (a Markdown table).
"""

from __future__ import annotations

import threading

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
