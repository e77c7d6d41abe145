"""The documented way to try cluster mode (issue 15, docs/CLUSTER.md):
``python -m oncelog_tools.cluster`` starts PostgreSQL, SeaweedFS (issue 29) and brokers on
loopback, prints the bootstrap string and the object-store properties, serves a real client on a
PostgreSQL-engine topic and on a diskless topic, and stops everything on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import kafka_clients as kc


def test_the_cluster_tool_starts_a_cluster_a_client_can_use(tmp_path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "oncelog_tools.cluster", "--brokers", "2", "--dir", str(tmp_path),
                             "--duration", "120"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ), start_new_session=True)
    try:
        assert proc.stdout is not None
        bootstrap = None
        lines = []
        deadline = time.monotonic() + 120
        for line in proc.stdout:  # bounded by the tool's own timeouts and --duration
            lines.append(line)
            if line.startswith("bootstrap: "):
                bootstrap = line.split(" ", 1)[1].strip()
                break
            if time.monotonic() > deadline:
                break
        assert bootstrap and len(bootstrap.split(",")) == 2, "".join(lines)
        kc.create_topic("confluent", bootstrap, "try", 2)
        items = [(i % 2, None, b"v%d" % i) for i in range(20)]
        acked: list = []
        for _ in range(50):  # the topic gets leaders at the brokers' next poll
            try:
                acked = kc.produce("confluent", bootstrap, "try", items, timeout=20)
                break
            except AssertionError:
                time.sleep(0.2)
        assert len(acked) == 20
        read = kc.consume("confluent", bootstrap, "try", [0, 1], expected=20, timeout=30)
        assert sorted(v for *_x, v in read) == sorted(v for *_x, v in items)
        # issue 29: the tool starts SeaweedFS and gives the brokers the object store
        assert any(line.startswith("broker property: diskless.storage.url=s3://") for line in lines), "".join(lines)
        kc.create_topic("confluent", bootstrap, "try-dl", 2, {"diskless.enable": "true"})
        for _ in range(50):
            try:
                acked = kc.produce("confluent", bootstrap, "try-dl", items, timeout=20)
                break
            except AssertionError:
                time.sleep(0.2)
        assert len(acked) == 20
        read = kc.consume("confluent", bootstrap, "try-dl", [0, 1], expected=20, timeout=30)
        assert sorted(v for *_x, v in read) == sorted(v for *_x, v in items)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "stopped" in out
