"""Issue 18's pure parts: the SASL state machine and mechanisms (against a real SCRAM client,
scramp's), the credential store and its file, listener parsing, and TLS contexts and principals
(a real TLS handshake in memory, certificates made here)."""

from __future__ import annotations

import dataclasses
import ssl
from pathlib import Path

import pytest
import scramp

from oncelog.broker.network import listeners
from oncelog.broker.auth import tls
from oncelog.broker.auth.credentials import (
    MECHANISM_IDS, CredentialFile, CredentialStore, UserCredentials, salted_password,
)
from oncelog.broker.auth.gate import gate
from oncelog.broker.auth.sasl import (
    TRANSITIONS, AuthenticationFailed, Event, IllegalSaslState, SaslSession, State, shown,
)
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.protocol import apis, framing
from oncelog.protocol.errors import ErrorCode, InvalidConfig
from oncelog_tools.tls_certs import make_pki

ALL = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _store(user: str = "alice", password: str = "pw", mechs: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512"),
           iterations: int = 4096) -> CredentialStore:
    s = CredentialStore()
    for m in mechs:
        salt = b"salt-" + m.encode()
        res = s.alter([], [(user, MECHANISM_IDS[m], iterations, salt, salted_password(m, password, salt, iterations))])
        assert res[user][0] == ErrorCode.none
    return s


def _scram_login(session: SaslSession, mech: str, user: str, password: str) -> None:
    client = scramp.ScramClient([mech], user, password)
    assert session.handshake(mech, 1)
    server_first = session.token(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    server_final = session.token(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # the client checks the server's signature too


# -- the state machine ---------------------------------------------------------------------------


def test_transition_table_reaches_authenticated_only_through_a_mechanism() -> None:
    into_auth = {(s, e) for (s, e), nxt in TRANSITIONS.items() if nxt is State.AUTHENTICATED and s is not State.AUTHENTICATED}
    assert into_auth == {(State.AUTHENTICATE, Event.SUCCESS), (State.RAW_TOKENS, Event.SUCCESS)}
    assert not any(s is State.FAILED for s, _ in TRANSITIONS)  # FAILED is final
    assert (State.START, Event.OTHER_API) not in TRANSITIONS


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_login_with_a_real_client(mech: str) -> None:
    s = SaslSession(ALL, lambda: _store())
    s.api_versions()
    _scram_login(s, mech, "alice", "pw")
    assert s.authenticated and s.principal == "User:alice"
    s.other_api("Metadata")  # everything is open now


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_wrong_password_and_unknown_user(mech: str) -> None:
    for user, pw in (("alice", "nope"), ("bob", "pw")):
        s = SaslSession(ALL, lambda: _store())
        with pytest.raises(AuthenticationFailed) as err:
            _scram_login(s, mech, user, pw)
        assert "invalid credentials" in str(err.value) and "nope" not in str(err.value)
        assert s.state is State.FAILED and s.principal is None
        with pytest.raises(IllegalSaslState):
            s.token(b"again")


def test_plain_checks_against_the_scram_credentials() -> None:
    s = SaslSession(ALL, lambda: _store())
    assert s.handshake("PLAIN", 1)
    assert s.token(b"\0alice\0pw") == b""
    assert s.principal == "User:alice"
    for token in (b"\0alice\0wrong", b"\0bob\0pw", b"garbage", b"\0\0", b"eve\0alice\0pw", b"\0alice\0\xff\xfe"):
        s = SaslSession(ALL, lambda: _store())
        s.handshake("PLAIN", 1)
        with pytest.raises(AuthenticationFailed):
            s.token(token)
    s = SaslSession(ALL, lambda: _store(mechs=("SCRAM-SHA-256",)))  # one credential is enough for PLAIN
    s.handshake("PLAIN", 0)
    assert s.raw_tokens
    s.token(b"alice\0alice\0pw", raw=True)
    assert s.authenticated


def test_garbage_scram_tokens_fail_cleanly() -> None:
    for token in (b"", b"\xff\xff", b"n,,", b"x" * 10_000, b"n,,n=alice", b"n,,n=alice,r="):
        s = SaslSession(ALL, lambda: _store())
        s.handshake("SCRAM-SHA-256", 1)
        with pytest.raises(AuthenticationFailed):
            s.token(token)
            s.token(b"c=biws,r=xyz,p=AAAA")


def test_illegal_orders() -> None:
    s = SaslSession(ALL, lambda: _store())
    with pytest.raises(IllegalSaslState):
        s.other_api("Produce")
    s = SaslSession(ALL, lambda: _store())
    with pytest.raises(IllegalSaslState):
        s.token(b"x")  # a token before the handshake
    s = SaslSession(ALL, lambda: _store())
    s.handshake("PLAIN", 1)
    with pytest.raises(IllegalSaslState):
        s.handshake("PLAIN", 1)
    s = SaslSession(ALL, lambda: _store())
    s.handshake("PLAIN", 1)
    with pytest.raises(IllegalSaslState):
        s.api_versions()  # Kafka: after the handshake only SaslAuthenticate
    s = SaslSession(("SCRAM-SHA-512",), lambda: _store())
    assert not s.handshake("PLAIN", 1)
    assert s.state is State.FAILED


def test_a_credential_change_applies_to_the_next_login() -> None:
    users = CredentialStore()
    s = SaslSession(ALL, lambda: users)
    s.handshake("PLAIN", 1)
    with pytest.raises(AuthenticationFailed):
        s.token(b"\0alice\0pw")
    users.creds.update(_store().creds)
    s = SaslSession(ALL, lambda: users)
    s.handshake("PLAIN", 1)
    s.token(b"\0alice\0pw")
    assert s.authenticated


# -- the gate (frames in, outcome out) ------------------------------------------------------------


def _frame(api_key: int, version: int, **fields: object) -> bytes:
    data = framing.encode_request(api_key, version, 7, "t", apis.message_class(api_key, version, False)(**fields))
    return data[4:]  # the connection hands the gate frames without their size prefix


def test_gate_frames() -> None:
    s = SaslSession(("SCRAM-SHA-256",), lambda: _store())
    out = gate(s, _frame(apis.API_VERSIONS, 3, client_software_name="x", client_software_version="1"))
    assert out.dispatch and out.close is None
    out = gate(s, _frame(apis.SASL_HANDSHAKE, 1, mechanism="GSSAPI"))
    assert out.close and out.parts
    _, body = framing.decode_response(apis.SASL_HANDSHAKE, 1, b"".join(out.parts)[4:])
    assert body.error_code == ErrorCode.unsupported_sasl_mechanism and body.mechanisms == ("SCRAM-SHA-256",)
    s = SaslSession(ALL, lambda: _store())
    out = gate(s, _frame(apis.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False))
    assert out.close and "before SASL authentication" in out.close and out.parts is None
    s = SaslSession(ALL, lambda: _store())
    assert gate(s, _frame(apis.SASL_HANDSHAKE, 1, mechanism="PLAIN")).close is None
    out = gate(s, _frame(apis.SASL_AUTHENTICATE, 2, auth_bytes=b"\0alice\0bad"))
    assert out.failed and out.close
    _, body = framing.decode_response(apis.SASL_AUTHENTICATE, 2, b"".join(out.parts)[4:])
    assert body.error_code == ErrorCode.sasl_authentication_failed and "bad" not in body.error_message
    assert gate(SaslSession(ALL, lambda: _store()), b"\x00").close  # a frame too short for a header


def test_scram_user_names_are_checked_before_the_scram_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26 row 1: a name with no credential, or too long to exist, fails before scramp (whose
    SASLprep costs ~6 µs a character) sees it; an escaped name (=2C, =3D) is looked up unescaped."""
    called: list[str] = []
    s = SaslSession(ALL, lambda: _store(user="a,b=c"))
    assert s.handshake("SCRAM-SHA-256", 1)
    import scramp.core

    original = scramp.core.ScramServer.set_client_first
    monkeypatch.setattr(scramp.core.ScramServer, "set_client_first",
                        lambda self, text: (called.append(text), original(self, text))[1])
    for name in ("x" * 400_000, "nobody", "é" * 20_000):
        s = SaslSession(ALL, lambda: _store(user="a,b=c"))
        assert s.handshake("SCRAM-SHA-256", 1)
        with pytest.raises(AuthenticationFailed) as e:
            s.token(f"n,,n={name},r=abcdef".encode())
        assert len(str(e.value)) < 200  # the log line shows at most 64 characters of the name
        assert e.value.client_message == ("Authentication failed during authentication due to invalid credentials "
                                          "with SASL mechanism SCRAM-SHA-256")
    assert called == []
    _scram_login(SaslSession(ALL, lambda: _store(user="a,b=c")), "SCRAM-SHA-256", "a,b=c", "pw")
    assert len(called) == 1


def test_no_client_string_is_echoed_or_logged_whole() -> None:
    """Issue 26 row 2: every refusal's client message is fixed text; the log text cuts the
    client's strings (``shown``)."""
    huge = "u" * 40_000
    for mech, token in (("PLAIN", b"\0" + huge.encode() + b"\0pw"), ("PLAIN", huge.encode() + b"\0alice\0pw"),
                        ("PLAIN", b"\0alice\0" + b"\xff" * 10), ("SCRAM-SHA-512", b"\xff" * 40_000),
                        ("SCRAM-SHA-512", b"garbage-" * 5000)):
        s = SaslSession(ALL, lambda: _store())
        assert s.handshake(mech, 1)
        with pytest.raises(AuthenticationFailed) as e:
            s.token(token)
        assert "uuuuuuuuuu" not in e.value.client_message and len(e.value.client_message) < 120
        assert len(str(e.value)) < 300
    for v in (0, 1, 2):  # the gate's answer is encodable in every version, and echoes nothing
        s = SaslSession(ALL, lambda: _store())
        assert gate(s, _frame(apis.SASL_HANDSHAKE, 1, mechanism="PLAIN")).close is None
        out = gate(s, _frame(apis.SASL_AUTHENTICATE, v, auth_bytes=b"\0" + huge.encode() + b"\0pw"))
        assert out.failed and out.close and len(out.close) < 300
        _, body = framing.decode_response(apis.SASL_AUTHENTICATE, v, b"".join(out.parts)[4:])
        assert body.error_code == ErrorCode.sasl_authentication_failed and "uuuu" not in body.error_message
    out = gate(SaslSession(ALL, lambda: _store()), _frame(apis.SASL_HANDSHAKE, 1, mechanism="M" * 30_000))
    assert out.close and len(out.close) < 300
    assert shown("x" * 1000) == repr("x" * 64) + "… (1000 characters)" and shown(b"ab") == "b'ab'"


# -- credentials ---------------------------------------------------------------------------------


def test_store_validation_matches_kafka() -> None:
    s = _store()
    salt = b"0123456789abcdef"
    sp = salted_password("SCRAM-SHA-256", "x", salt, 4096)
    res = s.alter([("nobody", 1)], [("", 1, 4096, salt, sp), ("carol", 1, 4095, salt, sp), ("dave", 9, 4096, salt, sp),
                                     ("erin", 1, 16385, salt, sp), ("frank", 1, 4096, salt, sp), ("frank", 1, 8192, salt, sp)])
    assert res["nobody"][0] == ErrorCode.resource_not_found
    assert res[""][0] == ErrorCode.unacceptable_credential
    assert res["carol"][0] == ErrorCode.unacceptable_credential
    assert res["dave"][0] == ErrorCode.unsupported_sasl_mechanism
    assert res["erin"][0] == ErrorCode.unacceptable_credential
    assert res["frank"][0] == ErrorCode.duplicate_resource
    assert s.alter([], [("gina", 1, 4096, b"short", sp)])["gina"][0] == ErrorCode.unacceptable_credential
    assert s.users() == ["alice"]
    rows = {u: (code, infos) for u, code, _, infos in s.describe(["alice", "zed", "alice"])}
    assert rows["zed"][0] == ErrorCode.resource_not_found and rows["alice"][0] == ErrorCode.duplicate_resource
    assert s.describe(None) == [("alice", ErrorCode.none, None, [(1, 4096), (2, 4096)])]
    assert s.alter([("alice", 1)], [])["alice"][0] == ErrorCode.none
    assert s.describe(None)[0][3] == [(2, 4096)]


def test_credential_file_round_trip_keeps_no_password(tmp_path: Path) -> None:
    users = UserCredentials(CredentialFile(tmp_path))
    sp = salted_password("SCRAM-SHA-512", "hunter2", b"salty-salty-salty", 8192)
    assert users.alter([], [("alice", 2, 8192, b"salty-salty-salty", sp)])["alice"][0] == ErrorCode.none
    raw = (tmp_path / "scram-credentials.json").read_bytes()
    assert b"hunter2" not in raw and sp.hex().encode() not in raw
    assert (tmp_path / "scram-credentials.json").stat().st_mode & 0o777 == 0o600
    again = CredentialFile(tmp_path).load()
    assert again.get("alice", "SCRAM-SHA-512") == users.store.get("alice", "SCRAM-SHA-512")
    s = SaslSession(ALL, lambda: again)
    _scram_login(s, "SCRAM-SHA-512", "alice", "hunter2")
    # a refused alteration leaves the file as it was
    before = (tmp_path / "scram-credentials.json").read_bytes()
    assert users.alter([("ghost", 1)], [])["ghost"][0] == ErrorCode.resource_not_found
    assert (tmp_path / "scram-credentials.json").read_bytes() == before
    (tmp_path / "scram-credentials.json").write_bytes(b"{not json")
    with pytest.raises(InvalidConfig):
        CredentialFile(tmp_path).load()


# -- listeners -----------------------------------------------------------------------------------


def test_listeners_default_is_the_old_single_plaintext_one() -> None:
    cfg = BrokerConfig(host="127.0.0.1", port=9999, advertised_host="kafka.example")
    assert listeners.resolve(cfg) == [listeners.Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9999, "kafka.example", 0)]


def test_listeners_parse_map_and_advertise() -> None:
    cfg = BrokerConfig().with_overrides({
        "listeners": "PLAINTEXT://127.0.0.1:9092,CLIENT://:9093,SASL_SSL://[::1]:9094",
        "advertised.listeners": "CLIENT://broker.example:19093",
        "listener.security.protocol.map": "CLIENT:SASL_SSL",
    })
    got = listeners.resolve(cfg)
    assert [(x.name, x.protocol, x.host, x.port, x.advertised_host, x.advertised_port) for x in got] == [
        ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092, "127.0.0.1", 0),
        ("CLIENT", "SASL_SSL", "0.0.0.0", 9093, "broker.example", 19093),
        ("SASL_SSL", "SASL_SSL", "::1", 9094, "::1", 0),
    ]
    assert got[1].tls and got[1].sasl and not got[0].tls


@pytest.mark.parametrize("props", [
    {"listeners": "PLAINTEXT://127.0.0.1"},
    {"listeners": "FOO://127.0.0.1:1"},
    {"listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2"},
    {"listeners": "PLAINTEXT://a:1", "advertised.listeners": "SSL://b:2"},
    {"listeners": "X://a:1", "listener.security.protocol.map": "X:TLS"},
    {"listeners": "PLAINTEXT://a:70000"},
])
def test_bad_listeners_are_refused(props: dict[str, str]) -> None:
    with pytest.raises(InvalidConfig):
        listeners.resolve(BrokerConfig().with_overrides(props))


def test_per_listener_ssl_settings() -> None:
    cfg = BrokerConfig().with_overrides({"ssl.client.auth": "none", "listener.name.internal.ssl.client.auth": "required"})
    assert cfg.for_listener("INTERNAL").ssl_client_auth == "required"
    assert cfg.for_listener("EXTERNAL").ssl_client_auth == "none"
    with pytest.raises(InvalidConfig):
        BrokerConfig().with_overrides({"listener.name.x.no.such.key": "1"}).for_listener("X")


# -- TLS -----------------------------------------------------------------------------------------


def _handshake_in_memory(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> ssl.SSLObject:
    """A real TLS handshake between two SSLObjects over memory BIOs; returns the server side."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    done = {"s": False, "c": False}
    for _ in range(20):
        for name, obj in (("c", client), ("s", server)):
            if not done[name]:
                try:
                    obj.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            break
    assert all(done.values())
    # TLS 1.3: the server learns of the client certificate once it reads the client's data
    client.write(b"hi")
    s_in.write(c_out.read())
    assert server.read(2) == b"hi"
    return server


def test_tls_principal_is_the_certificate_subject(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    cfg = BrokerConfig(ssl_keystore_location=str(pki.server), ssl_truststore_location=str(pki.ca), ssl_client_auth="required")
    client_ctx = ssl.create_default_context(cafile=str(pki.ca))
    client_ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    server = _handshake_in_memory(tls.server_context(cfg, "SSL"), client_ctx)
    assert tls.principal_of(server) == "User:CN=alice,O=test"
    # requested, and no certificate given: ANONYMOUS
    cfg2 = dataclasses.replace(cfg, ssl_client_auth="requested")
    server = _handshake_in_memory(tls.server_context(cfg2, "SSL"), ssl.create_default_context(cafile=str(pki.ca)))
    assert tls.principal_of(server) == tls.ANONYMOUS


def test_tls_inline_pem_and_config_errors(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    cfg = BrokerConfig(ssl_keystore_key=pki.server_key.read_text(), ssl_keystore_certificate_chain=pki.server_cert.read_text(),
                       ssl_truststore_certificates=pki.ca.read_text(), ssl_client_auth="required")
    client_ctx = ssl.create_default_context(cafile=str(pki.ca))
    client_ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    assert tls.principal_of(_handshake_in_memory(tls.server_context(cfg, "X"), client_ctx)) == "User:CN=alice,O=test"
    for bad in (BrokerConfig(), BrokerConfig(ssl_keystore_location=str(pki.server), ssl_client_auth="required"),
                BrokerConfig(ssl_keystore_location=str(tmp_path / "missing.pem")),
                BrokerConfig(ssl_keystore_location=str(pki.server), ssl_keystore_type="JKS"),
                BrokerConfig(ssl_keystore_location=str(pki.server), ssl_client_auth="sometimes")):
        with pytest.raises(InvalidConfig):
            tls.server_context(bad, "X")


def test_rfc2253_escaping() -> None:
    class _Peer:  # getpeercert()'s documented shape, for the escaping rules alone
        def getpeercert(self) -> dict:
            return {"subject": ((("countryName", "US"),), (("organizationName", "A, B+C"),), (("commonName", " x="),))}

    assert tls.principal_of(_Peer()) == r"User:CN=\ x\=,O=A\, B\+C,C=US"
    assert tls.principal_of(None) == tls.ANONYMOUS
