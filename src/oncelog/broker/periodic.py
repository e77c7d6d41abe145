"""Periodic housekeeping on the event loop: one helper for every timer the broker runs
(retention, producer expiry, compaction, transaction timeouts, offset expiry, ...).

Contract: ``every(interval_s, job, what, log)`` starts a task that sleeps ``interval_s`` and then
runs ``job`` (a function, or a coroutine function whose coroutine is awaited), forever, until the
task is cancelled. A run that raises is logged as a bug under ``what`` and the next run still
happens; cancellation propagates. Runs never overlap: the next sleep starts when a run ends.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable


def every(interval_s: float, job: Callable[[], object], what: str, log: logging.Logger) -> asyncio.Task[None]:
    async def loop() -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                out = job()
                if asyncio.iscoroutine(out):
                    await out
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("bug: %s failed", what)

    return asyncio.get_running_loop().create_task(loop(), name=f"every {interval_s}s: {what}")
