"""Fault injection for the sink's tests: make one write task fail once at a chosen point.

Enabled only by the sink options ``faultInjection.point`` (``before_commit``: the rows were
produced inside the transaction, which is still open; ``after_commit``: the transaction is
committed but the task has not returned) and ``faultInjection.marker`` (a file path). The fault
fires in the first task that reaches the point while the marker file does not exist, and creates
the file atomically, so it fires exactly once per marker even across processes and restarts.
``faultInjection.batchId`` limits it to one micro-batch. Without these options this module
does nothing.
"""

from __future__ import annotations

import os


class InjectedFault(RuntimeError):
    """A failure requested by the faultInjection options (tests only)."""


def maybe_fail(point: str, *, configured_point: str | None, marker: str | None, batch_id: int, only_batch: int | None) -> None:
    if configured_point != point or not marker:
        return
    if only_batch is not None and batch_id != only_batch:
        return
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, f"{point} batch {batch_id} pid {os.getpid()}\n".encode())
    os.close(fd)
    raise InjectedFault(f"injected fault at {point} in batch {batch_id}")
