"""Prometheus metrics (issue 19, docs/METRICS.md): a real broker with ``metrics.listen`` set is
scraped over HTTP before and after a produce, a transaction and a consumer group's commit, and
the values that must move do; the broker still stops cleanly (exit 0). A bad address is a
config error at start."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from kafka_clients import create_topic
from oncelog.process import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def scrape(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape_until(address: str, ok, timeout: float = 15.0) -> dict:  # type: ignore[no-untyped-def]
    """Scrape until ``ok(samples)`` holds (state the coordinator finishes just after answering)
    or the time is up; returns the last scrape."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(address)
        if ok(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.1)


def test_metrics_move(broker_factory) -> None:
    address = f"127.0.0.1:{free_port()}"
    b = broker_factory(overrides={"metrics.listen": address})
    create_topic("confluent", b.bootstrap, "m", 1)
    before = scrape(address)
    assert value(before, "kafka_log_log_logendoffset", topic="m", partition="0") == 0

    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(100):
        p.produce("m", key=b"k", value=b"v%d" % i)
    assert p.flush(30) == 0

    tp = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "metrics-t"})
    tp.init_transactions(30)
    tp.begin_transaction()
    for i in range(10):
        tp.produce("m", value=b"t%d" % i)
    tp.commit_transaction(30)

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "metrics-g", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.subscribe(["m"])
    got = 0
    deadline = time.monotonic() + 30
    while got < 50 and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and not msg.error():
            got += 1
    assert got >= 50
    c.commit(offsets=[TopicPartition("m", 0, 50)], asynchronous=False)
    c.close()

    after = scrape_until(address, lambda s: value(s, "kafka_log_log_logendoffset", topic="m", partition="0") == 111
                         and value(s, "kafka_coordinator_transaction_completed_total", outcome="committed") == 1)
    assert value(after, "kafka_network_requestmetrics_requests_total", request="Produce") > \
        value(before, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert value(after, "kafka_network_requestmetrics_requests_total", request="Fetch") > 0
    assert value(after, "kafka_network_requestmetrics_totaltime_seconds_count", request="Produce") > 0
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic="m") >= 110  # retries count again
    assert value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic="m") > 110
    assert value(after, "kafka_server_brokertopicmetrics_bytesout_total", topic="m") > 0
    end = value(after, "kafka_log_log_logendoffset", topic="m", partition="0")
    assert end == 111  # 100 records, 10 in the transaction, its commit marker
    assert value(after, "kafka_log_log_laststableoffset", topic="m", partition="0") == end
    assert value(after, "kafka_log_log_laststableoffsetlag", topic="m", partition="0") == 0
    assert value(after, "kafka_log_log_numlogsegments", topic="m", partition="0") == 1
    assert value(after, "kafka_log_log_size", topic="m", partition="0") > 0
    assert value(after, "kafka_coordinator_transaction_completed_total", outcome="committed") == 1
    assert value(after, "kafka_coordinator_transaction_open") == 0
    assert value(after, "kafka_server_replicamanager_produceridcount") >= 1  # the transactional producer
    assert value(after, "kafka_consumergroup_current_offset", consumergroup="metrics-g", topic="m", partition="0") == 50
    assert value(after, "kafka_consumergroup_lag", consumergroup="metrics-g", topic="m", partition="0") == end - 50
    assert value(after, "kafka_server_socketservermetrics_connection_count", listener="PLAINTEXT") >= 1

    # an open transaction shows, with its age, and the LSO lags behind the log end
    tp.begin_transaction()
    tp.produce("m", value=b"open")
    tp.flush(30)
    now = scrape_until(address, lambda s: value(s, "kafka_coordinator_transaction_open") == 1)
    assert value(now, "kafka_coordinator_transaction_open") == 1
    assert value(now, "kafka_coordinator_transaction_oldest_open_age_seconds") >= 0
    assert value(now, "kafka_log_log_laststableoffsetlag", topic="m", partition="0") == 1
    tp.abort_transaction(30)
    done = scrape_until(address, lambda s: value(s, "kafka_log_log_laststableoffsetlag", topic="m", partition="0") == 0
                        and value(s, "kafka_coordinator_transaction_open") == 0)
    assert value(done, "kafka_coordinator_transaction_completed_total", outcome="aborted") == 1
    assert value(done, "kafka_log_log_laststableoffsetlag", topic="m", partition="0") == 0
    assert b.stop() == 0


def test_bad_metrics_address_is_a_config_error(tmp_path) -> None:
    """A malformed address is refused before anything starts: one line, exit code not 0."""
    proc = subprocess.run(
        [sys.executable, "-m", "oncelog", "broker", "--data-dir", str(tmp_path / "d"), "--listen",
         f"127.0.0.1:{free_port()}", "-o", "metrics.listen=nonsense"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode != 0
    assert "metrics.listen" in proc.stdout + proc.stderr


def test_metrics_address_in_use_is_a_clean_error(tmp_path) -> None:
    """An address another process holds: the broker says why and exits 1, nothing half-started."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "oncelog", "broker", "--data-dir", str(tmp_path / "d"), "--listen",
             f"127.0.0.1:{free_port()}", "-o", f"metrics.listen=127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60,
        )
    assert proc.returncode == 1
    assert "cannot start" in proc.stdout + proc.stderr
