"""``oncelog.testing.Broker`` as a context manager, for code that does not use pytest (issue 19)."""

from __future__ import annotations

import os
import signal

import psutil
import pytest
from confluent_kafka import Producer

from oncelog.testing import Broker, BrokerError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _produce(bootstrap: str, topic: str) -> int:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "log_level": 0})
    errors: list[object] = []
    p.produce(topic, b"v", callback=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0 and errors == [None], errors
    return len(p.list_topics(topic, timeout=30).topics[topic].partitions)


def test_context_manager_starts_serves_and_cleans_up() -> None:
    with Broker(config={"num.partitions": 3}) as b:
        assert b.running and b.bootstrap_servers == f"127.0.0.1:{b.port}"
        assert _produce(b.bootstrap_servers, "auto") == 3
        pid, data_dir = b.pid, b.data_dir
        assert (data_dir / "meta.properties").exists()
        # killed from outside, not through the object: close() says so, with the log
        os.kill(pid, signal.SIGKILL)
        psutil.Process(pid).wait(timeout=30)
        with pytest.raises(BrokerError, match="died during the test"):
            b.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not data_dir.exists(), "the temporary data directory was left behind"


def test_invalid_property_fails_start_with_the_reason() -> None:
    b = Broker(config={"no.such.property": "1"})
    with pytest.raises(BrokerError, match="no.such.property"):
        with b:
            pass  # pragma: no cover - never reached
    assert not b.data_dir.parent.exists(), "a failed start left its temporary directory behind"
