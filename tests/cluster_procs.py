"""Several broker processes on one store, for the cluster-mode tests (issue 15): the one way
those tests start and stop them."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from oncelog.process import BrokerProcess


@contextlib.contextmanager
def brokers(dsn: str, base: Path, overrides: dict[str, str], nodes: tuple[int, ...] = (1, 2, 3)
            ) -> Iterator[list[BrokerProcess]]:
    """Broker processes ``nodes`` on the store ``dsn`` (data dirs under ``base``), started in
    order; stopped (or killed, when a stop fails) at the end whatever happened."""
    procs = [BrokerProcess(base / f"broker{n}", node_id=n, store=dsn, overrides=overrides) for n in nodes]
    try:
        for b in procs:
            b.start(timeout=60)
        yield procs
    finally:
        for b in procs:
            try:
                b.stop(timeout=30)
            except Exception:  # noqa: BLE001 - a broker the test left dead or stuck
                b.kill()
