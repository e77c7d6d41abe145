"""Consumer groups (KIP-848) and share groups (KIP-932) in the metrics and the console (issue 30:
"the metrics/console views follow"): a real broker with ``metrics.listen`` and
``console.listen`` set, a confluent-kafka consumer with ``group.protocol=consumer`` and a
ShareConsumer; ``/metrics`` and ``/api/state`` (real HTTP) show each group's type, state, member
count and epoch, and the share partition's acquired / acknowledged / archived counts.

Before: neither endpoint showed a consumer group (only its committed offsets) nor a share group.
"""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer, ShareConsumer

from kafka_clients import create_topic, produce
from oncelog.process import free_port
from test_groups_share import FAST, set_group_configs
from test_metrics import scrape, value

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def api_state(address: str) -> dict:
    with urllib.request.urlopen(f"http://{address}/api/state", timeout=10) as resp:
        return json.load(resp)


def until(check: Any, timeout: float = 20.0) -> Any:
    """``check()`` until it returns something true or the time is up; returns its last answer."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_consumer_and_share_groups_in_metrics_and_console(broker_factory) -> None:  # type: ignore[no-untyped-def]
    metrics, console = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    b = broker_factory("observed", {**FAST, "metrics.listen": metrics, "console.listen": console})
    create_topic("confluent", b.bootstrap, "obs", 2)
    produce("confluent", b.bootstrap, "obs", [(0, None, b"v%d" % i) for i in range(10)])

    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "obs-consumer", "group.protocol": "consumer",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["obs"])
    set_group_configs(b.bootstrap, "obs-share", {"share.auto.offset.reset": "earliest"})
    share = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": "obs-share",
                           "share.acknowledgement.mode": "explicit"})
    share.subscribe(["obs"])
    try:
        deadline = time.monotonic() + 60
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.5)
        assert len(consumer.assignment()) == 2
        # the share consumer: accept offsets 0..3, reject 4 and 5 (archived), hold the rest acquired
        acked = rejected = 0
        held: list[Any] = []
        while acked + rejected + len(held) < 10 and time.monotonic() < deadline:
            for m in share.poll(0.5) or []:
                if m.error() is not None or m.partition() != 0:
                    if m.error() is None:
                        held.append(m)  # partition 1's records: held too
                    continue
                if m.offset() < 4:
                    share.acknowledge(m, AcknowledgeType.ACCEPT)
                    acked += 1
                elif m.offset() < 6:
                    share.acknowledge(m, AcknowledgeType.REJECT)
                    rejected += 1
                else:
                    held.append(m)
        assert (acked, rejected) == (4, 2)
        share.commit_sync(30)

        def share_row(samples: dict) -> bool:
            lv = {"sharegroup": "obs-share", "topic": "obs", "partition": "0"}
            return value(samples, "kafka_sharegroup_acknowledged_records_total", **lv) == 4 and \
                value(samples, "kafka_sharegroup_archived_records_total", **lv) == 2

        def counted() -> dict | None:
            s = scrape(metrics)
            return s if share_row(s) else None

        samples = until(counted)
        assert samples, "the share partition's counters never showed the acknowledgements"
        lv0 = {"sharegroup": "obs-share", "topic": "obs", "partition": "0"}
        held0 = sum(1 for m in held if m.partition() == 0)
        assert value(samples, "kafka_sharegroup_acquired_records", **lv0) == held0
        assert value(samples, "kafka_sharegroup_start_offset", **lv0) == 6
        assert value(samples, "kafka_sharegroup_in_flight_records", **lv0) == held0
        for gid, gtype in (("obs-consumer", "consumer"), ("obs-share", "share")):
            assert value(samples, "kafka_consumergroup_members", consumergroup=gid, type=gtype) == 1
            assert value(samples, "kafka_consumergroup_epoch", consumergroup=gid, type=gtype) >= 1
        assert value(samples, "kafka_consumergroup_state", consumergroup="obs-share", type="share", state="Stable") == 1
        assert value(samples, "kafka_server_group_coordinator_metrics_group_count", protocol="consumer") == 1
        assert value(samples, "kafka_server_group_coordinator_metrics_group_count", protocol="share") == 1

        doc = api_state(console)
        groups = {g["group_id"]: g for g in doc["groups"]}
        cg, sg = groups["obs-consumer"], groups["obs-share"]
        assert (cg["type"], cg["protocol_type"], len(cg["members"])) == ("consumer", "consumer", 1)
        assert cg["generation"] >= 1 and cg["state"] in ("Stable", "Reconciling")
        assert cg["members"][0]["assignment"] == ["obs-0", "obs-1"]
        assert (sg["type"], sg["state"], len(sg["members"])) == ("share", "Stable", 1)
        assert sg["members"][0]["assignment"] == ["obs-0", "obs-1"]
        (sp0,) = [p for p in sg["share_partitions"] if p["partition"] == 0]
        assert (sp0["start_offset"], sp0["acquired"], sp0["acknowledged"], sp0["archived"]) == (6, held0, 4, 2)
        assert sp0["log_end"] == 10 and sp0["lag"] == 4
    finally:
        consumer.close()
        share.close()
