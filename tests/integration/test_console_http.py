"""The web console's HTTP endpoint on a real broker, without a browser (issue 19 section 3).

``/api/state`` shows what a topic, a produce and a consumer group's commit did; the page and its
files are served with their security headers; hostile requests (unknown paths, traversal,
huge or missing bodies, bad JSON, no CSRF header, idle and slow connections, more connections
than the limit) get their error and never hurt the broker: Kafka requests are served meanwhile
and the broker stops cleanly (exit 0, checked by the fixture). With ACLs on, the console is no
way around them: abort is disabled without a configured principal, and refused by the broker's
own authorization with one (and let through when that principal may).
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import acl_harness as h
from console_login import add_users, login
from console_login import get as get_in
from console_login import post as post_in
from kafka_clients import create_topic
from oncelog.console.server import MAX_BODY, MAX_CONNECTIONS, REQUEST_TIMEOUT_S
from oncelog.process import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

OPS_PW = "ops-pw-123"


def get(address: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    c = http.client.HTTPConnection(*address.split(":"), timeout=10)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def state(address: str) -> dict:
    with urllib.request.urlopen(f"http://{address}/api/state", timeout=10) as resp:
        return json.load(resp)


def post(address: str, body: bytes, headers: dict[str, str] | None = None, path: str = "/api/transactions/abort"
         ) -> tuple[int, dict]:
    c = http.client.HTTPConnection(*address.split(":"), timeout=20)
    try:
        hdrs = {"Content-Type": "application/json", "X-Oncelog-Console": "abort", **(headers or {})}
        c.request("POST", path, body=body, headers=hdrs)
        r = c.getresponse()
        raw = r.read()
        return r.status, json.loads(raw) if raw else {}
    finally:
        c.close()


def produce_ok(bootstrap: str, topic: str) -> float:
    """Seconds one acks=all produce takes (the broker is alive and serving)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    t = time.monotonic()
    p.produce(topic, b"alive", partition=0)
    assert p.flush(20) == 0
    return time.monotonic() - t


def test_api_state_shows_topics_partitions_and_group_lag(broker_factory) -> None:
    address = f"127.0.0.1:{free_port()}"
    b = broker_factory(overrides={"console.listen": address})
    create_topic("confluent", b.bootstrap, "orders", 2)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(10):
        p.produce("orders", b"v%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "billing", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("orders", 0, 2), TopicPartition("orders", 1, 5)], asynchronous=False)
    c.close()

    doc = state(address)
    parts = {(x["topic"], x["partition"]): x for x in doc["partitions"]}
    assert {k: (v["log_start"], v["lso"], v["log_end"]) for k, v in parts.items() if k[0] == "orders"} == \
        {("orders", 0): (0, 5, 5), ("orders", 1): (0, 5, 5)}
    (orders,) = [t for t in doc["topics"] if t["name"] == "orders"]
    assert orders["partitions"] == 2 and orders["records"] == 10 and orders["size_bytes"] > 0
    (g,) = [g for g in doc["groups"] if g["group_id"] == "billing"]
    assert g["lag"] == 3 and g["members"] == []
    assert doc["brokers"] == [{"node_id": 1, "host": "127.0.0.1", "port": b.port, "rack": None, "this": True}]
    assert doc["hanging"]["items"] == [] and doc["hanging"]["error"] is None
    assert doc["abort"] == {"enabled": True, "why_not": None}

    status, headers, page = get(address, "/")
    assert status == 200 and b"<title>oncelog console</title>" in page
    assert "default-src 'self'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"
    assert get(address, "/static/console.js")[1]["content-type"].startswith("text/javascript")


def test_hostile_requests_get_their_error_and_never_hurt_the_broker(broker_factory) -> None:
    address = f"127.0.0.1:{free_port()}"
    b = broker_factory(overrides={"console.listen": address})
    create_topic("confluent", b.bootstrap, "t", 1)
    host, port = address.split(":")

    for path in ("/nope", "/../../etc/passwd", "/static/../../../../etc/passwd", "/static/", "/api",
                 "/api/state/../state/x", "/%2e%2e/%2e%2e/etc/passwd", "/" + "a" * 10_000):
        assert get(address, path)[0] == 404, path
    assert post(address, b"{}", path="/api/state")[0] == 404
    # the message browser and the timeline: bad queries, unknown partitions, huge query strings
    for path, status in (("/api/messages?topic=t", 400), ("/api/messages?topic=t&partition=0&limit=100000", 400),
                         ("/api/messages?topic=t&partition=0&isolation=dirty", 400),
                         ("/api/messages?topic=nope&partition=0", 404), ("/api/messages?topic=t&partition=7", 404),
                         ("/api/timeline?topic=t&partition=x", 400), ("/api/timeline?topic=nope&partition=0", 404),
                         ("/api/messages?topic=t&partition=0&q=" + "x" * 3000, 414),
                         ("/api/messages?" + "&".join(f"a{i}=1" for i in range(100)), 400),
                         ("/api/messages?topic=t&partition=0&offset=99999999999999999999", 400)):
        assert get(address, path)[0] == status, path
    assert get(address, "/api/messages?topic=t&partition=0&offset=5000")[0] == 200  # past the end: empty
    assert post(address, b"{}", path="/api/login", headers={"X-Oncelog-Console": "login"})[0] == 409  # no authorizer
    # abort: bad bodies, missing header, wrong type, too long, no length, unknown transaction
    assert post(address, b"not json")[0] == 400
    assert post(address, b'{"topic": "t", "partition": "0", "start_offset": 0}')[0] == 400
    assert post(address, b'{"topic": "t", "partition": 0, "start_offset": 0}', {"X-Oncelog-Console": ""})[0] == 403
    assert post(address, b'{"topic": "t", "partition": 0, "start_offset": 0}', {"Content-Type": "text/plain"})[0] == 403
    status, doc = post(address, b'{"topic": "t", "partition": 0, "start_offset": 0}')
    assert status == 404 and "no open transaction starts at offset 0" in doc["error"]
    status, doc = post(address, b'{"topic": "nope", "partition": 0, "start_offset": 0}')
    assert status == 409 and "UNKNOWN_TOPIC_OR_PARTITION" in doc["error"]
    with socket.create_connection((host, int(port)), timeout=10) as s:  # says 1 GB is coming, sends nothing
        s.sendall(b"POST /api/transactions/abort HTTP/1.1\r\nHost: " + address.encode() + b"\r\nContent-Length: 1000000000\r\n"
                  b"Content-Type: application/json\r\nX-Oncelog-Console: abort\r\n\r\n")
        assert s.recv(200).startswith(b"HTTP/1.1 413")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /api/transactions/abort HTTP/1.1\r\nHost: " + address.encode() + b"\r\n\r\n")
        assert s.recv(200).startswith(b"HTTP/1.1 411")
    with socket.create_connection((host, int(port)), timeout=10) as s:  # a real body just over the limit
        body = b"{" + b" " * MAX_BODY + b"}"
        s.sendall(b"POST /api/transactions/abort HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n"
                  % (address.encode(), len(body)) + body)
        assert s.recv(200).startswith(b"HTTP/1.1 413")
    with socket.create_connection((host, int(port)), timeout=10) as s:  # garbage instead of HTTP
        s.sendall(b"\x00\xff" * 5000 + b"\r\n\r\n")
        assert b"400" in s.recv(400)  # http.server's error page (no status line: not HTTP/1.x): not a crash
    with socket.create_connection((host, int(port)), timeout=10) as s:  # too many header lines
        s.sendall(b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n")
        assert s.recv(200).startswith(b"HTTP/1.1 431")

    # idle and slow connections: more than the limit at once, one sending a byte at a time
    idle = [socket.create_connection((host, int(port)), timeout=10) for _ in range(MAX_CONNECTIONS + 8)]
    try:
        slow = idle[0]
        for ch in b"GET /api/st":
            slow.sendall(bytes([ch]))
            time.sleep(0.05)
        assert produce_ok(b.bootstrap, "t") < 5  # Kafka is served while the console's slots are taken
    finally:
        for s in idle:
            s.close()
    deadline = time.monotonic() + 15
    while True:  # the console serves again once those are gone (each is dropped after its timeout at most)
        try:
            if get(address, "/api/state")[0] == 200:
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, "the console did not recover from the idle connections"
        time.sleep(0.2)
    assert produce_ok(b.bootstrap, "t") < 5


def test_a_page_of_another_site_gets_nothing(broker_factory) -> None:
    """DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1 reaches the
    console's port with ``Host: evil.example:PORT``; a page of another origin posts with its
    ``Origin``. Both are refused before anything is read or done (issue 26 row 6)."""
    address = f"127.0.0.1:{free_port()}"
    broker_factory(overrides={"console.listen": address})
    port = address.split(":")[1]
    abort = b'{"topic": "t", "partition": 0, "start_offset": 0}'
    for host in (f"evil.example:{port}", f"localhost.evil.example:{port}", "127.0.0.1:1", "evil.example"):
        assert get(address, "/api/state", {"Host": host})[0] == 403, host
        assert get(address, "/", {"Host": host})[0] == 403, host
        status, doc = post(address, abort, {"Host": host})
        assert status == 403 and "Host" in doc["error"], host
    for headers in ({"Origin": "http://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"},
                    {"Origin": f"http://evil.example:{port}", "Sec-Fetch-Site": "cross-site"}):
        status, doc = post(address, abort, headers)
        assert status == 403 and "cross-origin" in doc["error"], headers
        assert get(address, "/api/state", headers)[0] == 403, headers
    # the console's own page, by IP or localhost: served (the abort then finds no transaction)
    for host in (address, f"localhost:{port}"):
        assert get(address, "/api/state", {"Host": host})[0] == 200
        status, doc = post(address, abort, {"Host": host, "Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"})
        assert status == 409 and "UNKNOWN_TOPIC_OR_PARTITION" in doc["error"], doc


def test_trickling_clients_are_dropped_at_the_request_deadline(broker_factory) -> None:
    """Every slot taken by a client that sends 2 bytes every 2 s, never finishing its request
    (well within any per-read timeout): each is dropped when the WHOLE request's deadline passes,
    and the console serves others again (issue 26 row 7: before, they held every slot for as
    long as they kept trickling)."""
    address = f"127.0.0.1:{free_port()}"
    broker_factory(overrides={"console.listen": address})
    host, port = address.split(":")
    socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(MAX_CONNECTIONS)]
    started = time.monotonic()
    closed_at: dict[int, float] = {}
    head = b"GET /api/state HTTP/1.1\r\nHost: " + address.encode() + b"\r\nX-Slow: "
    try:
        for s in socks:
            s.sendall(head)
            s.setblocking(False)
        limit = started + REQUEST_TIMEOUT_S + 25
        while len(closed_at) < len(socks) and time.monotonic() < limit:
            for i, s in enumerate(socks):
                if i in closed_at:
                    continue
                try:
                    if s.recv(4096) == b"":
                        closed_at[i] = time.monotonic() - started
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    closed_at[i] = time.monotonic() - started
                    continue
                try:
                    s.send(b"ab")
                except OSError:
                    closed_at[i] = time.monotonic() - started
            time.sleep(2)
        assert len(closed_at) == len(socks), f"{len(socks) - len(closed_at)} trickling clients still held slots " \
                                             f"after {time.monotonic() - started:.0f} s"
        assert max(closed_at.values()) < REQUEST_TIMEOUT_S + 15
        assert get(address, "/api/state")[0] == 200
    finally:
        for s in socks:
            s.close()


def test_with_acls_on_the_console_is_no_way_around_them(tmp_path: Path) -> None:
    """The abort as a logged-in super user: still disabled without console.client.config, still
    refused by the broker's own ACLs for that principal."""
    address = f"127.0.0.1:{free_port()}"
    supers = {"super.users": "User:ops"}
    add_users(tmp_path / "broker", {"ops": OPS_PW})
    b = h.start_acl_broker(tmp_path / "broker", {"console.listen": address, **supers})
    try:
        assert get_in(address, "/api/state")[0] == 401  # with an authorizer: nothing without a login
        ops = login(address, "ops", OPS_PW)
        doc = get_in(address, "/api/state", ops)[1]
        assert not doc["abort"]["enabled"] and "authorizer" in doc["abort"]["why_not"]
        status, _, body = post_in(address, "/api/transactions/abort", "abort",
                                  {"topic": "t", "partition": 0, "start_offset": 0}, ops)
        assert status == 403 and "abort is disabled" in body["error"]
    finally:
        assert b.stop() == 0

    props = tmp_path / "console.properties"
    props.write_text("security.protocol=PLAINTEXT\n")  # a principal named: anonymous, with no ACLs
    add_users(tmp_path / "broker2", {"ops": OPS_PW})
    b = h.start_acl_broker(tmp_path / "broker2", {"console.listen": address, "console.client.config": str(props),
                                                  **supers})
    try:
        ops = login(address, "ops", OPS_PW)
        assert get_in(address, "/api/state", ops)[1]["abort"]["enabled"]
        status, _, body = post_in(address, "/api/transactions/abort", "abort",
                                  {"topic": "t", "partition": 0, "start_offset": 0}, ops)
        assert status == 403 and "AUTHORIZATION_FAILED" in body["error"]  # the broker's ACLs said no
    finally:
        assert b.stop() == 0

    # the same console principal made a super user: the broker lets it through to the lookup
    add_users(tmp_path / "broker3", {"ops": OPS_PW})
    b = h.start_acl_broker(tmp_path / "broker3", {"console.listen": address, "console.client.config": str(props),
                                                  "super.users": "User:ANONYMOUS;User:ops"})
    try:
        from kafka_clients import create_topic as create

        create("confluent", b.bootstrap, "t", 1)
        ops = login(address, "ops", OPS_PW)
        status, _, body = post_in(address, "/api/transactions/abort", "abort",
                                  {"topic": "t", "partition": 0, "start_offset": 0}, ops)
        assert status == 404 and "no open transaction starts at offset 0" in body["error"]
        assert get_in(address, "/api/state", ops)[1]["hanging"]["error"] is None  # find-hanging was authorized too
    finally:
        assert b.stop() == 0


@pytest.mark.parametrize("setting,named", [
    (["console.listen=nonsense"], "console.listen"),
    (["console.listen=127.0.0.1:0", "console.client.config=/nonexistent/console.properties"],
     "console.client.config"),
])
def test_a_bad_console_setting_is_a_config_error(tmp_path: Path, setting: list[str], named: str) -> None:
    import subprocess
    import sys

    opts = [x for kv in setting for x in ("-o", kv)]
    out = subprocess.run([sys.executable, "-m", "oncelog", "broker", "--data-dir", str(tmp_path / "d"),
                          "--listen", f"127.0.0.1:{free_port()}", *opts], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and named in out.stdout + out.stderr
    assert "Traceback" not in out.stderr
