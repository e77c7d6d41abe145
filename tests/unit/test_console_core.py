"""The web console's pure parts (issue 19 section 3): the state document from a snapshot, the
abort request's parsing, the hanging check's cache and the abort's error mapping (with a fake
TransactionsAdmin), and the snapshot reuse of ``StateSource``."""

from __future__ import annotations

import asyncio
import threading

import pytest

from oncelog.admin.transactions import Hanging, NotHanging, Producer
from oncelog.broker.observability.observe import BrokerState, GroupRow, PartitionRow, SharePartitionRow, TxnRow
from oncelog.console import snapshot
from oncelog.console.server import StateSource, host_allowed, origin_allowed, parse_abort, static_files
from oncelog.console.transactions import AbortRefused, TxnLink
from oncelog.coordinator.group.consumer_protocol import encode_assignment
from oncelog.protocol.errors import ErrorCode, error_for
from oncelog.types import TopicPartition

NOW = 1_000_000


def raw() -> BrokerState:
    r = BrokerState(now_ms=NOW, node_id=1, cluster_id="c")
    r.brokers = [(1, "127.0.0.1", 9092, None)]
    r.listeners = [("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)]
    # (topic, partition, log start, log end, LSO, size, segments, producers, open transactions)
    r.partitions = [PartitionRow("orders", 0, 0, 5, 5, 100, 1, 0, 0), PartitionRow("orders", 1, 2, 7, 3, 50, 1, 1, 1),
                    PartitionRow("__consumer_offsets", 0, 0, 1, 1, 10, 1, 0, 0)]
    r.groups = [GroupRow("billing", "Stable", "consumer", "range", 3,
                         (("m-1", None, "cli", "/127.0.0.1", encode_assignment({"orders": [0, 1]})),))]
    r.committed = [("billing", "orders", 0, 2), ("billing", "orders", 1, 7), ("billing", "elsewhere", 0, 9)]
    r.txns = [TxnRow("done", "CompleteCommit", 7, 0, 60_000, -1, frozenset()),
              TxnRow("live", "Ongoing", 8, 1, 60_000, NOW - 5_000, frozenset({TopicPartition("orders", 1)})),
              TxnRow("old", "Ongoing", 9, 0, 1_000, NOW - 5_000, frozenset({TopicPartition("orders", 1)}))]
    return r


def test_state_partitions_topics_and_lag() -> None:
    doc = snapshot.state(raw(), {"items": []}, NOW)
    p1 = next(p for p in doc["partitions"] if p["topic"] == "orders" and p["partition"] == 1)
    assert (p1["log_start"], p1["lso"], p1["log_end"], p1["lso_lag"], p1["records"]) == (2, 3, 7, 4, 5)
    orders = next(t for t in doc["topics"] if t["name"] == "orders")
    assert orders == {"name": "orders", "internal": False, "partitions": 2, "records": 10, "size_bytes": 150,
                      "lso_lag": 4, "open_transactions": 1,
                      "groups": [{"group_id": "billing", "lag": 3}]}  # who reads the topic, how far behind
    assert doc["topics"][-1]["internal"]  # internal topics last
    (g,) = doc["groups"]
    assert g["members"][0]["assignment"] == ["orders-0", "orders-1"]
    lags = {(o["topic"], o["partition"]): (o["lag"], o["member"]) for o in g["offsets"]}
    assert lags == {("orders", 0): (3, "m-1"), ("orders", 1): (0, "m-1"), ("elsewhere", 0): (None, None)}
    assert g["lag"] == 3  # a partition this broker does not hold has no lag, not a guess


def test_state_consumer_and_share_groups() -> None:
    """A consumer group (KIP-848) owns partitions through the coordinator's assignment; a share
    group (KIP-932) shows its share partitions, owned by no one member, and their lag."""
    r = raw()
    tps = (TopicPartition("orders", 0), TopicPartition("orders", 1))
    r.groups = [GroupRow("kip848", "Reconciling", "consumer", "", 7, (("c-1", "i-1", "cli", "/h", b""),), "consumer",
                         (tps,)),
                GroupRow("queue", "Stable", "share", "", 2, (("s-1", None, "cli", "/h", b""),
                                                              ("s-2", None, "cli", "/h", b"")), "share", (tps, tps))]
    r.committed = [("kip848", "orders", 1, 5)]
    r.share_partitions = [SharePartitionRow("queue", "orders", 1, 4, 6, 2, 1, 10, 3),
                          SharePartitionRow("queue", "orders", 0, -1, -1, 0, 0, 0, 0)]
    doc = snapshot.state(r, {"items": []}, NOW)
    groups = {g["group_id"]: g for g in doc["groups"]}
    c, q = groups["kip848"], groups["queue"]
    assert (c["type"], c["state"], c["generation"], c["members"][0]["instance_id"]) == ("consumer", "Reconciling", 7, "i-1")
    assert c["offsets"] == [{"topic": "orders", "partition": 1, "committed": 5, "log_end": 7, "lag": 2, "member": "c-1"}]
    assert (q["type"], q["protocol_type"], q["generation"], len(q["members"])) == ("share", "share", 2, 2)
    assert [m["assignment"] for m in q["members"]] == [["orders-0", "orders-1"]] * 2
    assert q["share_partitions"] == [
        {"topic": "orders", "partition": 0, "start_offset": -1, "end_offset": -1, "in_flight": 0, "acquired": 0,
         "acknowledged": 0, "archived": 0, "log_end": 5, "lag": None},
        {"topic": "orders", "partition": 1, "start_offset": 4, "end_offset": 6, "in_flight": 2, "acquired": 1,
         "acknowledged": 10, "archived": 3, "log_end": 7, "lag": 3}]
    assert q["lag"] == 3 and q["offsets"] == []


def test_state_transactions_age_timeout_and_hanging_marks() -> None:
    hanging = {"checked_ms": NOW, "error": None, "items": [{"transactional_id": "live", "topic": "orders"}]}
    doc = snapshot.state(raw(), hanging, NOW)
    by_id = {t["transactional_id"]: t for t in doc["transactions"]}
    assert by_id["live"]["hanging"] and by_id["live"]["age_ms"] == 5_000 and not by_id["live"]["over_timeout"]
    assert by_id["old"]["over_timeout"] and not by_id["old"]["hanging"]
    assert by_id["done"]["age_ms"] is None and not by_id["done"]["open"]
    assert [t["transactional_id"] for t in doc["transactions"]] == ["live", "old", "done"]  # hanging first
    assert doc["hanging"]["items"] == hanging["items"]


@pytest.mark.parametrize("body,why", [
    (b"", "not JSON"), (b"\xff\xfe", "not JSON"), (b"[1]", "JSON object"), (b'{"topic": 1}', "topic"),
    (b'{"topic": "t", "partition": -1, "start_offset": 0}', "partition"),
    (b'{"topic": "t", "partition": true, "start_offset": 0}', "partition"),
    (b'{"topic": "t", "partition": 0, "start_offset": "1"}', "start_offset"),
    (b'{"topic": "' + b"x" * 300 + b'", "partition": 0, "start_offset": 1}', "topic"),
])
def test_parse_abort_refuses(body: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_abort(body)


def test_parse_abort() -> None:
    assert parse_abort(b'{"topic": "t", "partition": 2, "start_offset": 17}') == ("t", 2, 17)


class FakeAdmin:
    """Stands for TransactionsAdmin: counts calls, answers what the test says."""

    calls: list[str] = []
    hanging: list[Hanging] = []
    abort_error: Exception | None = None

    def __init__(self, bootstrap: str, **kw: object) -> None:
        self.bootstrap = bootstrap

    def __enter__(self) -> "FakeAdmin":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def find_hanging(self, now_ms: int, *, max_timeout_ms: int) -> tuple[list[Hanging], dict[str, str]]:
        FakeAdmin.calls.append("find_hanging")
        return list(FakeAdmin.hanging), {}

    def abort_at(self, topic: str, partition: int, start_offset: int, *, now_ms: int, max_timeout_ms: int,
                 force: bool = False) -> Producer:
        assert not force, "the console never forces an abort"
        FakeAdmin.calls.append(f"abort_at {topic}-{partition}@{start_offset}")
        if FakeAdmin.abort_error is not None:
            raise FakeAdmin.abort_error
        return Producer(topic, partition, 42, 3, 0, 0, -1, start_offset)


@pytest.fixture
def fake() -> type[FakeAdmin]:
    FakeAdmin.calls, FakeAdmin.hanging, FakeAdmin.abort_error = [], [], None
    return FakeAdmin


def test_hanging_is_cached_and_an_abort_clears_it(fake: type[FakeAdmin]) -> None:
    p = Producer("t", 0, 42, 3, 0, 0, -1, 5)
    fake.hanging = [Hanging(p, "no coordinator", None, ("--topic", "t"))]
    link = TxnLink(lambda: "h:1", admin=fake, now_ms=lambda: NOW, ttl_s=3600)
    first = link.hanging()
    assert first["items"][0]["current_txn_start_offset"] == 5 and first["checked_ms"] == NOW
    link.hanging()
    assert fake.calls == ["find_hanging"]  # the second answer is the cached one
    assert link.abort("t", 0, 5) == {"aborted": True, "topic": "t", "partition": 0, "start_offset": 5,
                                     "producer_id": 42, "producer_epoch": 3, "coordinator_epoch": 0}
    link.hanging()
    assert fake.calls == ["find_hanging", "abort_at t-0@5", "find_hanging"]


def test_abort_errors_map_to_http_statuses(fake: type[FakeAdmin]) -> None:
    link = TxnLink(lambda: "h:1", admin=fake)
    for exc, status in ((LookupError("no open transaction"), 404),
                        (error_for(ErrorCode.cluster_authorization_failed, "denied"), 403),
                        (error_for(ErrorCode.not_leader_or_follower, "moved"), 409),
                        (ConnectionRefusedError("refused"), 503),
                        (NotHanging("its coordinator knows it", Producer("t", 0, 1, 0, 0, 0, 0, 1), "tid", 60_000), 409)):
        fake.abort_error = exc
        with pytest.raises(AbortRefused) as caught:
            link.abort("t", 0, 1)
        assert caught.value.status == status


def test_abort_disabled_sends_nothing(fake: type[FakeAdmin]) -> None:
    link = TxnLink(lambda: "h:1", admin=fake, abort_disabled="ACLs are on")
    with pytest.raises(AbortRefused) as caught:
        link.abort("t", 0, 1)
    assert caught.value.status == 403 and fake.calls == []


def test_hanging_check_failure_is_an_error_not_an_exception(fake: type[FakeAdmin]) -> None:
    def refuse(*a: object, **kw: object) -> None:
        raise ConnectionRefusedError("nobody there")

    doc = TxnLink(lambda: "h:1", admin=refuse, now_ms=lambda: NOW).hanging()
    assert doc["items"] == [] and "nobody there" in doc["error"]


def test_state_source_reuses_a_recent_snapshot() -> None:
    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        now = [0.0]
        on_loop: list[bool] = []

        async def take() -> BrokerState:
            on_loop.append(threading.current_thread() is t)
            return raw()

        src = StateSource(loop, take, min_interval_s=1.0, clock=lambda: now[0])
        src.raw()
        now[0] = 0.5
        src.raw()
        assert src.snapshots == 1
        now[0] = 1.5
        src.raw()
        assert src.snapshots == 2 and on_loop == [True, True]  # taken on the loop's thread only
        src.invalidate()  # after an abort: the next answer is a fresh snapshot
        src.raw()
        assert src.snapshots == 3
        slow = raw()
        slow.loop_s = 0.040  # a big broker: reused for 50 x 40 ms = 2 s, not 1 s
        assert src.interval_s(slow) == 2.0
    finally:
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)
        loop.close()


def test_static_files_ship_in_the_package() -> None:
    files = static_files()
    ours = {"console.js", "dom.js", "views.js", "messages.js", "timeline.js", "charts.js", "login.js"}
    assert set(files) == {"/", "/static/console.css", "/static/vendor/uPlot.iife.min.js",
                          "/static/vendor/uPlot.min.css", *(f"/static/{n}" for n in ours)}
    page = files["/"][0].decode()
    assert "/static/console.js" in page and "http" not in page.replace("http-equiv", "")  # nothing from elsewhere
    for name in ours:  # values go in as text only; nothing is fetched from elsewhere
        code = files[f"/static/{name}"][0].decode()
        assert "innerHTML" not in code and "insertAdjacentHTML" not in code and "eval(" not in code, name
        assert "http://" not in code.replace("http://www.w3.org/2000/svg", "") and "https://" not in code, name


def test_vendored_uplot_is_the_pinned_version() -> None:
    """uPlot ships with the package (static/vendor/README.md): the pinned version, its license beside it."""
    import hashlib
    from importlib import resources

    vendor = resources.files("oncelog.console") / "static" / "vendor"
    js = vendor.joinpath("uPlot.iife.min.js").read_bytes()
    assert js.startswith(b"/*! https://github.com/leeoniya/uPlot (v1.6.32) */")
    assert hashlib.sha256(js).hexdigest() == "19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f"
    assert "MIT License" in vendor.joinpath("uPlot.LICENSE").read_text()
    assert "uplot@1.6.32" in vendor.joinpath("README.md").read_text()


def test_console_is_off_by_default_and_not_even_imported(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    from oncelog.broker.configuration.config import BrokerConfig
    from oncelog.protocol.errors import InvalidConfig

    assert BrokerConfig().console_listen is None and BrokerConfig().console_client_config is None
    with pytest.raises(InvalidConfig, match="console.listen"):
        BrokerConfig().with_overrides({"console.listen": "no-port"})
    code = ("import sys; from oncelog.broker.broker import Broker; from oncelog.broker.configuration.config import BrokerConfig; "
            f"b = Broker(BrokerConfig(data_dir={str(tmp_path)!r})); "
            "assert b.console is None and 'oncelog.console' not in sys.modules, sorted(sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_a_missing_chromium_fails_the_browser_test_never_skips_it(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import browser

    monkeypatch.setenv("ONCELOG_CHROMIUM", "/nonexistent/chromium")
    with pytest.raises(pytest.fail.Exception, match="no Chromium found"):
        browser.chromium_path()


@pytest.mark.parametrize("host,ok", [
    ("127.0.0.1:8080", True), ("localhost:8080", True), ("LOCALHOST:8080", True), ("[::1]:8080", True),
    ("10.1.2.3:8080", True), ("console.example:8080", True),  # the host of console.listen
    ("127.0.0.1:8081", False), ("127.0.0.1", False), ("evil.example:8080", False),  # a rebinding attacker's name
    ("localhost.evil.example:8080", False), ("", False), (None, False), ("[::1:8080", False), (":8080", False),
    ("127.0.0.1:80x", False),
])
def test_host_header_must_name_this_console(host: str | None, ok: bool) -> None:
    assert host_allowed(host, "console.example", 8080) is ok


def test_origin_must_be_the_console_itself() -> None:
    assert origin_allowed(None, None, "127.0.0.1:8080")  # curl, the CLI: no Origin
    assert origin_allowed("http://127.0.0.1:8080", "same-origin", "127.0.0.1:8080")
    assert not origin_allowed("http://evil.example", None, "127.0.0.1:8080")
    assert not origin_allowed("null", None, "127.0.0.1:8080")
    assert not origin_allowed("https://127.0.0.1:8080", None, "127.0.0.1:8080")
    assert not origin_allowed(None, "cross-site", "127.0.0.1:8080")
    assert not origin_allowed(None, "same-site", "127.0.0.1:8080")
