"""The clock, injected.

Core code never reads the system time: it takes ``now_ms`` arguments or a ``Clock``. The broker
shell passes ``SystemClock``; tests pass ``ManualClock`` and advance it, so timeouts, retention
and expiry are tested without sleeping.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the epoch (wall clock, as Kafka's timestamps are)."""
        ...

    def monotonic_ms(self) -> int:
        """Milliseconds on a clock that never goes back (for timers)."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock for tests: it moves only when told to."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms

    def now_ms(self) -> int:
        return self._now

    def monotonic_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("a clock never goes back")
        self._now += ms
