"""The web console in a real browser (issue 19 section 3): headless Chromium (Debian's package,
driven by Playwright; tests/browser.py) on a real broker.

The broker holds: a topic ``orders`` (2 partitions, 10 records); a consumer group ``billing``
with one live member that committed 2 of partition 0's 5 records and all of partition 1's (lag
3); a live open transaction (``live-txn`` on ``payments-0``); and a HANGING transaction on
``hung-0``, made as tests/integration/test_hanging_transaction.py makes it (the broker is
SIGKILLed and its ``__transaction_state`` deleted, so no coordinator knows the producer). The
page must show each view's values, mark the hanging transaction and, after Abort + Confirm,
lose it while ``hung-0``'s LSO moves to the log end and a read_committed consumer reads past
it. Every request the page makes must be to the console itself. Screenshots of each view are
kept (tests/browser.py: ``ONCELOG_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from playwright.sync_api import expect

import kafka_clients as kc
from browser import artifacts_dir, chromium  # noqa: F401 - the fixture
from hanging_txn import make_hanging_transaction
from oncelog.process import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def state(address: str) -> dict:
    with urllib.request.urlopen(f"http://{address}/api/state", timeout=10) as resp:
        return json.load(resp)


def test_console_in_chromium_shows_the_broker_and_aborts_a_hanging_transaction(broker_factory, chromium) -> None:  # noqa: F811
    shots = artifacts_dir("console")
    address = f"127.0.0.1:{free_port()}"
    b = broker_factory(overrides={"console.listen": address})
    make_hanging_transaction(b)

    kc.create_topic("confluent", b.bootstrap, "orders", 2)
    kc.create_topic("confluent", b.bootstrap, "payments", 1)
    kc.produce("confluent", b.bootstrap, "orders", [(i % 2, None, b"o%d" % i) for i in range(10)])
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "billing", "enable.auto.commit": False,
                         "client.id": "billing-worker", "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    deadline = time.monotonic() + 30
    while not consumer.assignment():
        consumer.poll(0.2)
        assert time.monotonic() < deadline, "the consumer got no assignment"
    consumer.commit(offsets=[TopicPartition("orders", 0, 2), TopicPartition("orders", 1, 5)], asynchronous=False)
    live = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "live-txn", "linger.ms": 0})
    live.init_transactions(30)
    live.begin_transaction()
    live.produce("payments", b"pending", partition=0)
    assert live.flush(30) == 0

    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    foreign: list[str] = []

    def only_the_console(route, request) -> None:  # type: ignore[no-untyped-def]
        if request.url.startswith(f"http://{address}/"):
            route.continue_()
        else:
            foreign.append(request.url)
            route.abort()

    context.route("**/*", only_the_console)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    def cells(selector: str, key: str) -> list[str]:
        return [c.strip() for c in page.locator(f"{selector} tr[data-key='{key}'] td").all_inner_texts()]

    # -- brokers
    page.goto(f"http://{address}/#brokers")
    page.wait_for_selector("body[data-loaded='1']")
    assert cells("#brokers", "1")[:3] == ["1", "127.0.0.1", str(b.port)]
    assert "embedded" in page.inner_text("#cluster")
    page.screenshot(path=str(shots / "1-brokers.png"), full_page=True)

    # -- topics and partitions: log start, LSO, log end
    page.click("nav a[data-view='topics']")
    page.wait_for_selector("#partitions tr[data-key='hung-0']")
    assert cells("#partitions", "hung-0") == ["hung", "0", "0", "1", "3", "2", page.locator(
        "#partitions tr[data-key='hung-0'] td").nth(6).inner_text().strip(), "1"]
    assert cells("#partitions", "orders-1")[2:5] == ["0", "5", "5"]
    assert cells("#partitions", "payments-0")[2:6] == ["0", "0", "1", "1"]  # held back by live-txn
    assert cells("#topics", "orders")[:3] == ["orders", "2", "10"]
    assert cells("#topics", "orders")[6] == "billing (3)"  # the groups reading it, with their lag
    assert page.locator("#topics tr[data-key='__consumer_offsets']").count() == 0  # internal hidden by default
    page.screenshot(path=str(shots / "2-topics.png"), full_page=True)
    page.fill("#filter", "orde")
    assert page.locator("#partitions tbody tr").count() == 2
    page.fill("#filter", "")

    # -- consumer groups: members and lag
    page.click("nav a[data-view='groups']")
    page.wait_for_selector("#groups tr[data-key='billing']")
    row = cells("#groups", "billing")
    assert row[0] == "billing" and row[1] == "Stable" and row[3] == "1" and row[4] == "3"
    detail = page.locator(".group[data-group='billing']")
    assert "billing-worker" in detail.inner_text() and "orders-0, orders-1" in detail.inner_text()
    assert [c.strip() for c in detail.locator("tr[data-key='orders-0'] td").all_inner_texts()][:4] == \
        ["orders-0", "2", "5", "3"]
    page.screenshot(path=str(shots / "3-groups.png"), full_page=True)

    # -- transactions: the live one with its age and partitions, the hanging one marked
    page.click("nav a[data-view='transactions']")
    page.wait_for_selector("#hanging tr[data-key='hung-0@1']")
    hung = cells("#hanging", "hung-0@1")
    assert hung[0] == "hung-0" and hung[1] == "1" and "no transaction coordinator knows producer" in hung[5]
    assert page.inner_text("#hanging-badge") == "1"
    txn = cells("#transactions", "live-txn")
    assert "Ongoing" in txn[1] and "hanging" not in txn[1] and txn[6] == "payments-0" and txn[4].endswith("s")
    page.screenshot(path=str(shots / "4-transactions-hanging.png"), full_page=True)

    # -- abort: the same code as `oncelog transactions abort --start-offset`
    button = page.locator("#hanging tr[data-key='hung-0@1'] button.abort")
    assert button.inner_text() == "Abort"
    button.click()
    page.wait_for_selector("#hanging tr[data-key='hung-0@1'] button.confirm")
    page.screenshot(path=str(shots / "5-abort-confirm.png"), full_page=True)
    page.locator("#hanging tr[data-key='hung-0@1'] button.confirm").click()
    expect(page.locator("#abort-result")).to_have_text(re.compile(r"^aborted the transaction of producer"),
                                                       timeout=15_000)
    page.wait_for_selector("#hanging tr.empty", timeout=15_000)
    assert page.locator("#hanging-badge").is_hidden()
    page.screenshot(path=str(shots / "6-transactions-after-abort.png"), full_page=True)

    doc = state(address)  # the abort dropped the console's cached snapshot: this one is after the marker
    (hp,) = [p for p in doc["partitions"] if p["topic"] == "hung"]
    assert (hp["lso"], hp["log_end"]) == (4, 4)  # the ABORT marker took offset 3; nothing holds the LSO
    page.click("nav a[data-view='topics']")
    expect(page.locator("#partitions tr[data-key='hung-0'] td").nth(3)).to_have_text("4")  # the LSO, on the page
    seen = kc.consume("confluent", b.bootstrap, "hung", [0], expected=2, isolation="read_committed",
                      timeout=30, settle=0.5)
    assert [v for _p, _o, _k, v in seen] == [b"before", b"after"]
    (live_row,) = [t for t in doc["transactions"] if t["transactional_id"] == "live-txn"]
    assert live_row["state"] == "Ongoing"  # the live transaction was not touched

    assert foreign == [], f"the page fetched from elsewhere: {foreign}"
    assert errors == [], f"JavaScript errors: {errors}"
    live.abort_transaction(30)
    consumer.close()
    context.close()
    assert sorted(p.name for p in Path(shots).iterdir()) == [
        "1-brokers.png", "2-topics.png", "3-groups.png", "4-transactions-hanging.png", "5-abort-confirm.png",
        "6-transactions-after-abort.png"]
