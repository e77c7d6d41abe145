"""The console with an authorizer, over HTTP (docs/CONSOLE.md, "Security"): a login by the
broker's own SCRAM users, and each user sees what their ACLs allow.

``alice`` may read ``orders``; ``bob`` may only describe it; neither may touch ``secret``. The
test's own Kafka clients connect as ``User:ANONYMOUS``, a super user. Nothing is served without a
session; the session cookie is HttpOnly and SameSite=Strict; a POST without the console's header or
from another origin is refused; a user without Read gets 403 from the message browser; a session
ends at logout and when its user's credential is deleted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import kafka_clients as kc
from console_login import add_users, get, login, post, request
from oncelog.process import BrokerProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PASSWORDS = {"alice": "alice-pw-123", "bob": "bob-pw-123"}


def _acl(data: Path, *args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "oncelog", "acls", "add", "--data-dir", str(data), *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def acl_console(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    data = tmp_path_factory.mktemp("console-acl") / "broker"
    add_users(data, PASSWORDS)
    _acl(data, "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders")
    _acl(data, "--allow-principal", "User:bob", "--operation", "Describe", "--topic", "orders")
    address = f"127.0.0.1:{free_port()}"
    b = BrokerProcess(data, overrides={
        "console.listen": address, "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS", "allow.everyone.if.no.acl.found": "false",
        "group.initial.rebalance.delay.ms": "0"}).start()
    try:
        for topic in ("orders", "secret"):
            kc.create_topic("confluent", b.bootstrap, topic, 1)
            kc.produce("confluent", b.bootstrap, topic, [(0, b"k", topic.encode() + b"-%d" % i) for i in range(3)])
        yield b, address
    finally:
        assert b.stop() == 0, b.log_tail()


def test_nothing_is_served_without_a_login(acl_console) -> None:  # type: ignore[no-untyped-def]
    _b, address = acl_console
    assert get(address, "/api/session") == (200, {"login_required": True, "principal": None, "authorizer": True,
                                                  "note": None})
    for path in ("/api/state", "/api/messages?topic=orders&partition=0", "/api/timeline?topic=orders&partition=0",
                 "/api/history"):
        status, doc = get(address, path)
        assert status == 401 and "log in" in doc["error"], path
    assert get(address, "/api/state", cookie="oncelog_console=forged-token")[0] == 401
    assert request(address, "GET", "/")[0] == 200  # the page itself holds no data
    assert post(address, "/api/login", "login", {"username": "alice", "password": "wrong"})[0] == 401
    assert post(address, "/api/login", "login", {"username": "nobody", "password": "x"})[0] == 401
    assert post(address, "/api/login", "login", {"user": "alice"})[0] == 400
    assert post(address, "/api/login", "abort", {"username": "alice", "password": PASSWORDS["alice"]})[0] == 403
    status, _, _ = request(address, "POST", "/api/login", body=b'{"username": "alice", "password": "alice-pw-123"}',
                           headers={"Content-Type": "application/json", "X-Oncelog-Console": "login",
                                    "Origin": "http://evil.example"})
    assert status == 403  # a page of another origin cannot log anyone in


def test_each_user_sees_what_their_acls_allow(acl_console) -> None:  # type: ignore[no-untyped-def]
    _b, address = acl_console
    status, headers, doc = post(address, "/api/login", "login", {"username": "alice", "password": PASSWORDS["alice"]})
    assert status == 200 and doc == {"principal": "User:alice"}
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    alice = cookie.split(";", 1)[0]
    assert get(address, "/api/session", alice)[1]["principal"] == "User:alice"
    status, page = get(address, "/api/messages?topic=orders&partition=0&isolation=everything&from=beginning", alice)
    assert status == 200 and [r["offset"] for r in page["rows"]] == [0, 1, 2]
    status, doc = get(address, "/api/messages?topic=secret&partition=0&from=beginning", alice)
    assert status == 403 and "Read" in doc["error"]
    assert get(address, "/api/timeline?topic=secret&partition=0", alice)[0] == 403
    state = get(address, "/api/state", alice)[1]
    assert [t["name"] for t in state["topics"]] == ["orders"]
    assert {p["topic"] for p in state["partitions"]} == {"orders"}

    bob = login(address, "bob", PASSWORDS["bob"])
    status, doc = get(address, "/api/messages?topic=orders&partition=0&from=beginning", bob)
    assert status == 403 and "User:bob may not read topic orders" in doc["error"]  # Describe is not Read
    assert get(address, "/api/timeline?topic=orders&partition=0", bob)[0] == 200
    assert [t["name"] for t in get(address, "/api/state", bob)[1]["topics"]] == ["orders"]
    status, _, doc = post(address, "/api/transactions/abort", "abort", {"topic": "orders", "partition": 0,
                                                                         "start_offset": 0}, bob)
    assert status == 403 and "ClusterAction" in doc["error"]

    status, headers, _ = post(address, "/api/logout", "logout", {}, alice)
    assert status == 200 and "Max-Age=0" in headers["set-cookie"]
    assert get(address, "/api/state", alice)[0] == 401  # the session is gone, not just the cookie


def test_a_deleted_credential_ends_its_sessions(acl_console) -> None:  # type: ignore[no-untyped-def]
    b, address = acl_console
    from confluent_kafka.admin import AdminClient, UserScramCredentialDeletion, ScramMechanism

    bob = login(address, "bob", PASSWORDS["bob"])
    assert get(address, "/api/state", bob)[0] == 200
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for fut in admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256)]).values():
        fut.result(30)
    assert get(address, "/api/state", bob)[0] == 401
    assert post(address, "/api/login", "login", {"username": "bob", "password": PASSWORDS["bob"]})[0] == 401
