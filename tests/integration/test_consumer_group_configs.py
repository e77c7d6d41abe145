"""Consumer group configs (KIP-848) on a GROUP resource, through confluent-kafka's AdminClient and
a real KIP-848 consumer (``group.protocol=consumer``): ``consumer.heartbeat.interval.ms`` set on
a running group changes how often its member heartbeats (the interval the coordinator hands
out), values are checked against the broker's ``group.consumer.min/max.*`` (INVALID_CONFIG),
described with their GROUP_CONFIG source, listed by ListConfigResources (kafka-python), and
kept across a restart. Before: every consumer group config was INVALID_CONFIG ("unknown group
config"), and librdkafka's own test 0081 failed on it."""

from __future__ import annotations

import logging
import threading
import time

import pytest

pytestmark = pytest.mark.integration

HEARTBEAT, SESSION = "consumer.heartbeat.interval.ms", "consumer.session.timeout.ms"
BROKER = {"group.consumer.heartbeat.interval.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "100",
          "group.consumer.min.session.timeout.ms": "2000"}


def _set(admin, group: str, **ops: str | None) -> None:  # type: ignore[no-untyped-def]
    """IncrementalAlterConfigs on ``group``: SET each name=value, DELETE each name=None."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(n.replace("_", "."), v, incremental_operation=AlterConfigOpType.DELETE if v is None
                           else AlterConfigOpType.SET) for n, v in ops.items()]
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([res])[res].result(timeout=30)


def _described(admin, group: str) -> dict:  # type: ignore[no-untyped-def]
    from confluent_kafka.admin import ConfigResource, ResourceType

    res = ConfigResource(ResourceType.GROUP, group)
    return admin.describe_configs([res])[res].result(timeout=30)


class _Heartbeats(logging.Handler):
    """A KIP-848 consumer polling on a thread; ``count()``: the ConsumerGroupHeartbeat requests
    it has sent, from librdkafka's own protocol log (its statistics leave this request out)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        from confluent_kafka import Consumer

        super().__init__()
        self._sent = 0
        self._lock = threading.Lock()
        log = logging.getLogger(f"kip848.{group}")
        log.propagate = False
        log.setLevel(logging.DEBUG)
        log.addHandler(self)
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                           "debug": "protocol"}, logger=log)
        self.c.subscribe([topic])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        if "Sent ConsumerGroupHeartbeatRequest" in record.getMessage():
            with self._lock:
                self._sent += 1

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.c.poll(0.05)

    def count(self) -> int:
        with self._lock:
            return self._sent

    def rate_over(self, seconds: float) -> int:
        start = self.count()
        time.sleep(seconds)
        return self.count() - start

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.c.close()


def test_a_groups_heartbeat_interval_reaches_its_running_member(broker_factory) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigSource, NewTopic
    from kafka.admin import KafkaAdminClient

    b = broker_factory("group-configs", BROKER)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("gc-t", 2)])["gc-t"].result(30)
    member = _Heartbeats(b.bootstrap, "gc", "gc-t")
    try:
        deadline = time.monotonic() + 30
        while member.count() < 2 and time.monotonic() < deadline:  # joined, heartbeating
            time.sleep(0.1)
        assert member.rate_over(2.0) <= 4  # the broker's 1000 ms
        _set(admin, "gc", consumer_heartbeat_interval_ms="100")
        time.sleep(1.5)  # its next heartbeat (at most 1 s away) brings the new interval
        assert member.rate_over(2.0) >= 8  # about 20 at 100 ms
    finally:
        member.close()

    got = _described(admin, "gc")
    assert (got[HEARTBEAT].value, got[HEARTBEAT].source) == ("100", ConfigSource.GROUP_CONFIG.value)
    assert (got[SESSION].value, got[SESSION].source) == ("45000", ConfigSource.DEFAULT_CONFIG.value)
    assert "share.auto.offset.reset" in got  # the share groups' configs are described too

    def refused(**ops: str) -> str:
        with pytest.raises(KafkaException) as e:
            _set(admin, "gc", **ops)
        return f"{e.value.args[0].name()}: {e.value.args[0].str()}"

    assert refused(consumer_heartbeat_interval_ms="99") == (
        f"INVALID_CONFIG: {HEARTBEAT} must be greater than or equal to group.consumer.min.heartbeat.interval.ms")
    assert refused(consumer_session_timeout_ms="60001").startswith("INVALID_CONFIG")  # above the max
    assert refused(consumer_session_timeout_ms="2000", consumer_heartbeat_interval_ms="2000") == (
        f"INVALID_CONFIG: {SESSION} must be greater than {HEARTBEAT}")
    assert refused(streams_session_timeout_ms="50000").startswith("INVALID_CONFIG: group config streams.session")
    assert _described(admin, "gc")[HEARTBEAT].value == "100"  # nothing refused was written

    listed = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=20_000)
    try:
        assert listed.list_config_resources(["GROUP"]) == {"group": ["gc"]}
    finally:
        listed.close()

    b.stop()
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    assert _described(admin, "gc")[HEARTBEAT].value == "100"  # durable
    _set(admin, "gc", consumer_heartbeat_interval_ms=None)
    got = _described(admin, "gc")[HEARTBEAT]
    assert (got.value, got.source) == ("1000", ConfigSource.STATIC_BROKER_CONFIG.value)  # the broker's again
