"""kafka-python 3.0.12's own integration suite (from its sdist) against an oncelog broker, so a
regression against a real client's own expectations fails here (R3, R13).

The suite runs against an external broker when ``KAFKA_URI`` names one, with ``KAFKA_VERSION``
saying which Kafka it is (4.2.0: oncelog's ApiVersions answer is Kafka 4.2's). The broker is
configured as the suite's own Kafka fixture configures Kafka (its kafka.properties): node id 0,
4 partitions per auto-created topic, a 1 s minimum session timeout (its group tests use 3 s),
and an authorizer that allows everything (its ACL test creates, lists and deletes ACLs).

Left out, and why:
* ``test_ssl_integration.py``: its tests start their own SSL Kafka from a Kafka distribution
  (no external-broker mode);
* ``test_sasl_integration.py``: its tests skip themselves on an external broker ("Testing on
  external Kafka Broker"); oncelog's SASL is tested with kafka-python in
  tests/integration/test_security.py.
One test skips itself (``test_kafka_consumer_offsets_for_time_old``: Kafka before 0.10.1 only).
Everything else must pass: 55 tests, about 30 s.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from client_suites import kafka_python_suite

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]  # a first run downloads (and builds)

EXPECTED_PASSED = 55
EXCLUDED = ("test/integration/test_ssl_integration.py", "test/integration/test_sasl_integration.py")
SUITE_BROKER = {
    "num.partitions": "4",
    "group.min.session.timeout.ms": "1000",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}


def test_kafka_python_integration_suite(broker_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    home = kafka_python_suite()
    b = broker_factory("suite", overrides=SUITE_BROKER, node_id=0)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "KAFKA_"))}
    env.update(KAFKA_VERSION="4.2.0", KAFKA_URI=f"PLAINTEXT://{b.bootstrap}", KAFKA_ROOT=str(home / "kafka-root"),
               PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "log_level=WARNING",
           "--timeout=90", "-rfEs", "test/integration"] + [f"--ignore={p}" for p in EXCLUDED]
    done = subprocess.run(cmd, cwd=home, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    (tmp_path / "kafka-python-suite.txt").write_text(out)
    summary = out.strip().splitlines()[-1] if out.strip() else ""
    passed = re.search(r"(\d+) passed", summary)
    assert done.returncode == 0 and passed and int(passed.group(1)) == EXPECTED_PASSED, (
        f"kafka-python's suite: {summary}\n" + "\n".join(l for l in out.splitlines()
                                                         if l.startswith(("FAILED", "ERROR")))
        + "\n" + out[-4000:])
