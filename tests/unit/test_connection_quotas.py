"""A listener's connection limits (broker/network/connection_quotas.py): the static ones, the
dynamic ones over them (AlterConfigs on the BROKER resource), the per-address overrides (host
names resolved without blocking the loop) and the creation rate."""

from __future__ import annotations

import asyncio
import time

import pytest

from oncelog.broker.configuration import dynamic_kafka_configs as kd
from oncelog.broker.configuration.dynamic_kafka_configs import ConnectionLimits
from oncelog.broker.network.connection_quotas import UNLIMITED, ConnectionQuotas


def test_dynamic_values_replace_the_static_ones_and_deleting_them_restores_them() -> None:
    q = ConnectionQuotas(ConnectionLimits(100, 10), "PLAINTEXT")
    assert q.refusal("10.0.0.1", 99, 9) is None
    assert q.refusal("10.0.0.1", 100, 0) == "max.connections=100 reached"
    assert q.refusal("10.0.0.1", 5, 10) == "max.connections.per.ip=10 reached for 10.0.0.1"
    dynamic = {"max.connections.per.ip": "2", "max.connections.per.ip.overrides": "10.0.0.9:4,::1:1"}
    q.adopt(dynamic.get)
    assert q.refusal("10.0.0.1", 5, 2) == "max.connections.per.ip=2 reached for 10.0.0.1"
    assert q.refusal("10.0.0.9", 5, 3) is None
    assert q.refusal("10.0.0.9", 5, 4) == "max.connections.per.ip.overrides=4 reached for 10.0.0.9"
    assert q.per_ip_limit("::1") == 1
    q.adopt({}.get)
    assert q.limits == q.static and q.refusal("10.0.0.9", 5, 9) is None


def test_overrides_and_lower_bounds_are_checked_as_kafka_checks_them() -> None:
    assert kd.normalize("max.connections.per.ip.overrides", " a.example:3 , 10.1.2.3:0,") == "a.example:3,10.1.2.3:0"
    for bad in ("nohost", "a.example:x", "-bad-:1", "a.example:-1"):
        with pytest.raises(ValueError):
            kd.normalize("max.connections.per.ip.overrides", bad)
    with pytest.raises(ValueError, match="at least 0"):
        kd.normalize("max.connections", "-1")


def test_a_host_name_among_the_overrides_is_resolved_on_the_loop() -> None:
    async def go() -> None:
        q = ConnectionQuotas(ConnectionLimits(100, 10), "PLAINTEXT")
        q.adopt({"max.connections.per.ip.overrides": "localhost:3"}.get)
        for _ in range(100):  # bounded: 5 s
            if q.per_ip_limit("127.0.0.1") == 3:
                break
            await asyncio.sleep(0.05)
        assert q.per_ip_limit("127.0.0.1") == 3
        assert q.per_ip_limit("10.0.0.1") == 10

    asyncio.run(go())


def test_the_creation_rate_makes_the_next_connections_wait() -> None:
    async def go() -> None:
        q = ConnectionQuotas(ConnectionLimits(UNLIMITED, UNLIMITED), "PLAINTEXT")
        q.adopt({"max.connection.creation.rate": "3"}.get)
        start = time.monotonic()
        for _ in range(3):
            await q.throttle()
        assert time.monotonic() - start < 0.5  # three in a second pass at once
        await q.throttle()  # the fourth waits for the first to leave the one-second window
        assert time.monotonic() - start >= 0.9
        q.adopt({"max.connection.creation.rate": "0"}.get)
        assert q.refusal("10.0.0.1", 0, 0) == "max.connection.creation.rate=0"

    asyncio.run(go())
