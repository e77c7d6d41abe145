"""``oncelog groups list|describe|reset-offsets`` against a real broker (R3)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from kafka_clients import create_topic, produce

pytestmark = pytest.mark.integration


def _cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "oncelog", "groups", *args, "-b", bootstrap],
                          capture_output=True, text=True, timeout=60, env=env)


def _offsets_table(stdout: str) -> dict[int, tuple[int, int, int]]:
    """partition -> (committed, log end, lag) from ``groups describe``'s offsets table."""
    rows = [line.split("│") for line in stdout.splitlines() if line.count("│") >= 6 and "cli-t" in line]
    return {int(r[2]): (int(r[3]), int(r[4]), int(r[5])) for r in rows if r[2].strip().isdigit()}


def test_list_describe_and_reset_offsets(broker) -> None:
    from confluent_kafka import Consumer, TopicPartition

    create_topic("confluent", broker.bootstrap, "cli-t", 2)
    produce("confluent", broker.bootstrap, "cli-t", [(i % 2, None, b"v%d" % i) for i in range(100)])
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cli-g", "client.id": "cli-client",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000})
    c.subscribe(["cli-t"])
    deadline = time.monotonic() + 30
    while len(c.assignment()) < 2 and time.monotonic() < deadline:
        c.consume(10, 0.2)
    c.commit(offsets=[TopicPartition("cli-t", 0, 10), TopicPartition("cli-t", 1, 50)], asynchronous=False)
    try:
        out = _cli(broker.bootstrap, "list")
        assert out.returncode == 0, out.stderr
        assert "cli-g" in out.stdout and "Stable" in out.stdout

        out = _cli(broker.bootstrap, "describe", "cli-g")
        assert out.returncode == 0, out.stderr
        assert "state Stable" in out.stdout and "cli-client" in out.stdout and "cli-t:0,1" in out.stdout
        assert _offsets_table(out.stdout) == {0: (10, 50, 40), 1: (50, 50, 0)}, out.stdout

        out = _cli(broker.bootstrap, "reset-offsets", "cli-g", "--topic", "cli-t", "--to-earliest", "--execute")
        assert out.returncode == 1 and "active member" in out.stdout, "an active group is refused"
    finally:
        c.close()

    out = _cli(broker.bootstrap, "reset-offsets", "cli-g", "--topic", "cli-t", "--to-earliest")
    assert out.returncode == 0 and "dry run" in out.stdout
    out = _cli(broker.bootstrap, "describe", "cli-g")
    assert "state Empty" in out.stdout and _offsets_table(out.stdout) == {0: (10, 50, 40), 1: (50, 50, 0)}, (
        "a dry run changes nothing")

    out = _cli(broker.bootstrap, "reset-offsets", "cli-g", "--topic", "cli-t:1", "--shift-by", "-20", "--execute")
    assert out.returncode == 0 and "committed 1 offset(s)" in out.stdout, out.stdout + out.stderr
    out = _cli(broker.bootstrap, "describe", "cli-g")
    assert _offsets_table(out.stdout) == {0: (10, 50, 40), 1: (30, 50, 20)}, out.stdout
