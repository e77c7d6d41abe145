"""The schema registry in cluster mode: two brokers on one real PostgreSQL, both serving the
registry (docs/SCHEMA-REGISTRY.md "Cluster mode").

Both take registrations at the same time and every schema gets its own id (the registries'
one transactional id fences them: no two commit records planned from the same state). Then the
broker leading ``_schemas`` is SIGKILLed: the other one still serves every id with the same
schema, gives new ids above all of them, and a topic with validation on still takes the
registered ids (and refuses others) through the surviving broker.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

import kafka_clients as kc
from oncelog.process import BrokerProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SMALL = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
         "offsets.topic.num.partitions": "2", "transaction.state.log.num.partitions": "2",
         "group.initial.rebalance.delay.ms": "0"}


def _schema(i: int) -> str:
    return json.dumps({"type": "record", "name": f"R{i}", "fields": [{"name": "f", "type": "int"}]})


def _leader(bootstrap: str, topic: str) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return md.topics[topic].partitions[0].leader


def test_two_brokers_give_unique_ids_and_keep_them_across_a_failover(pg_dsn: str, tmp_path: Path) -> None:
    urls = {}
    procs = []
    for n in (1, 2):
        address = f"127.0.0.1:{free_port()}"
        urls[n] = f"http://{address}"
        procs.append(BrokerProcess(tmp_path / f"b{n}", node_id=n, store=pg_dsn,
                                   overrides={**SMALL, "schema.registry.listen": address}))
    try:
        for b in procs:
            b.start(timeout=60)
        bootstrap = ",".join(b.bootstrap for b in procs)
        clients = {n: SchemaRegistryClient({"url": u}) for n, u in urls.items()}
        ids: dict[str, int] = {}
        failures: list[BaseException] = []

        def register(n: int, start: int) -> None:
            try:
                for i in range(start, start + 4):
                    ids[f"s{i}"] = clients[n].register_schema(f"s{i}-value", Schema(_schema(i), "AVRO"))
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        threads = [threading.Thread(target=register, args=(1, 0)), threading.Thread(target=register, args=(2, 100))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not failures, failures
        assert len(ids) == 8 and len(set(ids.values())) == 8, ids  # one id per schema, cluster-wide
        for n in (1, 2):  # both registries say the same
            for subject, sid in ids.items():
                assert json.loads(clients[n].get_schema(sid).schema_str)["name"] == f"R{subject[1:]}"

        kc.create_topic("confluent", bootstrap, "checked", 1, {"confluent.value.schema.validation": "true"})
        leader = _leader(bootstrap, "_schemas")
        victim = next(b for b in procs if b.node_id == leader)
        survivor = next(b for b in procs if b.node_id != leader)
        victim.kill()
        sr = clients[survivor.node_id]
        deadline = time.monotonic() + 90
        while True:  # the survivor takes _schemas (and the transactions' coordinators) over
            try:
                new = sr.register_schema("after-value", Schema(_schema(999), "AVRO"))
                break
            except Exception as exc:  # noqa: BLE001 - retried until the failover is done
                assert time.monotonic() < deadline, f"no registration after the failover: {exc}"
                time.sleep(1)
        assert new > max(ids.values())
        for subject, sid in ids.items():
            assert sr.get_latest_version(f"{subject}-value").schema_id == sid
        registered = sr.register_schema("checked-value", Schema(_schema(7), "AVRO"))
        p = Producer({"bootstrap.servers": survivor.bootstrap, "retries": 0, "message.timeout.ms": 30000})
        outcome: dict[str, object] = {}
        for name, value in (("ok", b"\x00" + registered.to_bytes(4, "big") + b"\x02"),
                            ("unknown", b"\x00\x00\x00\x27\x0f\x02")):
            p.produce("checked", value, on_delivery=lambda err, msg, n=name: outcome.__setitem__(n, err))
            p.flush(60)
        assert outcome["ok"] is None
        assert outcome["unknown"] is not None and outcome["unknown"].code() == KafkaError.INVALID_RECORD
    finally:
        for b in procs:
            try:
                b.stop(timeout=30)
            except Exception:  # noqa: BLE001 - the killed one
                b.kill()
