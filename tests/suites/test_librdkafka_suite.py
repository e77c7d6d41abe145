"""A handful of librdkafka's own tests (its tests/0xxx, built from the sources the npm package
@confluentinc/kafka-javascript carries under deps/librdkafka) against an oncelog broker, so a
regression against librdkafka's own expectations fails here (R3, R13).

librdkafka's test runner takes the brokers from a test.conf (``RDKAFKA_TEST_CONF``) and the
broker's Kafka version from ``TEST_KAFKA_VERSION`` (4.2.0: oncelog's ApiVersions answer is
Kafka 4.2's; tests adapt to it). 0052 (timestamps) is not among them: it needs Kafka's
kafka-topics.sh; its ``broker.version.fallback=0.9.0.0`` case, which Kafka 4 and oncelog
disconnect, is tested with confluent-kafka in tests/integration/test_kafka_release_apis.py. The library and runner are built once (minutes) into
build/client-suites/ (tests/client_suites.py). librdkafka 2.15.1 is the newest the npm registry
carries; confluent-kafka 2.16.1 bundles 2.16.0.

The tests run: see ``TESTS`` (each chosen for what it covers, and short), and of 0081 (every
admin API) the config sub-tests (``SUBTESTS``); 0081 whole (about three minutes: its own waits,
for its producer and its consumer half) runs in ``make test-long`` (``WHOLE``). The full suite
and KIP-848's tests need a 3-broker cluster and minutes; they are not part of ``make test``.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from client_suites import librdkafka_tree

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]  # a first run downloads (and builds)

#: librdkafka test -> what it checks here
TESTS = {
    "0001": "several producers and topics at once",
    "0002": "producing to an unknown partition fails per message",
    "0005": "order of 1000s of messages, idempotent-less",
    "0007": "topic auto-creation on produce",
    "0008": "acks 0, 1, all",
    "0012": "produce then consume, several partitions",
    "0017": "gzip, snappy and lz4 batches produced and consumed",
    "0030": "offset commits: sync, async, auto, committed offsets read back",
}
#: librdkafka test -> (sub-tests: a substring of their names, what they check): the part of a
#: long test that runs in ``make test``
SUBTESTS = {
    "0081": ("Configs", "AlterConfigs and IncrementalAlterConfigs on topics, a broker (its dynamic "
                        "sasl.kerberos.min.time.before.relogin: INVALID_REQUEST before) and a GROUP (the KIP-848 "
                        "consumer.session.timeout.ms: INVALID_CONFIG before); DescribeConfigs of topics, brokers "
                        "and a group that does not exist"),
}
#: run whole only by ``make test-long`` (minutes: the test's own waits, twice over for its
#: producer and consumer halves)
WHOLE = {
    "0081": "every admin API librdkafka has: topics, partitions, ACLs, configs, records, consumer groups and "
            "their offsets (static members deleted one session timeout after they close), SCRAM users",
}


#: as librdkafka's own test cluster is configured: 4 partitions per auto-created topic (0012
#: produces to 4), an authorizer that allows everything (0081 creates and deletes ACLs)
SUITE_BROKER = {
    "num.partitions": "4",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}


def _run(tree, base: dict, name: str, extra: dict, numbers: list[str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    done = subprocess.run(["./test-runner", "-p1", "-E"], cwd=tree / "tests", env={**base, **extra},
                          capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    (tmp_path / f"librdkafka-{name}.txt").write_text(out)
    assert done.returncode == 0, out[-6000:]
    for number in numbers:
        assert re.search(rf"{number}_\w+ +\S* *PASSED", out) or f"{number}_" in out, (
            f"test {number} did not run:\n{out[-3000:]}")


def _suite(broker_factory, tmp_path):  # type: ignore[no-untyped-def]
    tree = librdkafka_tree()
    b = broker_factory("suite", overrides=SUITE_BROKER)
    conf = tmp_path / "test.conf"
    conf.write_text(f"metadata.broker.list={b.bootstrap}\n")
    return tree, {**os.environ, "RDKAFKA_TEST_CONF": str(conf), "TEST_KAFKA_VERSION": "4.2.0", "TEST_LEVEL": "1",
                  "LD_LIBRARY_PATH": f"{tree / 'src'}:{tree / 'src-cpp'}"}


def test_librdkafka_own_tests(broker_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    tree, base = _suite(broker_factory, tmp_path)
    _run(tree, base, "tests", {"TESTS": ",".join(TESTS)}, list(TESTS), tmp_path)
    for n, (sub, _) in SUBTESTS.items():
        _run(tree, base, f"{n}-{sub}", {"TESTS": n, "SUBTESTS": sub}, [n], tmp_path)


@pytest.mark.long
@pytest.mark.parametrize("number", sorted(WHOLE))
def test_librdkafka_own_long_tests_whole(broker_factory, tmp_path, number: str) -> None:  # type: ignore[no-untyped-def]
    tree, base = _suite(broker_factory, tmp_path)
    _run(tree, base, number, {"TESTS": number}, [number], tmp_path)
