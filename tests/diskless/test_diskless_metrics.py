"""The diskless counters in /metrics (issue 29, docs/METRICS.md): a real cluster-mode broker with
``metrics.listen`` and an object store (real PostgreSQL, real SeaweedFS) reports its object-store
requests by kind, the bytes each way, its read cache's hits and misses and its writer's objects:
each scrape until it moves (an answer is reused for a second). A produce moves PUTs and put bytes, a tail read is served from the writer's cache (hits, no
GET), and a read after a restart (empty cache) GETs the batches back."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import kafka_clients as kc
from dl_cluster import diskless_brokers, restart_hard
from oncelog.process import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def scrape(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def _scrape_until(address: str, ok, timeout: float = 20.0) -> dict:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        try:
            samples = scrape(address)
        except OSError:
            samples = {}
        if (samples and ok(samples)) or time.monotonic() > deadline:
            return samples
        time.sleep(0.5)


def test_object_requests_bytes_and_cache_lookups_are_exported(pg_dsn: str, tmp_path: Path, seaweed) -> None:
    address = f"127.0.0.1:{free_port()}"
    with diskless_brokers(pg_dsn, tmp_path, seaweed, prefix="m1", extra={"metrics.listen": address}) as (b,):
        kc.create_topic("confluent", b.bootstrap, "dl", 2, {"diskless.enable": "true"})
        before = scrape(address)
        assert value(before, "oncelog_diskless_object_requests_total", request="PUT") == 0
        vals = [b"v%04d" % i + b"x" * 100 for i in range(400)]
        kc.produce("confluent", b.bootstrap, "dl", [(i % 2, None, v) for i, v in enumerate(vals)],
                   extra={"linger.ms": 20})
        payload = sum(len(v) for v in vals)
        # an answer is reused for a second (metrics.MIN_INTERVAL_S): scrape until it moves
        s = _scrape_until(address, lambda x: value(x, "oncelog_diskless_writer_batches_total") >= 2)
        puts = value(s, "oncelog_diskless_object_requests_total", request="PUT")
        assert puts >= 1
        assert value(s, "oncelog_diskless_writer_objects_total") == puts  # no retries: one PUT per object
        assert value(s, "oncelog_diskless_object_bytes_total", direction="put") >= payload
        assert value(s, "oncelog_diskless_writer_batches_total") >= 2
        assert value(s, "oncelog_diskless_cache_bytes") > 0

        got = kc.consume("confluent", b.bootstrap, "dl", [0, 1], expected=400, timeout=60)
        assert len(got) == 400
        s = _scrape_until(address, lambda x: value(x, "oncelog_diskless_cache_lookups_total", result="hit") > 0)
        assert value(s, "oncelog_diskless_cache_lookups_total", result="hit") > 0
        assert value(s, "oncelog_diskless_object_requests_total", request="GET") == 0  # the writer's cache

        restart_hard(b)  # every cache is gone
        got = kc.consume("confluent", b.bootstrap, "dl", [0, 1], expected=400, timeout=60)
        assert len(got) == 400
        s = _scrape_until(address, lambda x: value(x, "oncelog_diskless_object_requests_total", request="GET") > 0)
        assert value(s, "oncelog_diskless_object_requests_total", request="GET") >= 1
        assert value(s, "oncelog_diskless_object_bytes_total", direction="get") >= payload
        assert value(s, "oncelog_diskless_cache_lookups_total", result="miss") >= 1
        assert value(s, "oncelog_diskless_object_requests_total", request="PUT") == 0  # a new process
