"""The web console of a cluster member (issue 19 section 3), two brokers on one real PostgreSQL.

The console of broker 1 shows what broker 1 knows: both live brokers (its cluster view), the
partitions it leads (not broker 2's), its mode; the hanging check asks the whole cluster through
broker 1's listener (the code of ``oncelog transactions find-hanging``) and finds nothing with
no error.

With an object store too (SeaweedFS): who leads every partition of every topic (as the Kafka
metadata says), which topics are diskless, the object store's counters, and the message browser
reading through both cluster engines (PostgreSQL rows and diskless objects) with each record's
fate (R15), a partition led by the other broker answered NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

import kafka_clients as kc
import seaweedfs
from browser import artifacts_dir, chromium, shoot  # noqa: F401 - the fixture
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


def _get(address: str, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=20) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def _transactions(bootstrap: str, topic: str, partition: int, tid: str):  # type: ignore[no-untyped-def]
    """On ``topic-partition``: a committed transaction (2 records + COMMIT), an aborted one (1 +
    ABORT), then an open one (1 record). Returns the open one's producer."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"c0", partition=partition)
    p.produce(topic, b"c1", partition=partition)
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"a3", partition=partition)
    assert p.flush(30) == 0
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"o5", partition=partition)
    assert p.flush(30) == 0
    return p


FATES = [(0, "committed"), (1, "committed"), (2, "COMMIT"), (3, "aborted"), (4, "ABORT"), (5, "open")]


def test_console_shows_leaders_diskless_counters_and_browses_both_cluster_engines(pg_dsn: str, tmp_path: Path,
                                                                                   chromium) -> None:  # noqa: F811
    try:
        server = seaweedfs.SeaweedServer(tmp_path / "s3")
    except seaweedfs.SeaweedMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    server.start()
    address = f"127.0.0.1:{free_port()}"
    store = {"diskless.storage.url": f"s3://{server.bucket}/console", "diskless.storage.endpoint": server.endpoint,
             "diskless.commit.interval.ms": "100"}
    procs = [BrokerProcess(tmp_path / "b1", node_id=1, store=pg_dsn, env=server.env(),
                           overrides={**SMALL, **store, "console.listen": address}),
             BrokerProcess(tmp_path / "b2", node_id=2, store=pg_dsn, env=server.env(), overrides={**SMALL, **store})]
    held = []
    try:
        for b in procs:
            b.start(timeout=60)
        bootstrap = ",".join(b.bootstrap for b in procs)
        kc.create_topic("confluent", bootstrap, "rows", 2)
        kc.create_topic("confluent", bootstrap, "objects", 2, {"diskless.enable": "true"})
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        deadline = time.monotonic() + 45
        while True:  # leadership settles as the brokers poll the store
            doc = _get(address, "/api/state")[1]
            md = admin.list_topics(timeout=10)
            want = sorted((t, p.id, p.leader) for t in ("rows", "objects") for p in md.topics[t].partitions.values())
            shown = sorted((x["topic"], x["partition"], x["leader"]) for x in doc["leaders"] if not x["internal"])
            if shown == want and all(n in (1, 2) for _t, _p, n in want) and len(doc["brokers"]) == 2:
                break
            assert time.monotonic() < deadline, f"leaders on the console {shown}, in the metadata {want}"
            time.sleep(0.5)
        assert {x["topic"]: x["diskless"] for x in doc["leaders"] if not x["internal"]} == {"rows": False,
                                                                                          "objects": True}
        assert {x["topic"] for x in doc["leaders"] if x["internal"]} >= {"__consumer_offsets", "__transaction_state"}
        mine = {t: [p for tt, p, n in want if tt == t and n == 1] for t in ("rows", "objects")}
        other = [(t, p) for t, p, n in want if n == 2]
        for topic in ("rows", "objects"):
            assert mine[topic], f"broker 1 leads no partition of {topic}: {want}"  # the placement deals both
            held.append(_transactions(bootstrap, topic, mine[topic][0], f"console-{topic}"))

        # the message browser through each engine: PostgreSQL rows, diskless objects
        for topic in ("rows", "objects"):
            path = f"/api/messages?topic={topic}&partition={mine[topic][0]}&isolation=everything&from=beginning"
            status, page = _get(address, path)
            assert status == 200, page
            assert [(r["offset"], r.get("marker") or r["fate"]) for r in page["rows"]] == FATES, topic
            assert page["rows"][5]["transactional_id"] == f"console-{topic}" and page["lso"] == 5
            status, page = _get(address, path.replace("everything", "read_committed"))
            assert [r["offset"] for r in page["rows"]] == [0, 1], topic
            status, tl = _get(address, f"/api/timeline?topic={topic}&partition={mine[topic][0]}")
            assert [(r["fate"], r["first"]) for r in tl["ranges"]] == [("committed", 0), ("aborted", 3), ("open", 5)]
        if other:
            status, err = _get(address, f"/api/messages?topic={other[0][0]}&partition={other[0][1]}")
            assert status == 409 and "NOT_LEADER_OR_FOLLOWER" in err["error"]

        # the object store's counters: the produce above uploaded objects and committed batches
        deadline = time.monotonic() + 10  # a state document is reused for a second
        while True:
            c = _get(address, "/api/state")[1]["diskless"]
            if c is not None and c["objects"] >= 1 and c["batches"] >= 1 and c.get("requests_PUT", 0) >= 1:
                break
            assert time.monotonic() < deadline, c
            time.sleep(0.5)

        # the same on the page: who leads what, the diskless topic marked, the counters
        page = chromium.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"http://{address}/#brokers")
        page.wait_for_selector("#leaders tr[data-key='objects-0']")
        for t, p, n in want:
            row = [c.strip() for c in page.locator(f"#leaders tr[data-key='{t}-{p}'] td").all_inner_texts()]
            assert row[:3] == [t, str(p), str(n)] and row[4] == ("diskless" if t == "objects" else "–"), row
        objects = [c.strip() for c in page.locator("#diskless tr[data-key='objects'] td").all_inner_texts()]
        assert objects[0] == "objects" and int(objects[1].replace(",", "")) >= 1
        assert page.locator("#brokers tr[data-key='1'] td").nth(4).inner_text().strip() == str(
            sum(1 for x in doc["leaders"] if x["leader"] == 1))
        shoot(page, artifacts_dir("console-cluster"), "cluster-brokers", docs=True)
        page.close()
    finally:
        for p in held:
            p.abort_transaction(30)
        for b in procs:
            assert b.stop(timeout=30) == 0, b.log_tail()
        server.close()
