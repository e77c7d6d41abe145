"""Listeners, TLS and SASL (issue 18) with the three real clients, and bad input on the auth path.

One broker (module scope) with four listeners: PLAINTEXT (the ready line's), SASL_SSL, SSL with
``ssl.client.auth=required`` (set through Kafka's per-listener form) and SASL_PLAINTEXT (crafted
requests). Its first user is written with ``oncelog users add --data-dir`` before it starts;
certificates are made by the test (tests/tls_certs.py).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from oncelog.client import ProtocolClient
from oncelog.logs import StormFilter
from oncelog.process import BrokerProcess, free_port
from oncelog.protocol import apis, framing
from oncelog.protocol.errors import ErrorCode
from oncelog_tools.tls_certs import Pki, make_pki

CLIENTS = ("confluent", "kafka-python", "aiokafka")
PASSWORD = "alice-secret-pw"
N = 50


class Env:
    def __init__(self, broker: BrokerProcess, pki: Pki, ports: dict[str, int]) -> None:
        self.broker, self.pki, self.ports = broker, pki, ports

    def addr(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


def _oncelog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "oncelog", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("security")
    pki = make_pki(base / "pki")
    data = base / "broker"
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        r = _oncelog("users", "add", "alice", "--password", PASSWORD, "--mechanism", mech, "--data-dir", str(data))
        assert r.returncode == 0, r.stderr + r.stdout
    ports = {"PLAINTEXT": free_port(), "SASL_SSL": free_port(), "SSL": free_port(), "SASL_PLAINTEXT": free_port()}
    listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    b = BrokerProcess(data, port=ports["PLAINTEXT"], overrides={
        "group.initial.rebalance.delay.ms": "0",
        "listeners": listeners,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.handshake.timeout.ms": "1500",
    })
    b.start()
    try:
        yield Env(b, pki, ports)
    finally:
        code = b.stop()
        assert code == 0, b.log_tail()


# -- the three clients over SASL_SSL and SSL ---------------------------------------------------------


def _conf(client: str, env: Env, listener: str, mechanism: str | None, password: str = PASSWORD) -> dict:
    p = env.pki
    if client == "confluent":
        c = {"bootstrap.servers": env.addr(listener), "security.protocol": listener, "ssl.ca.location": str(p.ca)}
        if mechanism:
            c.update({"sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": password})
        else:
            c.update({"ssl.certificate.location": str(p.client_cert), "ssl.key.location": str(p.client_key)})
        return c
    c = {"bootstrap_servers": env.addr(listener), "security_protocol": listener}
    if mechanism:
        c.update({"sasl_mechanism": mechanism, "sasl_plain_username": "alice", "sasl_plain_password": password})
    if client == "kafka-python":
        c.update({"ssl_cafile": str(p.ca)})
        if not mechanism:
            c.update({"ssl_certfile": str(p.client_cert), "ssl_keyfile": str(p.client_key)})
    else:
        from aiokafka.helpers import create_ssl_context

        c["ssl_context"] = create_ssl_context(cafile=str(p.ca), certfile=None if mechanism else str(p.client_cert),
                                              keyfile=None if mechanism else str(p.client_key))
    return c


def _roundtrip(client: str, conf: dict, topic: str, n: int, *, transactional: bool = False) -> list[bytes]:
    """Produce ``n`` values (in one transaction if asked) and read them back (read_committed)."""
    values = [f"{topic}-{i}".encode() for i in range(n)]
    deadline = time.monotonic() + 60
    if client == "confluent":
        from confluent_kafka import Consumer, Producer, TopicPartition

        pconf = dict(conf)
        if transactional:
            pconf["transactional.id"] = f"tx-{topic}"
        prod = Producer(pconf)
        if transactional:
            prod.init_transactions(30)
            prod.begin_transaction()
        for v in values:
            prod.produce(topic, v, partition=0)
        if transactional:
            prod.commit_transaction(30)
        assert prod.flush(30) == 0
        cons = Consumer({**conf, "group.id": f"g-{topic}", "enable.auto.commit": False, "isolation.level": "read_committed"})
        cons.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        try:
            while len(got) < n and time.monotonic() < deadline:
                m = cons.poll(0.5)
                if m is not None and m.error() is None:
                    got.append(m.value())
        finally:
            cons.close()
        return got
    if client == "kafka-python":
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KTP

        kp = KafkaProducer(**conf, **({"transactional_id": f"tx-{topic}"} if transactional else {}))
        try:
            if transactional:
                kp.init_transactions()
                kp.begin_transaction()
            for v in values:
                kp.send(topic, v, partition=0)
            if transactional:
                kp.commit_transaction()
            kp.flush(30)
        finally:
            kp.close(10)
        kc = KafkaConsumer(**conf, enable_auto_commit=False, isolation_level="read_committed")
        got = []
        try:
            kc.assign([KTP(topic, 0)])
            kc.seek(KTP(topic, 0), 0)
            while len(got) < n and time.monotonic() < deadline:
                for recs in kc.poll(500).values():
                    got.extend(r.value for r in recs)
        finally:
            kc.close()
        return got

    async def go() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition as ATP

        ap = AIOKafkaProducer(**conf, **({"transactional_id": f"tx-{topic}"} if transactional else {}))
        await ap.start()
        try:
            if transactional:
                async with ap.transaction():
                    for v in values:
                        await ap.send(topic, v, partition=0)
            else:
                for v in values:
                    await ap.send(topic, v, partition=0)
                await ap.flush()
        finally:
            await ap.stop()
        ac = AIOKafkaConsumer(**conf, enable_auto_commit=False, isolation_level="read_committed")
        await ac.start()
        got: list[bytes] = []
        try:
            ac.assign([ATP(topic, 0)])
            ac.seek(ATP(topic, 0), 0)
            while len(got) < n and time.monotonic() < deadline:
                for recs in (await ac.getmany(timeout_ms=500)).values():
                    got.extend(r.value for r in recs)
        finally:
            await ac.stop()
        return got

    return asyncio.run(go())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
@pytest.mark.parametrize("client", CLIENTS)
def test_sasl_ssl_produce_consume(env: Env, client: str, mechanism: str) -> None:
    topic = f"sasl-{client}-{mechanism}-{uuid.uuid4().hex[:6]}"
    got = _roundtrip(client, _conf(client, env, "SASL_SSL", mechanism), topic, N)
    assert got == [f"{topic}-{i}".encode() for i in range(N)]
    _assert_logged_in_with(env, mechanism)


def _assert_logged_in_with(env: Env, mechanism: str) -> None:
    """The broker logged a login of alice with ``mechanism``. Its log cuts storms (oncelog.logs:
    ten lines of one template per 10 s window, the rest counted), and this module logs in more
    often than that, so a line missing may only be suppressed: then, once the window is over,
    one more login with ``mechanism`` (a metadata request) is the first of a new window, and
    logged."""
    line = "authenticated as User:alice with " + mechanism
    if line in env.broker.log_path.read_text():
        return
    from confluent_kafka.admin import AdminClient

    time.sleep(StormFilter().window + 0.5)
    assert AdminClient(_conf("confluent", env, "SASL_SSL", mechanism)).list_topics(timeout=20).brokers
    deadline = time.monotonic() + 5
    while line not in env.broker.log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert line in env.broker.log_path.read_text()


@pytest.mark.parametrize("client", CLIENTS)
def test_ssl_client_certificate(env: Env, client: str) -> None:
    topic = f"ssl-{client}-{uuid.uuid4().hex[:6]}"
    got = _roundtrip(client, _conf(client, env, "SSL", None), topic, N)
    assert got == [f"{topic}-{i}".encode() for i in range(N)]
    # Kafka's default principal: the subject in RFC 2253 order
    assert "presented a client certificate: User:CN=alice,O=test" in env.broker.log_path.read_text()


@pytest.mark.parametrize("client", ["confluent", "aiokafka"])
def test_transactional_produce_over_sasl_ssl(env: Env, client: str) -> None:
    topic = f"tx-{client}-{uuid.uuid4().hex[:6]}"
    got = _roundtrip(client, _conf(client, env, "SASL_SSL", "SCRAM-SHA-512"), topic, 20, transactional=True)
    assert got == [f"{topic}-{i}".encode() for i in range(20)]


def test_metadata_advertises_the_listener_the_client_came_on(env: Env) -> None:
    from confluent_kafka.admin import AdminClient

    for listener, mech in (("SASL_SSL", "SCRAM-SHA-256"), ("SSL", None)):
        md = AdminClient(_conf("confluent", env, listener, mech)).list_topics(timeout=20)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", env.ports[listener])]
    with ProtocolClient(env.addr("PLAINTEXT")) as c:
        m = c.classes(apis.METADATA, 12)
        body = c.request(apis.METADATA, m["MetadataRequest"](topics=(), allow_auto_topic_creation=False,
                                                              include_topic_authorized_operations=False), version=12)
        assert [(b.host, b.port) for b in body.brokers] == [("127.0.0.1", env.ports["PLAINTEXT"])]


def test_wrong_password_fails_and_is_logged_without_the_secret(env: Env) -> None:
    from confluent_kafka.admin import AdminClient

    bad = "wrong-" + uuid.uuid4().hex
    admin = AdminClient({**_conf("confluent", env, "SASL_SSL", "SCRAM-SHA-256", password=bad)})
    with pytest.raises(Exception):
        admin.list_topics(timeout=5)
    deadline = time.monotonic() + 10
    while "authentication failed" not in env.broker.log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    text = env.broker.log_path.read_text()
    assert "authentication failed" in text
    assert bad not in text and PASSWORD not in text


# -- crafted requests on the SASL_PLAINTEXT listener ---------------------------------------------


def _closed_within(sock: socket.socket, seconds: float, *, silently: bool = False) -> bool:
    """True if the peer closes ``sock`` (EOF or reset) within ``seconds`` (``silently``: having
    sent nothing more)."""
    sock.settimeout(seconds)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
            assert not silently, f"an answer came before the close: {data[:40]!r}"
    except (ConnectionResetError, ssl.SSLError, ssl.SSLEOFError):
        return True
    except (socket.timeout, TimeoutError):
        return False


def _handshake(c: ProtocolClient, mechanism: str, version: int = 1):  # type: ignore[no-untyped-def]
    m = c.classes(apis.SASL_HANDSHAKE, version)
    return c.request(apis.SASL_HANDSHAKE, m["SaslHandshakeRequest"](mechanism=mechanism), version=version)


def _authenticate(c: ProtocolClient, token: bytes, version: int = 2):  # type: ignore[no-untyped-def]
    m = c.classes(apis.SASL_AUTHENTICATE, version)
    return c.request(apis.SASL_AUTHENTICATE, m["SaslAuthenticateRequest"](auth_bytes=token), version=version)


def test_garbage_scram_token_is_refused_after_the_delay_and_closed(env: Env) -> None:
    with ProtocolClient(env.addr("SASL_PLAINTEXT")) as c:
        assert _handshake(c, "SCRAM-SHA-256").error_code == ErrorCode.none
        t0 = time.monotonic()
        res = _authenticate(c, b"\xff\x00garbage\x01" * 10)
        took = time.monotonic() - t0
        assert res.error_code == ErrorCode.sasl_authentication_failed
        assert took >= 0.09  # connection.failed.authentication.delay.ms=100
        assert _closed_within(c.sock, 5)


def test_garbage_plain_token_and_wrong_password(env: Env) -> None:
    for token in (b"no-nuls-at-all", b"\0alice\0not-the-password", b"\0nobody\0" + PASSWORD.encode()):
        with ProtocolClient(env.addr("SASL_PLAINTEXT")) as c:
            assert _handshake(c, "PLAIN").error_code == ErrorCode.none
            res = _authenticate(c, token)
            assert res.error_code == ErrorCode.sasl_authentication_failed, token
            assert PASSWORD not in (res.error_message or "")
            assert _closed_within(c.sock, 5)


def test_plain_right_password_then_apis_open(env: Env) -> None:
    with ProtocolClient(env.addr("SASL_PLAINTEXT")) as c:
        assert _handshake(c, "PLAIN", version=0).error_code == ErrorCode.none
        # handshake v0: the token goes bare, the answer comes bare (Kafka's pre-KIP-152 framing)
        token = b"\0alice\0" + PASSWORD.encode()
        c.send_raw(len(token).to_bytes(4, "big") + token)
        assert c.recv_frame() == b""
        m = c.classes(apis.METADATA, 12)
        body = c.request(apis.METADATA, m["MetadataRequest"](topics=(), allow_auto_topic_creation=False,
                                                              include_topic_authorized_operations=False), version=12)
        assert body.brokers[0].port == env.ports["SASL_PLAINTEXT"]
        # a second handshake on an authenticated connection: ILLEGAL_SASL_STATE (no re-authentication)
        assert _handshake(c, "PLAIN").error_code == ErrorCode.illegal_sasl_state


def test_unknown_mechanism_gets_the_enabled_list_and_is_closed(env: Env) -> None:
    with ProtocolClient(env.addr("SASL_PLAINTEXT")) as c:
        res = _handshake(c, "GSSAPI")
        assert res.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(res.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert _closed_within(c.sock, 5)


def test_api_request_before_authenticating_closes_the_connection(env: Env) -> None:
    for before_handshake in (True, False):
        with ProtocolClient(env.addr("SASL_PLAINTEXT")) as c:
            if not before_handshake:
                assert _handshake(c, "SCRAM-SHA-256").error_code == ErrorCode.none
            m = c.classes(apis.METADATA, 12)
            c.send_raw(framing.encode_request(apis.METADATA, 12, 99, "x", m["MetadataRequest"](
                topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False)))
            assert _closed_within(c.sock, 5, silently=True)


def test_sasl_requests_on_a_plaintext_listener_get_illegal_sasl_state(env: Env) -> None:
    with ProtocolClient(env.addr("PLAINTEXT")) as c:
        assert _handshake(c, "PLAIN").error_code == ErrorCode.illegal_sasl_state
        assert _authenticate(c, b"x").error_code == ErrorCode.illegal_sasl_state


def test_user_scram_credentials_apis_take_effect_at_once(env: Env) -> None:
    """AlterUserScramCredentials through the PLAINTEXT listener (the CLI), then bob logs in with
    SCRAM and PLAIN; deleted, he cannot."""
    from confluent_kafka.admin import AdminClient

    addr = env.addr("PLAINTEXT")
    r = _oncelog("users", "add", "bob", "--password", "bob-pw", "--mechanism", "SCRAM-SHA-512", "-b", addr)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _oncelog("users", "list", "-b", addr, "--json")
    assert '"bob"' in r.stdout and '"alice"' in r.stdout
    conf = {**_conf("confluent", env, "SASL_SSL", "SCRAM-SHA-512"), "sasl.username": "bob", "sasl.password": "bob-pw"}
    assert AdminClient(conf).list_topics(timeout=20).brokers
    conf_plain = {**conf, "sasl.mechanism": "PLAIN"}
    assert AdminClient(conf_plain).list_topics(timeout=20).brokers
    r = _oncelog("users", "remove", "bob", "--mechanism", "SCRAM-SHA-512", "-b", addr)
    assert r.returncode == 0, r.stdout + r.stderr
    with pytest.raises(Exception):
        AdminClient(conf).list_topics(timeout=5)
    r = _oncelog("users", "remove", "bob", "--mechanism", "SCRAM-SHA-512", "-b", addr)
    assert r.returncode == 1 and "RESOURCE_NOT_FOUND" in r.stdout


def test_users_cli_over_sasl_ssl_with_a_command_config(env: Env, tmp_path: Path) -> None:
    """``oncelog users … --command-config`` logs in as kafka-configs.sh would (SCRAM over TLS)."""
    good = tmp_path / "admin.properties"
    good.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nssl.truststore.location={env.pki.ca}\n"
                    f'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                    f'username="alice" password="{PASSWORD}";\n')
    bad = tmp_path / "bad.properties"
    bad.write_text(good.read_text().replace(PASSWORD, "not-it"))
    addr = env.addr("SASL_SSL")
    r = _oncelog("users", "add", "carol", "--password", "carol-pw", "-b", addr, "--command-config", str(good))
    assert r.returncode == 0, r.stdout + r.stderr
    r = _oncelog("users", "list", "-b", addr, "--command-config", str(good), "--json")
    assert '"carol"' in r.stdout, r.stdout + r.stderr
    r = _oncelog("users", "list", "-b", addr, "--command-config", str(bad))
    assert r.returncode == 1 and "invalid credentials" in r.stdout and "Traceback" not in r.stderr, r.stdout + r.stderr
    from confluent_kafka.admin import AdminClient

    conf = {**_conf("confluent", env, "SASL_SSL", "SCRAM-SHA-256"), "sasl.username": "carol", "sasl.password": "carol-pw"}
    assert AdminClient(conf).list_topics(timeout=20).brokers


# -- TLS: stalled handshakes, plaintext to the TLS port, untrusted client certificates -------------


def test_stalled_tls_handshake_is_bounded_and_blocks_nobody(env: Env) -> None:
    stalled = []
    for _ in range(5):
        s = socket.create_connection(("127.0.0.1", env.ports["SASL_SSL"]), timeout=5)
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # the start of a ClientHello, then nothing
        stalled.append(s)
    t0 = time.monotonic()
    topic = f"while-stalled-{uuid.uuid4().hex[:6]}"
    got = _roundtrip("confluent", _conf("confluent", env, "SASL_SSL", "SCRAM-SHA-256"), topic, 10)
    assert len(got) == 10
    for s in stalled:
        assert _closed_within(s, 10), "a stalled TLS handshake was not ended (ssl.handshake.timeout.ms=1500)"
        s.close()
    assert time.monotonic() - t0 < 20


def test_plaintext_client_on_the_tls_port_is_closed(env: Env) -> None:
    s = socket.create_connection(("127.0.0.1", env.ports["SSL"]), timeout=5)
    with s:
        m = apis.message_class(apis.API_VERSIONS, 3, False)
        s.sendall(framing.encode_request(apis.API_VERSIONS, 3, 1, "x", m(client_software_name="x",
                                                                         client_software_version="1")))
        assert _closed_within(s, 10)
    # and the listener still serves TLS clients
    assert len(_roundtrip("confluent", _conf("confluent", env, "SSL", None), f"after-{uuid.uuid4().hex[:6]}", 5)) == 5


def test_client_certificate_from_an_untrusted_ca_is_refused(env: Env) -> None:
    ctx = ssl.create_default_context(cafile=str(env.pki.ca))
    ctx.load_cert_chain(str(env.pki.stranger_cert), str(env.pki.stranger_key))
    raw = socket.create_connection(("127.0.0.1", env.ports["SSL"]), timeout=5)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            m = apis.message_class(apis.API_VERSIONS, 3, False)
            s.sendall(framing.encode_request(apis.API_VERSIONS, 3, 1, "x", m(client_software_name="x",
                                                                             client_software_version="1")))
            if not s.recv(4):  # TLS 1.3: the refusal may arrive after the handshake returned
                raise ConnectionError("closed")
    # no client certificate at all: refused too (ssl.client.auth=required)
    ctx2 = ssl.create_default_context(cafile=str(env.pki.ca))
    raw = socket.create_connection(("127.0.0.1", env.ports["SSL"]), timeout=5)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with ctx2.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(b"\0\0\0\0")
            if not s.recv(4):
                raise ConnectionError("closed")


def test_ready_lines(env: Env) -> None:
    text = Path(env.broker.log_path).read_text()
    assert "listener SASL_SSL (SASL_SSL) on 127.0.0.1:" in text


# -- KIP-368: connections.max.reauth.ms ------------------------------------------------------------


def test_sessions_expire_unless_re_authenticated(tmp_path: Path) -> None:
    """``connections.max.reauth.ms=2000`` on a SASL_PLAINTEXT listener: the lifetime is announced;
    a connection that does not re-authenticate is closed at its first request after it; one that
    re-authenticates (same user) goes on; re-authenticating as someone else closes it; and
    confluent-kafka, which re-authenticates by itself, produces across several lifetimes."""
    data = tmp_path / "broker"
    for user in ("alice", "eve"):
        r = _oncelog("users", "add", user, "--password", PASSWORD, "--mechanism", "SCRAM-SHA-256", "--data-dir", str(data))
        assert r.returncode == 0, r.stderr
    plain, sasl = free_port(), free_port()
    b = BrokerProcess(data, port=plain, overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "listener.name.sasl_plaintext.connections.max.reauth.ms": "2000"}).start()
    addr = f"127.0.0.1:{sasl}"
    md = lambda c: c.request(apis.METADATA, c.classes(apis.METADATA, 12)["MetadataRequest"](  # noqa: E731
        topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False), version=12)

    def login(c: ProtocolClient, user: str = "alice") -> object:
        assert _handshake(c, "PLAIN").error_code == ErrorCode.none
        res = _authenticate(c, b"\0" + user.encode() + b"\0" + PASSWORD.encode())
        assert res.error_code == ErrorCode.none
        return res

    try:
        with ProtocolClient(addr) as c:
            assert login(c).session_lifetime.total_seconds() == 2.0
            md(c)
            time.sleep(2.5)
            c.send_raw(framing.encode_request(apis.API_VERSIONS, 3, 9, "x", apis.message_class(apis.API_VERSIONS, 3, False)(
                client_software_name="x", client_software_version="1")))
            assert _closed_within(c.sock, 5, silently=True)
        with ProtocolClient(addr) as c:
            login(c)
            time.sleep(1.2)
            login(c)  # re-authentication
            time.sleep(1.3)  # 2.5 s after the first login, 1.3 s after the second
            assert md(c).brokers
        with ProtocolClient(addr) as c:
            login(c)
            assert _handshake(c, "PLAIN").error_code == ErrorCode.none
            c.send_raw(framing.encode_request(apis.SASL_AUTHENTICATE, 2, 50, "x", apis.message_class(
                apis.SASL_AUTHENTICATE, 2, False)(auth_bytes=b"\0eve\0" + PASSWORD.encode())))
            assert _closed_within(c.sock, 5)
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": addr, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                      "sasl.username": "alice", "sasl.password": PASSWORD})
        delivered: list[object] = []
        deadline = time.monotonic() + 6
        i = 0
        while time.monotonic() < deadline:
            p.produce("reauth", f"v{i}".encode(), on_delivery=lambda err, m: delivered.append(err))
            p.flush(10)
            i += 1
            time.sleep(0.2)
        assert i >= 20 and delivered == [None] * i
        assert "re-authenticated as User:alice with SCRAM-SHA-256" in b.log_path.read_text()
    finally:
        assert b.stop() == 0, b.log_tail()


@pytest.mark.parametrize("overrides, message", [
    (["listeners=SSL://127.0.0.1:0"], "set ssl.keystore.location"),
    (["listeners=SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms=GSSAPI"], "supported are PLAIN"),
    (["listeners=PLAINTEXT://127.0.0.1"], "is not NAME://HOST:PORT"),
    (["listeners=SSL://127.0.0.1:0", "ssl.keystore.type=JKS", "ssl.keystore.location=/nonexistent"], "only PEM"),
])
def test_bad_security_settings_stop_the_broker_before_it_listens(tmp_path: Path, overrides: list[str], message: str) -> None:
    args = [a for o in overrides for a in ("-o", o)]
    r = _oncelog("broker", "--data-dir", str(tmp_path / "d"), *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in " ".join((r.stdout + r.stderr).split()) and "Traceback" not in r.stderr
    assert "ready on" not in r.stdout
