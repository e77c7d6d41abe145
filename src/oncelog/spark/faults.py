"""A test hook of the sink: make it fail, or stop and wait to be killed, at a chosen point of a
chosen micro-batch — once. Not an option of the data source: it is armed from the environment,
as the broker's crash points are (``oncelog.faults``), and does nothing unless armed.

Arming: ``ONCELOG_SPARK_FAULTS`` names a file (every process of the Spark application must see
the variable: set it before the SparkSession starts, and its JVM and Python workers inherit it).
The file holds a spec line, and a directory line::

    before_commit:fail@1,driver_commit:hang
    dir /tmp/x/faults

``arm(path, spec, directory)`` writes it atomically and ``disarm(path)`` removes it, so one
Spark application can arm different faults for different queries, one after the other. Each
fault fires once, recorded by creating ``<dir>/<point>@<batchId or any>`` atomically (O_EXCL):
exactly once even across processes, task retries and query restarts. The file holds the point,
the batch and the pid. Processes read the file again whenever it changes (mtime).

Points (where the sink calls ``maybe_fire``):

| point | where | state when it fires |
| --- | --- | --- |
| ``after_produce`` | write task (executor) | rows handed to the producer inside the task's transaction; input offsets not added, nothing committed |
| ``before_commit`` | write task (executor) | rows produced and flushed to the broker inside the task's transaction, still open |
| ``after_commit`` | write task (executor) | the task's transaction committed; the task has not returned |
| ``driver_commit`` | ``commit(messages, batchId)`` (driver) | every task committed; Spark has not logged the batch |

Actions: ``fail`` raises ``InjectedFault`` (the task fails: Spark retries it, or the query
dies); ``hang`` creates the file and then sleeps — the test SIGKILLs the Spark processes once
it sees the file — raising ``InjectedFault`` after ``HANG_LIMIT_S`` so nothing waits forever;
``pause`` creates the file, waits until the test creates ``<file>.release`` (meanwhile the test
kills and restarts the broker, say) and then lets the task go on as if nothing happened (after
``HANG_LIMIT_S`` without a release it raises ``InjectedFault``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ENV = "ONCELOG_SPARK_FAULTS"
POINTS = frozenset({"after_produce", "before_commit", "after_commit", "driver_commit"})
ACTIONS = frozenset({"fail", "hang", "pause"})
#: How often a hanging or pausing fault looks at the clock and for its release file.
TICK_S = 0.05
#: A hanging fault gives up (raises) after this long: the test was meant to kill us by then.
HANG_LIMIT_S = 300.0


class InjectedFault(RuntimeError):
    """A failure requested through ``ONCELOG_SPARK_FAULTS`` (tests only)."""


@dataclass(frozen=True)
class Fault:
    point: str
    action: str
    batch_id: int | None  # None: the first batch that reaches the point

    @property
    def file_name(self) -> str:
        return f"{self.point}@{'any' if self.batch_id is None else self.batch_id}"


def parse(spec: str | None) -> tuple[Fault, ...]:
    """Parse ``<point>:<action>[@<batchId>]`` items (comma separated); raises ValueError."""
    out = []
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        head, _, batch = item.partition("@")
        point, _, action = head.partition(":")
        action = action or "fail"
        if point not in POINTS or action not in ACTIONS:
            raise ValueError(
                f"fault {item!r} is not <point>:<action>[@<batchId>] with point in "
                f"{sorted(POINTS)} and action in {sorted(ACTIONS)}"
            )
        try:
            batch_id = int(batch) if batch else None
        except ValueError:
            raise ValueError(f"fault {item!r}: bad batch id") from None
        out.append(Fault(point, action, batch_id))
    return tuple(out)


def arm(path: str | os.PathLike[str], spec: str, directory: str | os.PathLike[str]) -> None:
    """Arm ``spec`` (see ``parse``), recording fired faults in ``directory``."""
    parse(spec)  # refuse a bad spec here, not in a Spark task
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(f"{spec}\ndir {directory}\n")
    os.replace(tmp, p)


def disarm(path: str | os.PathLike[str]) -> None:
    Path(path).unlink(missing_ok=True)


_cache: dict[str, tuple[int, tuple[Fault, ...], str]] = {}  # path -> (mtime_ns, faults, directory)


def _armed() -> tuple[tuple[Fault, ...], str]:
    path = os.environ.get(ENV)
    if not path:
        return (), ""
    try:
        mtime = os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return (), ""
    cached = _cache.get(path)
    if cached is not None and cached[0] == mtime:
        return cached[1], cached[2]
    lines = Path(path).read_text().splitlines()
    faults = parse(lines[0] if lines else "")
    directory = next((line[4:] for line in lines[1:] if line.startswith("dir ")), "")
    _cache[path] = (mtime, faults, directory)
    return faults, directory


def maybe_fire(point: str, batch_id: int, prepare: Callable[[], object] | None = None) -> None:
    """Fire the first armed fault for ``point`` and ``batch_id`` that has not fired yet.
    ``prepare`` runs only when a fault fires, just before it: a point can make its state
    definite first (``before_commit`` flushes, so the fault always meets records on the broker
    in an open transaction rather than, by timing, records still queued in the client)."""
    faults, directory = _armed()
    if not faults or not directory:
        return
    for f in faults:
        if f.point != point or (f.batch_id is not None and f.batch_id != batch_id):
            continue
        path = os.path.join(directory, f.file_name)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            continue
        os.write(fd, f"{point} {f.action} batch {batch_id} pid {os.getpid()}\n".encode())
        os.close(fd)
        if prepare is not None:
            prepare()
        deadline = time.monotonic() + HANG_LIMIT_S
        if f.action == "pause":
            while time.monotonic() < deadline:
                if os.path.exists(path + ".release"):
                    return
                time.sleep(TICK_S)
        elif f.action == "hang":
            while time.monotonic() < deadline:
                time.sleep(TICK_S)
        raise InjectedFault(f"injected fault ({f.action}) at {point} in batch {batch_id}")
