"""The pytest plugin ``oncelog.testing.plugin`` (issue 19), run the way a user runs it: each test
here writes a test file, runs pytest on it (pytester, in process) with the plugin, and checks the
outcome. The generated tests use real brokers and confluent-kafka.

``-p no:oncelog -p oncelog.testing.plugin``: the plugin is loaded by module name whether or not
the installed package registers the ``oncelog`` entry point (an editable install of another
checkout may not), and never twice.
"""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ("pytester",)
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PLUGIN = ("-p", "no:oncelog", "-p", "oncelog.testing.plugin", "-p", "no:cacheprovider", "--timeout", "120")

#: helpers the generated tests share (confluent-kafka, as a user's tests would use it)
CLIENT_HELPERS = '''
import time
from confluent_kafka import Consumer, Producer, TopicPartition

def produce(bootstrap, topic, values, **conf):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "log_level": 0, **conf})
    errors = []
    for v in values:
        p.produce(topic, v, callback=lambda err, msg: errors.append(err))
    left = p.flush(30)
    assert left == 0 and errors == [None] * len(values), (left, errors)

def read_all(bootstrap, topic, partition=0, timeout=30.0):
    """Every record of one partition, up to its high watermark at the start."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "log_level": 0})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
        c.assign([TopicPartition(topic, partition, 0)])
        out, deadline = [], time.monotonic() + timeout
        while len(out) < high and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m.value())
    finally:
        c.close()
    return out

def partitions_of(bootstrap, topic):
    p = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    return len(p.list_topics(topic, timeout=30).topics[topic].partitions)
'''


def _write(pytester: pytest.Pytester, **files: str) -> None:
    pytester.makepyfile(helpers=CLIENT_HELPERS)
    pytester.makepyfile(**{k: textwrap.dedent(v) for k, v in files.items()})


def test_function_scope_faults_topics_and_the_log_on_failure(pytester: pytest.Pytester) -> None:
    """One broker per test; acknowledged records survive SIGKILL and restart; pause makes the
    broker unresponsive until resume; create_topic goes through the Kafka protocol; a failing
    test's report carries the broker log."""
    _write(pytester, test_user="""
        import pytest
        from oncelog.protocol.errors import TopicAlreadyExists
        from helpers import produce, read_all, partitions_of
        from confluent_kafka import Producer

        PIDS = []

        def test_kill_restart_keeps_acknowledged_records(oncelog_broker):
            PIDS.append(oncelog_broker.pid)
            oncelog_broker.create_topic("orders", partitions=3, config={"cleanup.policy": "delete"})
            assert partitions_of(oncelog_broker.bootstrap_servers, "orders") == 3
            with pytest.raises(TopicAlreadyExists):
                oncelog_broker.create_topic("orders")
            oncelog_broker.create_topic("orders", exist_ok=True)
            produce(oncelog_broker.bootstrap_servers, "orders", [b"a", b"b", b"c"])
            old = oncelog_broker.pid
            oncelog_broker.kill()
            assert not oncelog_broker.running
            oncelog_broker.restart()
            assert oncelog_broker.running and oncelog_broker.pid != old
            # every acknowledged record is back, whichever partition the partitioner chose
            bootstrap = oncelog_broker.bootstrap_servers
            assert sorted(v for p in range(3) for v in read_all(bootstrap, "orders", partition=p)) \\
                == [b"a", b"b", b"c"]

        def test_pause_then_resume(oncelog_broker):
            PIDS.append(oncelog_broker.pid)
            produce(oncelog_broker.bootstrap_servers, "t", [b"before"])
            oncelog_broker.pause()
            p = Producer({"bootstrap.servers": oncelog_broker.bootstrap_servers, "acks": "all", "linger.ms": 0,
                          "log_level": 0})
            p.produce("t", b"during")
            assert p.flush(2) == 1, "a paused broker acknowledged a record"
            oncelog_broker.resume()
            assert p.flush(30) == 0
            assert read_all(oncelog_broker.bootstrap_servers, "t") == [b"before", b"during"]

        def test_each_test_has_its_own_broker():
            assert len(PIDS) == 2 and PIDS[0] != PIDS[1]

        def test_fails_and_shows_the_log(oncelog_broker):
            oncelog_broker.create_topic("shown-in-the-report")
            assert "created topic shown-in-the-report" in oncelog_broker.log
            assert False, "deliberate failure"
    """)
    result = pytester.runpytest(*PLUGIN, "-p", "no:randomly")
    result.assert_outcomes(passed=3, failed=1)
    out = result.stdout.str()
    assert "oncelog broker log" in out
    # the section is this test's broker log, attached to the failing test only
    section = out[out.index("oncelog broker log"):]
    assert "created topic shown-in-the-report" in section
    assert out.count("oncelog broker log") == 1


def test_module_scope_shares_a_broker_and_heals_it_between_tests(pytester: pytest.Pytester) -> None:
    """``oncelog_broker_scope = module``: the tests of a module share one broker, another module
    gets its own; a broker one test killed or paused runs again for the next. Broker properties
    from the ini option apply, a module's marker overrides them."""
    pytester.makeini("""
        [pytest]
        oncelog_broker_scope = module
        oncelog_broker_config =
            num.partitions = 2
    """)
    _write(pytester, test_first="""
        from helpers import produce, partitions_of
        SEEN = []

        def test_a(oncelog_broker):
            SEEN.append(oncelog_broker.pid)
            produce(oncelog_broker.bootstrap_servers, "auto", [b"x"])
            assert partitions_of(oncelog_broker.bootstrap_servers, "auto") == 2
            oncelog_broker.kill()

        def test_b(oncelog_broker):
            assert oncelog_broker.running
            SEEN.append(oncelog_broker.pid)
            oncelog_broker.pause()

        def test_c(oncelog_broker):
            assert not oncelog_broker.paused
            produce(oncelog_broker.bootstrap_servers, "auto", [b"y"])  # answered: it was resumed
            assert oncelog_broker.pid == SEEN[1]

        def test_same_data_dir_across_tests(oncelog_broker):
            from helpers import read_all
            got = [v for p in (0, 1) for v in read_all(oncelog_broker.bootstrap_servers, "auto", partition=p)]
            assert sorted(got) == [b"x", b"y"]
    """, test_second="""
        import pytest
        from helpers import produce, partitions_of
        pytestmark = pytest.mark.oncelog_broker(config={"num.partitions": 5})

        def test_own_broker_with_the_module_marker(oncelog_broker):
            produce(oncelog_broker.bootstrap_servers, "auto", [b"x"])
            assert partitions_of(oncelog_broker.bootstrap_servers, "auto") == 5
    """)
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=5)


def test_marker_sets_broker_properties_and_is_refused_on_a_test_under_wider_scope(pytester: pytest.Pytester) -> None:
    _write(pytester, test_marker="""
        import pytest
        from helpers import produce, partitions_of

        @pytest.mark.oncelog_broker(config={"num.partitions": 4, "auto.create.topics.enable": "true"})
        def test_marked(oncelog_broker):
            assert oncelog_broker.config["num.partitions"] == "4"
            produce(oncelog_broker.bootstrap_servers, "auto", [b"x"])
            assert partitions_of(oncelog_broker.bootstrap_servers, "auto") == 4
    """)
    pytester.runpytest(*PLUGIN, "-o", "oncelog_broker_prestart=false").assert_outcomes(passed=1)
    # the same marker on a single test while brokers are shared per module: a usage error
    result = pytester.runpytest(*PLUGIN, "-o", "oncelog_broker_scope=module")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*oncelog_broker on a test needs oncelog_broker_scope = function*"])
    result = pytester.runpytest(*PLUGIN, "-o", "oncelog_broker_scope=forever")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


PRESTART_TESTS = """
    import time
    import pytest

    @pytest.fixture(autouse=True)
    def asked_at():
        return time.monotonic()  # autouse: set up before oncelog_broker

    READY = []

    @pytest.mark.parametrize("i", range(3))
    def test_broker(i, asked_at, oncelog_broker):
        assert oncelog_broker.running
        READY.append(oncelog_broker.started_at < asked_at)
        time.sleep(0.5)  # a test's work, during which the next broker starts

    @pytest.mark.oncelog_broker(config={"num.partitions": 2})
    def test_other_properties(asked_at, oncelog_broker):
        assert oncelog_broker.config["num.partitions"] == "2"
        READY.append(oncelog_broker.started_at < asked_at)

    def test_which_were_started_before_asked():
        assert READY == EXPECTED
"""


@pytest.mark.parametrize("prestart", [True, False])
def test_prestart_hands_the_next_test_a_running_broker(pytester: pytest.Pytester, prestart: bool) -> None:
    """With prestart (the default), the second and third test get a broker whose start began
    before they asked (while the previous test ran); a test with other properties gets one
    started for it. Without prestart, every broker is started when asked for."""
    expected = [False, True, True, False] if prestart else [False] * 4
    pytester.makepyfile(test_prestart=textwrap.dedent(PRESTART_TESTS) + f"\nEXPECTED = {expected!r}\n")
    result = pytester.runpytest(*PLUGIN, "-o", f"oncelog_broker_prestart={str(prestart).lower()}")
    result.assert_outcomes(passed=5)


def test_cluster_fixture_survives_a_broker_kill(pytester: pytest.Pytester) -> None:
    """``oncelog_cluster``: three brokers on a real PostgreSQL; with one broker killed, records
    are still acknowledged (its partitions move to the others) and every acknowledged record is
    read back; the killed broker rejoins."""
    _write(pytester, test_cluster="""
        import pytest
        from helpers import produce, read_all

        @pytest.mark.oncelog_cluster(brokers=3)
        def test_kill_one(oncelog_cluster):
            assert len(oncelog_cluster.brokers) == 3
            bootstrap = oncelog_cluster.bootstrap_servers
            oncelog_cluster.brokers[0].create_topic("t", partitions=3)
            produce(bootstrap, "t", [b"a%d" % i for i in range(30)])
            oncelog_cluster.brokers[1].kill()
            produce(bootstrap, "t", [b"b%d" % i for i in range(30)])
            got = sorted(v for p in range(3) for v in read_all(bootstrap, "t", partition=p, timeout=60))
            assert got == sorted([b"a%d" % i for i in range(30)] + [b"b%d" % i for i in range(30)])
            oncelog_cluster.restart_broker(1)
            assert all(b.running for b in oncelog_cluster.brokers)
    """)
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=1)
