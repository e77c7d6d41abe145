"""SCRAM credentials in the cluster store (issue 18): the first user written with
``oncelog users add --store`` before any broker runs; a user added through one broker with
confluent-kafka's AdminClient (AlterUserScramCredentials) logs in at the other broker within a
bound, and is described there; removed, it cannot log in any more."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka.admin import (
    AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion, UserScramCredentialUpsertion,
)

from oncelog.process import BrokerProcess, free_port


def _can_login(port: int, user: str, password: str, mechanism: str) -> bool:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    try:
        return bool(admin.list_topics(timeout=3).brokers)
    except Exception:  # noqa: BLE001 - librdkafka's KafkaException on a failed login
        return False


def _eventually(check, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.3)
    return False


def test_credentials_live_in_the_store_and_reach_every_broker(pg_dsn: str, tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "oncelog", "users", "add", "admin", "--password", "admin-pw",
                        "--mechanism", "SCRAM-SHA-256", "--store", pg_dsn], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    procs, sasl = [], {}
    try:
        for node in (1, 2):
            plain, sasl[node] = free_port(), free_port()
            b = BrokerProcess(tmp_path / f"broker{node}", port=plain, node_id=node, store=pg_dsn, overrides={
                "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl[node]}"})
            procs.append(b)
            b.start(timeout=60)
        assert _can_login(sasl[1], "admin", "admin-pw", "SCRAM-SHA-256")
        assert _can_login(sasl[2], "admin", "admin-pw", "PLAIN")
        assert not _can_login(sasl[2], "admin", "wrong", "SCRAM-SHA-256")

        admin1 = AdminClient({"bootstrap.servers": procs[0].bootstrap})
        futs = admin1.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"bob-pw")])
        futs["bob"].result(timeout=30)
        assert _eventually(lambda: _can_login(sasl[2], "bob", "bob-pw", "SCRAM-SHA-512"), 15)
        admin2 = AdminClient({"bootstrap.servers": procs[1].bootstrap})
        described = admin2.describe_user_scram_credentials(["bob"])["bob"].result(timeout=30)
        assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
            (ScramMechanism.SCRAM_SHA_512, 8192)]

        admin2.alter_user_scram_credentials([UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_512)]
                                            )["bob"].result(timeout=30)
        assert _eventually(lambda: not _can_login(sasl[1], "bob", "bob-pw", "SCRAM-SHA-512"), 15)
        r = subprocess.run([sys.executable, "-m", "oncelog", "users", "list", "--store", pg_dsn, "--json"],
                           capture_output=True, text=True, timeout=60)
        assert '"admin"' in r.stdout and '"bob"' not in r.stdout, r.stdout + r.stderr
    finally:
        for b in procs:
            try:
                assert b.stop(timeout=30) == 0, b.log_tail()
            except Exception:
                b.kill()
                raise


def test_inter_broker_traffic_logs_in_as_the_broker_principal(pg_dsn: str, tmp_path: Path) -> None:
    """Two brokers reach each other on an INTERNAL SASL_PLAINTEXT listener as ``User:broker``
    (SCRAM-SHA-512, Kafka's per-listener JAAS line): a transaction over partitions led by both
    commits (markers and KIP-890 verification go broker to broker) and reads back whole."""
    import kafka_clients as kc
    from cluster_procs import read_from_start
    from confluent_kafka import Producer

    r = subprocess.run([sys.executable, "-m", "oncelog", "users", "add", "broker", "--password", "broker-pw",
                        "--mechanism", "SCRAM-SHA-512", "--store", pg_dsn], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    procs = []
    try:
        for node in (1, 2):
            plain, internal = free_port(), free_port()
            b = BrokerProcess(tmp_path / f"broker{node}", port=plain, node_id=node, store=pg_dsn, overrides={
                "listeners": f"PLAINTEXT://127.0.0.1:{plain},INTERNAL://127.0.0.1:{internal}",
                "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT",
                "inter.broker.listener.name": "INTERNAL",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "listener.name.internal.scram-sha-512.sasl.jaas.config":
                    'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
                    'password="broker-pw";',
                "group.initial.rebalance.delay.ms": "0"})
            procs.append(b)
            b.start(timeout=60)
        bootstrap = procs[0].bootstrap
        kc.create_topic("confluent", bootstrap, "spread", 6)
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "across", "enable.idempotence": True})
        p.init_transactions(30)
        for round_ in range(2):
            p.begin_transaction()
            for part in range(6):
                p.produce("spread", f"r{round_}-p{part}".encode(), partition=part)
            p.commit_transaction(30)
        got = read_from_start(bootstrap, "spread", 6, lambda out: len(out) >= 12, group="g-spread",
                              isolation="read_committed", timeout=60)
        assert sorted(v for _, _, v in got) == sorted(f"r{r}-p{q}".encode() for r in range(2) for q in range(6))
        logs = "".join(b.log_path.read_text() for b in procs)
        assert "listener INTERNAL: " in logs and "authenticated as User:broker with SCRAM-SHA-512" in logs
        assert "inter-broker login" not in logs  # no refused login
    finally:
        for b in procs:
            try:
                assert b.stop(timeout=30) == 0, b.log_tail()
            except Exception:
                b.kill()
                raise
