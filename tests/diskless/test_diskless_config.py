"""``diskless.enable`` (issue 29 row 1, docs/DISKLESS.md §2.1) through a real client
(confluent-kafka's AdminClient) against real brokers: a cluster broker on a real PostgreSQL with
a real SeaweedFS object store, a cluster broker without one, and an embedded broker.

Accepted: ``diskless.enable=true`` at creation on a cluster broker with ``diskless.storage.url``
(the partitions' rows say ``engine = 'diskless'``, those CreatePartitions adds too;
DescribeConfigs answers it). Refused with
INVALID_CONFIG and a message naming the reason: on the embedded broker, on an internal topic,
with ``cleanup.policy=compact``, on a broker without ``diskless.storage.url``, and as a change
after creation (either way, IncrementalAlterConfigs or AlterConfigs); compaction added to a
diskless topic later is refused too. A whole-set AlterConfigs that leaves the key out keeps the
topic diskless."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from dl_cluster import diskless_brokers


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _create(admin, name: str, configs: dict[str, str], partitions: int = 1):
    """The error of creating ``name`` (None: created)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    fut = admin.create_topics([NewTopic(name, partitions, 1, config=configs)], operation_timeout=10)[name]
    try:
        fut.result(timeout=30)
        return None
    except KafkaException as exc:
        return exc.args[0]


def _incremental(admin, topic: str, name: str, value: str | None):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value or "", incremental_operation=op)])
    try:
        admin.incremental_alter_configs([res])[res].result(timeout=30)
        return None
    except KafkaException as exc:
        return exc.args[0]


def _describe(admin, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import ConfigResource, ResourceType

    res = ConfigResource(ResourceType.TOPIC, topic)
    return {k: v.value for k, v in admin.describe_configs([res])[res].result(timeout=30).items()}


def _invalid_config(err, *words: str) -> None:
    from confluent_kafka import KafkaError

    assert err is not None, "expected INVALID_CONFIG, the request succeeded"
    assert err.code() == KafkaError.INVALID_CONFIG, err
    for w in words:
        assert w in err.str(), (w, err.str())


def test_diskless_topics_on_a_cluster_broker_with_an_object_store(pg_dsn: str, tmp_path: Path, seaweed) -> None:
    with diskless_brokers(pg_dsn, tmp_path, seaweed) as (b,):
        admin = _admin(b.bootstrap)
        assert _create(admin, "dl", {"diskless.enable": "true"}, partitions=3) is None
        assert _create(admin, "plain", {}) is None
        assert _describe(admin, "dl")["diskless.enable"] == "true"
        assert _describe(admin, "plain")["diskless.enable"] == "false"
        with psycopg.connect(pg_dsn) as conn:
            engines = dict(conn.execute("SELECT topic, array_agg(DISTINCT engine) FROM oncelog_partition "
                                        "WHERE topic IN ('dl', 'plain') GROUP BY topic").fetchall())
        assert engines == {"dl": ["diskless"], "plain": ["postgres"]}
        from confluent_kafka.admin import NewPartitions

        admin.create_partitions([NewPartitions("dl", 5)])["dl"].result(timeout=30)  # new partitions: same engine
        with psycopg.connect(pg_dsn) as conn:
            assert conn.execute("SELECT array_agg(engine ORDER BY partition) FROM oncelog_partition "
                                "WHERE topic = 'dl'").fetchone()[0] == ["diskless"] * 5

        _invalid_config(_create(admin, "dl-compact", {"diskless.enable": "true", "cleanup.policy": "compact"}),
                        "compact")
        _invalid_config(_create(admin, "dl-both", {"diskless.enable": "true", "cleanup.policy": "compact,delete"}),
                        "compact")
        # an internal topic's name is reserved: its creation is refused before any config is looked at
        # (the engine rule "an internal topic cannot be diskless" stays as a second line, topic_rules.py)
        from confluent_kafka import KafkaError

        err = _create(admin, "__transaction_state", {"diskless.enable": "true"})
        assert err is not None and err.code() == KafkaError.INVALID_REQUEST and "internal topic" in err.str(), err

        # the engine is fixed at creation
        _invalid_config(_incremental(admin, "dl", "diskless.enable", "false"), "after creation")
        _invalid_config(_incremental(admin, "plain", "diskless.enable", "true"), "after creation")
        _invalid_config(_incremental(admin, "dl", "cleanup.policy", "compact"), "compact")
        # other configs of a diskless topic may change; it stays diskless
        assert _incremental(admin, "dl", "retention.ms", "3600000") is None
        from confluent_kafka.admin import ConfigResource, ResourceType

        whole = ConfigResource(ResourceType.TOPIC, "dl", set_config={"retention.bytes": "1000000"})
        admin.alter_configs([whole])[whole].result(timeout=30)  # the whole set, without diskless.enable
        got = _describe(admin, "dl")
        assert got["diskless.enable"] == "true" and got["retention.bytes"] == "1000000"
        with psycopg.connect(pg_dsn) as conn:
            names = {r[0] for r in conn.execute("SELECT name FROM oncelog_topic").fetchall()}
        assert not names & {"dl-compact", "dl-both"}


def test_a_cluster_broker_without_an_object_store_refuses_them(pg_dsn: str, tmp_path: Path, seaweed) -> None:
    with diskless_brokers(pg_dsn, tmp_path, seaweed, with_store=False) as (b,):
        admin = _admin(b.bootstrap)
        _invalid_config(_create(admin, "dl", {"diskless.enable": "true"}), "diskless.storage.url")
        assert _create(admin, "dl", {"diskless.enable": "false"}) is None


def test_the_embedded_broker_refuses_them(broker_factory) -> None:
    b = broker_factory()
    admin = _admin(b.bootstrap)
    _invalid_config(_create(admin, "dl", {"diskless.enable": "true"}), "cluster mode")
    assert _create(admin, "plain", {"diskless.enable": "false"}) is None
    assert _describe(admin, "plain")["diskless.enable"] == "false"
