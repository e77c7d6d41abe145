"""The web console of a cluster member (issue 19 section 3), two brokers on one real PostgreSQL.

The console of broker 1 shows what broker 1 knows: both live brokers (its cluster view), the
partitions it leads (not broker 2's), its mode; the hanging check asks the whole cluster through
broker 1's listener (the code of ``oncelog transactions find-hanging``) and finds nothing with
no error."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

import kafka_clients as kc
from oncelog.process import BrokerProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SMALL = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
         "offsets.topic.num.partitions": "4", "transaction.state.log.num.partitions": "4",
         "group.initial.rebalance.delay.ms": "0"}


def test_console_of_a_cluster_member(pg_dsn: str, tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    procs = [BrokerProcess(tmp_path / "b1", node_id=1, store=pg_dsn, overrides={**SMALL, "console.listen": address}),
             BrokerProcess(tmp_path / "b2", node_id=2, store=pg_dsn, overrides=SMALL)]
    try:
        for b in procs:
            b.start(timeout=60)
        bootstrap = ",".join(b.bootstrap for b in procs)
        kc.create_topic("confluent", bootstrap, "spread", 4)
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        # leadership settles as the brokers poll the store: compare until both agree, and until a
        # hanging check (reused 10 s) ran after it settled (one during a move says NOT_LEADER)
        deadline = time.monotonic() + 45
        while True:
            with urllib.request.urlopen(f"http://{address}/api/state", timeout=10) as resp:
                doc = json.load(resp)
            shown = sorted(p["partition"] for p in doc["partitions"] if p["topic"] == "spread")
            md = admin.list_topics("spread", timeout=10)
            led_by_1 = sorted(p.id for p in md.topics["spread"].partitions.values() if p.leader == 1)
            settled = doc["hanging"]["checked_ms"] is not None and doc["hanging"]["error"] is None
            if len(doc["brokers"]) == 2 and shown and shown == led_by_1 and settled:
                break
            assert time.monotonic() < deadline, \
                f"broker 1's console: brokers {doc['brokers']}, partitions {shown}; it leads {led_by_1}; " \
                f"hanging check: {doc['hanging']}"
            time.sleep(0.5)
        assert doc["broker"]["mode"] == "cluster"
        assert [(x["node_id"], x["this"]) for x in doc["brokers"]] == [(1, True), (2, False)]
        assert doc["hanging"]["error"] is None and doc["hanging"]["items"] == []
    finally:
        for b in procs:
            assert b.stop(timeout=30) == 0, b.log_tail()
