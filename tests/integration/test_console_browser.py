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
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from playwright.sync_api import expect

import kafka_clients as kc
from browser import artifacts_dir, chromium, shoot  # noqa: F401 - the fixture
from hanging_txn import make_hanging_transaction
from oncelog.process import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def state(address: str) -> dict:
    with urllib.request.urlopen(f"http://{address}/api/state", timeout=10) as resp:
        return json.load(resp)


def _only_the_console(context, address: str) -> list[str]:  # type: ignore[no-untyped-def]
    foreign: list[str] = []

    def route(route, request) -> None:  # type: ignore[no-untyped-def]
        if request.url.startswith(f"http://{address}/"):
            route.continue_()
        else:
            foreign.append(request.url)
            route.abort()

    context.route("**/*", route)
    return foreign


def _open(chromium, address: str, height: int = 800):  # type: ignore[no-untyped-def]
    """A browser context and page that may reach the console only: (context, page, the URLs it
    tried elsewhere, its JavaScript errors)."""
    context = chromium.new_context(viewport={"width": 1280, "height": height})
    foreign = _only_the_console(context, address)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    return context, page, foreign, errors


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

    context, page, foreign, errors = _open(chromium, address, height=900)

    def cells(selector: str, key: str) -> list[str]:
        return [c.strip() for c in page.locator(f"{selector} tr[data-key='{key}'] td").all_inner_texts()]

    # -- brokers
    page.goto(f"http://{address}/#brokers")
    page.wait_for_selector("body[data-loaded='1']")
    assert cells("#brokers", "1")[:3] == ["1", "127.0.0.1", str(b.port)]
    assert "embedded" in page.inner_text("#cluster")
    shoot(page, shots, "1-brokers")

    # -- topics and partitions: log start, LSO, log end
    page.click("nav a[data-view='topics']")
    page.wait_for_selector("#partitions tr[data-key='hung-0']")
    assert cells("#partitions", "hung-0")[:6] == ["hung", "0", "0", "1", "3", "2"]
    assert cells("#partitions", "hung-0")[7:] == ["1", "messages timeline"]
    assert cells("#partitions", "orders-1")[2:5] == ["0", "5", "5"]
    assert cells("#partitions", "payments-0")[2:6] == ["0", "0", "1", "1"]  # held back by live-txn
    assert cells("#topics", "orders")[:3] == ["orders", "2", "10"]
    assert cells("#topics", "orders")[6] == "billing (3)"  # the groups reading it, with their lag
    assert page.locator("#topics tr[data-key='__consumer_offsets']").count() == 0  # internal hidden by default
    shoot(page, shots, "2-topics", docs=True)
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
    shoot(page, shots, "3-groups")

    # -- transactions: the live one with its age and partitions, the hanging one marked
    page.click("nav a[data-view='transactions']")
    page.wait_for_selector("#hanging tr[data-key='hung-0@1']")
    hung = cells("#hanging", "hung-0@1")
    assert hung[0] == "hung-0" and hung[1] == "1" and "no transaction coordinator knows producer" in hung[5]
    assert page.inner_text("#hanging-badge") == "1"
    txn = cells("#transactions", "live-txn")
    assert "Ongoing" in txn[1] and "hanging" not in txn[1] and txn[6] == "payments-0" and txn[4].endswith("s")
    shoot(page, shots, "4-transactions-hanging", docs=True)

    # -- abort: the same code as `oncelog transactions abort --start-offset`
    button = page.locator("#hanging tr[data-key='hung-0@1'] button.abort")
    assert button.inner_text() == "Abort"
    button.click()
    page.wait_for_selector("#hanging tr[data-key='hung-0@1'] button.confirm")
    shoot(page, shots, "5-abort-confirm")
    page.locator("#hanging tr[data-key='hung-0@1'] button.confirm").click()
    expect(page.locator("#abort-result")).to_have_text(re.compile(r"^aborted the transaction of producer"),
                                                       timeout=15_000)
    page.wait_for_selector("#hanging tr.empty", timeout=15_000)
    assert page.locator("#hanging-badge").is_hidden()
    shoot(page, shots, "6-transactions-after-abort")

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


def _ledger(bootstrap: str) -> tuple[Producer, dict[int, str]]:
    """Topic ``ledger`` (1 partition): plain records, a committed transaction, an aborted one, an
    OPEN one (its producer returned, still open: it holds the LSO), then a committed one above the
    LSO and a plain record. Returns the open transaction's producer and each offset's fate."""
    kc.create_topic("confluent", bootstrap, "ledger", 1)
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    plain.produce("ledger", b'{"order": 1, "items": ["tea", "cake"]}', key=b"order-1", partition=0,
                  headers=[("source", b"shop")])
    plain.produce("ledger", b"\x00\x01\xfe\xff", key=b"blob", partition=0)
    assert plain.flush(30) == 0
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ledger-writer", "linger.ms": 0})
    tx.init_transactions(30)
    tx.begin_transaction()
    tx.produce("ledger", b"paid", key=b"order-1", partition=0)
    tx.produce("ledger", b"shipped", key=b"order-1", partition=0)
    tx.commit_transaction(30)                                      # 2, 3 committed; 4 COMMIT
    tx.begin_transaction()
    tx.produce("ledger", b"refund?", key=b"order-2", partition=0)
    assert tx.flush(30) == 0
    tx.abort_transaction(30)                                       # 5 aborted; 6 ABORT
    held = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ledger-slow", "linger.ms": 0})
    held.init_transactions(30)
    held.begin_transaction()
    held.produce("ledger", b"pending", key=b"order-3", partition=0)
    assert held.flush(30) == 0                                     # 7 open: the LSO
    tx.begin_transaction()
    tx.produce("ledger", b"later", key=b"order-4", partition=0)
    tx.commit_transaction(30)                                      # 8 committed above the LSO; 9 COMMIT
    plain.produce("ledger", b"tail", partition=0)
    assert plain.flush(30) == 0                                    # 10 plain, above the LSO
    fates = {0: "plain", 1: "plain", 2: "committed", 3: "committed", 4: "marker", 5: "aborted", 6: "marker",
             7: "open", 8: "committed", 9: "marker", 10: "plain"}
    return held, fates


def _loaded(page, view: str, state: str = "loaded") -> None:  # type: ignore[no-untyped-def]
    """Wait until the page shows ``view`` (messages, timeline) for the URL it is at now (the page's
    CSP forbids Playwright's polled functions: attribute selectors instead)."""
    hash_ = page.evaluate("location.hash").replace("\\", "\\\\").replace('"', '\\"')
    page.wait_for_selector(f'body[data-{view}="{state}"][data-{view}-for="{hash_}"]', state="attached")


def _rows(page) -> dict[int, str]:  # type: ignore[no-untyped-def]
    """The message browser's rows: offset -> fate (marker rows: "marker")."""
    _loaded(page, "messages")
    return {int(k): f for k, f in page.eval_on_selector_all(
        "#messages-table tbody tr[data-key]", "rows => rows.map(r => [r.dataset.key, r.dataset.fate])")}


def test_message_browser_timeline_and_charts_in_chromium(broker_factory, chromium) -> None:  # noqa: F811
    """R15 on the page: each record's fate in both views, the shareable URL, the timeline's open range
    at the LSO, charts drawn from real traffic."""
    shots = artifacts_dir("console-browse")
    address = f"127.0.0.1:{free_port()}"
    b = broker_factory(overrides={"console.listen": address, "console.history.interval.ms": "1000"})
    held, fates = _ledger(b.bootstrap)
    context, page, foreign, errors = _open(chromium, address)

    # -- everything: every record with its fate, the markers as rows
    page.goto(f"http://{address}/#messages?topic=ledger&partition=0&isolation=everything&from=beginning")
    page.wait_for_selector("body[data-loaded='1']")
    assert _rows(page) == fates
    row = page.locator("#messages-table tr[data-key='7']")
    assert "ledger-slow" in row.inner_text() and "open" in row.inner_text()
    assert "COMMIT marker" in page.locator("#messages-table tr[data-key='4']").inner_text()
    assert "ABORT marker" in page.locator("#messages-table tr[data-key='6']").inner_text()
    assert "above LSO" in page.locator("#messages-table tr[data-key='8']").inner_text()
    value = page.locator("#messages-table tr[data-key='0'] td.value").inner_text()
    assert '"items": [\n' in value  # JSON, pretty-printed
    assert page.locator("#messages-table tr[data-key='1'] td.value").inner_text().startswith("00 01 fe ff")  # hex
    assert "source: shop" in page.locator("#messages-table tr[data-key='0']").inner_text()
    assert "LSO 7" in page.inner_text("#msg-info") and "log end 11" in page.inner_text("#msg-info")
    shoot(page, shots, "messages-everything", docs=True)

    # -- the same offsets as a read_committed consumer sees them: only what it gets
    page.click("#msg-other-view")
    assert _rows(page) == {0: "plain", 1: "plain", 2: "committed", 3: "committed"}
    shared = page.url
    assert "isolation=read_committed" in shared and "topic=ledger" in shared
    shoot(page, shots, "messages-read-committed", docs=True)
    seen = kc.consume("confluent", b.bootstrap, "ledger", [0], expected=4, isolation="read_committed",
                      timeout=30, settle=0.5)
    assert [o for _p, o, _k, _v in seen] == [0, 1, 2, 3]  # what a real read_committed consumer gets

    # -- the shareable URL reopens the same view, in a browser that never saw it
    other = chromium.new_context(viewport={"width": 1280, "height": 800})
    _only_the_console(other, address)
    again = other.new_page()
    again.goto(shared)
    again.wait_for_selector("body[data-loaded='1']")
    assert _rows(again) == {0: "plain", 1: "plain", 2: "committed", 3: "committed"}
    assert again.input_value("#msg-topic") == "ledger" and again.input_value("#msg-isolation") == "read_committed"
    other.close()

    # -- paging: newer and older, each its own URL
    page.goto(f"http://{address}/#messages?topic=ledger&partition=0&isolation=everything&offset=2&limit=3")
    assert list(_rows(page)) == [2, 3, 4]
    page.click("#msg-newer")
    assert list(_rows(page)) == [5, 6, 7] and "offset=5" in page.url
    page.click("#msg-older")
    assert list(_rows(page)) == [2, 3, 4] and "before=5" in page.url
    page.goto(f"http://{address}/#messages?topic=ledger&partition=0&isolation=everything&from=beginning&q=order-1&in=key")
    assert list(_rows(page)) == [0, 2, 3]  # filtered by key

    # -- the timeline: committed, aborted and open ranges; the open one starts at the LSO
    page.goto(f"http://{address}/#timeline?topic=ledger&partition=0")
    _loaded(page, "timeline")
    ranges = page.eval_on_selector_all("#timeline-svg a.range", "as => as.map(a => [a.dataset.fate, "
                                       "Number(a.dataset.first), Number(a.dataset.last)])")
    assert ["committed", 2, 4] in ranges and ["aborted", 5, 6] in ranges and ["committed", 8, 9] in ranges
    assert ["open", 7, 10] in ranges  # from the LSO to the log end
    assert page.get_attribute("#timeline-svg line.mark-lso", "data-offset") == "7"
    assert page.get_attribute("#timeline-svg line.mark-end", "data-offset") == "11"
    assert "open: ledger-slow from 7" in page.inner_text("#tl-info")
    assert page.locator("#timeline-table tr[data-fate='open']").inner_text().split("\t")[4].strip() == "ledger-slow"
    shoot(page, shots, "timeline", docs=True)
    page.click("#timeline-svg a.range-aborted")  # a range links to its records
    assert _rows(page)[5] == "aborted" and "isolation=everything" in page.url

    # -- charts from real traffic: produce, fetch, a group's lag
    kc.produce("confluent", b.bootstrap, "ledger", [(0, None, b"x" * 200)] * 300)
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "auditors", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    consumer.assign([TopicPartition("ledger", 0)])
    got = 0
    deadline = time.monotonic() + 30
    while got < 5 and time.monotonic() < deadline:
        got += consumer.poll(0.5) is not None
    consumer.commit(offsets=[TopicPartition("ledger", 0, 5)], asynchronous=False)
    page.goto(f"http://{address}/#overview")
    for chart in ("#chart-produce", "#chart-fetch", "#chart-lag"):  # sampled every second, drawn every 5
        expect(page.locator(f"{chart} canvas")).to_have_count(1, timeout=20_000)
        expect(page.locator(chart)).to_have_attribute("data-points", re.compile(r"^[1-9]"), timeout=20_000)
    assert "ledger" in page.get_attribute("#chart-produce", "data-series")
    assert page.get_attribute("#chart-lag", "data-series") == "auditors"
    shoot(page, shots, "overview", docs=True)
    page.click("nav a[data-view='groups']")
    expect(page.locator("#chart-group-lag canvas")).to_have_count(1, timeout=10_000)
    shoot(page, shots, "groups", docs=True)
    page.click("nav a[data-view='brokers']")
    shoot(page, shots, "brokers", docs=True)

    assert foreign == [], f"the page fetched from elsewhere: {foreign}"
    assert errors == [], f"JavaScript errors: {errors}"
    consumer.close()
    held.abort_transaction(30)
    context.close()


def test_with_an_authorizer_a_user_sees_only_what_they_may(tmp_path: Path, chromium) -> None:  # noqa: F811
    """A logged-out browser sees nothing; bob (Describe, no Read on ``ledger``) sees none of its
    records and the API answers 403; alice (Read) browses them."""
    from console_login import add_users

    from oncelog.process import BrokerProcess

    shots = artifacts_dir("console-login")
    data = tmp_path / "broker"
    add_users(data, {"alice": "alice-pw-123", "bob": "bob-pw-123"})
    for user, op in (("alice", "Read"), ("bob", "Describe")):
        r = subprocess.run([sys.executable, "-m", "oncelog", "acls", "add", "--data-dir", str(data), "--allow-principal",
                            f"User:{user}", "--operation", op, "--topic", "ledger"], capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr
    address = f"127.0.0.1:{free_port()}"
    b = BrokerProcess(data, overrides={
        "console.listen": address, "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS", "group.initial.rebalance.delay.ms": "0"}).start()
    try:
        held, _fates = _ledger(b.bootstrap)
        context, page, foreign, errors = _open(chromium, address)
        status = "url => fetch(url).then(r => r.status)"

        # -- logged out: a login form, and nothing else
        page.goto(f"http://{address}/#messages?topic=ledger&partition=0&isolation=everything&from=beginning")
        expect(page.locator("#login")).to_be_visible()
        assert page.locator("main").is_hidden() and page.locator("#messages-table tbody tr[data-key]").count() == 0
        assert page.evaluate(status, "/api/state") == 401
        assert page.evaluate(status, "/api/messages?topic=ledger&partition=0") == 401
        assert "ledger" not in page.content().replace("topic=ledger", "")
        shoot(page, shots, "login", docs=True)

        # -- bob may describe the topic but not read it
        page.fill("#login-user", "bob")
        page.fill("#login-password", "bob-pw-123")
        page.click("#login-form button[type=submit]")
        expect(page.locator("#who")).to_have_text("User:bob")
        _loaded(page, "messages", "error")
        assert "User:bob may not read topic ledger" in page.inner_text("#msg-info")
        assert page.locator("#messages-table tbody tr[data-key]").count() == 0
        assert page.evaluate(status, "/api/messages?topic=ledger&partition=0&from=beginning") == 403
        shoot(page, shots, "no-read", docs=True)
        page.click("nav a[data-view='topics']")
        page.wait_for_selector("#partitions tr[data-key='ledger-0']")  # Describe: it sees the topic

        # -- logging out leaves nothing on the page
        with page.expect_navigation():  # the page reloads: nothing of bob's view stays in it
            page.click("#logout")
        expect(page.locator("#login")).to_be_visible()
        assert page.locator("#partitions tbody tr[data-key]").count() == 0
        assert page.evaluate(status, "/api/state") == 401

        # -- alice may read it
        page.fill("#login-user", "alice")
        page.fill("#login-password", "alice-pw-123")
        page.click("#login-form button[type=submit]")
        expect(page.locator("#who")).to_have_text("User:alice")
        page.goto(f"http://{address}/#messages?topic=ledger&partition=0&isolation=everything&from=beginning")
        assert _rows(page)[5] == "aborted"
        assert foreign == [] and errors == [], (foreign, errors)
        held.abort_transaction(30)
        context.close()
    finally:
        assert b.stop() == 0, b.log_tail()
