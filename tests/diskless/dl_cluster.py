"""Cluster brokers with an object store (issue 29): the one way the diskless tests start them.

``diskless_brokers(pg_dsn, base, server, nodes, prefix, extra)`` starts broker processes on the
store ``pg_dsn`` with ``diskless.storage.url`` on ``server``'s bucket under ``prefix``, the
endpoint, and the AWS_* credentials in their environment; stopped (or killed) at the end."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from oncelog.process import BrokerProcess

SMALL = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
         "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"}


def diskless_props(server, prefix: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    props = {**SMALL, "diskless.storage.url": f"s3://{server.bucket}/{prefix}",
             "diskless.storage.endpoint": server.endpoint, "diskless.commit.interval.ms": "100"}
    props.update(extra or {})
    return props


@contextlib.contextmanager
def diskless_brokers(pg_dsn: str, base: Path, server, nodes: tuple[int, ...] = (1,), prefix: str = "dl",
                     extra: dict[str, str] | None = None, with_store: bool = True) -> Iterator[list[BrokerProcess]]:
    overrides = diskless_props(server, prefix, extra) if with_store else {**SMALL, **(extra or {})}
    procs = [BrokerProcess(base / f"broker{n}", node_id=n, store=pg_dsn, overrides=overrides, env=server.env())
             for n in nodes]
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


def restart_hard(b: BrokerProcess, timeout: float = 60.0) -> None:
    """SIGKILL ``b`` and start it again once its session in the store has expired (a new
    process is refused while the old incarnation's session lives): bounded by ``timeout``."""
    import time

    b.kill()
    deadline = time.monotonic() + timeout
    while True:
        time.sleep(1.0)
        try:
            b.start(timeout=max(5.0, deadline - time.monotonic()))
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
