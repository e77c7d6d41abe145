"""``python -m bench --security [--records N] [--size B] [--connections N] [--repeat N]``
(issue 18): what TLS and SASL cost, in one run on one broker.

The broker has two listeners, PLAINTEXT and SASL_SSL (SCRAM-SHA-512, certificates made on the
spot). Each repetition, in alternating order, produces N records with confluent-kafka (acks=all)
and consumes them back on each listener; reported are records/s and MB/s, median and spread.
Connection set-up: N fresh connections per kind, each timed from connect(2) until the answer to
a first Metadata request: PLAINTEXT; TLS only (the SASL_SSL handshake without logging in is not
possible, so the SSL figure comes from a second, SSL listener); SASL_SSL with SCRAM-SHA-256 and
SCRAM-SHA-512 (TLS handshake, ApiVersions, SaslHandshake, two SaslAuthenticate round trips,
Metadata). The client side is Python's ssl module and scramp, so the client's own costs are in
the figure too.
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import statistics
import struct
import tempfile
import time
import uuid
from pathlib import Path

import scramp

from bench.produce_consume import Phase
from oncelog.process import BrokerProcess, free_port
from oncelog.protocol import apis, framing
from oncelog_tools.tls_certs import Pki, make_pki

PASSWORD = "bench-password"


def _conf(kind: str, ports: dict[str, int], pki: Pki) -> dict[str, object]:
    if kind == "PLAINTEXT":
        return {"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"}
    return {"bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}", "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bench", "sasl.password": PASSWORD,
            "ssl.ca.location": str(pki.ca)}


def _produce(conf: dict[str, object], topic: str, n: int, size: int, timeout: float) -> Phase:
    from confluent_kafka import Producer

    acked, errors = [0], []

    def done(err, _msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            acked[0] += 1
        else:
            errors.append(str(err))

    p = Producer({**conf, "acks": "all", "linger.ms": 5, "queue.buffering.max.messages": 500_000,
                  "queue.buffering.max.kbytes": 512 * 1024})
    value = b"x" * size
    deadline = time.monotonic() + timeout
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0, on_delivery=done)
                break
            except BufferError:
                p.poll(0.01)
                if time.monotonic() > deadline:
                    raise TimeoutError("producer queue did not drain") from None
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(max(deadline - time.monotonic(), 1.0))
    seconds = time.perf_counter() - t0
    if left or errors or acked[0] != n:
        raise RuntimeError(f"produce: {left} undelivered, errors {errors[:3]}, {acked[0]} of {n} acked")
    return Phase(records=n, nbytes=n * size, seconds=seconds)


def _consume(conf: dict[str, object], topic: str, n: int, timeout: float) -> Phase:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({**conf, "group.id": "bench-security", "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    got = nbytes = 0
    deadline = time.monotonic() + timeout
    t0 = time.perf_counter()
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        while got < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumed {got} of {n}")
            for m in c.consume(num_messages=10_000, timeout=0.5):
                if m.error():
                    raise RuntimeError(str(m.error()))
                got += 1
                nbytes += len(m.value())
        seconds = time.perf_counter() - t0
    finally:
        c.close()
    return Phase(records=got, nbytes=nbytes, seconds=seconds)


def _request(sock: socket.socket | ssl.SSLSocket, api_key: int, version: int, corr: int, body: object) -> object:
    sock.sendall(framing.encode_request(api_key, version, corr, "bench", body))
    size = struct.unpack(">i", _exact(sock, 4))[0]
    return framing.decode_response(api_key, version, _exact(sock, size))[1]


def _exact(sock: socket.socket | ssl.SSLSocket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def _connect_once(port: int, ctx: ssl.SSLContext | None, mechanism: str | None) -> float:
    """Seconds from connect(2) to the answer of a first Metadata request."""
    cls = lambda k, v: apis.message_class(k, v, False)  # noqa: E731
    t0 = time.perf_counter()
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1") if ctx else raw
    try:
        _request(sock, apis.API_VERSIONS, 3, 1, cls(apis.API_VERSIONS, 3)(client_software_name="bench",
                                                                         client_software_version="1"))
        if mechanism:
            _request(sock, apis.SASL_HANDSHAKE, 1, 2, cls(apis.SASL_HANDSHAKE, 1)(mechanism=mechanism))
            client = scramp.ScramClient([mechanism], "bench", PASSWORD)
            r = _request(sock, apis.SASL_AUTHENTICATE, 2, 3,
                         cls(apis.SASL_AUTHENTICATE, 2)(auth_bytes=client.get_client_first().encode()))
            client.set_server_first(r.auth_bytes.decode())  # type: ignore[attr-defined]
            r = _request(sock, apis.SASL_AUTHENTICATE, 2, 4,
                         cls(apis.SASL_AUTHENTICATE, 2)(auth_bytes=client.get_client_final().encode()))
            client.set_server_final(r.auth_bytes.decode())  # type: ignore[attr-defined]
        _request(sock, apis.METADATA, 12, 5, cls(apis.METADATA, 12)(
            topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        return time.perf_counter() - t0
    finally:
        sock.close()


def _ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:.2f} ({min(xs) * 1000:.2f}–{max(xs) * 1000:.2f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench --security", description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="oncelog-bench-security-"))
    pki = make_pki(work / "pki")
    data = work / "broker"
    ports = {"PLAINTEXT": free_port(), "SASL_SSL": free_port(), "SSL": free_port()}
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        from oncelog.broker.auth.credentials import MECHANISM_IDS, CredentialFile, UserCredentials, salted_password

        salt = os.urandom(32)
        UserCredentials(CredentialFile(data)).alter(
            [], [("bench", MECHANISM_IDS[mech], 4096, salt, salted_password(mech, PASSWORD, salt, 4096))])
    broker = BrokerProcess(data, port=ports["PLAINTEXT"], overrides={
        "listeners": ",".join(f"{k}://127.0.0.1:{v}" for k, v in ports.items()),
        "ssl.keystore.location": str(pki.server), "ssl.truststore.location": str(pki.ca)})
    broker.start(timeout=60)
    rows: dict[str, dict[str, list[float]]] = {k: {"produce": [], "produce_mb": [], "consume": [], "consume_mb": []}
                                               for k in ("PLAINTEXT", "SASL_SSL")}
    try:
        for rep in range(args.repeat):
            order = ("PLAINTEXT", "SASL_SSL") if rep % 2 == 0 else ("SASL_SSL", "PLAINTEXT")
            for kind in order:
                conf = _conf(kind, ports, pki)
                topic = f"sec-{kind.lower()}-{uuid.uuid4().hex[:8]}"
                p = _produce(conf, topic, args.records, args.size, args.timeout)
                c = _consume(conf, topic, args.records, args.timeout)
                rows[kind]["produce"].append(p.rate)
                rows[kind]["produce_mb"].append(p.mbps)
                rows[kind]["consume"].append(c.rate)
                rows[kind]["consume_mb"].append(c.mbps)
                print(f"rep {rep + 1} {kind}: produce {p.rate:,.0f} rec/s {p.mbps:.1f} MB/s; "
                      f"consume {c.rate:,.0f} rec/s {c.mbps:.1f} MB/s", flush=True)
        client_ctx = ssl.create_default_context(cafile=str(pki.ca))
        setups: dict[str, list[float]] = {}
        for name, port, ctx, mech in (("PLAINTEXT", ports["PLAINTEXT"], None, None),
                                      ("SSL (TLS only)", ports["SSL"], client_ctx, None),
                                      ("SASL_SSL SCRAM-SHA-256", ports["SASL_SSL"], client_ctx, "SCRAM-SHA-256"),
                                      ("SASL_SSL SCRAM-SHA-512", ports["SASL_SSL"], client_ctx, "SCRAM-SHA-512")):
            _connect_once(port, ctx, mech)  # warm-up
            setups[name] = [_connect_once(port, ctx, mech) for _ in range(args.connections)]
    finally:
        broker.stop()
    med = statistics.median
    print(f"\n{args.records:,} records of {args.size} B, one partition, acks=all, confluent-kafka; "
          f"median (min–max) of {args.repeat}\n")
    print("| listener | produce rec/s | produce MB/s | consume rec/s | consume MB/s |")
    print("|---|---|---|---|---|")
    for kind, r in rows.items():
        print(f"| {kind} | {med(r['produce']):,.0f} ({min(r['produce']):,.0f}–{max(r['produce']):,.0f}) | "
              f"{med(r['produce_mb']):.1f} | {med(r['consume']):,.0f} ({min(r['consume']):,.0f}–{max(r['consume']):,.0f}) | "
              f"{med(r['consume_mb']):.1f} |")
    print(f"\nConnection set-up to a first Metadata answer, ms, median (min–max) of {args.connections}:\n")
    print("| kind | set-up ms |")
    print("|---|---|")
    for name, xs in setups.items():
        print(f"| {name} | {_ms(xs)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
