"""Log storms are cut at the handler: a message that repeats is written a few times per window,
then counted, and the count is reported with its next occurrence (R22).

A broker under attack or on a failing disk can produce the same line thousands of times a
second (every refused connection, every failed read). ``StormFilter`` keys records by (logger,
level, message template) — the format string, not the formatted text, so "refused a connection
from 10.0.0.1" and "…from 10.0.0.2" are one key — and lets ``burst`` of each key through per
``window`` seconds. The first record let through after suppression carries
" [N similar messages suppressed]". Keys are forgotten once their window is over, so memory
stays bounded by the number of distinct templates active in one window.

The clock is injected (``clock``: seconds, monotonic) for tests.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

__all__ = ["StormFilter", "install"]


class StormFilter(logging.Filter):
    def __init__(self, burst: int = 10, window: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self.clock = clock
        # key -> [window start, records let through in it, records suppressed in it]
        self._seen: dict[tuple[str, int, object], list] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        now = self.clock()
        key = (record.name, record.levelno, record.msg)
        entry = self._seen.get(key)
        if entry is None or now - entry[0] >= self.window:
            suppressed = entry[2] if entry is not None else 0
            if len(self._seen) > 10_000:
                self._forget_old(now)
            self._seen[key] = [now, 1, 0]
            if suppressed:
                record.msg = f"{record.msg} [{suppressed} similar messages suppressed]"
            return True
        if entry[1] < self.burst:
            entry[1] += 1
            return True
        entry[2] += 1
        return False

    def _forget_old(self, now: float) -> None:
        self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.window}


def install(burst: int = 10, window: float = 10.0) -> StormFilter:
    """Put one StormFilter on every handler of the root logger (call after basicConfig)."""
    f = StormFilter(burst, window)
    for handler in logging.getLogger().handlers:
        handler.addFilter(f)
    return f
