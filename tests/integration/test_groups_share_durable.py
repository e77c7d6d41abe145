"""A share group (KIP-932, issue 30) across a broker SIGKILL: three ShareConsumers in explicit
mode accept every record and commit; the broker is killed mid-stream and restarted on the same
data directory. Nothing is lost (every record ends accepted) and no record whose acceptance the
broker confirmed before the kill is delivered again after it (``__share_group_state`` holds the
acknowledgements before they are answered); only records acquired and not yet confirmed at the
kill may come again, as Kafka's at-least-once delivery allows.

Before: share groups were not served at all; with the share-partition state in memory only, the
restarted broker would redeliver every record from the group's start offset.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kafka_clients import create_topic, produce
from test_groups_share import FAST, poll_records, set_group_configs, share_consumer

pytestmark = pytest.mark.integration


def _round(consumers: list[Any], delivered: list[tuple[int, int, float]], confirmed: dict[int, float]) -> None:
    """One poll of each consumer: accept what it got and commit; note what the broker confirmed."""
    from confluent_kafka import AcknowledgeType

    for i, c in enumerate(consumers):
        got = poll_records(c, 0.2)
        for m in got:
            delivered.append((m.offset(), i, time.monotonic()))
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        if not got:
            continue
        try:
            results = c.commit_sync(10)
        except Exception:  # noqa: BLE001 - the broker is down: nothing confirmed
            continue
        if all(err is None for err in results.values()):
            now = time.monotonic()
            for m in got:
                confirmed.setdefault(m.offset(), now)


def test_share_group_survives_a_broker_sigkill(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory("share-kill", FAST)
    create_topic("confluent", b.bootstrap, "qk", 1)
    n = 3000
    produce("confluent", b.bootstrap, "qk", [(0, None, b"v%d" % i) for i in range(n)],
            extra={"batch.num.messages": 10})
    set_group_configs(b.bootstrap, "sgk", {"share.auto.offset.reset": "earliest"})
    consumers = [share_consumer(b.bootstrap, "sgk", ["qk"], explicit=True) for _ in range(3)]
    delivered: list[tuple[int, int, float]] = []
    confirmed: dict[int, float] = {}
    try:
        deadline = time.monotonic() + 60
        while len(confirmed) < n // 3 and time.monotonic() < deadline:
            _round(consumers, delivered, confirmed)
        assert len(confirmed) >= n // 3, f"only {len(confirmed)} confirmed before the kill"
        holder = share_consumer(b.bootstrap, "sgk", ["qk"], explicit=True)  # acquires and never acknowledges
        held: set[int] = set()
        deadline = time.monotonic() + 30
        while not held and time.monotonic() < deadline:
            held = {m.offset() for m in poll_records(holder, 0.5)}
            _round(consumers, delivered, confirmed)
        assert held, "the holder got nothing"
        killed_at = time.monotonic()
        confirmed_before = {o for o, t in confirmed.items() if t < killed_at}
        b.restart(hard=True)  # SIGKILL, then start on the same port and data directory
        holder.close()  # its records were acquired when the broker died: they come back
        deadline = time.monotonic() + 120
        while len(confirmed) < n and time.monotonic() < deadline:
            _round(consumers, delivered, confirmed)
    finally:
        for c in consumers:
            c.close()
    assert sorted(confirmed) == list(range(n)), f"{n - len(confirmed)} record(s) never accepted"
    again = sorted({o for o, _, t in delivered if t > killed_at and o in confirmed_before})
    assert not again, f"records confirmed before the kill delivered again: {again[:20]}"
    assert held <= {o for o, _, t in delivered if t > killed_at}, "the held records were not delivered again"
    counts: dict[int, int] = {}
    for o, _, _ in delivered:
        counts[o] = counts.get(o, 0) + 1
    twice = {o for o, k in counts.items() if k > 1}
    assert not twice & confirmed_before, sorted(twice & confirmed_before)[:20]
