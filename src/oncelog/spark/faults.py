"""Fault injection for the sink's tests: make the sink fail, or stop and wait to be killed, at a
chosen point of a chosen micro-batch — once.

Enabled only by two sink options; without them this module does nothing:

- ``faultInjection`` — a comma list of ``<point>:<action>[@<batchId>]``, e.g.
  ``before_commit:fail@1,driver_commit:hang@3``.
- ``faultInjection.dir`` — a directory; each fault fires once, recorded by creating the file
  ``<dir>/<point>@<batchId or any>`` atomically (O_EXCL), so it fires exactly once even across
  processes, task retries and query restarts. The file holds the point, batch and pid.

Points (where the sink calls ``maybe_fire``):

| point | where | state when it fires |
| --- | --- | --- |
| ``after_produce`` | write task (executor) | rows handed to the producer inside the task's transaction; input offsets not added, nothing committed |
| ``before_commit`` | write task (executor) | rows produced inside the task's transaction, still open |
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
from dataclasses import dataclass

POINTS = frozenset({"after_produce", "before_commit", "after_commit", "driver_commit"})
ACTIONS = frozenset({"fail", "hang", "pause"})
#: How often a hanging or pausing fault looks at the clock and for its release file.
TICK_S = 0.05
#: A hanging fault gives up (raises) after this long: the test was meant to kill us by then.
HANG_LIMIT_S = 300.0


class InjectedFault(RuntimeError):
    """A failure requested by the faultInjection options (tests only)."""


@dataclass(frozen=True)
class Fault:
    point: str
    action: str
    batch_id: int | None  # None: the first batch that reaches the point

    @property
    def file_name(self) -> str:
        return f"{self.point}@{'any' if self.batch_id is None else self.batch_id}"


def parse(spec: str | None) -> tuple[Fault, ...]:
    """Parse the ``faultInjection`` option; raises ValueError naming the option."""
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
                f"option faultInjection: {item!r} is not <point>:<action>[@<batchId>] with point in "
                f"{sorted(POINTS)} and action in {sorted(ACTIONS)}"
            )
        try:
            batch_id = int(batch) if batch else None
        except ValueError:
            raise ValueError(f"option faultInjection: bad batch id in {item!r}") from None
        out.append(Fault(point, action, batch_id))
    return tuple(out)


def maybe_fire(faults: tuple[Fault, ...], directory: str | None, point: str, batch_id: int) -> None:
    """Fire the first configured fault for ``point`` and ``batch_id`` that has not fired yet."""
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
