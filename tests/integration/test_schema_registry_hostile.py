"""The schema registry's HTTP endpoint against hostile clients, and its security
(docs/SCHEMA-REGISTRY.md "Security" and "Limits").

Hostile: a body that says it is huge (413 before reading), a body just over the limit, no
Content-Length, chunked bodies, a JSON body nested 100,000 deep, a schema nested too deeply, a
reference to itself / to nothing, garbage instead of HTTP, more connections than the limit
(closed at once), a client trickling a byte at a time (dropped at the request deadline). After
all of it the registry and the broker's Kafka listener still answer, and the broker stops
cleanly.

Security: HTTPS with the broker's keystore; with an authorizer, HTTP Basic with the broker's SCRAM users; subjects authorized by
their topic's ACLs (Confluent's Topic ACL Authorizer mapping); the registry's own Kafka client
logs in with ``schema.registry.client.config``.
"""

from __future__ import annotations

import base64
import functools
import json
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from oncelog.process import BrokerProcess, free_port
from oncelog_tools.tls_certs import make_pki
from oncelog.schema_registry.http import MAX_BODY, MAX_CONNECTIONS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TEST_OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}


def _stop_cleanly(b: BrokerProcess) -> None:
    """SIGTERM, and the broker must exit 0 (killed when it does not stop)."""
    try:
        code = b.stop()
    except Exception:
        b.kill()
        raise
    assert code == 0, f"broker exited with {code}; log:\n{b.log_tail()}"

DEADLINE_MS = 2000


def call(url: str, method: str, path: str, body: Any = None, auth: tuple[str, str] | None = None,
         context: ssl.SSLContext | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30, context=context) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, json.loads(raw) if raw else None


def raw_exchange(host: str, port: int, data: bytes, *, read: bool = True) -> bytes:
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(data)
        if not read:
            return b""
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            out += chunk
        return out


def test_hostile_requests_get_their_error_and_never_hurt_the_broker(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    host, port = address.split(":")[0], int(address.split(":")[1])
    b = BrokerProcess(tmp_path / "broker", overrides={**TEST_OVERRIDES, "schema.registry.listen": address,
                                                      "schema.registry.request.timeout.ms": str(DEADLINE_MS)}).start()
    url = f"http://{address}"
    try:
        assert call(url, "GET", "/subjects") == (200, [])
        # a body that says 1 GB is coming: refused before anything is read, the connection closed
        t = time.monotonic()
        answer = raw_exchange(host, port, b"POST /subjects/s/versions HTTP/1.1\r\nHost: x\r\n"
                                          b"Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 413") and time.monotonic() - t < 5
        over = json.dumps({"schema": "x" * MAX_BODY}).encode()
        answer = raw_exchange(host, port, b"POST /subjects/s/versions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                              + str(len(over)).encode() + b"\r\n\r\n" + over[:1000])
        assert answer.startswith(b"HTTP/1.1 413")
        assert raw_exchange(host, port, b"POST /subjects/s/versions HTTP/1.1\r\nHost: x\r\n\r\n").startswith(
            b"HTTP/1.1 411")
        assert raw_exchange(host, port, b"POST /subjects/s/versions HTTP/1.1\r\nHost: x\r\n"
                                        b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n").startswith(
            b"HTTP/1.1 411")
        assert b"400" in raw_exchange(host, port, b"\x16\x03\x01garbage\r\n\r\n")
        # deep nesting: of the request body, and of the schema inside it
        deep_body = b'{"schema": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        answer = raw_exchange(host, port, b"POST /subjects/s/versions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                              + str(len(deep_body)).encode() + b"\r\nConnection: close\r\n\r\n" + deep_body)
        assert answer.startswith(b"HTTP/1.1 400") and b"nest" in answer
        status, doc = call(url, "POST", "/subjects/s/versions", {"schema": "[" * 5000 + "]" * 5000})
        assert (status, doc["error_code"]) == (422, 42201) and "nested" in doc["message"]
        deep_avro: Any = "int"
        for i in range(200):
            deep_avro = {"type": "record", "name": f"R{i}", "fields": [{"name": "f", "type": deep_avro}]}
        status, doc = call(url, "POST", "/subjects/s/versions", {"schema": json.dumps(deep_avro)})
        assert (status, doc["error_code"]) == (422, 42201)
        # references: to itself before it exists (the only way to try a cycle over the API), to nothing
        status, doc = call(url, "POST", "/subjects/self/versions", {
            "schema": '{"type":"record","name":"S","fields":[{"name":"s","type":"S2"}]}',
            "references": [{"name": "S2", "subject": "self", "version": 1}]})
        assert (status, doc["error_code"]) == (422, 42201)
        status, doc = call(url, "POST", "/subjects/s/versions", {
            "schema": '"string"', "references": [{"name": "x", "subject": "missing", "version": "latest"}]})
        assert (status, doc["error_code"]) == (422, 42201)
        # more connections than the limit: the extra ones are closed at once; one trickles bytes
        idle = [socket.create_connection((host, port), timeout=10) for _ in range(MAX_CONNECTIONS + 8)]
        try:
            closed = 0
            for s in idle[MAX_CONNECTIONS:]:
                s.settimeout(5)
                try:
                    closed += s.recv(1) == b""
                except (ConnectionResetError, TimeoutError):
                    closed += 1
            assert closed == 8
            slow = idle[0]  # a byte every 0.2 s: never a whole request; dropped at the deadline
            t = time.monotonic()
            dropped = False
            for ch in (b"GET /subjects HTTP/1.1\r\nHost: x\r\n" * 10)[:int((DEADLINE_MS / 1000 + 1) / 0.2)]:
                try:
                    slow.sendall(bytes([ch]))
                except (BrokenPipeError, ConnectionResetError):
                    dropped = True
                    break
                time.sleep(0.2)
            if not dropped:
                slow.settimeout(3)
                try:
                    dropped = slow.recv(65536) == b""
                except ConnectionResetError:
                    dropped = True
            assert dropped and time.monotonic() - t < DEADLINE_MS / 1000 + 5
        finally:
            for s in idle:
                s.close()
        deadline = time.monotonic() + 2 * DEADLINE_MS / 1000 + 10
        while True:  # the idle connections' threads end at their deadline: served again
            try:
                if call(url, "GET", "/schemas/types")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the registry did not recover from the idle connections"
            time.sleep(0.3)
        p = Producer({"bootstrap.servers": b.bootstrap})
        p.produce("alive", b"x")
        assert p.flush(30) == 0
    finally:
        _stop_cleanly(b)


PASSWORDS = {"admin": "admin-pw-123", "registry": "registry-pw-1", "alice": "alice-pw-123", "bob": "bob-pw-123"}


def _oncelog(*args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "oncelog", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_https_basic_logins_and_topic_acls_guard_subjects(tmp_path: Path) -> None:
    """The broker has a keystore: the registry serves HTTPS with it (a plain-HTTP request and a
    client that never starts the handshake get nothing and are dropped)."""
    pki = make_pki(tmp_path / "pki")
    tls = ssl.create_default_context(cafile=str(pki.ca))
    data = tmp_path / "broker"
    for user, pw in PASSWORDS.items():
        _oncelog("users", "add", user, "--password", pw, "--mechanism", "SCRAM-SHA-256", "--data-dir", str(data))
    _oncelog("acls", "add", "--data-dir", str(data), "--allow-principal", "User:alice", "--operation", "Read",
             "--operation", "Write", "--topic", "orders")
    plain, sasl, http_port = free_port(), free_port(), free_port()
    client = tmp_path / "registry-client.properties"
    client.write_text(f"bootstrap.servers=127.0.0.1:{sasl}\nsecurity.protocol=SASL_PLAINTEXT\n"
                      f"sasl.mechanism=SCRAM-SHA-256\nsasl.username=registry\nsasl.password={PASSWORDS['registry']}\n")
    b = BrokerProcess(data, port=plain, overrides={
        **TEST_OVERRIDES,
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:registry", "allow.everyone.if.no.acl.found": "false",
        "ssl.keystore.location": str(pki.server), "ssl.truststore.location": str(pki.ca),
        "schema.registry.listen": f"127.0.0.1:{http_port}", "schema.registry.client.config": str(client),
        "schema.registry.request.timeout.ms": str(DEADLINE_MS)}).start()
    url = f"https://127.0.0.1:{http_port}"
    call = functools.partial(globals()["call"], context=tls)
    alice, bob, admin = ("alice", PASSWORDS["alice"]), ("bob", PASSWORDS["bob"]), ("admin", PASSWORDS["admin"])
    try:
        status, doc = call(url, "GET", "/subjects")
        assert (status, doc["error_code"]) == (401, 40101)
        assert call(url, "GET", "/subjects", auth=("alice", "wrong"))[0] == 401
        assert call(url, "GET", "/subjects", auth=("nobody", "x"))[0] == 401
        status, doc = call(url, "POST", "/subjects/orders-value/versions", {"schema": '"string"'}, auth=alice)
        assert status == 200, doc
        orders_id = doc["id"]
        status, doc = call(url, "POST", "/subjects/orders-value/versions", {"schema": '"string"'}, auth=bob)
        assert (status, doc["error_code"]) == (403, 40301)
        status, doc = call(url, "POST", "/subjects/secret-value/versions", {"schema": '"long"'}, auth=admin)
        assert status == 200
        secret_id = doc["id"]
        assert call(url, "GET", "/subjects", auth=alice) == (200, ["orders-value"])  # only what she may read
        assert call(url, "GET", "/subjects", auth=admin) == (200, ["orders-value", "secret-value"])
        assert call(url, "GET", f"/schemas/ids/{orders_id}", auth=alice)[0] == 200
        assert call(url, "GET", f"/schemas/ids/{secret_id}", auth=alice)[1]["error_code"] == 40301
        assert call(url, "GET", "/subjects/secret-value/versions", auth=alice)[1]["error_code"] == 40301
        assert call(url, "PUT", "/config", {"compatibility": "NONE"}, auth=alice)[1]["error_code"] == 40301
        assert call(url, "PUT", "/config", {"compatibility": "NONE"}, auth=admin) == (200, {"compatibility": "NONE"})
        assert call(url, "DELETE", "/subjects/orders-value", auth=bob)[1]["error_code"] == 40301
        assert call(url, "DELETE", "/subjects/orders-value", auth=alice) == (200, [1])
        # plain HTTP to the HTTPS port: no answer; a silent client: dropped at the deadline
        assert not raw_exchange("127.0.0.1", http_port, b"GET /subjects HTTP/1.1\r\nHost: x\r\n\r\n").startswith(
            b"HTTP/")
        with socket.create_connection(("127.0.0.1", http_port), timeout=DEADLINE_MS / 1000 + 5) as silent:
            t = time.monotonic()
            assert silent.recv(1) == b"" and time.monotonic() - t < DEADLINE_MS / 1000 + 4
        assert call(url, "GET", "/schemas/types", auth=alice)[0] == 200
    finally:
        _stop_cleanly(b)
