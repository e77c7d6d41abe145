"""Crash a Spark application the way a machine failure would: SIGKILL a process and all of its
descendants at once.

A PySpark driver is a process tree: the driver's Python, the JVM it launched (py4j gateway),
the Python worker daemon the JVM forked (``pyspark.daemon`` puts itself in its own process
group) and the workers that daemon forked, plus the Python runners of a streaming data source.
Killing only the driver's Python lets the JVM notice and shut down with its hooks; killing the
process group misses the daemon. So the tree is collected from ``/proc`` (Linux) and every
process in it gets SIGKILL, the root first, then the rest without waiting in between.
Only descendants of the given pid are touched.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _children_map() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may contain spaces: parse after the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        out.setdefault(int(fields[1]), []).append(int(entry.name))
    return out


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children first, breadth first)."""
    children = _children_map()
    out: list[int] = []
    todo = [pid]
    while todo:
        nxt = []
        for p in todo:
            for c in children.get(p, ()):
                out.append(c)
                nxt.append(c)
        todo = nxt
    return out


def kill_tree(pid: int, timeout: float = 30.0) -> list[int]:
    """SIGKILL ``pid`` and its descendants; wait (bounded) until they are gone. Returns the pids
    killed. Processes re-parented away before the scan (double forks) are not found."""
    tree = [pid] + descendants(pid)
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    # Late forks: whatever a dying process spawned meanwhile.
    for p in descendants(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    for p in tree:
        while _alive(p) and time.monotonic() < deadline:
            time.sleep(0.02)
    return tree


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"  # a zombie waits for its parent to reap it
