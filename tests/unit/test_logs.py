"""Log storms are cut at the handler (R22): oncelog.logs.StormFilter with an injected clock."""

from __future__ import annotations

import logging

from oncelog.logs import StormFilter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record(msg: str, *args: object, name: str = "oncelog.x", level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_a_repeated_template_passes_burst_times_per_window_then_reports_the_count() -> None:
    clock = Clock()
    f = StormFilter(burst=3, window=10.0, clock=clock)
    passed = [f.filter(_record("refused a connection from %s", f"10.0.0.{i}")) for i in range(1000)]
    assert sum(passed) == 3
    clock.now = 10.0
    r = _record("refused a connection from %s", "10.0.0.9")
    assert f.filter(r)
    assert r.getMessage() == "refused a connection from 10.0.0.9 [997 similar messages suppressed]"


def test_templates_loggers_and_levels_are_counted_apart() -> None:
    clock = Clock()
    f = StormFilter(burst=1, window=10.0, clock=clock)
    assert f.filter(_record("a %s", 1))
    assert not f.filter(_record("a %s", 2))
    assert f.filter(_record("b %s", 1))
    assert f.filter(_record("a %s", 1, name="other"))
    assert f.filter(_record("a %s", 1, level=logging.WARNING))


def test_memory_stays_bounded_with_many_templates() -> None:
    clock = Clock()
    f = StormFilter(burst=1, window=1.0, clock=clock)
    for i in range(50_000):
        clock.now = i * 0.001
        f.filter(_record(f"unique message {i}"))
    assert len(f._seen) <= 10_001
