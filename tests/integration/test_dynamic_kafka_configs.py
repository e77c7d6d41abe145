"""Kafka's dynamic broker configs beyond the log configs (SASL, SSL, connection limits ...),
through confluent-kafka's AdminClient (librdkafka's own test 0081 sets
``sasl.kerberos.min.time.before.relogin`` on a BROKER resource and expects NO_ERROR, as Kafka
answers). Before: INVALID_REQUEST ("read-only or unknown") for every one of them.

Accepted at Kafka's levels (per broker; the security ones not at the cluster default), stored
durably (a restart keeps them), described with their dynamic source; read-only configs are still
refused with INVALID_REQUEST, as Kafka."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def _admin(broker):  # type: ignore[no-untyped-def]
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _alter(admin, res) -> None:  # type: ignore[no-untyped-def]
    admin.incremental_alter_configs([res])[res].result(timeout=30)


def _alter_default(broker, name: str, value: str) -> int:  # type: ignore[no-untyped-def]
    """IncrementalAlterConfigs SET on the cluster default (resource name ""), which
    confluent-kafka's AdminClient does not send; returns the resource's error code."""
    from oncelog.client import ProtocolClient
    from oncelog.protocol import apis

    with ProtocolClient(broker.bootstrap) as c:
        m = c.classes(apis.INCREMENTAL_ALTER_CONFIGS, 1)
        req = m["IncrementalAlterConfigsRequest"](validate_only=False, resources=(m["AlterConfigsResource"](
            resource_type=4, resource_name="", configs=(m["AlterableConfig"](name=name, config_operation=0,
                                                                              value=value),)),))
        return int(c.request(apis.INCREMENTAL_ALTER_CONFIGS, req, version=1).responses[0].error_code)


def _described(admin, node: str) -> dict:  # type: ignore[no-untyped-def]
    from confluent_kafka.admin import ConfigResource, ResourceType

    res = ConfigResource(ResourceType.BROKER, node)
    return admin.describe_configs([res])[res].result(timeout=30)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_dynamic_security_and_limit_configs_are_accepted_stored_and_described(broker) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                       ResourceType)

    admin = _admin(broker)
    node = str(admin.describe_cluster().result(timeout=30).nodes[0].id)

    # the 0081 case: the (deprecated) whole-set AlterConfigs, as librdkafka's test sends it
    res = ConfigResource(ResourceType.BROKER, node, set_config={"sasl.kerberos.min.time.before.relogin": "58000"})
    admin.alter_configs([res])[res].result(timeout=30)

    def op(name: str, value: str | None, kind: AlterConfigOpType = AlterConfigOpType.SET):  # type: ignore[no-untyped-def]
        return ConfigEntry(name, value, incremental_operation=kind)

    _alter(admin, ConfigResource(ResourceType.BROKER, node, incremental_configs=[
        op("max.connections", "1000"), op("sasl.kerberos.ticket.renew.jitter", "0.1"),
        op("listener.name.plaintext.sasl.kerberos.service.name", "kafka")]))
    assert _alter_default(broker, "num.io.threads", "16") == 0

    got = _described(admin, node)
    kerb = got["sasl.kerberos.min.time.before.relogin"]
    assert (kerb.value, kerb.source, kerb.is_read_only) == ("58000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    assert got["max.connections"].value == "1000"
    assert got["max.connections"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert got["sasl.kerberos.ticket.renew.jitter"].value == "0.1"
    assert got["num.io.threads"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value

    def refused(resource_name: str, name: str, value: str) -> str:
        r = ConfigResource(ResourceType.BROKER, resource_name, incremental_configs=[op(name, value)])
        with pytest.raises(KafkaException) as e:
            _alter(admin, r)
        return e.value.args[0].name()

    assert refused(node, "node.id", "7") == "INVALID_REQUEST"  # read-only, as Kafka
    assert refused(node, "log.dirs", "/x") == "INVALID_REQUEST"
    assert _alter_default(broker, "sasl.kerberos.min.time.before.relogin", "1") == 42  # INVALID_REQUEST: per broker
    assert refused(node, "ssl.keystore.location", "/k") == "INVALID_REQUEST"  # per listener only
    assert refused(node, "max.connections", "many") == "INVALID_CONFIG"

    broker.stop()
    broker.start()
    admin = _admin(broker)
    got = _described(admin, node)
    assert got["sasl.kerberos.min.time.before.relogin"].value == "58000"  # durable
    assert got["num.io.threads"].value == "16"
    _alter(admin, ConfigResource(ResourceType.BROKER, node, incremental_configs=[
        op("max.connections", None, AlterConfigOpType.DELETE)]))
    assert _described(admin, node)["max.connections"].source != ConfigSource.DYNAMIC_BROKER_CONFIG.value


def test_a_dynamic_connection_limit_applies_at_once_and_after_a_restart(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """``max.connections.per.ip`` set through IncrementalAlterConfigs (the cluster default) is
    enforced by the running broker at once: of four connections from 127.0.0.1 the fourth is
    closed as it comes; again after a restart (the stored value); deleting it lifts it at once.
    Before: stored and described, never enforced (all four served)."""
    from raw_connections import served_once

    b = broker_factory("limits")
    assert served_once(b.bootstrap, 4, [True] * 4) == [True] * 4
    assert _alter_default(b, "max.connections.per.ip", "3") == 0  # its own connection closes with it
    assert served_once(b.bootstrap, 4, [True, True, True, False]) == [True, True, True, False]
    b.stop()
    b.start()
    assert served_once(b.bootstrap, 4, [True, True, True, False]) == [True, True, True, False]
    assert _alter_when_served(b, "max.connections.per.ip", "-1") == 40  # INVALID_CONFIG: at least 0, as Kafka
    assert _alter_when_served(b, "max.connections.per.ip.overrides", "127.0.0.1:5") == 0  # an address's own limit
    assert served_once(b.bootstrap, 6, [True] * 5 + [False]) == [True] * 5 + [False]
    assert _alter_when_served(b, "max.connections.per.ip.overrides", "localhost:x") == 40


def _alter_when_served(broker, name: str, value: str) -> int:  # type: ignore[no-untyped-def]
    """``_alter_default`` once the broker has counted out the connections a check just closed
    (until then, past the limit, the admin connection is refused too); bounded: 10 s."""
    import time

    for _ in range(100):
        try:
            return _alter_default(broker, name, value)
        except OSError:  # refused: the limit is still full of the closed ones
            time.sleep(0.1)
    return _alter_default(broker, name, value)
