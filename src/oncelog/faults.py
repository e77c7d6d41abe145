"""Fault-injection points: let tests kill the broker exactly between two steps of a protocol.

The broker reads ``ONCELOG_CRASH_POINT`` once at start (a comma-separated list of point names).
When the code reaches a named point the process sends itself SIGKILL: no flush, no cleanup, the
same as ``kill -9`` from outside, but at a precise place. Points are named
``<operation>.<moment>``; the transaction coordinator's are listed in its module docstring.
Unset (the default) it costs one set lookup per point.
"""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)

ENV = "ONCELOG_CRASH_POINT"


class CrashPoints:
    def __init__(self, spec: str | None = None) -> None:
        raw = os.environ.get(ENV, "") if spec is None else spec
        self.points = frozenset(p.strip() for p in raw.split(",") if p.strip())

    def reached(self, name: str) -> None:
        if name in self.points:
            log.warning("fault injection: SIGKILL at %s", name)
            for handler in logging.getLogger().handlers:
                handler.flush()
            os.kill(os.getpid(), signal.SIGKILL)
