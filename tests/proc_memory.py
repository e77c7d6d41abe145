"""A process's memory as the kernel counts it, for the hostile tests that bound what a client
can make the broker hold: resident size now, and the peak since it was last reset (Linux
``/proc/PID/status`` VmRSS / VmHWM; ``/proc/PID/clear_refs`` 5 resets the peak)."""

from __future__ import annotations

MIB = 1 << 20


def _status(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def rss(pid: int) -> int:
    """Resident bytes now."""
    return _status(pid, "VmRSS:")


def peak(pid: int) -> int:
    """The most resident bytes since the process started or ``reset_peak``."""
    return _status(pid, "VmHWM:")


def reset_peak(pid: int) -> None:
    """Start measuring the peak from now (the process must be ours)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
